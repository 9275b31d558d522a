"""Fair-share usage (half-life decay, charging up the tree) and Slurm's Fair Tree factors (controller/fairshare.py)."""

from __future__ import annotations

import math

import pytest

from spur_hpc.controller import associations as A
from spur_hpc.controller import fairshare as F

DAY = 86400.0


def store_with(*users: tuple[str, str], accounts: tuple[tuple[str, str, int], ...] = (("phys", "root", 1),)):
    """A store with accounts (name, parent, shares) and users (name, account) of one share each."""
    s = A.default_store("c")
    next_id = 3
    for name, parent, shares in accounts:
        s["accounts"][name] = A.new_account(name, parent)
        s["assocs"][A.assoc_key(name)] = A.new_assoc(next_id, "c", name, parent=parent, shares=shares)
        next_id += 1
    for user, account in users:
        s["users"].setdefault(user, A.new_user(user, account))
        s["assocs"][A.assoc_key(account, user)] = A.new_assoc(next_id, "c", account, user, parent=account)
        next_id += 1
    return s


def test_usage_halves_after_each_half_life():
    s = store_with(("alice", "phys"))
    s[F.HALF_LIFE_KEY] = DAY
    F.charge(s, A.assoc_key("phys", "alice"), 1000.0, 100.0)
    assert F.usage_at(s, A.assoc_key("phys", "alice"), 100.0) == pytest.approx(1000.0)
    assert F.usage_at(s, A.assoc_key("phys", "alice"), 100.0 + DAY) == pytest.approx(500.0)
    assert F.usage_at(s, A.assoc_key("phys", "alice"), 100.0 + 3 * DAY) == pytest.approx(125.0)
    # a second charge decays the first to its own time, then adds
    F.charge(s, A.assoc_key("phys", "alice"), 100.0, 100.0 + DAY)
    assert s["usage"][A.assoc_key("phys", "alice")] == [pytest.approx(600.0), 100.0 + DAY]


def test_half_life_zero_never_decays_and_default_is_seven_days():
    s = store_with(("alice", "phys"))
    assert F.half_life(s) == 7 * DAY
    s[F.HALF_LIFE_KEY] = 0
    F.charge(s, A.assoc_key("phys", "alice"), 10.0, 0.0)
    assert F.usage_at(s, A.assoc_key("phys", "alice"), 1e9) == 10.0


def test_charge_reaches_every_ancestor_and_nothing_else():
    s = store_with(("alice", "bio"), ("bob", "phys"), accounts=(("phys", "root", 1), ("bio", "phys", 1)))
    keys = F.charge(s, A.assoc_key("bio", "alice"), 60.0, 5.0)
    assert keys == [A.assoc_key("bio", "alice"), A.assoc_key("bio"), A.assoc_key("phys"), A.assoc_key("root")]
    assert A.assoc_key("phys", "bob") not in s["usage"]
    assert F.charge(s, A.assoc_key("bio", "nobody"), 60.0, 5.0) == []  # no such association: nothing charged
    assert F.charge(s, A.assoc_key("bio", "alice"), 0.0, 6.0) == []


def test_job_charge_is_cpus_times_run_seconds_times_usage_factor_without_suspended_time():
    def job(**extra):
        return {"start_time": 100.0, "attempt": 1,
                "alloc": {"cpus": 2, "per_node": {"n1": {"cpus": 2}, "n2": {"cpus": 4}}}, **extra}  # fmt: skip

    assert F.job_charge(job(), 1.0, 160.0) == 6 * 60
    assert F.job_charge(job(), 0.5, 160.0) == 3 * 60
    assert F.job_charge(job(suspend_attempt=1, suspended_secs=10.0), 1.0, 160.0) == 6 * 50
    still = job(suspend_attempt=1, suspended_secs=10.0, suspended=1, suspend_time=150.0)  # suspended since 150
    assert F.job_charge(still, 1.0, 160.0) == 6 * 40


def test_a_running_job_is_charged_by_parts_never_twice():
    job = {"start_time": 100.0, "attempt": 1, "alloc": {"cpus": 1, "per_node": {"n1": {"cpus": 1}}}}
    assert F.job_charge(job, 1.0, 130.0) == 30.0  # the leader's period
    assert F.job_charge(job, 1.0, 130.0) == 0.0  # the same time again: nothing more
    assert F.job_charge(job, 1.0, 190.0) == 60.0  # its end: the rest
    job.update(attempt=2, start_time=300.0)  # requeued, a new run: counted from its own start
    assert F.job_charge(job, 1.0, 310.0) == 10.0


def test_fair_tree_equal_shares_used_user_ranks_lower():
    s = store_with(("alice", "phys"), ("bob", "phys"))
    F.charge(s, A.assoc_key("phys", "alice"), 3600.0, 0.0)
    rows = F.shares(s, 0.0)
    alice, bob = rows[A.assoc_key("phys", "alice")], rows[A.assoc_key("phys", "bob")]
    root_user = rows[A.assoc_key("root", "root")]
    assert alice["norm_shares"] == bob["norm_shares"] == 0.5
    assert alice["effective_usage"] == 1.0 and bob["effective_usage"] == 0.0
    assert bob["level_fs"] == math.inf and alice["level_fs"] == pytest.approx(0.5)
    # three user associations: root's own user (no usage: level FS infinite) ranks above account phys (which has
    # usage) at the top level, so 3/3; inside phys bob (no usage) 2/3, then alice 1/3.
    assert root_user["fairshare"] == 1.0
    assert bob["fairshare"] == pytest.approx(2 / 3)
    assert alice["fairshare"] == pytest.approx(1 / 3)
    assert rows[A.assoc_key("phys")]["fairshare"] == 0.0  # accounts have no factor of their own


def test_fair_tree_ties_share_a_rank_and_no_usage_is_infinite():
    s = store_with(("alice", "phys"), ("bob", "phys"))
    rows = F.shares(s, 0.0)
    factors = {k: r["fairshare"] for k, r in rows.items() if r["user"]}
    # nobody has usage: every level FS is infinite, users are tied at every level: all rank first
    assert set(factors.values()) == {1.0}
    assert rows[A.assoc_key("phys", "alice")]["level_fs"] == math.inf


def test_fair_tree_sibling_accounts_order_all_their_users():
    s = store_with(
        ("a1", "busy"), ("a2", "busy"), ("b1", "idle"),
        accounts=(("busy", "root", 1), ("idle", "root", 1)),
    )  # fmt: skip
    F.charge(s, A.assoc_key("busy", "a1"), 100.0, 0.0)
    F.charge(s, A.assoc_key("idle", "b1"), 10.0, 0.0)
    rows = F.shares(s, 0.0)
    fs = {r["user"]: r["fairshare"] for r in rows.values() if r["user"]}
    # idle (less usage for the same shares) outranks busy: every user of idle above every user of busy
    assert fs["b1"] > fs["a2"] > fs["a1"]
    assert rows[A.assoc_key("busy")]["norm_usage"] == pytest.approx(100 / 110)
    order = sorted(rows, key=lambda k: rows[k]["order"])
    assert order[0] == A.assoc_key("root")
    assert [rows[k]["depth"] for k in order[:2]] == [0, 1]


def test_shares_decay_to_the_reading_time():
    s = store_with(("alice", "phys"))
    s[F.HALF_LIFE_KEY] = DAY
    F.charge(s, A.assoc_key("phys", "alice"), 800.0, 0.0)
    assert F.shares(s, 2 * DAY)[A.assoc_key("phys", "alice")]["raw_usage"] == pytest.approx(200.0)
