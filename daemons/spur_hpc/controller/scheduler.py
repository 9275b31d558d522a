"""The scheduler's plan: which pending jobs start now, and on which nodes.

Read-only over the replicated state (run under its lock on the leader); the leader writes the plan as
job_start records, which state.py checks again. Two questions are asked of each pending job, each in a
module of its own: may it start at all (eligibility.py: holds, dependencies, begin times, array throttles)
and which nodes would take it (placement.py: partition, free CPUs and memory, the nodes it names or
excludes, exclusivity, gres, features).

The leader plans from a JobIndex: the pending jobs of each partition kept in the order the plan takes
them, the running jobs and the pending jobs with a deadline, all maintained from the records as they
are applied. A plan then walks only the partitions that are not blocked yet and stops when every one is:
with 100,000 jobs waiting behind a job that does not fit, a submission costs what it costs with 10.
plan_starts without an index scans the whole queue; both decide the same (tests/unit/test_scheduler_incremental.py).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from spur_hpc.controller import eligibility, limits, partitions, placement
from spur_hpc.controller.associations import DEFAULT_QOS
from spur_hpc.controller.tracking import JobTracker
from spur_hpc.model import PENDING, RUNNING, TOP_PRIORITY, parse_array_ranges

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState


def pending_in_order(s: ClusterState, parts: Any = None, levels: Mapping[str, int] | None = None) -> list[int]:
    """Pending jobs in the order the scheduler considers them: the jobs of a higher partition PriorityTier first,
    then by priority (submission order, lowered by --nice; see order_key)."""
    return sorted(
        (j for j, job in s.jobs.items() if job["state"] == PENDING),
        key=lambda j: (-_tier(parts, placement.job_partition(s.jobs[j]["spec"])), *order_key(s.jobs[j], levels)),
    )


def _tier(parts: Any, partition: str) -> int:
    return parts.tier(partition) if parts is not None else 1


def order_key(job: dict[str, Any], levels: Mapping[str, int] | None = None) -> tuple[int, int, int]:
    """Under qos_priority preemption, a QOS of a higher preemption rank first (`levels`, preemption.preempt_levels:
    a job that may preempt another is planned before it, as Slurm sorts its queue); then the higher priority
    (state.py gives each job Slurm's priority/basic one: submission order, lowered by --nice), then the lower job
    id. A record written before priorities existed ranks as the first ones did."""
    priority = job.get("priority")
    if priority is None:
        priority = TOP_PRIORITY - int(job["spec"].get("nice") or 0)
    level = levels.get(job["spec"].get("qos") or DEFAULT_QOS, 0) if levels else 0
    return (-level, -int(priority), job["job_id"])


# Records that change no job (every other op without a job_id makes the index look at every job again).
_NO_JOB_OPS = frozenset({"member_announce", "set_wal_level", "step_create", "step_end", "node_dispatch_hold"})
# Past this many changed jobs since the last plan, one pass over every job is cheaper.
_REBUILD_AFTER = 20_000


class JobIndex(JobTracker):
    """The jobs a leader's duties look at: the pending jobs of each partition in plan order, the running jobs and
    the pending jobs with a deadline, kept up to date from the applied records (controller/tracking.py)."""

    no_job_ops = _NO_JOB_OPS
    rebuild_after = _REBUILD_AFTER

    def __init__(self) -> None:
        super().__init__()
        self._key: dict[int, tuple[str, tuple[int, int, int]]] = {}  # pending job -> (partition, order key)
        self.queues: dict[str, list[tuple[int, int, int]]] = {}  # partition -> its pending jobs' order keys, sorted
        self.running: set[int] = set()
        self.with_deadline: set[int] = set()  # pending jobs pending_ends must look at
        # The QOS preemption ranks the order keys were made with, and where the next ones come from (the leader
        # sets it: the ranks while [scheduler] preempt_type is qos_priority, else none); a change rebuilds.
        self.levels_of: Callable[[ClusterState], Mapping[str, int]] | None = None
        self._levels: Mapping[str, int] = {}

    def sync(self, s: ClusterState) -> JobIndex:
        levels = self.levels_of(s) if self.levels_of is not None else {}
        if levels is not self._levels and levels != self._levels:
            self._levels, self._rebuild = levels, True
        if self.stale(s):
            self._build(s)
        else:
            for job_id in self.touched():
                self._update(s, job_id)
        self.caught_up(s)
        return self

    def _build(self, s: ClusterState) -> None:
        self.rebuilt(s)
        self._key, self.queues, self.running, self.with_deadline = {}, {}, set(), set()
        for job_id, job in s.jobs.items():
            if job["state"] == PENDING:
                self._add_pending(job_id, job, sort=False)
            elif job["state"] == RUNNING:
                self.running.add(job_id)
        for queue in self.queues.values():
            queue.sort()

    def _update(self, s: ClusterState, job_id: int) -> None:
        old = self._key.pop(job_id, None)
        if old is not None:
            queue = self.queues[old[0]]
            at = bisect_left(queue, old[1])
            if at < len(queue) and queue[at] == old[1]:
                del queue[at]
            if not queue:
                del self.queues[old[0]]
        self.running.discard(job_id)
        self.with_deadline.discard(job_id)
        job = s.jobs.get(job_id)
        if job is None:
            return
        if job["state"] == PENDING:
            self._add_pending(job_id, job, sort=True)
        elif job["state"] == RUNNING:
            self.running.add(job_id)

    def _add_pending(self, job_id: int, job: dict[str, Any], sort: bool) -> None:
        spec = job["spec"]
        partition, key = placement.job_partition(spec), order_key(job, self._levels)
        self._key[job_id] = (partition, key)
        queue = self.queues.setdefault(partition, [])
        if sort:
            insort(queue, key)
        else:
            queue.append(key)
        if spec.get("deadline") or (spec.get("kill_on_invalid_dep") and spec.get("dependency")):
            self.with_deadline.add(job_id)

    def pending_in_order(self, parts: Any = None) -> Iterator[tuple[str, int]]:
        """(partition, job id) in the plan's order (a higher partition PriorityTier first, then the order key);
        send(partition) blocks a partition: its jobs are skipped from then on without being looked at."""
        tiers = {name: -_tier(parts, name) for name in self.queues}
        heap = [(tiers[name], queue[0], name, 0) for name, queue in self.queues.items() if queue]
        heapq.heapify(heap)
        blocked: set[str] = set()
        while heap:
            tier, key, name, at = heapq.heappop(heap)
            if name in blocked:
                continue
            blocked_now = yield name, key[-1]  # the job id
            if blocked_now is not None:
                blocked.add(blocked_now)
                yield None  # the value of send()
            queue = self.queues[name]
            if name not in blocked and at + 1 < len(queue):
                heapq.heappush(heap, (tier, queue[at + 1], name, at + 1))


def plan_starts(
    s: ClusterState, now: float = 0.0, index: JobIndex | None = None, parts: Any = None, blockers: list | None = None
) -> list[tuple[int, list[str]]]:
    """FIFO with resource fit, per partition: the oldest eligible job of a partition that does not fit
    blocks the younger ones behind it (no backfill), so a large job is not starved. A job that may not
    start yet (held, waiting on a dependency, over its partition's limits) blocks nothing; a partition that is
    DOWN or INACTIVE blocks all of its jobs. An array's own record stands for its pending tasks: it appears once
    per task that starts now (the leader splits each off), up to its %N throttle. `parts` is the leader's
    PartitionTable (controller/partitions.py): which nodes serve which partition, the limits, the tiers.
    `blockers`, when given, receives the ids of the jobs that did not fit (each blocks its partition): the jobs
    preemption may make room for (controller/preemption.py)."""
    free = placement.free_resources(s, now, parts)  # without the nodes whose agents hold dispatch for a restart
    blocked: set[str] = set()
    plans: list[tuple[int, list[str]]] = []
    memo: dict = {}
    if index is not None:
        order = index.sync(s).pending_in_order(parts)
        memo["running_ids"] = index.running  # what limits.py counts usage from, instead of every job
        for partition, job_id in order:
            if _plan_job(s, s.jobs[job_id], now, memo, free, plans, parts, blockers):
                order.send(partition)
        return plans
    for job_id in pending_in_order(s, parts):
        job = s.jobs[job_id]
        partition = placement.job_partition(job["spec"])
        if partition not in blocked and _plan_job(s, job, now, memo, free, plans, parts, blockers):
            blocked.add(partition)
    return plans


def _plan_job(
    s: ClusterState,
    job: dict[str, Any],
    now: float,
    memo: dict,
    free: dict,
    plans: list,
    parts: Any = None,
    blockers: list | None = None,
) -> bool:
    """Plan what of one pending job starts now; True when it does not fit (it blocks its partition)."""
    job_id = job["job_id"]
    if eligibility.waiting_reason(s, job, now, memo) is not None:
        return False
    if parts is not None:
        reason = partitions.waiting_reason(parts, s, job["spec"], memo)
        if reason is not None:
            return reason in partitions.PARTITION_WIDE
    starts = 1
    if job.get("array_pending"):
        starts = len(parse_array_ranges(job["array_pending"], "array_pending"))
        limit = job.get("array_max_running") or 0
        if limit:
            starts = min(starts, limit - s.array_running(job_id))
    for n in range(starts):
        if n and limits.waiting_reason(s, job, memo) is not None:
            return False  # the array's next task would go over a limit its last one reached
        chosen = placement.choose_nodes(s, job, free)
        if chosen is None:
            if blockers is not None:
                blockers.append(job_id)
            return True
        placement.take(job, chosen, free)
        limits.charge(s, job, memo)  # the next job of this plan counts this start against its limits
        plans.append((job_id, chosen))
    return False
