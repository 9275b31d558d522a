"""Unit tests of the spur.cluster module spur_daemon_swap (a rolling upgrade turn's hold, switch and restart in one
call): the steps run in that order and report their seconds, no hold is asked without hold_node, and a switch that
fails restarts nothing. The three parts are the modules' own code (spur_dispatch_hold, spur_release,
spur_service_restart), tested in their own files; here they are replaced by recorders."""

from __future__ import annotations

import itertools

import pytest
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurError
from ansible_collections.spur.cluster.plugins.modules import spur_daemon_swap

PARAMS = {"name": "spurd", "manager": "supervisord", "supervisord_conf": "/x/supervisord.conf",
          "probe": "127.0.0.1:6823", "ready_path": "/readyz", "start_timeout": 30.0, "log_lines": 10,
          "release": {"src": "/r", "prefix": "/opt/spur", "bin_dir": None, "python": None},
          "hold_node": "n1", "hold_on_unsupported": "skip", "controllers": ["http://127.0.0.1:1"]}


@pytest.fixture
def calls(monkeypatch):
    done: list = []

    class Hold:
        def __init__(self, params):
            done.append(("hold", params["name"], params["hold_secs"], params["on_unsupported"]))

        def run(self):
            return {"changed": True, "held": True, "hold_until": 99.0, "wal_level": 5, "warnings": []}

    class Release:
        def __init__(self, params):
            self.params = params

        def run(self):
            done.append(("switch", self.params["src"], self.params["state"]))
            if self.params["src"] == "/broken":
                raise SpurError("the release installer failed (exit 1): boom")
            return {"changed": True, "release_id": "0.2.0-abc"}

    def restart(params, run_command):
        done.append(("restart", params["name"], params["timeout"]))
        return {"changed": True, "pid": 7, "stop_secs": 0.2, "start_secs": 0.5}

    monkeypatch.setattr(spur_daemon_swap, "DispatchHold", Hold)
    monkeypatch.setattr(spur_daemon_swap, "ReleaseInstall", Release)
    monkeypatch.setattr(spur_daemon_swap, "restart", restart)
    return done


def test_hold_then_switch_then_restart_each_timed(calls):
    clock = itertools.count(0.0, 0.25).__next__  # each look at the clock is a quarter second later
    result = spur_daemon_swap.swap(dict(PARAMS), None, clock=clock)
    assert calls == [("hold", "n1", 0, "skip"), ("switch", "/r", "current"), ("restart", "spurd", 30.0)]
    assert result["changed"] is True and result["release_id"] == "0.2.0-abc" and result["pid"] == 7
    assert result["hold"] == {"held": True, "hold_until": 99.0, "wal_level": 5}
    assert [(s["step"], s["kind"]) for s in result["steps"]] == [
        ("dispatch_hold", "info"), ("switch", "work"), ("swap", "work"), ("started", "gate")]
    assert [s["secs"] for s in result["steps"]] == [0.25, 0.25, 0.0, 0.5]


def test_no_hold_without_hold_node_and_no_restart_after_a_failed_switch(calls):
    result = spur_daemon_swap.swap(dict(PARAMS, hold_node=None), None)
    assert [c[0] for c in calls] == ["switch", "restart"] and result["hold"] is None
    calls.clear()
    with pytest.raises(SpurError) as failed:
        spur_daemon_swap.swap(dict(PARAMS, release=dict(PARAMS["release"], src="/broken")), None)
    assert [c[0] for c in calls] == ["hold", "switch"]
    assert failed.value.fail_result()["msg"] == (
        "switching to the staged release (spurd not restarted): the release installer failed (exit 1): boom")


def test_an_agents_turn_waits_in_the_call_until_the_node_registers_at_the_target(calls, fake_cluster, controller):
    """wait_registered: the real look (spur_node_info's, against a controller whose state is the real one and
    an agent probe) after the restart, until the node is registered at the target and its agent says so too."""
    import threading

    from collection_fakes import ProbeServer, conn

    controller.add_node("n1")  # registered at 1.0.0, build build-a
    job = controller.start_job("n1")
    status = {"node": "n1", "registered": True, "version": "0.9.0", "build": "old",
              "running_jobs": [{"job_id": job, "attempt": 1, "supervisor_pid": 4242}]}  # fmt: skip
    agent = ProbeServer({"/status": (200, status)})
    params = dict(PARAMS, **conn(fake_cluster),
                  wait_registered={"node": "n1", "agent_probe": agent.url, "version": "1.0.0", "build": "build-a",
                                   "timeout": 10.0, "poll_interval": 0.05})  # fmt: skip
    try:
        # the agent's probe still reports the old release for a moment after the restart
        later = threading.Timer(0.4, lambda: agent.routes.update({"/status": (200, dict(status, version="1.0.0"))}))
        later.start()
        result = spur_daemon_swap.swap(params, None)
        later.join()
        assert not result.get("failed"), result
        assert [s["step"] for s in result["steps"]] == ["dispatch_hold", "switch", "swap", "started", "registered"]
        assert result["steps"][-1]["kind"] == "gate" and result["steps"][-1]["secs"] >= 0.3
        (node,) = result["nodes"]
        assert node["name"] == "n1" and node["running_jobs"] == status["running_jobs"]

        # a node that never gets there fails the call with what was missing, once the timeout has passed
        stuck = dict(params, wait_registered=dict(params["wait_registered"], version="2.0.0", timeout=0.3))
        failed = spur_daemon_swap.swap(stuck, None)
    finally:
        agent.close()
    assert failed["failed"] and failed["msg"] == (
        "spurd restarted on the target release, but node n1 did not register at it within 0.3 s: "
        "node n1 registered at 1.0.0 (build build-a), not at the target 2.0.0 (build build-a)")
    calls.clear()
    with pytest.raises(SpurError, match="wait_registered.poll_interval must not be negative"):
        spur_daemon_swap.swap(dict(params, wait_registered=dict(params["wait_registered"], poll_interval=-1)), None)
    assert calls == []  # refused before anything was held, switched or restarted
