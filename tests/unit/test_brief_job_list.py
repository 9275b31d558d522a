"""The brief ListJobs reply built from cached per-job bytes is the reply built from scratch, after any change."""

from __future__ import annotations

import copy

from spur_hpc.controller.grpc_api import BriefJobList, job_to_pb
from spur_hpc.proto import slurm_pb2

# A new value for every field of Job that the controller's job record feeds (all but job_id and spec).
CHANGES = {
    "state": "RUNNING",
    "reason": "Resources",
    "exit_code": 3,
    "signal": 9,
    "submit_time": 5.5,
    "start_time": 6.5,
    "end_time": 7.5,
    "nodes": ["n1", "n2"],
    "attempt": 2,
    "cancel_requested": True,
    "held": True,
    "array_job_id": 12,
    "array_task_id": 3,
    "array_pending": "4-15",
    "array_max_running": 4,
    "restart_count": 1,
    "eligible_time": 8.5,
    "priority": 4294901750,
    "suspend_time": 9.5,
    "suspended_secs": 2.5,
    "cancelled_by_uid": 1000,
    "preempted_by": 41,
    "preempt_time": 10.5,
    "steps": {
        "0": {"step_id": "0", "name": "sh", "state": "RUNNING", "nodes": ["n1"], "tasks": 2, "cpus_per_task": 1,
              "exit_code": 0, "signal": 0, "start_time": 6.5, "end_time": 0.0, "attempt": 2, "reason": ""},
    },  # fmt: skip
    "spec_rev": 1,
}


def job(job_id: int) -> dict:
    return {
        "job_id": job_id,
        "spec": {"name": f"j{job_id}", "script": "#!/bin/sh\ntrue\n", "user": "u", "uid": 1, "gid": 1,
                 "work_dir": "/tmp", "partition": "debug", "cpus_per_task": 2, "environment": {"A": "1"}},
        "state": "PENDING",
        "reason": "None",
        "exit_code": 0,
        "signal": 0,
        "submit_time": 1.0,
        "start_time": 0.0,
        "end_time": 0.0,
        "nodes": [],
        "attempt": 0,
        "cancel_requested": False,
        "held": False,
    }  # fmt: skip


def from_scratch(jobs: list[dict]) -> slurm_pb2.ListJobsReply:
    return slurm_pb2.ListJobsReply(jobs=[job_to_pb(j, brief=True) for j in jobs])


def test_the_changes_cover_every_field_of_a_job_but_its_id_and_spec() -> None:
    # supervisor_pid is an agent's answer about a job it runs; the controller's records do not carry it. allocs
    # (what the job holds on each node, for scontrol show job -d) is left out of the brief listings.
    fields = {f.name for f in slurm_pb2.Job.DESCRIPTOR.fields} - {"job_id", "spec", "supervisor_pid", "allocs"}
    assert set(CHANGES) - {"spec_rev"} == fields, "a new Job field must be in grpc_api.JOB_RECORD_FIELDS"


def listed(cache: BriefJobList, jobs: list[dict], whole_queue: bool = True) -> slurm_pb2.ListJobsReply:
    """What ListJobs does: each job through cache.view (under the state lock), then cache.reply."""
    return cache.reply([cache.view(j) for j in jobs], whole_queue)


def test_the_brief_reply_leaves_out_script_and_environment_only() -> None:
    reply = listed(BriefJobList(), [job(1)])
    assert reply == from_scratch([job(1)])
    assert reply.jobs[0].spec.script == "" and not reply.jobs[0].spec.environment
    assert reply.jobs[0].spec.work_dir == "/tmp" and reply.jobs[0].spec.cpus_per_task == 2


def test_a_change_to_any_field_is_seen_by_the_next_reply() -> None:
    cache = BriefJobList()
    jobs = [job(i) for i in range(1, 4)]
    assert listed(cache, jobs) == from_scratch(jobs)
    for field, value in CHANGES.items():
        changed = copy.deepcopy(jobs)
        changed[1][field] = value
        assert listed(cache, changed) == from_scratch(changed), field
        assert listed(cache, jobs, whole_queue=False) == from_scratch(jobs), field


def test_a_listing_of_the_whole_queue_forgets_the_jobs_that_left_it() -> None:
    cache = BriefJobList()
    listed(cache, [job(i) for i in range(1, 6)])
    listed(cache, [job(9)], whole_queue=False)  # a filtered listing adds, never forgets
    assert sorted(cache._entries) == [1, 2, 3, 4, 5, 9]
    listed(cache, [job(2), job(3)])
    assert sorted(cache._entries) == [2, 3]


def test_an_empty_queue_gives_an_empty_reply() -> None:
    assert listed(BriefJobList(), []) == slurm_pb2.ListJobsReply()


def test_an_unchanged_job_is_neither_copied_nor_encoded_again() -> None:
    cache = BriefJobList()
    jobs = [job(1), job(2)]
    listed(cache, jobs)
    jobs[1]["state"] = "RUNNING"
    views = [cache.view(j) for j in jobs]
    assert views[0][2] is not None and views[0][3] is None  # cached bytes, no copy
    assert views[1][2] is None and views[1][3] == jobs[1] and views[1][3] is not jobs[1]  # changed: a copy


def test_the_brief_listing_leaves_out_what_a_job_holds_on_each_node() -> None:
    from spur_hpc.controller.grpc_api import job_to_pb

    running = job(2)
    running.update(state="RUNNING", nodes=["n1"], alloc={"cpus": 1, "memory_mb": 0,
                   "per_node": {"n1": {"cpus": 1, "memory_mb": 0, "cpu_ids": [3], "gres_ids": {}}}})  # fmt: skip
    assert list(job_to_pb(running).allocs["n1"].cpu_ids) == [3]  # GetJob: scontrol show job -d's CPU_IDs
    assert not listed(BriefJobList(), [running]).jobs[0].allocs
