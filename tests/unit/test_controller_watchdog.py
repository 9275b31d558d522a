"""The controller's watchdog (controller/status.py serving_problem, controller/daemon.py _exit_if_not_serving):
what /readyz and /livez answer, and when spurctld asks to exit, for a Raft core that died or a member that had
no leader for [controller] leaderless_exit_secs. A stand-in Raft gives the two facts SpurRaft exposes."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from spur_hpc.controller import daemon as daemon_module
from spur_hpc.controller import status as status_module
from spur_hpc.controller.daemon import ControllerDaemon
from spur_hpc.daemon import EXIT_FATAL


class FakeRaft:
    def __init__(self) -> None:
        self.alive = True
        self.core_error: str | None = None
        self.idle = 0.0
        self.current_term = 3
        self.leader = "127.0.0.1:6821"  # what pysyncobj still believes: a stuck core never updates it

    def term(self) -> int:
        return self.current_term

    def core_alive(self) -> bool:
        return self.alive

    def leaderless_secs(self) -> float:
        return self.idle

    def holding_elections(self) -> bool:
        return False

    def leader_addr(self) -> str | None:
        return self.leader

    def isReady(self) -> bool:  # noqa: N802 (pysyncobj's name)
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def member(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(daemon_module, "time", clock)
    monkeypatch.setattr(status_module, "time", clock)
    d = ControllerDaemon()
    d.conf = SimpleNamespace(controller=SimpleNamespace(leaderless_exit_secs=30.0, fatal_exit_grace_secs=10.0))
    d.raft = FakeRaft()
    d.clock = clock
    return d


def readyz(d) -> tuple[int, str]:
    code, _type, body = d._readyz()
    return code, body.decode().strip()


def test_a_healthy_member_is_ready_and_stays_up(member):
    assert member.serving_problem() is None
    assert readyz(member) == (200, "ready")
    assert member._exit_if_not_serving() is False and not member.stopping.is_set()


def test_a_dead_core_fails_both_probes_at_once_and_exits_70_after_the_grace(member, caplog):
    member.raft.alive = False
    member.raft.core_error = "KeyError: 'x'"
    code, body = readyz(member)
    assert code == 503 and body == "not ready: the Raft core stopped (its tick thread died: KeyError: 'x')"
    assert member._livez()[0] == 503
    with caplog.at_level(logging.ERROR):
        assert member._exit_if_not_serving() is False  # the grace starts: one ERROR line says why and when
        member.clock.now += 9.9
        assert member._exit_if_not_serving() is False
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "the Raft core stopped" in errors[0] and "status 70 in 10 s" in errors[0], errors
    member.clock.now += 0.2
    assert member._exit_if_not_serving() is True
    assert member.stopping.is_set() and member.exit_code == EXIT_FATAL == 70


def test_no_leader_for_longer_than_the_bound_fails_readyz_but_not_livez(member):
    member.raft.idle = 29.0
    assert readyz(member)[0] == 200
    member.raft.idle = 31.0
    code, body = readyz(member)
    assert code == 503 and "no leader for 31 s" in body and "leaderless_exit_secs = 30" in body, body
    assert member._livez()[0] == 200  # the process and its core run: only readiness and the exit say so


def test_a_leader_back_within_the_grace_cancels_the_exit(member):
    member.raft.idle = 31.0
    assert member._exit_if_not_serving() is False
    member.clock.now += 5
    member.raft.idle = 0.0
    assert member._exit_if_not_serving() is False and member.not_serving_since is None
    member.clock.now += 60
    assert member._exit_if_not_serving() is False and not member.stopping.is_set()


def test_zero_never_exits_for_want_of_a_leader(member):
    member.conf.controller.leaderless_exit_secs = 0
    member.raft.idle = 10.0**6
    assert member.serving_problem() is None and readyz(member)[0] == 200


def test_a_member_stopped_on_purpose_for_a_stall_is_not_made_to_exit(member):
    member.raft.alive = False
    member.raft_stopped_for_stall = True
    assert member.serving_problem() is None and member._livez()[0] == 200
    assert readyz(member) == (503, "not ready: stalled on a record this release cannot read")


def test_the_term_age_counts_from_the_first_look_at_a_term_and_leader_and_starts_again_at_a_change(member):
    """/status term_secs, kept by the watch's serving_problem() every 0.2 s: the rolling upgrade's health gate
    judges a stable term from it in one look."""
    member.serving_problem()
    member.clock.now += 4.0
    assert member.term_secs() == 4.0
    member.raft.current_term = 4  # an election
    member.serving_problem()
    member.clock.now += 1.5
    assert member.term_secs() == 1.5
    member.raft.leader = None  # no leader: no stable term
    assert member.term_secs() == 0.0
