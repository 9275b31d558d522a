"""Dependencies, holds, begin times, deadlines, nice, requeue and update: the state machine's records and the
planner's answers (eligibility.waiting_reason gives the pending reason squeue shows)."""

from __future__ import annotations

import pytest

from spur_hpc import model
from spur_hpc.controller import eligibility, wal
from spur_hpc.controller.scheduler import plan_starts
from spur_hpc.controller.state import REQUEUE_DELAY_SECS, ClusterState


def rec(op, **kw):
    return wal.make_record(op, **kw)


def spec(**kw):
    base = {"name": "d", "script": "true", "user": "u", "uid": 1, "gid": 1, "work_dir": "/tmp", "nodes": 1}
    base.update(tasks=1, cpus_per_task=1, memory_mb=0, time_limit_secs=0, partition="default")
    base.update(kw)
    return base


def cluster(level=3, cpus=4) -> ClusterState:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=level))
    s.apply(
        rec("node_register", name="n1", address="n1:1", cpus=cpus, memory_mb=1000, version="1", build="b",
            partition="default", running=[], time=1.0)
    )  # fmt: skip
    return s


def submit(s, time=1.0, **kw) -> int:
    result = s.apply(rec("job_submit", spec=spec(**kw), key="", time=time))
    assert result["ok"], result
    return result["job_id"]


def start(s, job_id, now=10.0):
    job = s.jobs[job_id]
    op = "job_array_split" if job.get("array_pending") else "job_start"
    result = s.apply(rec(op, job_id=job_id, nodes=["n1"], attempt=job["attempt"] + 1, time=now))
    assert result["ok"], result
    return result["job_id"]


def end(s, job_id, state="COMPLETED", exit_code=0, now=20.0):
    job = s.jobs[job_id]
    result = s.apply(rec("job_end", job_id=job_id, attempt=job["attempt"], state=state, exit_code=exit_code,
                         signal=0, time=now, reason=""))  # fmt: skip
    assert result["accepted"], result


def reason(s, job_id, now=30.0):
    return eligibility.waiting_reason(s, s.jobs[job_id], now)


def planned(s, now=30.0):
    return [j for j, _nodes in plan_starts(s, now)]


# ------------------------------------------------------------------ the grammar


def test_a_dependency_is_read_as_slurm_writes_it():
    assert model.parse_dependency("afterok:12:13,singleton") == (
        False,
        [("afterok", 12, 0), ("afterok", 13, 0), ("singleton", 0, 0)],
    )
    assert model.parse_dependency("after:5+10?afternotok:7") == (True, [("after", 5, 10), ("afternotok", 7, 0)])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("afterok", "needs job ids"),
        ("afterok:", "needs job ids"),
        ("afterok:x", "not a job id"),
        ("afterok:0", "not a job id"),
        ("aftercorr:3", "not a dependency type"),
        ("afterok:1,afterany:2?afterok:3", "mixes"),
        ("afterok:3+5", "not a job id"),
        ("singleton:4", "takes no job ids"),
        ("afterok:" + ":".join(["1"] * 1001), "more than 1000"),
    ],
)
def test_a_bad_dependency_gets_one_line_naming_it(text, words):
    with pytest.raises(model.InvalidValue, match=words) as info:
        model.parse_dependency(text)
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ each kind


def test_afterok_waits_then_starts_after_success():
    s = cluster()
    first = submit(s)
    second = submit(s, dependency=f"afterok:{first}")
    assert reason(s, second) == "Dependency" and planned(s) == [first]
    start(s, first)
    end(s, first)
    assert reason(s, second) is None and planned(s) == [second]


def test_afterok_on_a_failed_job_is_never_satisfied():
    s = cluster()
    first = submit(s)
    second = submit(s, dependency=f"afterok:{first}")
    start(s, first)
    end(s, first, state="FAILED", exit_code=1)
    assert reason(s, second) == "DependencyNeverSatisfied"
    assert planned(s) == []
    assert eligibility.pending_ends(s, 30.0) == [], "without --kill-on-invalid-dep it stays pending"


def test_kill_on_invalid_dep_ends_the_job_cancelled():
    s = cluster()
    first = submit(s)
    second = submit(s, dependency=f"afterok:{first}", kill_on_invalid_dep=True)
    start(s, first)
    end(s, first, state="FAILED", exit_code=1)
    ends = eligibility.pending_ends(s, 30.0)
    assert ends == [(second, "CANCELLED", "DependencyNeverSatisfied")]
    job_id, state, why = ends[0]
    assert s.apply(rec("job_pending_end", job_id=job_id, state=state, reason=why, time=30.0))["ended"]
    assert (s.jobs[second]["state"], s.jobs[second]["reason"]) == ("CANCELLED", "DependencyNeverSatisfied")


def test_afternotok_starts_after_a_failure_and_never_after_success():
    s = cluster()
    good, bad = submit(s), submit(s)
    on_good = submit(s, dependency=f"afternotok:{good}")
    on_bad = submit(s, dependency=f"afternotok:{bad}")
    for j in (good, bad):
        start(s, j)
    assert reason(s, on_good) == reason(s, on_bad) == "Dependency"
    end(s, good)
    end(s, bad, state="TIMEOUT")
    assert reason(s, on_good) == "DependencyNeverSatisfied"
    assert reason(s, on_bad) is None


def test_afterany_starts_after_any_end():
    s = cluster()
    first = submit(s)
    second = submit(s, dependency=f"afterany:{first}")
    start(s, first)
    assert reason(s, second) == "Dependency"
    end(s, first, state="FAILED", exit_code=3)
    assert reason(s, second) is None


def test_after_starts_once_the_job_started_and_plus_minutes_later():
    s = cluster()
    first = submit(s)
    plain = submit(s, dependency=f"after:{first}")
    later = submit(s, dependency=f"after:{first}+2")
    assert reason(s, plain) == "Dependency"
    start(s, first, now=100.0)
    assert reason(s, plain, now=101.0) is None
    assert reason(s, later, now=101.0) == "Dependency"
    assert reason(s, later, now=221.0) is None


def test_commas_need_every_term_and_a_question_mark_any():
    s = cluster()
    a, b = submit(s), submit(s)
    both = submit(s, dependency=f"afterok:{a}:{b}")
    either = submit(s, dependency=f"afterok:{a}?afterok:{b}")
    start(s, a)
    end(s, a)
    assert reason(s, both) == "Dependency"
    assert reason(s, either) is None
    start(s, b)
    end(s, b, state="FAILED", exit_code=1)
    assert reason(s, both) == "DependencyNeverSatisfied"


def test_a_dependency_on_an_array_waits_for_every_task():
    s = cluster(cpus=1)
    array = submit(s, array="0-2")
    after = submit(s, dependency=f"afterok:{array}")
    first = start(s, array)
    end(s, first)
    assert reason(s, after) == "Dependency", "two tasks have not even started"
    for _ in range(2):
        end(s, start(s, array))
    assert s.jobs[array]["state"] == "COMPLETED"
    assert reason(s, after) is None


def test_a_dependency_on_an_array_with_a_failed_task_is_never_satisfied():
    s = cluster(cpus=1)
    array = submit(s, array="0-2")
    after = submit(s, dependency=f"afterok:{array}")
    end(s, start(s, array), state="FAILED", exit_code=2)
    assert reason(s, after) == "DependencyNeverSatisfied"


def test_a_purged_dependee_counts_as_done():
    s = cluster()
    first = submit(s)
    second = submit(s, dependency=f"afterok:{first}")
    start(s, first)
    end(s, first)
    s.apply(rec("jobs_purge", before=1000.0, keep=[second]))
    assert first not in s.jobs and reason(s, second) is None


def test_singleton_runs_one_job_of_a_name_and_user_at_a_time():
    s = cluster()
    first = submit(s, name="chain", dependency="singleton")
    second = submit(s, name="chain", dependency="singleton")
    other_user = submit(s, name="chain", dependency="singleton", user="v", uid=2)
    other_name = submit(s, name="other", dependency="singleton")
    assert planned(s) == [first, other_user, other_name]
    start(s, first)
    assert reason(s, second) == "Dependency"
    end(s, first)
    assert reason(s, second) is None


def test_ten_thousand_dependents_of_one_array_are_planned_in_one_pass():
    s = cluster(cpus=1)
    array = submit(s, array="0-9999")
    for _ in range(10_000):
        submit(s, dependency=f"afterok:{array}")
    memo: dict = {}
    reasons = {eligibility.waiting_reason(s, job, 30.0, memo) for job in s.jobs.values() if job["job_id"] != array}
    assert reasons == {"Dependency"}
    assert len([k for k in memo if k != "singleton"]) == 1, "the array was judged once for all its dependents"


# ------------------------------------------------------------------ holds, times, nice


def test_a_job_submitted_held_waits_with_job_held_user_until_released():
    s = cluster()
    job = submit(s, hold=True)
    assert s.jobs[job]["held"] and reason(s, job) == "JobHeldUser"
    assert planned(s) == []
    s.apply(rec("job_release", job_id=job))
    assert planned(s) == [job]


def test_a_begin_time_keeps_the_job_waiting_with_reason_begin_time():
    s = cluster()
    job = submit(s, begin_time=500.0)
    assert s.jobs[job]["eligible_time"] == 500.0
    assert reason(s, job, now=499.0) == "BeginTime" and planned(s, now=499.0) == []
    assert planned(s, now=500.0) == [job]


def test_a_pending_job_past_its_deadline_ends_deadline():
    s = cluster()
    job = submit(s, deadline=100.0, hold=True)
    assert eligibility.pending_ends(s, 99.0) == []
    assert eligibility.pending_ends(s, 100.0) == [(job, "DEADLINE", "DeadLine")]
    s.apply(rec("job_pending_end", job_id=job, state="DEADLINE", reason="DeadLine", time=100.0))
    assert s.jobs[job]["state"] == "DEADLINE"


def test_the_planner_takes_lower_nice_first_then_submission_order():
    s = cluster(cpus=1)
    first = submit(s, nice=100)
    second = submit(s)
    third = submit(s, nice=-5)
    assert planned(s) == [third], "one CPU: the lowest nice goes first"
    s.apply(rec("job_submit", spec=spec(), key="", time=2.0))
    from spur_hpc.controller.scheduler import pending_in_order

    assert pending_in_order(s)[:3] == [third, second, second + 2] and pending_in_order(s)[-1] == first


# ------------------------------------------------------------------ requeue


def test_a_node_failure_puts_a_requeueable_batch_job_back_in_the_queue():
    s = cluster()
    job = submit(s)
    plain = submit(s, requeue=2)
    start(s, job)
    start(s, plain)
    result = s.apply(rec("node_lost", name="n1", reason="Not responding", time=70.0))
    assert sorted(result["failed"]) == [job, plain]
    requeued = s.jobs[job]
    assert (requeued["state"], requeued["restart_count"], requeued["nodes"]) == ("PENDING", 1, [])
    assert s.jobs[plain]["state"] == "NODE_FAIL", "--no-requeue: it ends"
    assert reason(s, job, now=70.0 + REQUEUE_DELAY_SECS - 1) == "BeginTime"
    assert reason(s, job, now=70.0 + REQUEUE_DELAY_SECS) is None


def test_before_wal_level_3_a_node_failure_ends_the_job_as_before():
    s = cluster(level=2)
    job = submit(s)
    start(s, job)
    s.apply(rec("node_lost", name="n1", reason="Not responding", time=70.0))
    assert s.jobs[job]["state"] == "NODE_FAIL"


def test_requeue_of_a_running_job_frees_its_node_and_counts_a_restart():
    s = cluster()
    job = submit(s)
    start(s, job)
    result = s.apply(rec("job_requeue_user", job_id=job, hold=False, time=40.0))
    assert result["ok"] and result["signal_agent"] and result["nodes"] == ["n1"] and result["attempt"] == 1
    assert (s.jobs[job]["state"], s.jobs[job]["restart_count"]) == ("PENDING", 1)
    assert s.nodes["n1"]["alloc_cpus"] == 0
    late = s.apply(rec("job_end", job_id=job, attempt=1, state="CANCELLED", exit_code=0, signal=15, time=41.0))
    assert not late["accepted"], "the stopped run's end report changes nothing"
    assert planned(s, now=40.0 + REQUEUE_DELAY_SECS) == [job]
    assert start(s, job, now=50.0) == job and s.jobs[job]["attempt"] == 2


def test_requeuehold_of_a_finished_job_holds_it_with_job_held_user():
    s = cluster()
    job = submit(s)
    start(s, job)
    end(s, job, state="FAILED", exit_code=1)
    result = s.apply(rec("job_requeue_user", job_id=job, hold=True, time=40.0))
    assert result["ok"] and not result["signal_agent"]
    assert (s.jobs[job]["state"], s.jobs[job]["held"], s.jobs[job]["reason"]) == ("PENDING", True, "JobHeldUser")
    assert s.jobs[job]["exit_code"] == 0 and s.jobs[job]["end_time"] == 0.0


@pytest.mark.parametrize(
    ("kw", "words"), [({"requeue": 2}, "may not be requeued"), ({"interactive": True}, "interactive"), ({}, "PENDING")]
)
def test_requeue_is_refused_for_no_requeue_interactive_and_pending_jobs(kw, words):
    s = cluster()
    job = submit(s, **kw)
    if kw:
        start(s, job)
    refused = s.apply(rec("job_requeue_user", job_id=job, hold=False, time=40.0))
    assert not refused["ok"] and words in refused["message"]


# ------------------------------------------------------------------ update


def test_an_update_changes_the_spec_and_its_revision():
    s = cluster()
    job = submit(s)
    result = s.apply(rec("job_update", job_id=job, changes={"time_limit_secs": 60, "nice": 5}, time=2.0))
    assert result == {"ok": True, "spec_rev": 1}
    assert s.jobs[job]["spec"]["time_limit_secs"] == 60 and s.jobs[job]["spec"]["nice"] == 5


def test_a_running_job_takes_only_a_new_time_limit():
    s = cluster()
    job = submit(s)
    start(s, job)
    refused = s.apply(rec("job_update", job_id=job, changes={"name": "x"}, time=2.0))
    assert not refused["ok"] and "only its time limit" in refused["message"]
    assert s.apply(rec("job_update", job_id=job, changes={"time_limit_secs": 30}, time=2.0))["ok"]


def test_an_update_of_a_dependency_is_judged_at_once():
    s = cluster()
    first = submit(s)
    second = submit(s)
    s.apply(rec("job_update", job_id=second, changes={"dependency": f"afterok:{first}"}, time=2.0))
    assert reason(s, second) == "Dependency"


def test_a_chain_of_dependencies_back_to_a_job_is_found():
    s = cluster()
    a = submit(s, hold=True)
    b = submit(s, dependency=f"afterok:{a}")
    c = submit(s, dependency=f"afterany:{b}")
    assert eligibility.dependency_path(s, [c], a) == [c, b, a]
    assert eligibility.dependency_path(s, [a], c) == []


def test_a_job_its_node_lost_is_requeued_when_the_leader_asks_and_the_level_reads_it():
    for level, expected in ((3, "PENDING"), (2, "NODE_FAIL")):
        s = cluster(level=level)
        job = submit(s)
        start(s, job)
        lost = rec("job_end", job_id=job, attempt=1, state="NODE_FAIL", exit_code=0, signal=0, time=50.0,
                   reason="the agent on n1 lost the job", requeue=True)  # fmt: skip
        assert s.apply(lost)["state"] == expected
        assert s.jobs[job]["state"] == expected and s.nodes["n1"]["alloc_cpus"] == 0
    reported = cluster()
    job = submit(reported)
    start(reported, job)
    end(reported, job, state="NODE_FAIL")
    assert reported.jobs[job]["state"] == "NODE_FAIL", "an agent's own NODE_FAIL report ends the job"
