"""Table-driven tests of the pure planning and guard-rail logic of spur.cluster (module_utils/spur_plan.py)."""

from __future__ import annotations

import pytest
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import ClusterView, SpurInvalid
from ansible_collections.spur.cluster.plugins.module_utils.spur_plan import (
    HealthTracker,
    highest_common_wal_level,
    order_controllers,
    plan_agents,
    plan_controllers,
    preflight_refusals,
    version_key,
    wal_level_blockers,
)

NAMES = ["ctl-0", "ctl-1", "ctl-2"]

# ------------------------------------------------------------------ controller order


@pytest.mark.parametrize(
    "names, leaders, explicit, order, source, warns",
    [
        (NAMES, ["ctl-0"], None, ["ctl-1", "ctl-2", "ctl-0"], "leader_last", False),
        (NAMES, ["ctl-1"], None, ["ctl-0", "ctl-2", "ctl-1"], "leader_last", False),
        (NAMES, ["ctl-2"], None, ["ctl-0", "ctl-1", "ctl-2"], "leader_last", False),
        (NAMES, [], None, NAMES, "inventory", True),
        (NAMES, ["ctl-0", "ctl-2"], None, NAMES, "inventory", True),
        (NAMES, ["ctl-1"], ["ctl-2", "ctl-0", "ctl-1"], ["ctl-2", "ctl-0", "ctl-1"], "explicit", False),
        (NAMES, [], ["ctl-1", "ctl-0", "ctl-2"], ["ctl-1", "ctl-0", "ctl-2"], "explicit", False),
        (["solo"], [], None, ["solo"], "single", False),
        (["solo"], ["solo"], None, ["solo"], "single", False),
    ],
)
def test_controller_order(names, leaders, explicit, order, source, warns):
    got = order_controllers(names, leaders, explicit)
    assert got["order"] == order
    assert got["source"] == source
    assert bool(got["warnings"]) == warns
    if warns:
        assert "inventory order" in got["warnings"][0] and "order" in got["warnings"][0]


@pytest.mark.parametrize(
    "explicit, needle",
    [
        (["ctl-0", "ctl-1"], "leaves out ctl-2"),
        (["ctl-0", "ctl-1", "ctl-1"], "names ctl-1 more than once"),
        (["ctl-0", "ctl-1", "ctl-9"], "names unknown controllers ctl-9"),
        (["ctl-0", "ctl-0", "ctl-0", "ctl-1", "ctl-2"], "more than once"),
    ],
)
def test_explicit_order_must_name_every_controller_once(explicit, needle):
    with pytest.raises(SpurInvalid) as info:
        order_controllers(NAMES, ["ctl-0"], explicit)
    assert needle in info.value.message
    assert info.value.override == "order"
    assert "exactly once" in info.value.message


def test_warning_names_several_leaders():
    got = order_controllers(NAMES, ["ctl-0", "ctl-2"])
    assert "several controllers answer as leader (ctl-0, ctl-2)" in got["warnings"][0]
    got = order_controllers(NAMES, [])
    assert "no controller answers as leader" in got["warnings"][0]


def ctl(name, build="old", leader=False, reachable=True):
    return {"name": name, "build": build, "is_leader": leader, "reachable": reachable}


@pytest.mark.parametrize(
    "controllers, upgrade, at_target, unreachable, leader",
    [
        ([ctl("a", leader=True), ctl("b"), ctl("c")], ["b", "c", "a"], [], [], "a"),
        ([ctl("a", "new"), ctl("b", leader=True), ctl("c")], ["c", "b"], ["a"], [], "b"),
        ([ctl("a", "new"), ctl("b", "new", leader=True), ctl("c", "new")], [], ["a", "c", "b"], [], "b"),
        # an unreachable controller keeps its place: its build is unknown
        ([ctl("a", reachable=False), ctl("b", leader=True), ctl("c")], ["a", "c", "b"], [], ["a"], "b"),
        # a controller that says leader but does not answer does not count as leader
        ([ctl("a", leader=True, reachable=False), ctl("b"), ctl("c")], ["a", "b", "c"], [], ["a"], None),
    ],
)
def test_plan_controllers(controllers, upgrade, at_target, unreachable, leader):
    plan = plan_controllers(controllers, "new")
    assert plan["upgrade"] == upgrade
    assert plan["at_target"] == at_target
    assert plan["unreachable"] == unreachable
    assert plan["leader"] == leader


# ------------------------------------------------------------------ agent batches


def agent(name, build="old", busy=False, reachable=True, known=True):
    return {"name": name, "build": build, "busy": busy, "reachable": reachable, "known": known}


FIVE = [agent(f"n{i}") for i in range(1, 6)]


@pytest.mark.parametrize(
    "agents, batch, canary, batches",
    [
        (FIVE, 1, False, [["n1"], ["n2"], ["n3"], ["n4"], ["n5"]]),
        (FIVE, 2, False, [["n1", "n2"], ["n3", "n4"], ["n5"]]),
        (FIVE, 2, True, [["n1"], ["n2", "n3"], ["n4", "n5"]]),
        (FIVE, 10, True, [["n1"], ["n2", "n3", "n4", "n5"]]),
        (FIVE, 10, False, [["n1", "n2", "n3", "n4", "n5"]]),
        ([agent("n1", "new"), *FIVE[1:]], 2, True, [["n2"], ["n3", "n4"], ["n5"]]),
        ([agent("n1", "new")], 1, True, []),
        ([], 3, True, []),
    ],
)
def test_agent_batches(agents, batch, canary, batches):
    assert plan_agents(agents, "new", batch, canary)["batches"] == batches


def test_agents_busy_unreachable_unknown_and_skipped_are_listed():
    agents = [
        agent("n1", busy=True),
        agent("n2", reachable=False),
        agent("n3", "new", busy=True),
        agent("n4", known=False),
        agent("n5", reachable=None, known=None),
    ]
    plan = plan_agents(agents, "new", 2, False)
    assert plan["at_target"] == ["n3"]
    assert plan["upgrade"] == ["n1", "n2", "n4", "n5"]
    assert plan["busy"] == ["n1"]  # n3 is busy but needs nothing
    assert plan["unreachable"] == ["n2"]
    assert plan["unknown"] == ["n4"]


def test_same_build_under_another_version_is_not_at_target():
    # One tree released as 0.1.0 and 0.2.0 has one build: only the version tells the releases apart.
    agents = [dict(agent("n1", "b1"), version="0.1.0"), dict(agent("n2", "b1"), version="0.2.0")]
    plan = plan_agents(agents, "b1", 1, False, target_version="0.2.0")
    assert plan["at_target"] == ["n2"]
    assert plan["batches"] == [["n1"]]
    assert plan_agents(agents, "b1")["at_target"] == ["n1", "n2"]  # without a version, the build decides
    controllers = [dict(ctl("a", "b1", leader=True), version="0.1.0"), dict(ctl("b", "b1"), version="0.2.0")]
    plan = plan_controllers(controllers, "b1", target_version="0.2.0")
    assert plan["upgrade"] == ["a"]
    assert plan["at_target"] == ["b"]


@pytest.mark.parametrize("agents, batch, needle", [(FIVE, 0, "batch_size"), (FIVE + FIVE[:1], 1, "n1")])
def test_agent_plan_refuses_bad_input(agents, batch, needle):
    with pytest.raises(SpurInvalid) as info:
        plan_agents(agents, "new", batch)
    assert needle in info.value.message


# ------------------------------------------------------------------ versions


@pytest.mark.parametrize(
    "older, newer",
    [
        ("1.0.0", "1.0.1"),
        ("1.0", "1.0.1"),
        ("1.9", "1.10"),
        ("1.0.0rc1", "1.0.0"),
        ("1.0.0a2", "1.0.0b1"),
        ("1.0.0b3", "1.0.0rc1"),
        ("1.0.0.dev4", "1.0.0a1"),
        ("1.0.0", "1.0.0.post1"),
        ("0.9.9", "1.0"),
    ],
)
def test_version_order(older, newer):
    assert version_key(older) < version_key(newer)


@pytest.mark.parametrize("same", [("1.0", "1.0.0"), ("2", "2.0.0")])
def test_version_equal(same):
    assert version_key(same[0]) == version_key(same[1])


def test_version_key_refuses_garbage():
    with pytest.raises(SpurInvalid) as info:
        version_key("latest")
    assert info.value.override == "target_version"


# ------------------------------------------------------------------ guard rails

MEMBERS = ["127.0.1.1:6821", "127.0.1.2:6821", "127.0.1.3:6821"]
HEALTHY = {
    "upgrade": True,
    "wipe": False,
    "inventory_members": MEMBERS,
    "committed_members": MEMBERS,
    "running_versions": ["1.0.0"],
    "target_version": "1.1.0",
    "cluster_wal_level": 1,
    "target_max_wal_level": 2,
    "health_problems": [],
    "require_healthy": True,
}


@pytest.mark.parametrize(
    "change, checks, override",
    [
        ({}, [], None),
        ({"wipe": True}, ["wipe_during_upgrade"], None),
        ({"upgrade": False, "wipe": True}, [], None),
        ({"skip_busy_agents": True}, [], None),
        ({"skip_busy_agents": True, "force_upgrade_busy_agents": True}, ["busy_agent_modes"], None),
        ({"skip_busy_agents": True, "in_place_upgrade": True}, ["busy_agent_modes"], None),
        ({"force_upgrade_busy_agents": True, "in_place_upgrade": True}, ["busy_agent_modes"], None),
        (
            {"skip_busy_agents": True, "force_upgrade_busy_agents": True, "in_place_upgrade": True},
            ["busy_agent_modes"],
            None,
        ),
        ({"inventory_members": MEMBERS[:2]}, ["topology_change"], "wipe"),
        ({"inventory_members": [*MEMBERS, "127.0.1.4:6821"]}, ["topology_change"], "wipe"),
        ({"inventory_members": list(reversed(MEMBERS))}, [], None),
        ({"inventory_members": MEMBERS[:2], "upgrade": False, "wipe": True}, [], None),
        ({"inventory_members": MEMBERS[:2], "committed_members": None}, [], None),
        ({"inventory_members": []}, [], None),
        ({"cluster_wal_level": 2, "target_max_wal_level": 1}, ["wal_level_skew"], None),
        ({"cluster_wal_level": 2, "target_max_wal_level": 2}, [], None),
        ({"cluster_wal_level": 2, "target_max_wal_level": None}, [], None),
        ({"target_version": "0.9.0"}, ["downgrade"], "allow_downgrade"),
        ({"target_version": "1.0.0rc1"}, ["downgrade"], "allow_downgrade"),
        ({"target_version": "0.9.0", "allow_downgrade": True}, [], None),
        ({"target_version": "1.0.0"}, [], None),
        ({"running_versions": ["1.0.0", "1.2.0"], "target_version": "1.1.0"}, ["downgrade"], "allow_downgrade"),
        ({"health_problems": ["no controller answers as leader"]}, ["cluster_health"], "require_healthy"),
        ({"health_problems": ["no controller answers as leader"], "require_healthy": False}, [], None),
    ],
)
def test_preflight_rules(change, checks, override):
    found = preflight_refusals(dict(HEALTHY, **change))
    assert [r["check"] for r in found] == checks
    if checks:
        assert found[0]["override"] == override
        assert found[0]["message"] and "\n" not in found[0]["message"]


def test_preflight_reports_every_broken_rule_at_once():
    facts = dict(
        HEALTHY,
        wipe=True,
        skip_busy_agents=True,
        in_place_upgrade=True,
        inventory_members=MEMBERS[:1],
        cluster_wal_level=3,
        target_max_wal_level=2,
        target_version="0.1",
        health_problems=["member x lags"],
    )
    checks = [r["check"] for r in preflight_refusals(facts)]
    # wipe is set, so the topology rule (whose override is wipe) stays quiet
    assert checks == ["wipe_during_upgrade", "busy_agent_modes", "wal_level_skew", "downgrade", "cluster_health"]


def test_topology_message_names_the_difference():
    (found,) = preflight_refusals(dict(HEALTHY, inventory_members=[MEMBERS[0], MEMBERS[1], "127.0.1.9:6821"]))
    assert "adds 127.0.1.9:6821" in found["message"]
    assert "removes 127.0.1.3:6821" in found["message"]


# ------------------------------------------------------------------ WAL level


INFO = {m: {"max_level": 2, "version": "1.1.0", "build": "b"} for m in MEMBERS}


@pytest.mark.parametrize(
    "info, level, blocked",
    [
        (INFO, 2, []),
        (INFO, 3, MEMBERS),
        ({**INFO, MEMBERS[1]: {"max_level": 1, "version": "1.0.0", "build": "a"}}, 2, [MEMBERS[1]]),
        ({k: v for k, v in INFO.items() if k != MEMBERS[2]}, 2, [MEMBERS[2]]),
        ({}, 1, MEMBERS),
    ],
)
def test_wal_level_blockers(info, level, blocked):
    found = wal_level_blockers(MEMBERS, info, level)
    assert [line.split(" ", 1)[0] for line in found] == blocked


@pytest.mark.parametrize(
    "info, level",
    [
        (INFO, 2),
        ({**INFO, MEMBERS[0]: {"max_level": 1}}, 1),
        ({**INFO, MEMBERS[0]: {"max_level": 3}}, 2),
        ({k: v for k, v in INFO.items() if k != MEMBERS[0]}, None),
    ],
)
def test_highest_common_wal_level(info, level):
    assert highest_common_wal_level(MEMBERS, info) == level


# ------------------------------------------------------------------ health


def test_health_needs_the_same_leader_and_term_for_stable_for():
    tracker = HealthTracker(stable_for=3)
    assert tracker.observe(0.0, "a", 5, []) != []
    assert "stable_for" in tracker.observe(2.0, "a", 5, [])[0]
    assert tracker.observe(3.5, "a", 5, []) == []
    # a new term starts the clock again
    assert tracker.observe(4.0, "a", 6, []) != []
    assert tracker.observe(7.1, "a", 6, []) == []
    # so does a problem in between
    assert tracker.observe(8.0, "a", 6, ["x"]) == ["x"]
    assert tracker.observe(9.0, "a", 6, []) != []
    assert tracker.observe(12.5, "a", 6, []) == []


def test_health_of_a_leader_still_on_the_term_held_before_a_follower_restart_is_stable_at_once():
    tracker = HealthTracker(stable_for=3, held_term=5)
    assert tracker.observe(0.0, "a", 5, []) == []
    assert tracker.observe(0.1, "a", 5, ["member c lags"]) == ["member c lags"]  # the other checks still hold
    # an election happened meanwhile: its term waits stable_for as any other
    assert "stable_for" in tracker.observe(1.0, "b", 6, [])[0]
    assert tracker.observe(4.1, "b", 6, []) == []


def test_health_of_a_leader_that_says_how_long_it_has_held_its_term_is_decided_in_one_look():
    tracker = HealthTracker(stable_for=3)
    assert tracker.observe(0.0, "a", 5, [], held_for=4.2) == []
    # a young term still waits what it lacks, counted from the leader's own start of it
    tracker = HealthTracker(stable_for=3)
    assert "stable_for" in tracker.observe(0.0, "a", 6, [], held_for=1.0)[0]
    assert tracker.observe(2.1, "a", 6, [], held_for=None) == []
    # nothing else is waived: a problem, or no age (a release before term_secs), waits as before
    assert HealthTracker(stable_for=3).observe(0.0, "a", 5, ["member c lags"], held_for=9.0) == ["member c lags"]
    assert HealthTracker(stable_for=3).observe(0.0, "a", 5, [], held_for=None) != []


def test_health_with_stable_for_zero_is_immediate():
    assert HealthTracker(0).observe(1.0, "a", 1, []) == []


def record(name, raft, leader=False, reachable=True, applied=10, commit=10, term=1, stalled=None):
    return {
        "name": name,
        "reachable": reachable,
        "error": None if reachable else "refused",
        "is_leader": leader,
        "raft_addr": raft,
        "applied_index": applied,
        "commit_index": commit,
        "term": term,
        "members": MEMBERS,
        "cluster_id": "c",
        "stalled": stalled,
        "lag_map": {m: 0 for m in MEMBERS if m != raft} if leader else None,
    }


@pytest.mark.parametrize(
    "records, max_lag, needles",
    [
        ([record("a", MEMBERS[0], True), record("b", MEMBERS[1]), record("c", MEMBERS[2])], 10, []),
        (
            [record("a", MEMBERS[0], True, commit=500), record("b", MEMBERS[1]), record("c", MEMBERS[2], applied=499)],
            10,
            ["member 127.0.1.2:6821 lags 490 entries", "max_lag 10"],
        ),
        ([record("a", MEMBERS[0]), record("b", MEMBERS[1]), record("c", MEMBERS[2])], 10, ["no controller answers"]),
        (
            [record("a", MEMBERS[0], True), record("b", MEMBERS[1], True), record("c", MEMBERS[2])],
            10,
            ["several controllers answer as leader: a, b"],
        ),
        (
            [record("a", MEMBERS[0], True), record("b", MEMBERS[1], reachable=False), record("c", MEMBERS[2])],
            10,
            ["controller b does not answer (refused)"],
        ),
        (
            [record("a", MEMBERS[0], True), record("b", MEMBERS[1], term=2), record("c", MEMBERS[2])],
            10,
            ["disagree on the term"],
        ),
        (
            [
                record("a", MEMBERS[0], True),
                record("b", MEMBERS[1], stalled={"reason": "op x"}),
                record("c", MEMBERS[2]),
            ],
            10,
            ["controller b stopped applying the log: op x"],
        ),
    ],
)
def test_cluster_view_problems(records, max_lag, needles):
    problems = ClusterView(records).problems(max_lag=max_lag)
    text = "; ".join(problems)
    if not needles:
        assert problems == []
    for needle in needles:
        assert needle in text
