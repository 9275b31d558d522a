"""Job arrays: the --array grammar and Slurm's short form (model.py), the state machine's records (a task split
off when it starts, the last one on the array's own record), the %N throttle, cancelling tasks, purging."""

from __future__ import annotations

import pytest

from spur_hpc import model
from spur_hpc.controller import eligibility, wal
from spur_hpc.controller.scheduler import plan_starts
from spur_hpc.controller.state import ClusterState


def rec(op, **kw):
    return wal.make_record(op, **kw)


def spec(**kw):
    base = {"name": "a", "script": "true", "user": "u", "uid": 1, "gid": 1, "work_dir": "/tmp", "nodes": 1}
    base.update(tasks=1, cpus_per_task=1, memory_mb=0, time_limit_secs=0, partition="default")
    base.update(kw)
    return base


def cluster(level=3, nodes=("n1",), cpus=4) -> ClusterState:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=level))
    for name in nodes:
        s.apply(
            rec(
                "node_register",
                name=name,
                address=f"{name}:1",
                cpus=cpus,
                memory_mb=1000,
                version="1",
                build="b",
                partition="default",
                running=[],
                time=1.0,
            )
        )
    return s


def submit(s, **kw) -> int:
    result = s.apply(rec("job_submit", spec=spec(**kw), key="", time=1.0))
    assert result["ok"], result
    return result["job_id"]


def start_planned(s, now=10.0) -> list[int]:
    """Write the plan as the leader does; the ids of the records that started."""
    started = []
    for job_id, nodes in plan_starts(s, now):
        job = s.jobs[job_id]
        op = "job_array_split" if job.get("array_pending") else "job_start"
        result = s.apply(rec(op, job_id=job_id, nodes=nodes, attempt=job["attempt"] + 1, time=now))
        assert result["ok"], result
        started.append(result["job_id"])
    return started


def end(s, job_id, state="COMPLETED", exit_code=0, now=20.0):
    job = s.jobs[job_id]
    assert s.apply(
        rec(
            "job_end",
            job_id=job_id,
            attempt=job["attempt"],
            state=state,
            exit_code=exit_code,
            signal=0,
            time=now,
            reason="",
        )
    )["accepted"]


# ------------------------------------------------------------------ the grammar


@pytest.mark.parametrize(
    ("text", "ids", "limit"),
    [
        ("0-15", list(range(16)), 0),
        ("1,3,7", [1, 3, 7], 0),
        ("0-20:4", [0, 4, 8, 12, 16, 20], 0),
        ("0-15:2%4", list(range(0, 16, 2)), 4),
        ("1-3,7-11:2%1", [1, 2, 3, 7, 9, 11], 1),
        ("5", [5], 0),
    ],
)
def test_an_array_is_read_as_slurm_reads_it(text, ids, limit):
    assert model.parse_array(text) == (ids, limit)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0-20000", "more than 10001 tasks"),
        ("0-4000000:1", "more than 10001 tasks"),
        ("0-99999999", "not a task id"),
        ("x", "not a task id"),
        ("7-3", "ends before it starts"),
        ("3:2", "not a task id"),
        ("0-3:0", "not a task id"),
        ("0-3%0", "throttle after %"),
        ("0-3%x", "throttle after %"),
        ("%2", "names no task ids"),
        ("1,,2", "not a task id"),
        ("-1", "not a task id"),
    ],
)
def test_a_bad_array_gets_one_line_naming_it(text, words):
    with pytest.raises(model.InvalidValue, match=words) as info:
        model.parse_array(text)
    assert "\n" not in str(info.value) and repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("ids", "text"),
    [
        ([], ""),
        ([3], "3"),
        ([1, 3], "1,3"),
        ([1, 3, 7], "1,3,7"),
        ([3, 4, 5], "3-5"),
        ([0, 2, 4, 6], "0-6:2"),
        ([1, 2, 3, 7], "1-3,7"),
        ([1, 2, 4, 5], "1-2,4-5"),
    ],
)
def test_pending_tasks_are_written_in_slurms_short_form(ids, text):
    assert model.format_array_ranges(ids) == text
    if ids:
        assert model.parse_array_ranges(text) == ids
        assert model.first_array_task(text) == ids[0]


def test_squeue_names_the_pending_rest_and_each_task():
    assert model.array_task_label(12, pending="3-15", max_running=4) == "12_[3-15%4]"
    assert model.array_task_label(12, pending="3-15") == "12_[3-15]"
    assert model.array_task_label(12, 1) == "12_1"


# ------------------------------------------------------------------ the records


def test_an_array_is_one_record_until_its_tasks_start():
    s = cluster()
    array = submit(s, array="0-15:2%4")
    job = s.jobs[array]
    assert (job["array_job_id"], job["array_pending"], job["array_max_running"]) == (array, "0-14:2", 4)
    assert s.next_job_id == array + 1


def test_a_starting_task_gets_a_record_of_its_own_and_leaves_the_pending_list():
    s = cluster(cpus=2)
    array = submit(s, array="0-3")
    started = start_planned(s)
    assert started == [array + 1, array + 2], "two CPUs: two tasks at once, each with the next job id"
    assert [(s.jobs[j]["array_job_id"], s.jobs[j]["array_task_id"]) for j in started] == [(array, 0), (array, 1)]
    assert s.jobs[array]["array_pending"] == "2-3" and s.jobs[array]["state"] == "PENDING"
    assert all(s.jobs[j]["state"] == "RUNNING" and s.jobs[j]["attempt"] == 1 for j in started)


def test_the_last_task_runs_on_the_arrays_own_record():
    s = cluster(cpus=4)
    array = submit(s, array="5,9")
    started = start_planned(s)
    assert started == [array + 1, array], "the last task left uses the array's record itself"
    own = s.jobs[array]
    assert (own["state"], own["array_task_id"], own["array_pending"]) == ("RUNNING", 9, "")
    assert s.jobs[array + 1]["array_task_id"] == 5


def test_the_throttle_keeps_at_most_n_tasks_running_with_reason_job_array_task_limit():
    s = cluster(cpus=8)
    array = submit(s, array="0-5%2")
    first = start_planned(s)
    assert len(first) == 2
    assert start_planned(s) == [], "two run: the throttle holds the rest"
    assert eligibility.waiting_reason(s, s.jobs[array], 10.0) == "JobArrayTaskLimit"
    end(s, first[0])
    assert len(start_planned(s)) == 1
    refused = s.apply(rec("job_array_split", job_id=array, nodes=["n1"], attempt=1, time=30.0))
    assert not refused["ok"] and "throttle" in refused["message"]


def test_a_plain_start_of_an_array_with_tasks_left_is_refused():
    s = cluster()
    array = submit(s, array="0-3")
    refused = s.apply(rec("job_start", job_id=array, nodes=["n1"], attempt=1, time=2.0))
    assert not refused["ok"] and "job_array_split" in refused["message"]


def test_cancelling_named_tasks_removes_pending_ones_and_flags_running_ones():
    s = cluster(cpus=1)
    array = submit(s, array="0-5")
    (running,) = start_planned(s)
    result = s.apply(rec("job_array_cancel", array_job_id=array, tasks=[0, 2, 3], by="u", time=5.0))
    assert result["ok"] and result["signal"] == [[running, 1, ["n1"]]] and result["unknown"] == ""
    assert s.jobs[array]["array_pending"] == "1,4-5"
    assert s.jobs[running]["cancel_requested"]
    missing = s.apply(rec("job_array_cancel", array_job_id=array, tasks=[99], by="u", time=5.0))
    assert not missing["ok"] and "has no task 99" in missing["message"]


def test_cancelling_the_last_pending_tasks_ends_the_arrays_own_record():
    s = cluster(cpus=1)
    array = submit(s, array="0-2")
    start_planned(s)
    s.apply(rec("job_array_cancel", array_job_id=array, tasks=[1, 2], by="u", time=5.0))
    own = s.jobs[array]
    assert (own["state"], own["array_pending"]) == ("CANCELLED", "1-2"), (
        "the record stands for the tasks that never ran"
    )


def test_cancelling_the_whole_array_reaches_every_record():
    s = cluster(cpus=2)
    array = submit(s, array="0-9")
    started = start_planned(s)
    result = s.apply(rec("job_array_cancel", array_job_id=array, tasks=[], by="u", time=5.0))
    assert sorted(j for j, _a, _n in result["signal"]) == started
    assert s.jobs[array]["state"] == "CANCELLED"
    assert [s.jobs[j]["array_job_id"] for j in s.array_tasks[array]] == [array, array]


def test_every_record_of_an_array_is_found_by_its_id():
    s = cluster(cpus=2)
    array = submit(s, array="0-3")
    started = start_planned(s)
    assert [j["job_id"] for j in s.array_records(array)] == [array, *started]


def test_purge_keeps_an_array_whose_tasks_are_not_all_finished():
    s = cluster(cpus=2)
    array = submit(s, array="0-3")
    started = start_planned(s)
    s.apply(rec("job_array_cancel", array_job_id=array, tasks=[2, 3], by="u", time=5.0))
    end(s, started[0], now=6.0)
    s.apply(rec("jobs_purge", before=100.0))
    assert array in s.jobs and started[1] in s.jobs and started[0] not in s.jobs
    assert [j["job_id"] for j in s.array_records(array)] == [array, started[1]]
    end(s, started[1], now=7.0)
    s.apply(rec("jobs_purge", before=100.0))
    assert array not in s.jobs and array not in s.array_tasks


def test_a_snapshot_keeps_the_arrays_index_and_an_older_release_refuses_it():
    import pickle

    s = cluster(cpus=2)
    array = submit(s, array="0-3")
    start_planned(s)
    data = s.__getstate__()
    assert data["format"] == 2, "job records of level 3 are not for a release that reads format 1"
    copy = pickle.loads(pickle.dumps(s))
    assert copy.array_tasks == s.array_tasks and copy.fingerprint() == s.fingerprint()
    assert cluster(level=2).__getstate__()["format"] == 1
    assert array in copy.jobs


def test_at_wal_level_2_an_array_field_is_not_read():
    s = cluster(level=2)
    job = submit(s, array="0-3", hold=True)
    assert "array_pending" not in s.jobs[job] and not s.jobs[job]["held"], "as a level-2 member applies it"


def test_cancelling_an_array_records_who_did_on_every_record_it_ends_or_stops():
    s = cluster(cpus=1)
    array = submit(s, array="0-3")
    (running,) = start_planned(s)
    s.apply(rec("job_array_cancel", array_job_id=array, tasks=[], by="u", by_uid=1000, time=5.0))
    assert s.jobs[running]["cancelled_by_uid"] == 1000 and s.jobs[running]["cancel_requested"]
    assert (s.jobs[array]["state"], s.jobs[array]["cancelled_by_uid"]) == ("CANCELLED", 1000)
