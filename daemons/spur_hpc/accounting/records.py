"""A replicated job record (controller/state.py) -> one accounting row, and the row's version.

The version orders every state a job passes through, so a writer can tell "newer" from "older or the
same" without reading the row: attempt * 8 + rank, where the rank orders the states of one attempt:

    1 PENDING (never started)  2 RUNNING  3 PENDING again (requeued after this attempt)  4 finished

A job's attempt only grows (the leader starts attempt n+1 after attempt n), so the version only grows
along a job's life, and a row is only ever replaced by a strictly higher version: a late RUNNING record
can never overwrite COMPLETED, and writing the same state twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from spur_hpc.model import FINISHED_STATES, NO_REASON, PENDING, RUNNING, per_node_cpus

RANK_PENDING, RANK_RUNNING, RANK_REQUEUED, RANK_FINISHED = 1, 2, 3, 4
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
)


def state_rank(job: Mapping[str, Any]) -> int:
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
        int(job.get("exit_code") or 0),
        int(job.get("signal") or 0),
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
    )
