"""Indexes kept beside the replicated state, following it record by record (scheduler.JobIndex, limits.SubmitCounts).

Not replicated: every member builds its own. note() runs under the state lock right after each applied record
(SpurRaft.add_state_listener) and collects the jobs the record touched; the index's own sync, also under the
lock, updates just those. Whenever it cannot tell which jobs a record changed (an op without a job id that is not
in the index's `no_job_ops`, a purge, a snapshot loaded, a record it did not see) it reads every job once instead.
"""

from __future__ import annotations

from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState


class JobTracker:
    # Ops that change nothing this index holds; any other op without a job id makes it read every job again.
    no_job_ops: frozenset[str] = frozenset()
    # Past this many touched jobs since the last sync, one pass over every job is cheaper (None: never).
    rebuild_after: int | None = None

    def __init__(self) -> None:
        self._state: Any = None
        self._applied = -1  # s.applied when the index was last brought up to date
        self._seen = 0  # records noted since
        self._touched: set[int] = set()
        self._rebuild = True
        self.rebuilds = 0

    def note(self, s: ClusterState, record: Any, result: Any) -> None:
        self._seen += 1
        if self._rebuild or s is not self._state:
            self._rebuild = True
            return
        op = record.get("op") if isinstance(record, dict) else None
        if op in self.no_job_ops:
            return
        fields = (record.get("job_id"), record.get("array_job_id"), (result or {}).get("job_id"))
        ids = [v for v in fields if isinstance(v, int)]
        if not ids or op == "jobs_purge":
            self._rebuild = True
            return
        for job_id in ids:
            self._touched.add(job_id)
            self._touched.update(s.array_tasks.get(job_id, ()))  # an op on an array reaches its tasks
        if self.rebuild_after is not None and len(self._touched) > self.rebuild_after:
            self._rebuild = True

    def stale(self, s: ClusterState) -> bool:
        """Whether the next sync must read every job (then call rebuilt(s) after it)."""
        return self._rebuild or s is not self._state or s.applied != self._applied + self._seen

    def rebuilt(self, s: ClusterState) -> None:
        self._state, self._rebuild = s, False
        self.rebuilds += 1

    def touched(self) -> set[int]:
        return self._touched

    def caught_up(self, s: ClusterState) -> None:
        self._touched = set()
        self._applied, self._seen = s.applied, 0
