"""Where sacct's job records come from, behind one small interface (select(query, now) -> jobs).

AccountingJobHistory asks the controller's JobHistory call (the PostgreSQL accounting database).
ControllerJobHistory reads the controller's own job list (ListJobs with include_finished=True), which keeps
finished jobs until the controller purges them; sacct uses it when the cluster runs without accounting.
Selection follows Slurm's sacct, the same rules as spur_hpc.accounting.query (which the CLI cannot import:
it pulls in psycopg):

- without -s: S defaults to midnight today (the epoch when job ids are given), E to now; a job is selected
  when it was submitted before E and had not ended before S.
- with -s: S defaults to now (the epoch with job ids) and E to S. PENDING matches a job that waited during
  the window, RUNNING one that ran during it, a finished state one that ended in the window in that state.
"""

from __future__ import annotations

import time

from spur_hpc.cli import jobview

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class HistoryQuery:
    __slots__ = ("job_ids", "users", "states", "names", "partitions", "start", "end")

    def __init__(
        self,
        job_ids: list[int] | None = None,
        users: list[str] | None = None,
        states: list[str] | None = None,
        names: list[str] | None = None,
        partitions: list[str] | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> None:
        self.job_ids = job_ids or []
        self.users = users or []
        self.states = states or []
        self.names = names or []
        self.partitions = partitions or []
        self.start = start
        self.end = end


def window(query: HistoryQuery, now: float) -> tuple[float, float]:
    """(S, E) with sacct's defaults; the window is [S, E)."""
    start, end = query.start, query.end
    if query.states:
        if start is None and not query.job_ids:
            start = now
        if start is not None and end is None:
            end = start
    elif start is None and not query.job_ids:
        local = time.localtime(now)
        start = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
    start = start or 0.0
    end = now if end is None else end
    if end == start or end == now:
        end += 1
    return start, end


def _in_state_during(job: Any, state: str, start: float, end: float) -> bool:
    name = jobview.state_name(job)
    if state == "PENDING":
        if not job.submit_time or job.submit_time >= end:
            return False
        if job.start_time:
            return job.start_time > start
        return job.end_time > start if job.end_time else name == "PENDING"
    if state == "RUNNING":
        if not job.start_time or job.start_time >= end:
            return False
        return job.end_time > start if job.end_time else name in ("RUNNING", "COMPLETING")
    return name == state and bool(job.end_time) and start <= job.end_time <= end


def selected(job: Any, query: HistoryQuery, start: float, end: float) -> bool:
    if query.job_ids and job.job_id not in query.job_ids:
        return False
    if query.users and job.spec.user not in query.users:
        return False
    if query.names and job.spec.name not in query.names:
        return False
    if query.partitions and jobview.partition(job) not in query.partitions:
        return False
    if query.states:
        return any(_in_state_during(job, state, start, end) for state in query.states)
    return job.submit_time < end and (not job.end_time or job.end_time >= start)


class ControllerJobHistory:
    """Finished and live jobs as the controller still holds them."""

    description = "the controller's job list (finished jobs stay there until the controller purges them)"

    def __init__(self, client: Any) -> None:
        self.client = client

    def select(self, query: HistoryQuery, now: float) -> list[Any]:
        request = {
            "job_ids": query.job_ids,
            "users": query.users,
            "names": query.names,
            "partitions": query.partitions,
            "include_finished": True,
        }
        jobs = self.client.call("ListJobs", request).jobs
        start, end = window(query, now)
        return sorted((job for job in jobs if selected(job, query, start, end)), key=lambda job: job.job_id)


class AccountingJobHistory:
    """Records from the accounting database, through the controller's JobHistory call."""

    description = "the accounting database (through the controller)"

    def __init__(self, client: Any) -> None:
        self.client = client

    def select(self, query: HistoryQuery, now: float) -> list[Any]:
        request = {
            "job_ids": query.job_ids,
            "users": query.users,
            "states": query.states,
            "start_time": query.start or 0.0,
            "end_time": query.end or 0.0,
        }
        jobs = self.client.call("JobHistory", request).jobs
        wanted = [
            j
            for j in jobs
            if (not query.names or j.spec.name in query.names)
            and (not query.partitions or jobview.partition(j) in query.partitions)
        ]
        return sorted(wanted, key=lambda job: job.job_id)


def select_jobs(client: Any, query: HistoryQuery, now: float) -> list[Any]:
    """Accounting first; the controller's own list when this cluster runs without accounting."""
    from spur_hpc.wire.grpcwire import RpcError

    if client.has_method("JobHistory"):
        try:
            return AccountingJobHistory(client).select(query, now)
        except RpcError as exc:
            if exc.code not in ("FAILED_PRECONDITION", "UNIMPLEMENTED"):
                raise
    return ControllerJobHistory(client).select(query, now)
