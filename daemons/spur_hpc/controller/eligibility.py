"""May a pending job start at all, whatever the free resources: the scheduler's first question.

Pure over the replicated state plus the leader's clock (`now`, epoch seconds). The answer is a Slurm
pending reason when the job must wait, None when it may start as soon as nodes fit. Nothing here is
written back: squeue shows the same answer, computed when it asks (service.shown_reason), so a job whose
dependency becomes satisfied costs no log record; the leader writes only the end of a pending job that can
never start (pending_ends).

`memo` is a dict one pass over the queue shares (one plan, one listing): answers about a dependee and the
singleton index are worked out once per pass, so 10,000 jobs waiting on one array cost 10,000 lookups.
"""

from __future__ import annotations

import functools
from typing import Any

from spur_hpc.controller import limits
from spur_hpc.model import (
    CANCELLED,
    COMPLETED,
    DEADLINE,
    FINISHED_STATES,
    PENDING,
    REASON_ARRAY_LIMIT,
    REASON_BEGIN_TIME,
    REASON_DEADLINE,
    REASON_DEPENDENCY,
    REASON_DEPENDENCY_NEVER,
    REASON_HELD_ADMIN,
    RUNNING,
    parse_dependency,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState

# What a dependency (or one of its terms) says now.
SATISFIED, WAITING, NEVER = "satisfied", "waiting", "never"


def waiting_reason(s: ClusterState, job: dict[str, Any], now: float, memo: dict | None = None) -> str | None:
    if job.get("held"):
        return job.get("reason") or REASON_HELD_ADMIN
    deadline = job["spec"].get("deadline") or 0.0
    if deadline and now >= deadline:
        return REASON_DEADLINE  # the leader ends it DEADLINE (pending_ends)
    if (job.get("eligible_time") or 0.0) > now:
        return REASON_BEGIN_TIME
    if job["spec"].get("dependency"):
        answer = dependency_state(s, job, now, {} if memo is None else memo)
        if answer == WAITING:
            return REASON_DEPENDENCY
        if answer == NEVER:
            return REASON_DEPENDENCY_NEVER
    limit = job.get("array_max_running") or 0
    if limit and job.get("array_job_id") and s.array_running(job["array_job_id"]) >= limit:
        return REASON_ARRAY_LIMIT
    return limits.waiting_reason(s, job, memo)  # association and QOS limits ([accounting] enforce "limits")


def pending_ends(s: ClusterState, now: float, candidates=None) -> list[tuple[int, str, str]]:
    """Pending jobs the leader ends now, as (job id, state, reason): past their --deadline (DEADLINE), or with
    a dependency that can never be satisfied and --kill-on-invalid-dep (CANCELLED, as Slurm does).
    candidates: the ids of the pending jobs with either option (scheduler.JobIndex), else every job is read."""
    ends = []
    memo: dict = {}
    ids = s.jobs.keys() if candidates is None else sorted(candidates)
    for job_id in ids:
        job = s.jobs.get(job_id)
        if job is None or job["state"] != PENDING:
            continue
        spec = job["spec"]
        if spec.get("deadline") and now >= spec["deadline"]:
            ends.append((job_id, DEADLINE, REASON_DEADLINE))
        elif spec.get("kill_on_invalid_dep") and spec.get("dependency"):
            if dependency_state(s, job, now, memo) == NEVER:
                ends.append((job_id, CANCELLED, REASON_DEPENDENCY_NEVER))
    return ends


@functools.lru_cache(maxsize=4096)
def parsed_dependency(text: str) -> tuple[bool, tuple[tuple[str, int, int], ...]]:
    """The spec's dependency string, parsed once per distinct string (the service checked it at submit)."""
    any_of, terms = parse_dependency(text)
    return any_of, tuple(terms)


def dependency_state(s: ClusterState, job: dict[str, Any], now: float, memo: dict) -> str:
    any_of, terms = parsed_dependency(job["spec"]["dependency"])
    answers = [_term_state(s, job, kind, dep_id, minutes, now, memo) for kind, dep_id, minutes in terms]
    if any_of:
        if SATISFIED in answers:
            return SATISFIED
        return NEVER if all(a == NEVER for a in answers) else WAITING
    if NEVER in answers:
        return NEVER
    return SATISFIED if all(a == SATISFIED for a in answers) else WAITING


def _term_state(
    s: ClusterState, job: dict[str, Any], kind: str, dep_id: int, minutes: int, now: float, memo: dict
) -> str:
    if kind == "singleton":
        return WAITING if _singleton_blocked(s, job, memo) else SATISFIED
    key = (kind, dep_id, minutes)
    if key not in memo:
        memo[key] = _records_state(kind, minutes, dependee_records(s, dep_id), now)
    return memo[key]


def dependee_records(s: ClusterState, dep_id: int) -> list[dict[str, Any]]:
    """The records a dependency on `dep_id` waits for: the job, or every record of an array (by its id)."""
    if dep_id in s.array_tasks:
        return s.array_records(dep_id)
    job = s.jobs.get(dep_id)
    return [] if job is None else [job]


def _records_state(kind: str, minutes: int, records: list[dict[str, Any]], now: float) -> str:
    if not records:
        return SATISFIED  # purged: it finished long ago (Slurm lifts a dependency on a job it forgot)
    finished = [j for j in records if j["state"] in FINISHED_STATES]
    all_done = len(finished) == len(records)
    if kind == "afterany":
        return SATISFIED if all_done else WAITING
    if kind == "afterok":
        if any(not _succeeded(j) for j in finished):
            return NEVER
        return SATISFIED if all_done else WAITING
    if kind == "afternotok":
        if not all_done:
            return WAITING
        return SATISFIED if any(not _succeeded(j) for j in finished) else NEVER
    # after: every record started (or ended without starting), `minutes` ago when given
    for j in records:
        if j["state"] == PENDING:
            return WAITING
        if minutes and j["state"] == RUNNING and j["start_time"] + 60 * minutes > now:
            return WAITING
    return SATISFIED


def dependency_path(s: ClusterState, starts: list[int], target: int, limit: int = 100_000) -> list[int]:
    """A chain of dependencies from one of `starts` to `target` ([start, ..., target]), or [] when there is
    none; at most `limit` jobs are looked at."""
    came_from: dict[int, int] = {j: 0 for j in starts}
    todo = list(starts)
    while todo and len(came_from) <= limit:
        job_id = todo.pop()
        if job_id == target:
            path = [job_id]
            while came_from[path[-1]]:
                path.append(came_from[path[-1]])
            return path[::-1]
        job = s.jobs.get(job_id)
        text = job["spec"].get("dependency") if job is not None and job["state"] == PENDING else ""
        for _kind, dep_id, _minutes in parsed_dependency(text)[1] if text else ():
            if dep_id and dep_id not in came_from:
                came_from[dep_id] = job_id
                todo.append(dep_id)
    return []


def _succeeded(job: dict[str, Any]) -> bool:
    return job["state"] == COMPLETED and not job.get("exit_code")


def _singleton_blocked(s: ClusterState, job: dict[str, Any], memo: dict) -> bool:
    """Slurm's singleton: another job of the same name and user runs, or waits and was submitted earlier."""
    index = memo.get("singleton")
    if index is None:
        index = {}  # (user, name) -> (one of them runs, the lowest pending job id)
        for other in s.jobs.values():
            if other["state"] in FINISHED_STATES:
                continue
            key = (other["spec"].get("user", ""), other["spec"].get("name", ""))
            running, lowest = index.get(key, (False, 0))
            if other["state"] == RUNNING:
                running = True
            elif not lowest or other["job_id"] < lowest:
                lowest = other["job_id"]
            index[key] = (running, lowest)
        memo["singleton"] = index
    running, lowest = index.get((job["spec"].get("user", ""), job["spec"].get("name", "")), (False, 0))
    return running or (lowest != 0 and lowest < job["job_id"])
