"""Unit tests of the spur.cluster modules spur_upgrade_plan, spur_preflight and spur_wal_level.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py).
"""

from __future__ import annotations

import pytest
from ansible_collections.spur.cluster.plugins.module_utils import spur_client
from ansible_collections.spur.cluster.plugins.modules import (
    spur_preflight,
    spur_upgrade_plan,
    spur_wal_level,
)
from collection_fakes import MEMBERS, NAMES, ProbeServer, conn, dead_url
from collection_helpers import run_module

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
        raise spur_client.SpurUnreachable("no controller could answer ListNodes (fake: connection refused)")

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


def test_preflight_passes_a_healthy_upgrade(fake_cluster):
    args = conn(fake_cluster, members=MEMBERS, target_version="1.1.0", target_max_wal_level=2)
    result = run_module(spur_preflight, args)
    assert "failed" not in result and result["passed"] is True and result["refusals"] == []
    assert result["facts"]["committed_members"] == [m + ":6821" for m in MEMBERS]
    assert result["facts"]["running_versions"] == ["1.0.0"]


def test_preflight_waits_for_a_stable_leader_first_and_a_leader_that_reports_its_terms_age_takes_one_look(fake_cluster):
    args = conn(fake_cluster, members=MEMBERS, target_version="1.1.0", target_max_wal_level=2, stable_for=3,
                health_wait=0.6)
    # A release before term_secs: the wait watches the term, runs out, and the rules still judge (and pass).
    result = run_module(spur_preflight, args)
    assert result["passed"] is True and result["health"]["healthy"] is False
    assert "stable_for" in result["health"]["unmet"][0] and result["health"]["waited"] >= 0.5
    for server in fake_cluster.servers:
        server.routes["/status"][1]["term_secs"] = 12.5
    result = run_module(spur_preflight, dict(args, health_wait=30))
    assert result["passed"] is True and result["health"]["healthy"] is True and result["health"]["waited"] < 5
    assert result["health"]["leader"] and result["health"]["term"] == 3
    # Without health_wait nothing is waited for, as before.
    assert run_module(spur_preflight, dict(args, health_wait=0))["health"] is None


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
