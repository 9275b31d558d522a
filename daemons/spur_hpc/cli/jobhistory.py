"""Where sacct's job records come from: the controller's JobHistory call (the PostgreSQL accounting database).

Selection by time window and state is the database query's (spur_hpc.accounting.query, which the CLI cannot
import: it pulls in psycopg); this module reads -j references, keeps the records they name, and orders them.
A cluster without accounting has no history: sacct then says so, as Slurm does.

-j takes Slurm's job references: N (a job, or every task of array N), N_T (task T of array N; a task still
waiting is matched by the array's pending record), N.S and N.batch (that step only). Slurm 22.05 refuses a
task range or list (N_[T-U]): BadArrayElement.
"""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import commandline, jobview
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


JOB_REFERENCE_FORMS = "N, N_T, N.STEP or N.batch (comma-separated)"


class BadArrayElement(CliError):
    """N_ followed by anything but one task id: Slurm 22.05's sacct stops with `Bad job array element specified`."""

    def __init__(self, job_id: int, text: str) -> None:
        super().__init__(f"invalid array task in '{text}': sacct takes one task id (N_T), not a range or list")
        self.job_id = job_id


class AccountingDisabled(Exception):
    """The cluster keeps no accounting ([accounting] database_url is empty): there is no history to list."""


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
        if not task_text.isdigit():
            raise BadArrayElement(job_id, text)
        try:
            tasks = frozenset(model.parse_array_ranges(task_text, "--jobs task ids"))
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


def latest_records(jobs: list[Any]) -> list[Any]:
    """Without -D: one record per job id, its latest run's (a requeued job's earlier runs are -D's)."""
    # The submit time tells two clusters' jobs of one id apart (-M all); a job's runs share it.
    def key(job: Any) -> tuple:
        return (job.job_id, job.submit_time, job.array_pending)

    latest: dict[tuple, Any] = {}
    for job in jobs:
        if key(job) not in latest or job.attempt >= latest[key(job)].attempt:
            latest[key(job)] = job
    return [job for job in jobs if latest[key(job)] is job]


def select_jobs(client: Any, query: HistoryQuery, now: float) -> list[Any]:
    """The records the query selects, in sacct's order; AccountingDisabled on a cluster without accounting."""
    from spur_hpc.wire.grpcwire import RpcError

    if not client.has_method("JobHistory"):
        raise AccountingDisabled()
    try:
        return AccountingJobHistory(client).select(query, now)
    except RpcError as exc:
        if exc.code in ("FAILED_PRECONDITION", "UNIMPLEMENTED"):
            raise AccountingDisabled() from None
        raise
