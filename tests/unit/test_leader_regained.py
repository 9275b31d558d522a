"""A leader whose majority answered late for a moment (has_quorum false, the same term) keeps its bookkeeping.

On a loaded host has_quorum dips every few seconds while pysyncobj keeps the leadership (it steps down only after
leader_fallback, and a new leadership is a new term). Starting afresh at each dip cleared the orphan checks, so a
job its agent had lost never reached ORPHAN_GRACE_SECS and stayed RUNNING: a drain waited for it until it gave up.
A new term still starts afresh."""

from __future__ import annotations

from types import SimpleNamespace

from spur_hpc.controller.leader import LeaderDuties
from spur_hpc.controller.state import ClusterState


class _Raft:
    def __init__(self, state: ClusterState) -> None:
        self.state, self.current_term = state, 5

    def read(self, fn):
        return fn(self.state)

    def term(self) -> int:
        return self.current_term

    def add_state_listener(self, fn) -> None:
        pass


def duties_on(raft: _Raft) -> LeaderDuties:
    conf = SimpleNamespace(
        controller=SimpleNamespace(scheduler_interval_ms=100, heartbeat_timeout_secs=30),
        auth=SimpleNamespace(type="none", munge_socket=""),
    )
    service = SimpleNamespace(raft=raft, conf=conf, plan_levels=None, read=raft.read)
    return LeaderDuties(service, job_to_pb=lambda job: None, bootstrap_cluster=lambda: None)


def test_a_regained_majority_keeps_the_orphan_checks_and_a_new_term_starts_afresh() -> None:
    s = ClusterState()
    s.nodes["n1"] = {"registered": True}
    s.jobs[7] = {"job_id": 7, "attempt": 1, "state": "RUNNING", "nodes": ["n1"], "spec": {}, "steps": {}}
    raft = _Raft(s)
    duties = duties_on(raft)
    duties._became_leader()
    duties.heartbeat_seen("n1", [])  # the agent does not hold job 7
    missing = dict(duties.missing_since)
    seen = dict(duties.last_seen)
    assert list(missing) == [(7, 1)]

    duties.was_leader = False  # has_quorum dipped, at the same term
    duties._became_leader()
    assert duties.missing_since == missing, "the job missing since then is still judged from then"
    assert duties.last_seen == seen, "a dead node's heartbeat timeout is not restarted either"

    raft.current_term = 6  # a leadership of its own: nothing of the old one is trusted
    duties.was_leader = False
    duties._became_leader()
    assert duties.missing_since == {}
    duties.pool.shutdown(wait=False)
