"""The scheduler's plan: which pending jobs start now, and on which nodes.

Read-only over the replicated state (run under its lock on the leader); the leader writes the plan as
job_start records, which state.py checks again. Two questions are asked of each pending job, each in a
module of its own: may it start at all (eligibility.py: holds, dependencies, begin times, array throttles)
and which nodes would take it (placement.py: partition, free CPUs and memory, the nodes it names or
excludes, exclusivity, gres, features).
"""

from __future__ import annotations

from spur_hpc.controller import eligibility, placement
from spur_hpc.model import PENDING, parse_array_ranges

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState


def pending_in_order(s: ClusterState) -> list[int]:
    """Pending jobs in the order the scheduler considers them: by --nice (lower first), then submission."""
    return sorted(
        (j for j, job in s.jobs.items() if job["state"] == PENDING),
        key=lambda j: (s.jobs[j]["spec"].get("nice") or 0, j),
    )


def plan_starts(s: ClusterState, now: float = 0.0) -> list[tuple[int, list[str]]]:
    """FIFO with resource fit, per partition: the oldest eligible job of a partition that does not fit
    blocks the younger ones behind it (no backfill), so a large job is not starved. A job that may not
    start yet (held, waiting on a dependency) blocks nothing. An array's own record stands for its pending
    tasks: it appears once per task that starts now (the leader splits each off), up to its %N throttle."""
    free = placement.free_resources(s)
    blocked: set[str] = set()
    plans = []
    memo: dict = {}
    for job_id in pending_in_order(s):
        job = s.jobs[job_id]
        if eligibility.waiting_reason(s, job, now, memo) is not None:
            continue
        partition = job["spec"].get("partition") or "default"
        if partition in blocked:
            continue
        starts = 1
        if job.get("array_pending"):
            starts = len(parse_array_ranges(job["array_pending"], "array_pending"))
            limit = job.get("array_max_running") or 0
            if limit:
                starts = min(starts, limit - s.array_running(job_id))
        for _ in range(starts):
            chosen = placement.choose_nodes(s, job, free)
            if chosen is None:
                blocked.add(partition)
                break
            placement.take(job, chosen, free)
            plans.append((job_id, chosen))
    return plans
