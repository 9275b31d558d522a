"""Unit tests of the spur.cluster module spur_node: drain, resume, down, waits that outlive a loss of the controllers.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py).
"""

from __future__ import annotations

import threading
import time

import pytest
from ansible_collections.spur.cluster.plugins.module_utils import spur_client
from ansible_collections.spur.cluster.plugins.modules import (
    spur_node,
)
from collection_fakes import PREFIX, node_args
from collection_helpers import run_module

# ------------------------------------------------------------------ spur_node


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


def test_drain_outlives_a_loss_of_the_controllers_that_begins_at_its_write(fake_cluster, controller, monkeypatch):
    """The node was read, then the network drops as the drain is sent (the tier-2 upgrade's node-0): the write waits
    the outage out instead of failing the upgrade after a write's usual patience."""
    controller.add_node("n1")
    real_call = controller.call

    def call(method, request, write=False, patience=None):
        if method == "DrainNode":
            monkeypatch.setattr(controller, "call", real_call)
            cut_off(controller, monkeypatch, 1.5)
            raise spur_client.SpurUnreachable("no controller could answer DrainNode (fake: the link went down)")
        return real_call(method, request, write, patience)

    monkeypatch.setattr(controller, "call", call)
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
    assert "no controller answered for 1 s while working on node n1" in result["msg"], result["msg"]


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
