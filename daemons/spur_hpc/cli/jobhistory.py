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

-j takes Slurm's job references: N (a job, or every task of array N), N_T and N_[T-U,V] (those tasks of array
N; a task still waiting is matched by the array's pending record), N.S and N.batch (that step only).
"""

from __future__ import annotations

import time

from spur_hpc import model
from spur_hpc.cli import commandline, jobview
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


JOB_REFERENCE_FORMS = "N, N_T, N_[T-U], N.STEP or N.batch (comma-separated)"


class JobSelector:
    """One -j reference: a job id, optionally array task ids (None: any) and a step id (None: the job and its
    steps)."""

    __slots__ = ("job_id", "tasks", "step")

    def __init__(self, job_id: int, tasks: frozenset[int] | None = None, step: str | None = None) -> None:
        self.job_id = job_id
        self.tasks = tasks
        self.step = step

    def matches_job(self, job: Any) -> bool:
        if self.tasks is None:
            return job.job_id == self.job_id or (job.array_job_id != 0 and job.array_job_id == self.job_id)
        if job.array_job_id != self.job_id:
            return False
        if job.array_pending:
            return not self.tasks.isdisjoint(model.parse_array_ranges(job.array_pending))
        return job.array_task_id in self.tasks

    def matches_step(self, step: Any) -> bool:
        """Whether the line of this step (None: the job's own line) is shown, given that its job matched."""
        if self.step is None:
            return True
        return step is not None and step.step_id == self.step


def _split_references(text: str) -> list[str]:
    """Split at commas outside brackets: 12_[1,3],14 -> 12_[1,3] and 14."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_job_reference(text: str) -> JobSelector:
    def bad(why: str = "") -> CliError:
        return CliError(f"invalid job reference '{text}' in --jobs{why}: write {JOB_REFERENCE_FORMS}")

    rest, dot, step = text.partition(".")
    if dot and not (step == model.BATCH_STEP or step.isdigit()):
        raise bad(f" (the step '{step}' is neither batch nor a number)")
    job_text, underscore, task_text = rest.partition("_")
    if not job_text.isdigit():
        raise bad()
    job_id = commandline.parse_job_id(job_text, "job id in --jobs")
    tasks = None
    if underscore:
        ranges = task_text[1:-1] if task_text.startswith("[") and task_text.endswith("]") else task_text
        if not ranges:
            raise bad(" (no task ids after _)")
        try:
            tasks = frozenset(model.parse_array_ranges(ranges, "--jobs task ids"))
        except ValueError as exc:
            raise CliError(str(exc)) from None
    return JobSelector(job_id, tasks, step if dot else None)


def parse_job_references(items: list[str]) -> list[JobSelector]:
    return [parse_job_reference(part) for item in items for part in _split_references(item)]


class HistoryQuery:
    __slots__ = ("selectors", "users", "states", "names", "partitions", "start", "end", "all_clusters")

    def __init__(
        self,
        selectors: list[JobSelector] | None = None,
        users: list[str] | None = None,
        states: list[str] | None = None,
        names: list[str] | None = None,
        partitions: list[str] | None = None,
        start: float | None = None,
        end: float | None = None,
        all_clusters: bool = False,
    ) -> None:
        self.selectors = selectors or []
        self.users = users or []
        self.states = states or []
        self.names = names or []
        self.partitions = partitions or []
        self.start = start
        self.end = end
        self.all_clusters = all_clusters

    @property
    def job_ids(self) -> list[int]:
        return sorted({s.job_id for s in self.selectors})

    def wants_job(self, job: Any) -> bool:
        return not self.selectors or any(s.matches_job(job) for s in self.selectors)

    def wants_line(self, job: Any, step: Any) -> bool:
        """Whether sacct shows this line: a job's own (step None) or one of its steps'."""
        if not self.selectors:
            return True
        return any(s.matches_job(job) and s.matches_step(step) for s in self.selectors)


def listing_order(job: Any) -> tuple:
    """sacct's order: by job id, an array's records together under the array's id, its tasks by task id and
    the tasks still waiting in the array's record after them."""
    if job.array_job_id:
        return (job.array_job_id, bool(job.array_pending), job.array_task_id, job.job_id)
    return (job.job_id, False, 0, job.job_id)


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
    if not query.wants_job(job):
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
        return sorted((job for job in jobs if selected(job, query, start, end)), key=listing_order)


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
            "names": query.names,
            "all_clusters": query.all_clusters,
        }
        jobs = self.client.call("JobHistory", request).jobs
        wanted = [
            j
            for j in jobs
            if (not query.names or j.spec.name in query.names)
            and (not query.partitions or jobview.partition(j) in query.partitions)
            and query.wants_job(j)
        ]
        return sorted(wanted, key=listing_order)


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
