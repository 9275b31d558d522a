"""The controller's side of accounting: migrate at start, copy job records while leader, purge what is stored.

The replicated job table is the source of truth. While this controller leads, a background loop hands a
copy of it to the AccountingWriter, which writes whatever the database lacks; a database outage only
delays that. Finished jobs leave the replicated state (jobs_purge) after min_job_age_secs, and, when
accounting is on, only once their final record is in the database. The leader writes what is due before it
answers sacct (history), so sacct shows a job's end as soon as squeue does, as slurmdbd does.

What the writer reads of a job adds two facts the record does not keep, as slurmdbd records them: whether a
pending job is eligible now (held, waiting on a dependency, its --begin or its array's throttle: not yet, and
sacct's time window leaves it out), and a job without --mem asks for a whole node's memory (ReqMem).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from spur_hpc.accounting import (
    AccountingError,
    AccountingUnavailable,
    AccountingWriter,
    InvalidQuery,
    SchemaTooNewError,
    assocstore,
    check_schema,
    connect,
    migrate,
    query_jobs,
    settings_from_config,
)
from spur_hpc.conf import Config
from spur_hpc.controller import errors, limits
from spur_hpc.controller.eligibility import waiting_reason
from spur_hpc.controller.placement import node_partitions
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.steps import public_step
from spur_hpc.model import FINISHED_STATES, PENDING

log = logging.getLogger("spurctld.accounting")

RECONCILE_SECS = 1.0
PURGE_EVERY_SECS = 30.0


class AccountingLink:
    def __init__(self, conf: Config) -> None:
        self.conf = conf
        self.settings = settings_from_config(conf)  # ConfigError on a bad [accounting] section
        self.writer: AccountingWriter | None = None
        self.service: ControllerService | None = None
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.last_purge = 0.0
        self.copied_at = -1  # the state's applied-record count at the last copy the writer was given
        self.min_job_age = float(conf.controller.min_job_age_secs)
        # The association store's tables the database last got (assoc_apply replaces them whole, so the same
        # objects mean nothing changed; holding them keeps their ids from being reused).
        self.store_copied: tuple[Any, ...] | None = None

    @property
    def enabled(self) -> bool:
        return self.settings is not None

    def migrate_at_start(self, build: str) -> None:
        """Bring the schema up to date (under the advisory lock); SchemaTooNewError refuses the start.

        A database that cannot be reached is not fatal: the records wait in the replicated state."""
        if self.settings is None:
            return
        try:
            with connect(self.settings) as conn:
                check_schema(conn)
                applied = migrate(conn, applied_by=build)
        except SchemaTooNewError:
            raise
        except AccountingUnavailable as exc:
            log.warning("accounting database not reachable at start (%s); job records wait until it is", exc)
            return
        except AccountingError as exc:
            raise errors.Unavailable(str(exc)) from None
        if applied:
            log.info("accounting schema migrated to version %s", applied[-1])

    def start(self, service: ControllerService) -> None:
        self.service = service
        self.thread = threading.Thread(target=self._loop, name="accounting", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        if self.writer is not None:
            self.writer.close()

    def health(self) -> dict[str, Any]:
        if self.settings is None:
            return {"enabled": False}
        if self.writer is None:
            return {"enabled": True, "connected": False, "backlog": 0, "active": False, "last_error": ""}
        return {"enabled": True, "active": True, **self.writer.health()}

    def history(self, cluster_id: str | None, **filters: Any) -> list[dict[str, Any]]:
        """Job records from the database for sacct (any controller answers; reads need no leader)."""
        if self.settings is None:
            raise errors.Conflict(
                "accounting is not configured on this controller ([accounting] database_url is "
                "empty); only jobs still held by the controllers can be listed"
            )
        self._write_due()
        try:
            with connect(self.settings) as conn:
                return query_jobs(conn, cluster_id=cluster_id, **filters)
        except InvalidQuery as exc:
            raise errors.InvalidArgument(str(exc)) from None
        except AccountingError as exc:
            raise errors.Unavailable(f"accounting database: {exc}") from None

    # -------------------------------------------------------------- the leader's loop

    def _loop(self) -> None:
        while not self.stopping.wait(RECONCILE_SECS):
            try:
                self._once()
            except errors.ControllerError as exc:
                log.info("accounting pass deferred: %s", exc)
            except Exception:
                log.exception("accounting pass failed")

    def _write_due(self) -> None:
        """Before a history query on the leader: write what the loop has not yet (a failure only means the
        answer is as old as the last pass)."""
        writer = self.writer
        if writer is None or self.service is None or not self.service.raft.is_leader():
            return
        try:
            if self.service.raft.read(lambda s: s.applied) == self.copied_at:
                return  # nothing happened since the last pass (a pass comes every RECONCILE_SECS anyway)
            cluster_id, _name, jobs = self._jobs()
        except errors.ControllerError:
            return
        if cluster_id == writer.cluster_id:
            writer.reconcile(jobs)

    def _jobs(self) -> tuple[str, str, list[dict[str, Any]]]:
        now, memo = time.time(), {}  # one memo per pass: each dependee is looked at once
        facts = _Facts(now, memo, getattr(self.service, "partitions", None))

        def copy(s: Any) -> tuple[str, str, list[dict[str, Any]]]:
            self.copied_at = s.applied
            return s.cluster_id, s.cluster_name, [_job_copy(j, s, facts) for j in s.jobs.values()]

        return self.service.raft.read(copy)

    def _once(self) -> None:
        raft = self.service.raft
        if not raft.is_leader():
            if self.writer is not None:
                self.writer.close()  # another controller writes now; reconnect (and re-read) if we lead again
                self.writer = None
            return
        if self.settings is None and time.monotonic() - self.last_purge < PURGE_EVERY_SECS:
            # no database to write to: the copy only feeds the purge, which is not due. (Copying 10,000 jobs
            # under the state lock every second was 15 % of an idle leader's time and held up each squeue.)
            return
        cluster_id, name, jobs = self._jobs()
        if not cluster_id:
            return
        recorded: set[int] | None = None
        if self.settings is not None:
            if self.writer is None or self.writer.cluster_id != cluster_id:
                self.writer = AccountingWriter(self.settings, cluster_id=cluster_id, cluster_name=name)
            self.writer.reconcile(jobs)
            self._copy_store()
            recorded = self.writer.recorded_job_ids_before(jobs, time.time() - self.min_job_age)
        self._purge(jobs, recorded)

    def _copy_store(self) -> None:
        """The association store (WAL level 5) to the database when it changed since the last copy."""

        def tables(s: Any) -> tuple[int, tuple[Any, ...]] | None:
            return None if s.assoc is None else (s.applied, tuple(s.assoc[t] for t in assocstore.TABLES))

        found = self.service.raft.read(tables)
        if found is None:
            return
        applied, current = found
        if self.store_copied is not None and all(a is b for a, b in zip(current, self.store_copied, strict=True)):
            return
        if self.writer.copy_associations(dict(zip(assocstore.TABLES, current, strict=True)), applied):
            self.store_copied = current

    def _purge(self, jobs: list[dict[str, Any]], recorded: set[int] | None) -> None:
        now = time.monotonic()
        if now - self.last_purge < PURGE_EVERY_SECS:
            return
        self.last_purge = now
        before = time.time() - self.min_job_age
        old = [j["job_id"] for j in jobs if j["state"] in FINISHED_STATES and 0 < j["end_time"] < before]
        if not old:
            return
        keep = [] if recorded is None else [j for j in old if j not in recorded]
        if len(keep) == len(old):
            return
        result = self.service.write("jobs_purge", before=before, keep=keep)
        log.info(
            "forgot %s finished jobs older than %.0f s (%d kept until accounting has them)",
            result.get("purged"),
            self.min_job_age,
            len(keep),
        )


class _Facts:
    """What one pass reads besides the jobs: the leader's clock, the memo its eligibility answers share, and the
    partition table (which nodes a pending job's partition has)."""

    __slots__ = ("now", "memo", "partitions", "partition_memory")

    def __init__(self, now: float, memo: dict, partitions: Any) -> None:
        self.now, self.memo, self.partitions = now, memo, partitions
        self.partition_memory: dict[str, int] = {}  # worked out once per pass, not once per waiting job


def _job_copy(job: dict[str, Any], s: Any = None, facts: _Facts | None = None) -> dict[str, Any]:
    """What the writer reads of a job, copied under the state lock (the state machine changes records in place).
    With the state s: a pending job that may not start yet has no eligible time, and a job without --mem asks
    for the memory of a node (its own nodes', or its partition's largest), as Slurm records both."""
    out = dict(job)
    out["spec"] = dict(job["spec"])
    out["nodes"] = list(job["nodes"])
    if s is not None and facts is not None:
        # A job that ended before it started (scancel of a held job) may be first written now: judge it alike.
        never_started = job["state"] == PENDING or not job.get("start_time")
        reason = waiting_reason(s, job, facts.now, facts.memo) if never_started else None
        if reason is not None and reason not in limits.REASONS:  # a job a limit holds back is eligible (Slurm)
            out["eligible"] = False  # records.job_row: NEVER_ELIGIBLE
        if not out["spec"].get("memory_mb"):
            out["spec"]["memory_mb"] = _node_memory(s, job, facts)
    # A step as readers see it: its record also holds the launch request (environment, I/O token).
    # A step cancelled because its job ended may still get its real end from its nodes: the writer must let
    # that replace the provisional row.
    out["steps"] = {
        step_id: dict(public_step(step), provisional=bool(step.get("ended_with_job")))
        for step_id, step in (job.get("steps") or {}).items()
    }
    return out


def _node_memory(s: Any, job: dict[str, Any], facts: _Facts) -> int:
    """The memory a job without --mem gets on each node (all of it, DefMemPerNode=UNLIMITED): the least of its
    nodes' while it holds nodes, else the largest of its partition's nodes (0 when none is known)."""
    nodes = s.nodes
    if job["nodes"]:
        return min((int(nodes[n].get("memory_mb") or 0) for n in job["nodes"] if n in nodes), default=0)
    partition = job["spec"].get("partition") or "default"
    if partition not in facts.partition_memory:
        members = (n for n in nodes.values() if partition in node_partitions(s, n, facts.partitions))
        facts.partition_memory[partition] = max((int(n.get("memory_mb") or 0) for n in members), default=0)
    return facts.partition_memory[partition]
