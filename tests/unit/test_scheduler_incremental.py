"""The leader's incremental planner (scheduler.JobIndex) decides exactly what the full scan of the queue
decides: on random queues (partitions, --nice, sizes, holds, arrays with throttles, dependencies, deadlines,
updates) and random node changes (registrations, drains, resumes), after every record."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spur_hpc.controller import eligibility, wal
from spur_hpc.controller.scheduler import JobIndex, plan_starts
from spur_hpc.controller.state import ClusterState
from spur_hpc.model import PENDING, RUNNING

NODES = ("n1", "n2", "n3")
PARTITIONS = ("default", "gpu")


def rec(op, **kw):
    return wal.make_record(op, **kw)


class Watched:
    """A state whose records also reach a JobIndex, the way SpurRaft's state listener feeds the leader's."""

    def __init__(self) -> None:
        self.s = ClusterState()
        self.index = JobIndex()
        self.now = 10.0
        self.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=3))

    def apply(self, record) -> dict:
        result = self.s.apply(record)
        self.index.note(self.s, record, result)
        return result

    def job_ids(self, state=None) -> list[int]:
        return sorted(j for j, job in self.s.jobs.items() if state is None or job["state"] == state)


def spec(partition, nice, cpus, nodes, **kw):
    base = {"name": "j", "script": "true", "user": "u", "uid": 1, "gid": 1, "work_dir": "/tmp"}
    base.update(nodes=nodes, tasks=nodes, cpus_per_task=cpus, memory_mb=0, time_limit_secs=0)
    base.update(partition=partition, nice=nice, **kw)
    return base


def act(w: Watched, action: tuple) -> None:
    kind, a, b, c, d = action
    w.now += 1.0
    if kind == "register":
        w.apply(
            rec(
                "node_register",
                name=NODES[a % 3],
                address=f"{NODES[a % 3]}:1",
                cpus=2 + b % 6,
                memory_mb=1000,
                version="1",
                build="b",
                partition=PARTITIONS[c % 2],
                running=[],
                time=w.now,
            )
        )
    elif kind == "drain":
        w.apply(rec("node_drain", name=NODES[a % 3], reason="test", time=w.now))
    elif kind == "resume":
        w.apply(rec("node_resume", name=NODES[a % 3], time=w.now))
    elif kind == "submit":
        extra = {}
        if d % 5 == 1:
            extra["array"] = f"0-{b % 4 + 1}%{c % 3 + 1}"
        if d % 5 == 2 and w.job_ids():
            extra["dependency"] = f"afterok:{w.job_ids()[a % len(w.job_ids())]}"
            extra["kill_on_invalid_dep"] = bool(b % 2)
        if d % 5 == 3:
            extra["deadline"] = w.now + b % 4
        if d % 7 == 4:
            extra["hold"] = True
        record = rec("job_submit", spec=spec(PARTITIONS[a % 2], b % 5 - 2, 1 + c % 4, 1 + d % 2, **extra), key="")
        w.apply(record | {"time": w.now})
    elif kind == "start":  # the leader writes the plan (from the full scan)
        for job_id, nodes in plan_starts(w.s, w.now):
            job = w.s.jobs[job_id]
            op = "job_array_split" if job.get("array_pending") else "job_start"
            w.apply(rec(op, job_id=job_id, nodes=nodes, attempt=job["attempt"] + 1, time=w.now))
    elif kind == "end" and w.job_ids(RUNNING):
        job = w.s.jobs[w.job_ids(RUNNING)[a % len(w.job_ids(RUNNING))]]
        w.apply(
            rec(
                "job_end",
                job_id=job["job_id"],
                attempt=job["attempt"],
                state=("COMPLETED", "FAILED")[b % 2],
                exit_code=b % 2,
                signal=0,
                time=w.now,
            )
        )
    elif kind in ("cancel", "hold", "release", "update", "pending_end") and w.job_ids():
        job_id = w.job_ids()[a % len(w.job_ids())]
        if kind == "cancel":
            w.apply(rec("job_cancel", job_id=job_id, by="u", time=w.now))
        elif kind == "hold":
            w.apply(rec("job_hold", job_id=job_id))
        elif kind == "release":
            w.apply(rec("job_release", job_id=job_id))
        elif kind == "update":
            changes = {"nice": b % 7 - 3} if c % 2 else {"partition": PARTITIONS[b % 2]}
            w.apply(rec("job_update", job_id=job_id, changes=changes))
        elif w.s.jobs[job_id]["state"] == PENDING:
            w.apply(rec("job_pending_end", job_id=job_id, state="DEADLINE", reason="DeadLine", time=w.now))
    elif kind == "purge":
        w.apply(rec("jobs_purge", before=w.now - 2, time=w.now))


ACTIONS = st.tuples(
    st.sampled_from(
        [
            "register",
            "drain",
            "resume",
            "submit",
            "submit",
            "submit",
            "start",
            "end",
            "cancel",
            "hold",
            "release",
            "update",
            "pending_end",
            "purge",
        ]
    ),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
)


def assert_same_decisions(w: Watched) -> None:
    s = w.s
    assert plan_starts(s, w.now, w.index) == plan_starts(s, w.now)
    fresh = JobIndex().sync(s)  # what one pass over every job finds
    assert (w.index.queues, w.index.running, w.index.with_deadline) == (
        fresh.queues,
        fresh.running,
        fresh.with_deadline,
    )
    ends = eligibility.pending_ends(s, w.now, w.index.sync(s).with_deadline)
    assert ends == eligibility.pending_ends(s, w.now)
    assert w.index.running == set(w.job_ids(RUNNING))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ACTIONS, min_size=1, max_size=60), st.integers(1, 6))
def test_the_incremental_planner_decides_exactly_what_the_full_scan_decides(actions, every):
    w = Watched()
    for i, action in enumerate(actions):
        act(w, action)
        if i % every == 0:  # the index also catches up over several records at once
            assert_same_decisions(w)
    assert_same_decisions(w)


def test_a_submission_behind_a_blocked_queue_is_planned_without_looking_at_the_queue():
    w = Watched()
    act(w, ("register", 0, 0, 0, 0))  # n1, 2 CPUs, partition default
    w.apply(rec("job_submit", spec=spec("default", 0, 2, 1), key="", time=1.0))
    act(w, ("start", 0, 0, 0, 0))
    for _ in range(2000):
        w.apply(rec("job_submit", spec=spec("default", 0, 1, 1), key="", time=1.0))
    assert plan_starts(w.s, w.now, w.index) == []
    looked = []
    original = eligibility.waiting_reason

    def counting(s, job, now, memo=None):
        looked.append(job["job_id"])
        return original(s, job, now, memo)

    eligibility.waiting_reason = counting
    try:
        w.apply(rec("job_submit", spec=spec("default", 0, 1, 1), key="", time=1.0))
        assert plan_starts(w.s, w.now, w.index) == []
    finally:
        eligibility.waiting_reason = original
    assert len(looked) == 1  # the oldest pending job blocks its partition: nothing behind it is read
    assert w.index.rebuilds == 1
