"""A replicated job record (controller/state.py) -> one accounting row, and the row's version.

The version orders every state a job passes through, so a writer can tell "newer" from "older or the
same" without reading the row: attempt * 8 + rank, where the rank orders the states of one attempt:

    1 PENDING (never started)  2 RUNNING  3 PENDING again (requeued after this attempt)  4 finished

A job's attempt only grows (the leader starts attempt n+1 after attempt n), so the version only grows
along a job's life, and a row is only ever replaced by a strictly higher version: a late RUNNING record
can never overwrite COMPLETED, and writing the same state twice changes nothing.

Within one version a row can still change in ways sacct shows: an array's record loses tasks as they split
off, and scontrol update edits a pending job's spec. detail_version orders those (spec revision, then tasks
split off); a row is replaced when (record_version, detail_version) grows. A release that knows only
record_version leaves detail_version at its default and still never goes backwards.

Steps (job["steps"][id], plus the batch step every started batch job has) get rows of their own, versioned
the same way by the step's attempt and state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from spur_hpc import model
from spur_hpc.model import (
    BATCH_STEP,
    FINISHED_STATES,
    NO_REASON,
    PENDING,
    RUNNING,
    batch_step_state,
    per_node_cpus,
)

# slurmdbd records a job's exit code when the job ends: one the controller ends (scancel, its time limit, a
# preemption) has not exited yet, so its row says 0:0; the batch step's row keeps the signal it died of.
ENDED_BY_CONTROLLER = frozenset({model.CANCELLED, model.TIMEOUT, model.PREEMPTED})

RANK_PENDING, RANK_RUNNING, RANK_REQUEUED, RANK_FINISHED = 1, 2, 3, 4
RANK_REPORTED_END = 5  # steps only: see step_version
# eligible_time of a job that may not start yet (job["eligible"] is False: held, waiting on a dependency, its
# --begin or its array's throttle): after every window, as slurmdbd's INFINITE, so sacct's window leaves it out.
NEVER_ELIGIBLE = "infinity"
RANKS_PER_ATTEMPT = 8  # room for states a later release adds between these

# Columns a writer fills, in COPY order (updated_at is set by the database).
COLUMNS: tuple[str, ...] = (
    "cluster_id",
    "job_id",
    "attempt",
    "record_version",
    "name",
    "user",
    "uid",
    "gid",
    "account",
    "partition",
    "state",
    "reason",
    "exit_code",
    "signal",
    "submit_time",
    "start_time",
    "end_time",
    "nodes",
    "cpus",
    "req_nodes",
    "tasks",
    "cpus_per_task",
    "memory_mb",
    "time_limit_secs",
    "work_dir",
    # schema version 2
    "array_job_id",
    "array_task_id",
    "array_pending",
    "array_max_running",
    "detail_version",
    "comment",
    "wckey",
    "qos",
    "constraints",
    "req_nodelist",
    "exc_nodelist",
    "restart_count",
    "eligible_time",
    "std_out",
    "std_err",
    # schema version 4
    "cancelled_by_uid",
)
STEP_COLUMNS: tuple[str, ...] = (
    "cluster_id",
    "job_id",
    "step_id",
    "attempt",
    "record_version",
    "name",
    "state",
    "exit_code",
    "signal",
    "nodes",
    "tasks",
    "cpus_per_task",
    "cpus",
    "start_time",
    "end_time",
)


def state_rank(job: Mapping[str, Any]) -> int:
    """The rank of a job's (or a step's) state within its attempt."""
    state = job["state"]
    if state in FINISHED_STATES:
        return RANK_FINISHED
    if state == RUNNING:
        return RANK_RUNNING
    if state == PENDING:
        # The leader requeues a job whose launch failed: PENDING again, attempt kept.
        return RANK_REQUEUED if int(job.get("attempt") or 0) > 0 else RANK_PENDING
    return RANK_RUNNING  # a state this release does not know yet: between pending and finished


def record_version(job: Mapping[str, Any]) -> int:
    return int(job.get("attempt") or 0) * RANKS_PER_ATTEMPT + state_rank(job)


def timestamp(value: float | None) -> datetime | None:
    """The state machine's epoch seconds (0.0 = not yet) -> an aware UTC datetime or None."""
    if not value:
        return None
    return datetime.fromtimestamp(float(value), tz=UTC)


def _text(value: Any) -> str:
    # PostgreSQL text cannot hold NUL; a job name is user input and must not make its record unwritable.
    return str(value or "").replace("\x00", "")


def job_row(cluster_id: str, job: Mapping[str, Any]) -> tuple[Any, ...]:
    """The accounting row of one job, in COLUMNS order."""
    spec = job.get("spec") or {}
    nodes = job.get("nodes") or []
    rank = state_rank(job)
    node_count = len(nodes) or max(1, int(spec.get("nodes") or 1))
    memory = int(spec.get("memory_mb") or 0)
    exited = job["state"] not in ENDED_BY_CONTROLLER
    return (
        cluster_id,
        int(job["job_id"]),
        int(job.get("attempt") or 0),
        int(job.get("attempt") or 0) * RANKS_PER_ATTEMPT + rank,
        _text(spec.get("name")),
        _text(spec.get("user")),
        int(spec["uid"]) if spec.get("uid") is not None else None,
        int(spec["gid"]) if spec.get("gid") is not None else None,
        _text(spec.get("account")),
        _text(spec.get("partition") or "default"),
        str(job["state"]),
        "" if job.get("reason") in (None, NO_REASON) else _text(job["reason"]),
        int(job.get("exit_code") or 0) if exited else 0,
        int(job.get("signal") or 0) if exited else 0,
        timestamp(job.get("submit_time")),
        # A requeued job's start belongs to the failed attempt: the state machine already cleared it.
        timestamp(job.get("start_time")),
        timestamp(job.get("end_time")),
        ",".join(nodes),
        per_node_cpus(spec) * node_count,  # allocated CPUs (per-node share rounded up)
        max(1, int(spec.get("nodes") or 1)),
        max(1, int(spec.get("tasks") or 1)),
        max(1, int(spec.get("cpus_per_task") or 1)),
        memory or None,
        int(spec.get("time_limit_secs") or 0),
        _text(spec.get("work_dir")),
        int(job.get("array_job_id") or 0),
        array_task(job),
        _text(job.get("array_pending")),
        int(job.get("array_max_running") or 0),
        detail_version(job),
        _text(spec.get("comment")),
        _text(spec.get("wckey")),
        _text(spec.get("qos")),
        _text(spec.get("constraint")),
        _text(spec.get("nodelist")),
        _text(spec.get("exclude")),
        int(job.get("restart_count") or 0),
        eligible_at(job),
        _text(spec.get("stdout_path")),
        _text(spec.get("stderr_path")),
        int(job.get("cancelled_by_uid", -1)),
    )


def eligible_at(job: Mapping[str, Any]) -> datetime | str:
    """When the job became eligible: NEVER_ELIGIBLE while it may not start, else its --begin (a record of a
    release before WAL level 3 has none: its submission)."""
    if job.get("eligible") is False:
        return NEVER_ELIGIBLE
    return timestamp(job.get("eligible_time") or job.get("submit_time"))


def array_task(job: Mapping[str, Any]) -> int | None:
    """The task id of an array task's record; None for a job that is no array task, and for an array's record
    while tasks still wait in it (it stands for those: sacct shows N_[pending])."""
    if not job.get("array_job_id") or job.get("array_pending"):
        return None
    return int(job.get("array_task_id") or 0)


def row_version(job: Mapping[str, Any]) -> tuple[int, int]:
    """What orders a job's rows: (record_version, detail_version)."""
    return record_version(job), detail_version(job)


def detail_version(job: Mapping[str, Any]) -> int:
    """Changes within one record version, ordered: the spec's revision (scontrol update), then for an array's
    record how few tasks still wait in it (its pending range only shrinks; none wait in a task's record), then
    whether a pending job is eligible (a held job released is written again; held again, its row stays)."""
    fewer_pending = 0
    if job.get("array_job_id"):
        pending = job.get("array_pending") or ""
        try:
            fewer_pending = model.MAX_ARRAY_TASKS - (len(model.parse_array_ranges(pending)) if pending else 0)
        except ValueError:
            fewer_pending = 0  # the controller formats it; an unreadable one only loses this ordering
    eligible = 0 if job.get("eligible") is False else 1
    return (int(job.get("spec_rev") or 0) << 32) + (max(0, fewer_pending) << 1) + eligible


def steps_of(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The job's step records (job["steps"]), with the batch step of a started batch job when the record has
    none: it runs from the job's start to its end on the first node and ends as the job did."""
    steps = list((job.get("steps") or {}).values())
    spec = job.get("spec") or {}
    started = bool(job.get("start_time")) and job["state"] != PENDING
    if started and not spec.get("interactive") and not any(s.get("step_id") == BATCH_STEP for s in steps):
        nodes = list(job.get("nodes") or [])[:1]
        steps.append(
            {
                "step_id": BATCH_STEP,
                "name": BATCH_STEP,
                "state": batch_step_state(job["state"]),
                "nodes": nodes,
                "tasks": 1,
                "cpus_per_task": per_node_cpus(spec),
                "exit_code": int(job.get("exit_code") or 0),
                "signal": int(job.get("signal") or 0),
                "start_time": job.get("start_time") or 0.0,
                "end_time": job.get("end_time") or 0.0,
                "attempt": int(job.get("attempt") or 0),
            }
        )
    return steps


def step_version(step: Mapping[str, Any]) -> int:
    """Like record_version; a step's end reported by its nodes ranks above the provisional CANCELLED the
    controller records when the job ends first (step["provisional"]), so the real end replaces it."""
    rank = state_rank(step)
    if rank == RANK_FINISHED and not step.get("provisional"):
        rank = RANK_REPORTED_END
    return int(step.get("attempt") or 0) * RANKS_PER_ATTEMPT + rank


def step_row(cluster_id: str, job_id: int, step: Mapping[str, Any]) -> tuple[Any, ...]:
    """The accounting row of one step, in STEP_COLUMNS order."""
    nodes = [str(n) for n in step.get("nodes") or []]
    tasks = max(1, int(step.get("tasks") or 1))
    cpus_per_task = max(1, int(step.get("cpus_per_task") or 1))
    return (
        cluster_id,
        int(job_id),
        _text(step["step_id"]),
        int(step.get("attempt") or 0),
        step_version(step),
        _text(step.get("name")),
        str(step["state"]),
        int(step.get("exit_code") or 0),
        int(step.get("signal") or 0),
        ",".join(nodes),
        tasks,
        cpus_per_task,
        tasks * cpus_per_task,
        timestamp(step.get("start_time")),
        timestamp(step.get("end_time")),
    )
