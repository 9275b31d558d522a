"""What scontrol suspend leaves in a job's record, read the same way everywhere: the job stays RUNNING and keeps
its nodes; `suspended` holds the attempt suspended, `suspend_attempt` the attempt its suspend times belong to
(`suspend_time`, `suspended_secs`), so a later run of a requeued job starts with none (state._op_job_suspend)."""

from __future__ import annotations

from typing import Any

from spur_hpc.model import RUNNING, SUSPENDED


def shown_state(job: dict[str, Any]) -> str:
    """The state clients see: a running job stopped by scontrol suspend (this run of it) is SUSPENDED."""
    if job["state"] == RUNNING and job.get("suspended") and job.get("suspended") == job.get("attempt"):
        return SUSPENDED
    return job["state"]


def suspended_secs(job: dict[str, Any]) -> float:
    """Seconds this run has spent suspended and resumed since (not run time; its time limit moved by as much)."""
    return float(job.get("suspended_secs", 0.0)) if job.get("suspend_attempt") == job.get("attempt") else 0.0


def suspend_time(job: dict[str, Any]) -> float:
    """When this run was last suspended or resumed (0: never)."""
    return float(job.get("suspend_time", 0.0)) if job.get("suspend_attempt") == job.get("attempt") else 0.0
