"""Unit tests of the spur.cluster module spur_dispatch_hold: check mode, the real call, a re-run that keeps the hold,
the WAL level 4 guard (fail, or skip with a warning), and what the controller caps.

Main() with injected arguments, asserting on the JSON it returns; the controller side is FakeController over
the real ControllerService (fixtures in conftest.py)."""

from __future__ import annotations

import time

from ansible_collections.spur.cluster.plugins.modules import spur_dispatch_hold
from collection_fakes import node_args
from collection_helpers import run_module


def level_4(controller) -> None:
    controller.service.set_wal_level(4)


def test_hold_four_times_check_real_check_real(fake_cluster, controller):
    controller.add_node("n1")
    level_4(controller)
    args = node_args(fake_cluster, hold_secs=20)
    first = run_module(spur_dispatch_hold, args, check_mode=True, diff=True)
    assert first["changed"] is True and first["held"] is True
    assert controller.service.get_node("n1").get("dispatch_hold_until", 0.0) == 0.0  # check mode wrote nothing
    started = time.time()
    second = run_module(spur_dispatch_hold, args, diff=True)
    assert second["changed"] is True and second["wal_level"] == 4
    assert started + 19 <= second["hold_until"] <= time.time() + 20
    assert second["diff"]["before"]["dispatch_hold_until"] == 0.0
    assert controller.service.get_node("n1")["dispatch_hold_until"] == second["hold_until"]
    third = run_module(spur_dispatch_hold, args, check_mode=True)
    fourth = run_module(spur_dispatch_hold, args)
    assert third["changed"] is False and fourth["changed"] is False
    assert fourth["hold_until"] == second["hold_until"]
    # the node is neither drained nor changed in state
    node = controller.service.get_node("n1")
    assert node["state"] == "IDLE" and node["drain"] is False and node["reason"] == ""


def test_a_hold_about_to_end_is_set_again_and_the_controller_caps_it(fake_cluster, controller):
    controller.add_node("n1")
    level_4(controller)
    controller.service.write("node_dispatch_hold", name="n1", until=time.time() + 2, time=time.time())
    result = run_module(spur_dispatch_hold, node_args(fake_cluster, hold_secs=600))
    assert result["changed"] is True
    assert result["hold_until"] <= time.time() + 60  # FakeController's heartbeat_timeout_secs
    again = run_module(spur_dispatch_hold, node_args(fake_cluster, hold_secs=0))
    assert again["changed"] is False  # the longest hold runs already


def test_a_registration_ends_the_hold(fake_cluster, controller):
    controller.add_node("n1")
    level_4(controller)
    run_module(spur_dispatch_hold, node_args(fake_cluster))
    controller.add_node("n1")  # the restarted spurd registers
    assert controller.service.get_node("n1").get("dispatch_hold_until", 0.0) == 0.0
    assert run_module(spur_dispatch_hold, node_args(fake_cluster))["changed"] is True


def test_below_wal_level_4_it_fails_or_skips_with_a_warning(fake_cluster, controller):
    controller.add_node("n1")  # FakeController's cluster runs level 1
    failed = run_module(spur_dispatch_hold, node_args(fake_cluster))
    assert failed["failed"] is True
    assert "WAL level 1 and a dispatch hold needs level 4" in failed["msg"] and "on_unsupported" in failed["msg"]
    skipped = run_module(spur_dispatch_hold, node_args(fake_cluster, on_unsupported="skip"))
    assert "failed" not in skipped and skipped["changed"] is False and skipped["held"] is False
    assert "restarts without one" in skipped["warnings"][0]
    assert controller.calls.count("HoldDispatch") == 0


def test_bad_arguments_and_an_unknown_node_are_one_line(fake_cluster, controller):
    level_4(controller)
    missing = run_module(spur_dispatch_hold, node_args(fake_cluster))
    assert missing["failed"] is True and missing["msg"] == "node n1 does not exist on the controllers"
    controller.add_node("n1")
    negative = run_module(spur_dispatch_hold, node_args(fake_cluster, hold_secs=-1))
    assert negative["failed"] is True and "hold_secs must not be negative" in negative["msg"]
