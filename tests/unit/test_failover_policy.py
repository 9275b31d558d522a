"""The failover policy every client shares (spur_hpc.wire.failover): which controller next, how long, when to
give up. Pure Python, so it runs against a clock the test owns; the walks below are what a client would do."""

from __future__ import annotations

import pytest

from spur_hpc.wire import failover


class Clock:
    """Time that moves only when the policy sleeps or a simulated try takes long."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def walk(policy: failover.Failover, answer) -> list[str]:
    """Try addresses as the policy says; answer(address, round) -> None to succeed, else (error, hint, reachable)."""
    tried = []
    for address in policy:
        tried.append(address)
        result = answer(address, policy.rounds)
        if result is None:
            return tried
        error, hint, reachable = result
        policy.failed(address, error, hint=hint, reachable=reachable)
    return tried


def make(clock: Clock, addresses=("a:1", "b:1", "c:1"), patience=15.0, **kwargs) -> failover.Failover:
    return failover.Failover(addresses, clock() + patience, clock=clock, sleep=clock.sleep, **kwargs)


def test_the_leader_a_refusal_names_is_tried_next() -> None:
    clock = Clock()
    tried = walk(make(clock), lambda a, r: None if a == "c:1" else ("not the leader", "c:1", True))
    assert tried == ["a:1", "c:1"]


def test_a_hint_outside_the_configured_addresses_is_tried_and_kept_for_later_rounds() -> None:
    clock = Clock()
    policy = make(clock, addresses=("a:1",))
    tried = walk(policy, lambda a, r: None if r == 2 and a == "z:9" else ("election", "z:9", True))
    assert tried == ["a:1", "z:9", "z:9"]  # round 2 starts with the leader last named
    assert policy.addresses == ["a:1", "z:9"]


def test_the_preferred_address_goes_first_then_the_rest_in_order() -> None:
    clock = Clock()
    tried = walk(make(clock, prefer="b:1"), lambda a, r: None if a == "c:1" else ("down", None, False))
    assert tried == ["b:1", "a:1", "c:1"]


def test_no_address_is_tried_twice_in_a_round() -> None:
    clock = Clock()
    policy = make(clock, patience=0.6)
    # every controller names another as leader, in a circle: each is still tried once per round
    circle = {"a:1": "b:1", "b:1": "c:1", "c:1": "a:1"}
    tried = walk(policy, lambda a, r: ("not the leader", circle[a], True))
    rounds = [tried[i : i + 3] for i in range(0, len(tried), 3)]
    assert len(rounds) == policy.rounds >= 2
    assert all(sorted(r) == ["a:1", "b:1", "c:1"] for r in rounds)


def test_rounds_are_separated_by_a_pause_and_end_at_the_deadline_with_every_last_error() -> None:
    clock = Clock()
    policy = make(clock, addresses=("a:1", "b:1"), patience=1.0, pause=0.25)
    tried = walk(policy, lambda a, r: (f"UNAVAILABLE round {r}", None, True))
    assert clock.sleeps == [0.25, 0.25, 0.25]  # a fourth pause would end at the deadline
    assert tried == ["a:1", "b:1"] * 4
    assert policy.summary() == "a:1: UNAVAILABLE round 4; b:1: UNAVAILABLE round 4"


def test_every_address_gets_one_try_even_when_the_first_one_took_all_the_time() -> None:
    clock = Clock()
    policy = make(clock, patience=3.0)

    def slow(address, round_number):
        clock.now += 15.0  # a call timeout longer than the patience
        return ("DEADLINE_EXCEEDED", None, True)

    assert walk(policy, slow) == ["a:1", "b:1", "c:1"]
    assert policy.rounds == 1 and clock.sleeps == []


def test_a_read_gives_up_after_a_round_where_nothing_listened_a_write_waits() -> None:
    refused = lambda a, r: ("connection refused", None, False)  # noqa: E731
    read_clock, write_clock = Clock(), Clock()
    read = make(read_clock, patience=3.0, write=False)
    write = make(write_clock, patience=3.0, write=True)
    assert walk(read, refused) == ["a:1", "b:1", "c:1"] and read_clock.sleeps == []
    walk(write, refused)
    assert write.rounds > 1 and write_clock.sleeps


def test_a_read_waits_while_an_election_runs() -> None:
    clock = Clock()
    policy = make(clock, patience=3.0, write=False)
    tried = walk(policy, lambda a, r: None if r == 3 else ("no leader yet", None, True))
    assert policy.rounds == 3 and tried[-1] == "a:1" and len(clock.sleeps) == 2


def test_a_stop_ends_the_walk_before_the_next_try() -> None:
    clock = Clock()
    stopping = []
    policy = make(clock, stopped=lambda: bool(stopping))

    def answer(address, round_number):
        stopping.append(True)
        return ("down", None, False)

    assert walk(policy, answer) == ["a:1"]
    assert policy.summary() == "a:1: down"


def test_the_leader_hint_is_read_from_trailing_metadata_pairs() -> None:
    assert failover.leader_hint([("other", "x"), (failover.LEADER_METADATA_KEY, "127.0.0.9:6817")]) == "127.0.0.9:6817"
    assert failover.leader_hint([(failover.LEADER_METADATA_KEY, "")]) is None
    assert failover.leader_hint(None) is None


def test_no_address_at_all_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no controller address"):
        failover.Failover([], deadline=0.0)
