"""WAL records, the WAL level gate, and determinism of the replicated state machine."""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spur_hpc.controller import wal
from spur_hpc.controller.scheduler import plan_starts
from spur_hpc.controller.state import ClusterState, StateFormatError, submission_key


def rec(op, **kw):
    return wal.make_record(op, **kw)


def spec(**kw):
    base = {
        "name": "j",
        "script": "true",
        "user": "u",
        "uid": 1,
        "gid": 1,
        "work_dir": "/tmp",
        "nodes": 1,
        "tasks": 1,
        "cpus_per_task": 1,
        "memory_mb": 0,
        "time_limit_secs": 0,
        "partition": "default",
    }
    base.update(kw)
    return base


def new_cluster() -> ClusterState:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id-1", members=["a:1", "b:1", "c:1"], wal_level=1))
    return s


def register(s, name, cpus=4, running=()):
    return s.apply(
        rec(
            "node_register",
            name=name,
            address=f"{name}:6818",
            cpus=cpus,
            memory_mb=1000,
            version="1",
            build="b",
            partition="default",
            running=[list(r) for r in running],
            time=10.0,
        )
    )


def test_records_are_self_describing():
    r = rec("job_submit", spec=spec(), key="k", time=1.0)
    assert r["op"] == "job_submit" and r["level"] == 1
    assert wal.readable(r) is None
    with pytest.raises(wal.UnknownOpError):
        wal.make_record("nonsense")


def test_level_gate_refuses_newer_op_until_level_raised():
    hold = rec("job_hold", job_id=1)
    assert hold["level"] == 2
    with pytest.raises(wal.WalLevelError, match="needs WAL level 2 but the cluster runs level 1"):
        wal.check_level(hold, 1)
    wal.check_level(hold, 2)


def test_record_fields_cannot_shadow_the_records_own_op_and_level():
    with pytest.raises(ValueError, match="cannot be fields"):
        rec("set_wal_level", level=2)


def test_set_wal_level_needs_every_member_to_read_it():
    s = new_cluster()
    for m in ("a:1", "b:1"):
        s.apply(rec("member_announce", raft_addr=m, grpc_addr="g", version="1", build="b", max_level=2))
    s.apply(rec("member_announce", raft_addr="c:1", grpc_addr="g", version="0", build="old", max_level=1))
    refused = s.apply(rec("set_wal_level", target=2))
    assert not refused["ok"] and "c:1" in refused["message"]
    s.apply(rec("member_announce", raft_addr="c:1", grpc_addr="g", version="1", build="b", max_level=2))
    assert s.apply(rec("set_wal_level", target=2)) == {"ok": True, "level": 2, "changed": True}
    assert not s.apply(rec("set_wal_level", target=1))["ok"], "the level never goes down"


def test_unknown_or_too_new_record_stalls_instead_of_skipping():
    s = new_cluster()
    before = s.fingerprint()
    result = s.apply({"op": "from_the_future", "level": 1})
    assert result["code"] == "stalled" and "unknown op" in result["message"]
    # Nothing after it is applied: the member stops, it never skips.
    assert s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["code"] == "stalled"
    assert s.fingerprint() == before
    s2 = new_cluster()
    assert "WAL level 99" in s2.apply({"op": "job_submit", "level": 99})["message"]


def test_apply_never_raises_on_malformed_records():
    s = new_cluster()
    for bad in ({"op": "job_submit", "level": 1}, {"op": "job_start", "level": 1, "job_id": "x"}, None, 5):
        result = s.apply(bad)
        assert result["ok"] is False


def test_job_ids_continue_across_snapshot_and_idempotency():
    s = new_cluster()
    ids = [s.apply(rec("job_submit", spec=spec(), key=f"k{i}", time=1.0))["job_id"] for i in range(3)]
    assert ids == [1, 2, 3]
    again = s.apply(rec("job_submit", spec=spec(), key="k1", time=2.0))
    assert again == {"ok": True, "job_id": 2, "duplicate": True}
    restored = pickle.loads(pickle.dumps(s))
    assert restored.apply(rec("job_submit", spec=spec(), key="", time=3.0))["job_id"] == 4


def test_idempotency_keys_are_scoped_per_user_and_keys_of_older_releases_keep_working():
    s = new_cluster()
    # Written by an older release: the key unscoped, the job uid 0's.
    legacy = s.apply(rec("job_submit", spec=spec(user="root", uid=0), key="old", time=1.0))["job_id"]
    root = s.apply(rec("job_submit", spec=spec(user="root", uid=0), key=submission_key(0, "k"), time=2.0))["job_id"]
    assert s.find_submission(0, "k") == root
    assert s.find_submission(65534, "k") is None, "another user's key is not this user's submission"
    nobody = s.apply(rec("job_submit", spec=spec(user="nobody", uid=65534), key=submission_key(65534, "k"), time=3.0))
    assert nobody == {"ok": True, "job_id": root + 1, "duplicate": False}
    assert s.find_submission(65534, "k") == root + 1
    # The same user repeating the key: the proposer answers from the index, and a record raced past it is a duplicate.
    again = s.apply(rec("job_submit", spec=spec(user="nobody", uid=65534), key=submission_key(65534, "k"), time=4.0))
    assert again == {"ok": True, "job_id": root + 1, "duplicate": True}
    restored = pickle.loads(pickle.dumps(s))  # a member restored from a snapshot answers the same
    for state in (s, restored):
        assert state.find_submission(0, "old") == legacy
        assert state.find_submission(65534, "old") is None
        assert state.find_submission(0, "k") == root and state.find_submission(65534, "k") == root + 1
    # A scoped entry never collides with an unscoped key of the same text.
    assert submission_key(0, "k") not in ("0k", "0:k", "k")


def test_a_leader_hold_records_its_reason_and_release_clears_it():
    s = new_cluster()
    job = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    assert s.apply(rec("job_hold", job_id=job, reason="launch failed 3 times on n1: UNAVAILABLE"))["ok"]
    assert s.jobs[job]["held"] and s.jobs[job]["reason"] == "launch failed 3 times on n1: UNAVAILABLE"
    s.apply(rec("job_release", job_id=job))
    assert not s.jobs[job]["held"] and s.jobs[job]["reason"] == "None"
    s.apply(rec("job_hold", job_id=job))
    assert s.jobs[job]["reason"] == "JobHeldAdmin", "scontrol hold still reads as Slurm's"


def test_snapshot_from_a_newer_release_is_refused():
    s = new_cluster()
    data = s.__getstate__()
    data["format"] = 99
    with pytest.raises(StateFormatError, match="newer than this release"):
        ClusterState().__setstate__(data)


def test_drain_lifecycle_and_allocation():
    s = new_cluster()
    register(s, "n1", cpus=2)
    job = s.apply(rec("job_submit", spec=spec(cpus_per_task=2), key="", time=1.0))["job_id"]
    assert plan_starts(s) == [(job, ["n1"])]
    assert s.apply(rec("job_start", job_id=job, nodes=["n1"], attempt=1, time=2.0))["ok"]
    assert s.node_state(s.nodes["n1"]) == "ALLOCATED"
    s.apply(rec("node_drain", name="n1", reason="upgrade", set_by="admin", time=3.0))
    assert s.node_state(s.nodes["n1"]) == "DRAINING"
    second = s.apply(rec("job_submit", spec=spec(), key="", time=3.0))["job_id"]
    assert plan_starts(s) == [], "no job lands on a draining node"
    s.apply(rec("job_end", job_id=job, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=4.0))
    assert s.node_state(s.nodes["n1"]) == "DRAINED"
    # The admin's drain survives re-registration.
    register(s, "n1", cpus=2)
    assert s.node_state(s.nodes["n1"]) == "DRAINED"
    refused = s.apply(rec("node_resume", name="n1", only_prefix="spur-upgrade:", time=5.0))
    assert not refused["ok"] and "not resuming" in refused["message"]
    s.apply(rec("node_resume", name="n1", only_prefix="", time=5.0))
    assert s.node_state(s.nodes["n1"]) == "IDLE"
    assert plan_starts(s) == [(second, ["n1"])]


def test_heartbeat_loss_fails_jobs_and_reregistration_returns_node():
    s = new_cluster()
    register(s, "n1")
    job = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    s.apply(rec("job_start", job_id=job, nodes=["n1"], attempt=1, time=2.0))
    result = s.apply(rec("node_lost", name="n1", reason="Not responding", time=70.0))
    assert result["failed"] == [job]
    assert s.jobs[job]["state"] == "NODE_FAIL"
    assert s.node_state(s.nodes["n1"]) == "DOWN" and s.nodes["n1"]["alloc_cpus"] == 0
    stale = register(s, "n1", running=[(job, 1)])["stale"]
    assert stale == [[job, 1]], "the agent is told to kill the job it still holds"
    assert s.node_state(s.nodes["n1"]) == "IDLE"


def test_late_completion_of_old_attempt_is_ignored():
    s = new_cluster()
    register(s, "n1")
    job = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    s.apply(rec("job_start", job_id=job, nodes=["n1"], attempt=1, time=2.0))
    s.apply(rec("job_requeue", job_id=job, attempt=1, time=3.0, reason="launch failed"))
    s.apply(rec("job_start", job_id=job, nodes=["n1"], attempt=2, time=4.0))
    late = s.apply(rec("job_end", job_id=job, attempt=1, state="FAILED", exit_code=1, signal=0, time=5.0))
    assert late["accepted"] is False and s.jobs[job]["state"] == "RUNNING"
    s.apply(rec("job_end", job_id=job, attempt=2, state="COMPLETED", exit_code=7, signal=0, time=6.0))
    assert s.jobs[job]["exit_code"] == 7


def _random_records(rng: random.Random, n: int) -> list[dict]:
    out = [rec("cluster_init", name="c", cluster_id="x", members=["a"], wal_level=1)]
    for i in range(n):
        kind = rng.choice(["submit", "register", "start", "end", "drain", "resume", "cancel", "lost", "purge", "junk"])
        job = rng.randint(1, 10)
        node = f"n{rng.randint(1, 3)}"
        if kind == "submit":
            out.append(
                rec(
                    "job_submit",
                    spec=spec(cpus_per_task=rng.randint(1, 4), user=rng.choice(["u", "v"])),
                    key=f"k{rng.randint(0, 5)}",
                    time=float(i),
                )
            )
        elif kind == "register":
            out.append(
                rec(
                    "node_register",
                    name=node,
                    address="x",
                    cpus=4,
                    memory_mb=100,
                    version="1",
                    build="b",
                    partition="default",
                    running=[[job, 1]],
                    time=float(i),
                )
            )
        elif kind == "start":
            out.append(rec("job_start", job_id=job, nodes=[node], attempt=rng.randint(1, 2), time=float(i)))
        elif kind == "end":
            out.append(
                rec(
                    "job_end",
                    job_id=job,
                    attempt=rng.randint(1, 2),
                    state="COMPLETED",
                    exit_code=0,
                    signal=0,
                    time=float(i),
                )
            )
        elif kind == "drain":
            out.append(rec("node_drain", name=node, reason="r", set_by="a", time=float(i)))
        elif kind == "resume":
            out.append(rec("node_resume", name=node, only_prefix="", time=float(i)))
        elif kind == "cancel":
            out.append(rec("job_cancel", job_id=job, by="u", time=float(i)))
        elif kind == "lost":
            out.append(rec("node_lost", name=node, reason="x", time=float(i)))
        elif kind == "purge":
            out.append(rec("jobs_purge", before=float(i), keep=[]))
        else:
            out.append({"op": "job_start", "level": 1, "job_id": job})
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 200))
def test_state_machine_is_deterministic(seed, n):
    records = _random_records(random.Random(seed), n)
    a, b = ClusterState(), ClusterState()
    results_a = [a.apply(r) for r in records]
    # b goes through a snapshot half-way, like a member restored from a dump
    half = len(records) // 2
    results_b = [b.apply(r) for r in records[:half]]
    b = pickle.loads(pickle.dumps(b))
    results_b += [b.apply(r) for r in records[half:]]
    assert results_a == results_b
    assert a.fingerprint() == b.fingerprint()
    # the by-user index follows submissions and purges, and is rebuilt from a snapshot
    for s in (a, b):
        by_user: dict[str, set[int]] = {}
        for job_id, job in s.jobs.items():
            by_user.setdefault(job["spec"]["user"], set()).add(job_id)
        assert s.jobs_by_user == by_user
    # allocations always add up
    for node in a.nodes.values():
        running = [a.jobs[j] for j in node["jobs"]]
        assert all(j["state"] == "RUNNING" for j in running)
        assert node["alloc_cpus"] == sum(j["alloc"]["cpus"] for j in running)


def test_node_lost_judged_on_an_older_registration_is_a_no_op():
    s = new_cluster()
    register(s, "n1")
    judged = s.nodes["n1"]["last_registered"]
    s.apply(rec("node_register", name="n1", address="n1:6818", cpus=4, memory_mb=1000, version="1", build="b",
                partition="default", running=[], time=99.0))
    result = s.apply(rec("node_lost", name="n1", reason="Not responding", time=100.0, registration=judged))
    assert result.get("newer_registration") and s.node_state(s.nodes["n1"]) == "IDLE"


def test_suspend_keeps_the_nodes_counts_the_time_suspended_and_a_new_run_starts_unsuspended():
    from spur_hpc.controller.grpc_api import job_to_pb
    from spur_hpc.controller.service import shown_state

    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id-1", members=["a:1"], wal_level=4))
    register(s, "n1", cpus=1)
    job = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    waiting = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    assert not s.apply(rec("job_suspend", job_id=job, time=1.5))["ok"], "a pending job cannot be suspended"
    s.apply(rec("job_start", job_id=job, nodes=["n1"], attempt=1, time=2.0))
    assert s.apply(rec("job_suspend", job_id=job, time=10.0)) == {"ok": True, "nodes": ["n1"], "attempt": 1}
    assert shown_state(s.jobs[job]) == "SUSPENDED" and s.jobs[job]["state"] == "RUNNING"
    assert plan_starts(s) == [], f"job {waiting} may not take the suspended job's CPU"
    assert "already suspended" in s.apply(rec("job_suspend", job_id=job, time=11.0))["message"]
    assert s.apply(rec("job_resume", job_id=job, time=40.0))["ok"]
    assert "not suspended" in s.apply(rec("job_resume", job_id=job, time=41.0))["message"]
    s.apply(rec("job_suspend", job_id=job, time=50.0))
    s.apply(rec("job_resume", job_id=job, time=55.0))
    shown = job_to_pb(s.jobs[job])
    assert (shown.state, shown.suspend_time, shown.suspended_secs) == (2, 55.0, 35.0)  # RUNNING, 30 s + 5 s
    # A run after a requeue starts with no suspension of its own.
    s.apply(rec("job_suspend", job_id=job, time=60.0))
    s.apply(rec("job_requeue", job_id=job, attempt=1, time=61.0, reason="launch failed"))
    s.apply(rec("job_start", job_id=job, nodes=["n1"], attempt=2, time=70.0))
    shown = job_to_pb(s.jobs[job])
    assert shown_state(s.jobs[job]) == "RUNNING" and (shown.suspend_time, shown.suspended_secs) == (0.0, 0.0)


def test_suspend_needs_wal_level_4():
    s = new_cluster()
    with pytest.raises(wal.WalLevelError, match="needs WAL level 4"):
        wal.check_level(rec("job_suspend", job_id=1, time=1.0), s.wal_level)


def test_who_cancelled_is_the_authenticated_uid_kept_through_the_end_and_cleared_by_a_requeue():
    s = new_cluster()
    register(s, "n1")
    waiting = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    running = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    s.apply(rec("job_start", job_id=running, nodes=["n1"], attempt=1, time=2.0))
    s.apply(rec("job_cancel", job_id=waiting, by="mallory", by_uid=0, time=3.0))
    s.apply(rec("job_cancel", job_id=running, by="u", by_uid=1, time=3.0))
    assert (s.jobs[waiting]["state"], s.jobs[waiting]["cancelled_by_uid"]) == ("CANCELLED", 0)
    assert s.jobs[running]["cancelled_by_uid"] == 1
    s.apply(rec("job_end", job_id=running, attempt=1, state="COMPLETED", exit_code=0, signal=15, time=4.0))
    assert (s.jobs[running]["state"], s.jobs[running]["cancelled_by_uid"]) == ("CANCELLED", 1)
    s.apply(rec("job_requeue_user", job_id=running, hold=False, time=5.0))
    assert s.jobs[running]["state"] == "PENDING" and "cancelled_by_uid" not in s.jobs[running]
    s.apply(rec("job_start", job_id=running, nodes=["n1"], attempt=2, time=70.0))
    s.apply(rec("job_cancel", job_id=running, by="u", by_uid=1, time=71.0))
    s.apply(rec("job_end", job_id=running, attempt=2, state="NODE_FAIL", exit_code=0, signal=0, time=72.0))
    assert s.jobs[running]["state"] == "NODE_FAIL" and "cancelled_by_uid" not in s.jobs[running]


def test_a_cancel_record_of_an_older_release_names_no_canceller():
    s = new_cluster()
    job = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    s.apply(rec("job_cancel", job_id=job, by="u", time=3.0))  # no by_uid: written before the field
    assert s.jobs[job]["state"] == "CANCELLED" and "cancelled_by_uid" not in s.jobs[job]
