"""Unit tests of every spur.cluster module: main() with injected arguments, asserting on the JSON it returns.

Probes are real HTTP servers on 127.0.0.1 (collection_fakes.ProbeServer); the gRPC side is FakeController, the
real controller state machine behind the client's call interface.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zipfile
from pathlib import Path

import pytest
from ansible_collections.spur.cluster.plugins.module_utils import spur_client, spur_release
from ansible_collections.spur.cluster.plugins.modules import (
    spur_cluster_health,
    spur_controller_info,
    spur_job,
    spur_node,
    spur_node_info,
    spur_preflight,
    spur_upgrade_plan,
    spur_wal_level,
)
from ansible_collections.spur.cluster.plugins.modules import spur_release as spur_release_module
from collection_fakes import FakeCluster, FakeController, ProbeServer
from collection_helpers import run_module

NAMES = ["ctl-0", "ctl-1", "ctl-2"]
PREFIX = "spur-ansible: "


@pytest.fixture
def fake_cluster():
    cluster = FakeCluster(leader=1)
    yield cluster
    cluster.close()


@pytest.fixture
def controller(monkeypatch):
    fake = FakeController()
    monkeypatch.setattr(spur_client.SpurConnection, "rpc", lambda self: fake)
    return fake


def conn(cluster: FakeCluster, **extra):
    return dict(controllers=cluster.urls, controller_names=NAMES, timeout=2, **extra)


def dead_url() -> str:
    server = ProbeServer()
    url = server.url
    server.close()
    return url


# ------------------------------------------------------------------ spur_controller_info


def test_controller_info_names_the_single_leader(fake_cluster):
    result = run_module(spur_controller_info, conn(fake_cluster))
    assert result["changed"] is False and "failed" not in result
    assert result["one_leader"] is True
    assert result["leader"] == "ctl-1" and result["leaders"] == ["ctl-1"]
    assert result["term"] == 3 and result["cluster_id"] == "c0ffee" and result["wal_level"] == 1
    assert result["members"] == ["127.0.1.1:6821", "127.0.1.2:6821", "127.0.1.3:6821"]
    by_name = {c["name"]: c for c in result["controllers"]}
    assert by_name["ctl-1"]["is_leader"] and by_name["ctl-1"]["role"] == "leader"
    assert by_name["ctl-0"]["role"] == "follower" and by_name["ctl-0"]["lag"] == 0
    assert by_name["ctl-2"]["build"] == "build-a" and by_name["ctl-2"]["grpc_addr"] == "127.0.1.3:6817"


def test_controller_info_reports_lag_against_the_leader(fake_cluster):
    fake_cluster.set(leader=1, commit=500, applied=480)
    result = run_module(spur_controller_info, conn(fake_cluster))
    assert {c["name"]: c["lag"] for c in result["controllers"]} == {"ctl-0": 20, "ctl-1": 0, "ctl-2": 20}


def test_controller_info_does_not_fail_on_a_down_controller(fake_cluster):
    fake_cluster.set(leader=0, down=(2,))
    urls = [*fake_cluster.urls, dead_url()]
    result = run_module(spur_controller_info, dict(controllers=urls, timeout=2), check_mode=True)
    assert "failed" not in result and result["changed"] is False
    assert result["one_leader"] is True and result["reachable_count"] == 2
    down = [c for c in result["controllers"] if not c["reachable"]]
    assert len(down) == 2 and all(c["error"] for c in down)
    assert "HTTP 503" in down[0]["error"]
    assert "refused" in down[1]["error"].lower()
    assert result["unreachable_controllers"] == [c["name"] for c in down]


def test_controller_info_without_a_leader_is_a_result_not_a_failure(fake_cluster):
    fake_cluster.set(leader=None)
    result = run_module(spur_controller_info, conn(fake_cluster))
    assert "failed" not in result
    assert result["one_leader"] is False and result["leader"] is None and result["term"] is None


def test_controller_info_accepts_host_port_and_names_must_match(fake_cluster):
    bare = [u.removeprefix("http://") for u in fake_cluster.urls]
    assert run_module(spur_controller_info, dict(controllers=bare))["one_leader"] is True
    result = run_module(spur_controller_info, dict(controllers=bare, controller_names=["a", "b"]))
    assert result["failed"] and "controller_names" in result["msg"] and result["override"] == "controller_names"
    result = run_module(spur_controller_info, dict(controllers=bare, timeout=0))
    assert result["failed"] and "timeout" in result["msg"]


# ------------------------------------------------------------------ spur_node_info


def test_node_info_merges_the_agents_view(fake_cluster, controller):
    controller.add_node("n1")
    controller.add_node("n2")
    job = controller.start_job("n1")
    agent = ProbeServer(
        {
            "/status": (
                200,
                {
                    "node": "n1",
                    "registered": True,
                    "controller": "127.0.1.2:6817",
                    "running_jobs": [{"job_id": job, "attempt": 1, "supervisor_pid": 4242}],
                    "version": "1.0.0",
                    "build": "build-a",
                },
            )
        }
    )
    try:
        result = run_module(
            spur_node_info, conn(fake_cluster, agent_probes=[agent.url, dead_url()], names=["n1", "n2", "n9"])
        )
    finally:
        agent.close()
    assert "failed" not in result and result["changed"] is False
    nodes = {n["name"]: n for n in result["nodes"]}
    assert nodes["n1"]["state"] == "MIXED" and nodes["n1"]["registered"]
    assert nodes["n1"]["running_jobs"] == [{"job_id": job, "attempt": 1, "supervisor_pid": 4242}]
    assert nodes["n1"]["running_jobs_source"] == "agent"
    assert nodes["n2"]["state"] == "IDLE" and nodes["n2"]["running_jobs"] == []
    assert nodes["n2"]["running_jobs_source"] == "controller"
    assert result["missing"] == ["n9"]
    assert len(result["agents_unreachable"]) == 1


# ------------------------------------------------------------------ spur_node


def node_args(cluster, **extra):
    return conn(cluster, name="n1", **extra)


def test_drain_four_times_check_real_check_real(fake_cluster, controller):
    controller.add_node("n1")
    args = node_args(fake_cluster, state="drained", reason="upgrade")
    first = run_module(spur_node, args, check_mode=True, diff=True)
    assert first["changed"] is True and first["drained_before"] is False
    assert first["diff"]["after"]["reason"] == PREFIX + "upgrade"
    assert controller.service.get_node("n1")["drain"] is False  # check mode changed nothing
    second = run_module(spur_node, args, diff=True)
    assert second["changed"] is True and second["outcome"] == "drained"
    assert second["node"]["state"] == "DRAINED" and second["node"]["reason"] == PREFIX + "upgrade"
    assert second["diff"]["before"]["drain"] is False and second["diff"]["after"]["drain"] is True
    third = run_module(spur_node, args, check_mode=True)
    fourth = run_module(spur_node, args)
    assert third["changed"] is False and fourth["changed"] is False
    assert fourth["drained_before"] is True and fourth["outcome"] == "drained"


def test_resume_clears_only_our_own_drain(fake_cluster, controller):
    controller.add_node("n1")
    controller.service.drain("n1", "bad dimm", "operator")
    result = run_module(spur_node, node_args(fake_cluster, state="resumed"))
    assert result["changed"] is False and "failed" not in result
    assert "bad dimm" in result["warnings"][0] and "force" in result["warnings"][0]
    assert controller.service.get_node("n1")["drain"] is True
    # our drain on top of the operator's is never stamped over it
    result = run_module(spur_node, node_args(fake_cluster, state="drained"))
    assert result["changed"] is False and result["drained_before"] is True
    assert controller.service.get_node("n1")["reason"] == "bad dimm"
    # force resumes it
    result = run_module(spur_node, node_args(fake_cluster, state="resumed", force=True))
    assert result["changed"] is True and controller.service.get_node("n1")["state"] == "IDLE"


def test_resume_four_times(fake_cluster, controller):
    controller.add_node("n1")
    controller.service.drain("n1", PREFIX + "upgrade", "spur.cluster")
    args = node_args(fake_cluster, state="resumed")
    runs = [run_module(spur_node, args, check_mode=check) for check in (True, False, True, False)]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[1]["node"]["state"] == "IDLE" and runs[1]["drained_before"] is True
    assert runs[3]["drained_before"] is False


def test_drain_wait_returns_when_the_job_ends(fake_cluster, controller):
    controller.add_node("n1")
    job = controller.start_job("n1")
    ender = threading.Timer(0.7, controller.end_job, args=(job,))
    ender.start()
    result = run_module(spur_node, node_args(fake_cluster, wait=True, wait_timeout=20))
    ender.join()
    assert result["changed"] is True and result["outcome"] == "drained"
    assert result["node"]["state"] == "DRAINED" and result["before"]["job_ids"] == [job]


@pytest.mark.parametrize(
    "on_timeout, failed, drained_after",
    [("fail", True, False), ("revert", False, False), ("keep", False, True)],
)
def test_drain_wait_timeout_undoes_only_our_drain(fake_cluster, controller, on_timeout, failed, drained_after):
    controller.add_node("n1")
    job = controller.start_job("n1")
    result = run_module(spur_node, node_args(fake_cluster, wait=True, wait_timeout=0.6, on_timeout=on_timeout))
    assert result["outcome"] == "busy"
    assert bool(result.get("failed")) is failed
    assert result["reverted"] is (not drained_after)
    assert controller.service.get_node("n1")["drain"] is drained_after
    if failed:
        assert f"still runs jobs {job}" in result["msg"] and "wait_timeout" in result["msg"]
    else:
        assert f"still runs jobs {job}" in result["warnings"][0]


def cut_off(controller, monkeypatch, secs: float) -> None:
    """No controller answers for secs from now (a network blip, seen from the host the module runs on)."""
    real_call, until = controller.call, time.monotonic() + secs

    def call(method, request, write=False, patience=None):
        if time.monotonic() < until:
            raise spur_client.SpurUnreachable("no controller could answer %s (fake: connection refused)" % method)
        return real_call(method, request, write, patience)

    monkeypatch.setattr(controller, "call", call)


def test_drain_wait_outlives_a_short_loss_of_the_controllers(fake_cluster, controller, monkeypatch):
    controller.add_node("n1")
    job = controller.start_job("n1")
    args = node_args(fake_cluster, wait=True, wait_timeout=30)
    threading.Timer(0.1, cut_off, args=(controller, monkeypatch, 1.5)).start()
    ender = threading.Timer(1.0, controller.end_job, args=(job,))
    ender.start()
    result = run_module(spur_node, args)
    ender.join()
    assert not result.get("failed"), result
    assert result["outcome"] == "drained" and result["node"]["state"] == "DRAINED"


def test_drain_outlives_a_loss_of_the_controllers_from_its_start(fake_cluster, controller, monkeypatch):
    controller.add_node("n1")
    cut_off(controller, monkeypatch, 1.5)
    result = run_module(spur_node, node_args(fake_cluster, wait=True, wait_timeout=30))
    assert not result.get("failed"), result
    assert result["outcome"] == "drained" and result["node"]["state"] == "DRAINED"


def test_drain_wait_fails_clearly_when_the_controllers_stay_away(fake_cluster, controller, monkeypatch):
    from ansible_collections.spur.cluster.plugins.module_utils import spur_nodes

    monkeypatch.setattr(spur_nodes, "UNREACHABLE_GRACE_SECS", 1.0)
    controller.add_node("n1")
    controller.start_job("n1")
    args = node_args(fake_cluster, wait=True, wait_timeout=30)
    threading.Timer(0.3, cut_off, args=(controller, monkeypatch, 60)).start()
    result = run_module(spur_node, args)
    assert result["failed"]
    assert "no controller answered for 1 s while waiting on node n1" in result["msg"], result["msg"]


def test_drain_wait_timeout_keeps_an_operators_drain(fake_cluster, controller):
    controller.add_node("n1")
    controller.start_job("n1")
    controller.service.drain("n1", "operator maintenance", "root")
    result = run_module(spur_node, node_args(fake_cluster, wait=True, wait_timeout=0.3))
    assert result["failed"] and result["reverted"] is False
    assert controller.service.get_node("n1")["reason"] == "operator maintenance"


def test_down_a_busy_node_needs_force(fake_cluster, controller):
    controller.add_node("n1")
    job = controller.start_job("n1")
    result = run_module(spur_node, node_args(fake_cluster, state="down", reason="ecc"))
    assert result["failed"] and "force" in result["msg"] and str(job) in result["msg"]
    assert result["override"] == "force"
    runs = [
        run_module(spur_node, node_args(fake_cluster, state="down", force=True), check_mode=c) for c in (1, 0, 1, 0)
    ]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[1]["outcome"] == "down"
    assert controller.service.get_job(job)["state"] == "NODE_FAIL"


def test_a_missing_node_fails_unless_allowed(fake_cluster, controller):
    result = run_module(spur_node, node_args(fake_cluster))
    assert result["failed"] and "does not exist" in result["msg"] and "allow_missing" in result["msg"]
    result = run_module(spur_node, node_args(fake_cluster, allow_missing=True))
    assert "failed" not in result and result["outcome"] == "gone" and result["changed"] is False


def test_a_lost_agent_is_gone(fake_cluster, controller):
    controller.add_node("n1", registered=False)
    result = run_module(spur_node, node_args(fake_cluster))
    assert result["changed"] is True and result["outcome"] == "gone"


def test_node_rejects_bad_arguments(fake_cluster, controller):
    result = run_module(spur_node, node_args(fake_cluster, state="drainedd"))
    assert result["failed"] and "state" in result["msg"]
    result = run_module(spur_node, node_args(fake_cluster, reason_prefix=" "))
    assert result["failed"] and "reason_prefix" in result["msg"]


# ------------------------------------------------------------------ spur_cluster_health


def test_health_passes_after_the_leader_was_stable(fake_cluster):
    start = time.monotonic()
    result = run_module(spur_cluster_health, conn(fake_cluster, stable_for=0.6, poll_interval=0.1))
    assert "failed" not in result and result["healthy"] is True and result["unmet"] == []
    assert time.monotonic() - start >= 0.6 and result["leader"] == "ctl-1"


@pytest.mark.parametrize(
    "state, needle, override",
    [
        (dict(leader=None), "no controller answers as leader", "wait_timeout"),
        (dict(leader=0, commit=900, applied=100), "lags 800 entries behind the leader (max_lag 100)", "wait_timeout"),
        (dict(leader=0, down=(1,)), "controller ctl-1 does not answer", "wait_timeout"),
    ],
)
def test_health_fails_naming_the_unmet_condition(fake_cluster, state, needle, override):
    fake_cluster.set(**state)
    result = run_module(spur_cluster_health, conn(fake_cluster, stable_for=0, wait_timeout=0.4, poll_interval=0.1))
    assert result["failed"] and result["healthy"] is False
    assert needle in result["msg"] and override in result["msg"]
    assert any(needle in line for line in result["unmet"])


def test_health_checks_expected_nodes(fake_cluster, controller):
    controller.add_node("n1")
    controller.add_node("n2", registered=False)
    args = conn(fake_cluster, stable_for=0, wait_timeout=0.3, poll_interval=0.1, expected_nodes=["n1", "n2", "n3"])
    result = run_module(spur_cluster_health, args)
    assert result["failed"]
    assert "n3 are unknown" in result["msg"] and "n2 are not registered" in result["msg"]
    args["expected_nodes"] = ["n1"]
    assert run_module(spur_cluster_health, args)["healthy"] is True


# ------------------------------------------------------------------ spur_upgrade_plan


def test_plan_puts_the_leader_last_and_batches_agents(fake_cluster, controller):
    for name in ("n1", "n2", "n3"):
        controller.add_node(name)
    controller.start_job("n2")
    agents = [{"name": "n1"}, {"name": "n2"}, {"name": "n3"}, {"name": "ghost"}]
    args = conn(fake_cluster, target_build="build-b", agents=agents, batch_size=2, canary=True)
    result = run_module(spur_upgrade_plan, args, check_mode=True)
    assert "failed" not in result and result["changed"] is False
    assert result["controllers"]["order"] == ["ctl-0", "ctl-2", "ctl-1"]
    assert result["controllers"]["order_source"] == "leader_last"
    assert result["agents"]["batches"] == [["n1"], ["n2", "n3"], ["ghost"]]
    assert result["agents"]["busy"] == ["n2"] and result["agents"]["unknown"] == ["ghost"]
    assert result["up_to_date"] is False


def test_plan_skips_hosts_at_the_target_build(fake_cluster, controller):
    controller.add_node("n1")
    result = run_module(spur_upgrade_plan, conn(fake_cluster, target_build="build-a", agents=[{"name": "n1"}]))
    assert result["controllers"]["upgrade"] == [] and result["agents"]["batches"] == []
    assert result["controllers"]["at_target"] == ["ctl-0", "ctl-2", "ctl-1"] and result["up_to_date"] is True


def test_plan_without_a_leader_warns_and_keeps_inventory_order(fake_cluster, controller):
    fake_cluster.set(leader=None)
    result = run_module(spur_upgrade_plan, conn(fake_cluster, target_build="build-b"))
    assert result["controllers"]["order"] == NAMES and result["controllers"]["order_source"] == "inventory"
    assert "no controller answers as leader" in result["warnings"][0]


def test_plan_explicit_order(fake_cluster, controller):
    result = run_module(spur_upgrade_plan, conn(fake_cluster, target_build="b", order=["ctl-2", "ctl-1", "ctl-0"]))
    assert result["controllers"]["order"] == ["ctl-2", "ctl-1", "ctl-0"]
    result = run_module(spur_upgrade_plan, conn(fake_cluster, target_build="b", order=["ctl-2", "ctl-1"]))
    assert result["failed"] and "leaves out ctl-0" in result["msg"] and "order" in result["msg"]


def test_plan_agent_without_controller_list_uses_its_probe(fake_cluster, monkeypatch):
    def no_grpc(self):
        raise spur_client.SpurMissingLibrary("grpcio missing")

    monkeypatch.setattr(spur_client.SpurConnection, "rpc", no_grpc)
    agent = ProbeServer({"/status": (200, {"node": "x1", "running_jobs": [], "build": "build-b", "version": "2"})})
    try:
        agents = [{"name": "host1", "probe": agent.url}, {"name": "host2", "probe": dead_url()}]
        result = run_module(spur_upgrade_plan, conn(fake_cluster, target_build="build-b", agents=agents))
    finally:
        agent.close()
    assert result["agents"]["at_target"] == ["host1"] and result["agents"]["unreachable"] == ["host2"]
    assert result["agent_observations"][0]["node"] == "x1"
    assert "node list is not available" in result["warnings"][0]


# ------------------------------------------------------------------ spur_preflight

MEMBERS = ["127.0.1.1", "127.0.1.2", "127.0.1.3"]


def test_preflight_passes_a_healthy_upgrade(fake_cluster):
    args = conn(fake_cluster, members=MEMBERS, target_version="1.1.0", target_max_wal_level=2)
    result = run_module(spur_preflight, args)
    assert "failed" not in result and result["passed"] is True and result["refusals"] == []
    assert result["facts"]["committed_members"] == [m + ":6821" for m in MEMBERS]
    assert result["facts"]["running_versions"] == ["1.0.0"]


@pytest.mark.parametrize(
    "extra, needle, override",
    [
        (dict(wipe=True), "wipe is set during an upgrade", None),
        (dict(skip_busy_agents=True, in_place_upgrade=True), "choose at most one", None),
        (dict(members=MEMBERS[:2]), "removes 127.0.1.3:6821", "wipe"),
        (dict(target_version="0.9"), "older than 1.0.0", "allow_downgrade"),
        (dict(target_max_wal_level=0), "reads only up to level 0", None),
    ],
)
def test_preflight_refusals_name_their_override(fake_cluster, extra, needle, override):
    args = conn(fake_cluster, members=MEMBERS, target_version="1.1.0", target_max_wal_level=2)
    args.update(extra)
    result = run_module(spur_preflight, args)
    assert result["failed"] and result["passed"] is False and needle in result["msg"]
    assert result["msg"].startswith("preflight refused: ")
    if override:
        assert f"set {override} to override" in result["msg"] and result["override"] == override
    else:
        assert "override" not in result


def test_preflight_health_applies_to_upgrades_only(fake_cluster):
    fake_cluster.set(leader=None)
    result = run_module(spur_preflight, conn(fake_cluster))
    assert result["failed"] and "not healthy" in result["msg"] and "require_healthy" in result["msg"]
    assert "failed" not in run_module(spur_preflight, conn(fake_cluster, upgrade=False))
    assert "failed" not in run_module(spur_preflight, conn(fake_cluster, require_healthy=False))


def test_preflight_several_refusals_in_one_message(fake_cluster):
    result = run_module(spur_preflight, conn(fake_cluster, wipe=True, target_version="0.1", members=MEMBERS[:1]))
    assert len(result["refusals"]) == 2 and "; " in result["msg"]
    assert "override" not in result  # each refusal names its own


# ------------------------------------------------------------------ spur_wal_level


def test_wal_level_four_times(fake_cluster, controller):
    args = conn(fake_cluster)
    first = run_module(spur_wal_level, args, check_mode=True, diff=True)
    assert first["changed"] is True and first["level"] == 2 and first["previous_level"] == 1
    assert first["diff"] == {"before": {"wal_level": 1}, "after": {"wal_level": 2}}
    assert "SetWalLevel" not in controller.calls
    second = run_module(spur_wal_level, args)
    assert second["changed"] is True and second["level"] == 2 and controller.calls == ["SetWalLevel"]
    fake_cluster.set(leader=1, wal_level=2)  # the probes now show the raised level
    third = run_module(spur_wal_level, args, check_mode=True)
    fourth = run_module(spur_wal_level, args)
    assert third["changed"] is False and fourth["changed"] is False and fourth["level"] == 2
    assert controller.calls == ["SetWalLevel"]


def test_wal_level_refuses_while_a_member_is_behind(fake_cluster, controller):
    fake_cluster.set(leader=1, max_levels=(2, 1, 2))
    result = run_module(spur_wal_level, conn(fake_cluster, level=2))
    assert result["failed"] and "127.0.1.2:6821" in result["msg"] and "upgrade those controllers first" in result["msg"]
    # without a level, it raises only to what every member reads: nothing to do here
    result = run_module(spur_wal_level, conn(fake_cluster))
    assert "failed" not in result and result["changed"] is False and result["target_level"] == 1
    assert controller.calls == []


def test_wal_level_never_goes_down(fake_cluster, controller):
    fake_cluster.set(leader=1, wal_level=2)
    result = run_module(spur_wal_level, conn(fake_cluster, level=1))
    assert result["changed"] is False and "never go down" in result["msg"]


def test_wal_level_needs_a_leader(fake_cluster, controller):
    fake_cluster.set(leader=None)
    result = run_module(spur_wal_level, conn(fake_cluster))
    assert result["failed"] and "no controller answers as leader" in result["msg"]


# ------------------------------------------------------------------ spur_job


def job_args(cluster, **extra):
    return conn(cluster, name="verify", wrap="echo hi", **extra)


def test_job_submitted_with_a_key_is_submitted_once(fake_cluster, controller):
    args = job_args(fake_cluster, state="submitted", idempotency_key="k1")
    runs = [run_module(spur_job, args, check_mode=c) for c in (True, False, True, False)]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[0]["job_id"] is None
    assert runs[1]["job_id"] == runs[2]["job_id"] == runs[3]["job_id"]
    assert runs[3]["duplicate"] is True and runs[1]["state"] == "PENDING"
    assert len(controller.service.list_jobs(include_finished=True)) == 1
    spec = controller.service.get_job(runs[1]["job_id"])["spec"]
    assert spec["script"] == "#!/bin/sh\necho hi\n" and spec["work_dir"] == "/tmp"


def test_job_without_a_key_submits_every_time(fake_cluster, controller):
    args = job_args(fake_cluster, state="submitted")
    assert run_module(spur_job, args)["changed"] and run_module(spur_job, args)["changed"]
    assert len(controller.service.list_jobs()) == 2


def test_job_finished_waits_and_reads_the_output(fake_cluster, controller, tmp_path):
    controller.add_node("n1")

    def run_it():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            jobs = controller.service.list_jobs()
            if jobs:
                job_id = jobs[0]["job_id"]
                controller.service.write("job_start", job_id=job_id, nodes=["n1"], attempt=1, time=time.time())
                (tmp_path / f"out-{job_id}.txt").write_text("hello from the job\n")
                controller.end_job(job_id)
                return
            time.sleep(0.05)

    runner = threading.Thread(target=run_it)
    runner.start()
    result = run_module(spur_job, job_args(fake_cluster, work_dir=str(tmp_path), output="out-%j.txt", wait_timeout=20))
    runner.join()
    assert "failed" not in result, result.get("msg")
    assert result["changed"] is True and result["state"] == "COMPLETED" and result["exit_code"] == 0
    assert result["output"] == "hello from the job\n" and result["nodes"] == ["n1"]
    assert result["output_path"] == str(tmp_path / f"out-{result['job_id']}.txt")


def test_job_that_fails_fails_the_task_unless_told(fake_cluster, controller):
    controller.add_node("n1")
    job = controller.start_job("n1", name="verify")
    controller.end_job(job, "FAILED", 3)
    result = run_module(spur_job, conn(fake_cluster, job_id=job))
    assert result["failed"] and "ended FAILED with exit code 3" in result["msg"] and "expect_success" in result["msg"]
    result = run_module(spur_job, conn(fake_cluster, job_id=job, expect_success=False))
    assert "failed" not in result and result["exit_code"] == 3 and result["changed"] is False


def test_job_wait_timeout(fake_cluster, controller):
    result = run_module(spur_job, job_args(fake_cluster, wait_timeout=0.3))
    assert result["failed"] and "still PENDING" in result["msg"] and "wait_timeout" in result["msg"]


def test_job_cancel_by_name(fake_cluster, controller):
    controller.add_node("n1")
    running = controller.start_job("n1", name="verify")
    args = conn(fake_cluster, state="cancelled", name="verify")
    runs = [run_module(spur_job, args, check_mode=c) for c in (True, False, True, False)]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[1]["cancelled"] == [running]
    assert controller.service.get_job(running)["state"] == "CANCELLED"


def test_job_argument_rules(fake_cluster, controller):
    both = run_module(spur_job, conn(fake_cluster, wrap="x", script="#!/bin/sh\n"))
    assert both["failed"] and "mutually exclusive" in both["msg"]
    neither = run_module(spur_job, conn(fake_cluster))
    assert neither["failed"] and "script" in neither["msg"]
    relative = run_module(spur_job, job_args(fake_cluster, work_dir="rel"))
    assert relative["failed"] and "work_dir" in relative["msg"]


# ------------------------------------------------------------------ spur_release


def fake_release(root: Path, version: str, build: str, max_level: int = 2) -> Path:
    """A release directory as far as the module looks at it: release.json and a wheel with wal.py."""
    root.mkdir(parents=True)
    wheel = f"spur_hpc-{version}-py3-none-any.whl"
    with zipfile.ZipFile(root / wheel, "w") as archive:
        archive.writestr("spur_hpc/controller/wal.py", f"MAX_WAL_LEVEL = {max_level}\n")
    (root / "release.json").write_text(json.dumps({"version": version, "build": build, "wheel": wheel}))
    return root


def fake_installer(prefix: Path):
    """Does what the release's installer does to PREFIX (links and markers), without building a venv."""

    def link(name: str, release_id: str) -> None:
        tmp = prefix / f".{name}.tmp"
        os.symlink(f"releases/{release_id}", tmp)
        os.replace(tmp, prefix / name)

    def runner(self, action, release):
        current = spur_release.link_target(str(prefix / "current"))
        if action == "install":
            target = prefix / "releases" / release["release_id"]
            if current == release["release_id"]:
                return {"ok": True, "changed": False}
            target.mkdir(parents=True, exist_ok=True)
            (target / spur_release.MARKER).write_text("{}")
            link("current", release["release_id"])
            if current:
                link("previous", current)
            return {"ok": True, "changed": True}
        previous = spur_release.link_target(str(prefix / "previous"))
        link("current", previous)
        link("previous", current)
        return {"ok": True, "changed": True}

    return runner


def test_release_install_four_times_then_roll_back(tmp_path, monkeypatch):
    prefix = tmp_path / "opt"
    monkeypatch.setattr(spur_release.ReleaseInstall, "run_installer", fake_installer(prefix))
    a = fake_release(tmp_path / "a", "1.0.0", "aaa")
    b = fake_release(tmp_path / "b", "1.1.0", "bbb", max_level=3)
    for src in (a, b):
        args = dict(src=str(src), prefix=str(prefix))
        runs = [run_module(spur_release_module, args, check_mode=c, diff=True) for c in (True, False, True, False)]
        assert [r["changed"] for r in runs] == [True, True, False, False], runs
        assert runs[0]["current"] == runs[1]["current"] == runs[3]["current"]
    assert runs[1]["release_id"] == "1.1.0-bbb" and runs[1]["max_wal_level"] == 3
    assert runs[1]["previous"] == "1.0.0-aaa" and runs[1]["diff"]["before"]["current"] == "1.0.0-aaa"
    back = dict(src=str(b), prefix=str(prefix), state="rolled_back")
    runs = [run_module(spur_release_module, back, check_mode=c) for c in (True, False, True, False)]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[0]["current"] == "1.0.0-aaa" and runs[3]["current"] == "1.0.0-aaa"
    assert runs[3]["previous"] == "1.1.0-bbb"


def test_release_refusals(tmp_path, monkeypatch):
    prefix = tmp_path / "opt"
    monkeypatch.setattr(spur_release.ReleaseInstall, "run_installer", fake_installer(prefix))
    a = fake_release(tmp_path / "a", "1.0.0", "aaa")
    run_module(spur_release_module, dict(src=str(a), prefix=str(prefix)))
    result = run_module(spur_release_module, dict(src=str(a), prefix=str(prefix), state="rolled_back"))
    assert result["failed"] and "no complete previous release" in result["msg"]
    result = run_module(spur_release_module, dict(src=str(tmp_path), prefix=str(prefix)))
    assert result["failed"] and "is not a release directory" in result["msg"] and "src" in result["msg"]
    result = run_module(spur_release_module, dict(release="1.0.0-aaa", prefix=str(prefix)))
    assert result["failed"] and "src" in result["msg"]  # state=current needs src
    result = run_module(spur_release_module, dict(src=str(a), prefix="relative/path"))
    assert result["failed"] and "absolute" in result["msg"]


# ------------------------------------------------------------------ missing libraries


def test_a_module_without_grpc_says_which_interpreter_to_use(fake_cluster, monkeypatch):
    monkeypatch.setattr(spur_client, "GRPC_IMPORT_ERROR", "Traceback: No module named 'grpc'")
    result = run_module(spur_node, node_args(fake_cluster))
    assert result["failed"]
    assert "grpcio and spur-hpc" in result["msg"] and "ansible_python_interpreter" in result["msg"]
    assert result["exception"].startswith("Traceback")
    # probe-only modules do not need it
    assert "failed" not in run_module(spur_controller_info, conn(fake_cluster))


# ------------------------------------------------------------------ credentials


def test_every_grpc_call_carries_a_credential(tmp_path):
    rpc = spur_client.ControllerRpc(["127.0.0.1:9"], 1, auth_type="none")
    ((key, value),) = rpc.credential()
    assert key == "spur-auth" and value == f"none:{os.getuid()}:{os.getgid()}"
    munge = spur_client.ControllerRpc(["127.0.0.1:9"], 1, auth_type="munge", munge_socket=str(tmp_path / "no.sock"))
    with pytest.raises(spur_client.SpurRefused) as info:
        munge.credential()
    assert "MUNGE credential" in info.value.message and info.value.override == "auth_type"
