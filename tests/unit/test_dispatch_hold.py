"""The dispatch hold of an agent about to restart (WAL level 4): no new job starts on the node until its agent
registers again or the hold's time passes, its state, drain and running jobs stay as they were, the controller
caps the hold at heartbeat_timeout_secs and refuses it below level 4, and HoldDispatch waits for launches in
flight."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from test_placement import register, spec

from spur_hpc.controller import errors, wal
from spur_hpc.controller.dispatch_gate import DispatchGate
from spur_hpc.controller.scheduler import plan_starts
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.state import ClusterState


def rec(op, **kw):
    return wal.make_record(op, **kw)


def two_nodes(level: int = 4) -> ClusterState:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id-1", members=["a:1"], wal_level=level))
    register(s, "n1")
    register(s, "n2")
    return s


def submit(s, **kw) -> int:
    return s.apply(rec("job_submit", spec=spec(**kw), key="", time=1.0))["job_id"]


def hold(s, name: str, until: float) -> dict:
    return s.apply(rec("node_dispatch_hold", name=name, until=until, time=until - 30))


def start(s, job_id: int, nodes: list[str], when: float) -> dict:
    return s.apply(rec("job_start", job_id=job_id, nodes=nodes, attempt=1, time=when))


def test_a_held_node_takes_no_new_job_until_its_agent_registers_again():
    s = two_nodes()
    job = submit(s, nodelist="n1")
    assert hold(s, "n1", 100.0)["ok"]
    assert plan_starts(s, 50.0) == []
    # A start the leader decided before the hold and proposed after it is refused by every member alike.
    refused = start(s, job, ["n1"], 50.0)
    assert not refused["ok"] and "holds dispatch while its agent restarts" in refused["message"]
    register(s, "n1")  # the restarted agent is back (its registration time is 10.0, before the hold's end)
    assert "dispatch_hold_until" not in s.nodes["n1"]
    assert plan_starts(s, 50.0) == [(job, ["n1"])]
    assert start(s, job, ["n1"], 50.0)["ok"]


def test_the_hold_ends_at_its_time_without_a_registration():
    s = two_nodes()
    job = submit(s, nodelist="n1")
    hold(s, "n1", 100.0)
    assert plan_starts(s, 99.9) == []
    assert not start(s, job, ["n1"], 99.9)["ok"]
    assert plan_starts(s, 100.0) == [(job, ["n1"])]
    assert start(s, job, ["n1"], 100.0)["ok"]


def test_other_nodes_take_the_work_meanwhile():
    s = two_nodes()
    hold(s, "n1", 100.0)
    job = submit(s)
    assert plan_starts(s, 50.0) == [(job, ["n2"])]
    two = submit(s, nodes=2)
    assert all(job_id != two for job_id, _ in plan_starts(s, 50.0))


def test_a_hold_leaves_the_state_an_operators_drain_and_running_jobs_alone():
    s = two_nodes()
    running = submit(s, nodelist="n1")
    assert start(s, running, ["n1"], 20.0)["ok"]
    s.apply(rec("node_drain", name="n2", reason="bad fan", set_by="alice", time=21.0))
    before = {n: (s.node_state(node), s.node_reason(node), list(node["jobs"])) for n, node in s.nodes.items()}
    hold(s, "n1", 100.0)
    hold(s, "n2", 100.0)
    after = {n: (s.node_state(node), s.node_reason(node), list(node["jobs"])) for n, node in s.nodes.items()}
    assert after == before
    assert s.jobs[running]["state"] == "RUNNING"
    register(s, "n2")  # a registration clears the hold, not the operator's drain
    assert s.nodes["n2"]["drain"] and s.nodes["n2"]["drain_reason"] == "bad fan"


def test_a_level_3_cluster_cannot_take_the_record():
    record = rec("node_dispatch_hold", name="n1", until=1.0, time=0.0)
    with pytest.raises(wal.WalLevelError, match="needs WAL level 4 but the cluster runs level 3"):
        wal.check_level(record, 3)


class _Raft:
    """Just enough of SpurRaft for ControllerService: apply at once, always the leader."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def propose(self, record, timeout):
        wal.check_level(record, self.state.wal_level)
        return self.state.apply(record)

    def read(self, fn):
        return fn(self.state)

    def is_leader(self) -> bool:
        return True


def service(level: int = 4, heartbeat_timeout: float = 30.0) -> ControllerService:
    conf = SimpleNamespace(controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=heartbeat_timeout))
    return ControllerService(conf, _Raft(two_nodes(level)), lambda addr: None, clock=lambda: 1000.0)


@pytest.mark.parametrize("asked, until", [(5.0, 1005.0), (0.0, 1030.0), (300.0, 1030.0)])
def test_the_hold_is_at_most_heartbeat_timeout_secs(asked, until):
    assert service().hold_dispatch("n1", asked)["dispatch_hold_until"] == until


def test_bad_requests_are_one_line_naming_the_fix():
    with pytest.raises(
        errors.Conflict, match=r"needs WAL level 4, the cluster runs level 3; .*spur cluster wal-level 4"
    ):
        service(level=3).hold_dispatch("n1", 5.0)
    with pytest.raises(errors.InvalidArgument, match="hold_secs -1.0 is not valid; give 0"):
        service().hold_dispatch("n1", -1.0)
    with pytest.raises(errors.InvalidArgument, match="hold_secs nan"):
        service().hold_dispatch("n1", float("nan"))
    with pytest.raises(errors.NotFound, match="node n9 does not exist"):
        service().hold_dispatch("n9", 5.0)


def test_hold_dispatch_waits_for_the_launches_already_on_their_way():
    gate = DispatchGate()
    gate.begin("n1")
    with gate.sending("n1"):
        assert gate.in_flight("n1") == 2
    assert not gate.wait_idle("n1", 0.01)  # one launch still in flight: the wait runs out
    assert gate.wait_idle("n2", 0.0)  # nothing goes to n2
    answered = threading.Event()

    def hold_dispatch() -> None:
        if gate.wait_idle("n1", 30.0):
            answered.set()

    waiter = threading.Thread(target=hold_dispatch)
    waiter.start()
    assert not answered.wait(0.05)
    started = time.monotonic()
    gate.end("n1")  # the launch landed
    waiter.join(timeout=30)
    assert answered.is_set() and time.monotonic() - started < 5
    assert gate.in_flight("n1") == 0
