"""The controller's side of accounting: migrate at start, copy job records while leader, purge what is stored.

The replicated job table is the source of truth. While this controller leads, a background loop hands a
copy of it to the AccountingWriter, which writes whatever the database lacks; a database outage only
delays that. Finished jobs leave the replicated state (jobs_purge) after min_job_age_secs, and, when
accounting is on, only once their final record is in the database.
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
    check_schema,
    connect,
    migrate,
    query_jobs,
    settings_from_config,
)
from spur_hpc.conf import Config
from spur_hpc.controller import errors
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.steps import public_step
from spur_hpc.model import FINISHED_STATES

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
        self.min_job_age = float(conf.controller.min_job_age_secs)

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

    def _once(self) -> None:
        raft = self.service.raft
        if not raft.is_leader():
            if self.writer is not None:
                self.writer.close()  # another controller writes now; reconnect (and re-read) if we lead again
                self.writer = None
            return
        cluster_id, name, jobs = raft.read(
            lambda s: (s.cluster_id, s.cluster_name, [_job_copy(j) for j in s.jobs.values()])
        )
        if not cluster_id:
            return
        recorded: set[int] | None = None
        if self.settings is not None:
            if self.writer is None or self.writer.cluster_id != cluster_id:
                self.writer = AccountingWriter(self.settings, cluster_id=cluster_id, cluster_name=name)
            self.writer.reconcile(jobs)
            recorded = self.writer.recorded_job_ids_before(jobs, time.time() - self.min_job_age)
        self._purge(jobs, recorded)

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


def _job_copy(job: dict[str, Any]) -> dict[str, Any]:
    """What the writer reads of a job, copied under the state lock (the state machine changes records in place)."""
    out = dict(job)
    out["spec"] = dict(job["spec"])
    out["nodes"] = list(job["nodes"])
    # A step as readers see it: its record also holds the launch request (environment, I/O token).
    # A step cancelled because its job ended may still get its real end from its nodes: the writer must let
    # that replace the provisional row.
    out["steps"] = {
        step_id: dict(public_step(step), provisional=bool(step.get("ended_with_job")))
        for step_id, step in (job.get("steps") or {}).items()
    }
    return out
