"""The leader's accounting writer: brings the database up to date with the replicated job table.

The replicated job table is the source of truth and the database a copy that may lag. The writer keeps
a map job_id -> the record version it knows is stored (confirmed by a commit, or read back from the
database after each (re)connect), so reconcile() with the full job table writes only the jobs whose
version moved. Writes are idempotent (primary key (cluster_id, job_id), and a row is replaced only
by a strictly newer version), so a retry after a lost commit acknowledgement, or two leaders writing
during a leadership change, can neither duplicate nor regress a record.

While the database is down reconcile() returns at once (short connect timeout, no retry storm),
health() reports connected=False and the backlog, and the next reconcile() after it is back writes
everything outstanding: nothing is queued in memory that the replicated table does not already hold.

Steps (records.steps_of: the job's step records plus its batch step) go to spur_steps the same way, keyed by
(cluster_id, job_id, step_id), in the same pass and batches as their jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psycopg
from psycopg import sql

from spur_hpc import buildinfo
from spur_hpc.accounting import assocstore, migrations
from spur_hpc.accounting.connection import (
    DEFAULT_CONNECT_TIMEOUT_SECS,
    ConnectionSettings,
    check_url,
    connect,
    describe_error,
    scrub,
    settings_from_config,
)
from spur_hpc.accounting.errors import AccountingError, AccountingUnavailable
from spur_hpc.accounting.records import (
    COLUMNS,
    STEP_COLUMNS,
    job_row,
    record_version,
    row_version,
    step_row,
    step_version,
    steps_of,
)
from spur_hpc.conf import Config, ConfigError
from spur_hpc.model import FINISHED_STATES

log = logging.getLogger("spurctld.accounting")

DEFAULT_BATCH_SIZE = 5000  # rows per transaction: large enough for COPY to pay off, small enough to commit often
DEFAULT_RETRY_INTERVAL_SECS = 1.0
STATEMENT_TIMEOUT_SECS = 60


@dataclasses.dataclass(frozen=True)
class _Table:
    """How rows of one table are merged: COPY into a per-connection temporary table, then one INSERT ... ON
    CONFLICT (one round trip per batch instead of one per row). `newer` makes the upsert monotonic and the
    same version a no-op."""

    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    newer: str
    kept: tuple[tuple[str, str], ...] = ()  # (column, SQL of its new value) where a newer row must not just replace it

    @property
    def incoming(self) -> str:
        return f"{self.name}_incoming"

    def merge(self) -> sql.Composed:
        updated = [c for c in self.columns if c not in self.key]
        return sql.SQL(
            "INSERT INTO {table} AS j ({cols}) SELECT {cols} FROM {incoming} "
            "ON CONFLICT ({key}) DO UPDATE SET {updates}, updated_at = now() "
            "WHERE {newer} RETURNING j.job_id"
        ).format(
            table=sql.Identifier(self.name),
            cols=sql.SQL(", ").join(map(sql.Identifier, self.columns)),
            incoming=sql.Identifier(self.incoming),
            key=sql.SQL(", ").join(map(sql.Identifier, self.key)),
            updates=sql.SQL(", ").join(
                sql.SQL("{c} = {v}").format(c=sql.Identifier(c), v=sql.SQL(dict(self.kept).get(c, f"EXCLUDED.{c}")))
                for c in updated
            ),
            newer=sql.SQL(self.newer),
        )

    def copy(self) -> sql.Composed:
        return sql.SQL("COPY {incoming} ({cols}) FROM STDIN").format(
            incoming=sql.Identifier(self.incoming), cols=sql.SQL(", ").join(map(sql.Identifier, self.columns))
        )


_JOBS = _Table(
    "spur_jobs",
    COLUMNS,
    ("cluster_id", "job_id"),
    "(j.record_version, j.detail_version) < (EXCLUDED.record_version, EXCLUDED.detail_version)",
    # A pending job's eligibility is what the leader sees now, a started one's is its start's; a job that ended
    # without starting keeps what was seen while it waited (never eligible: sacct's window leaves it out).
    kept=(
        (
            "eligible_time",
            "CASE WHEN EXCLUDED.state = 'PENDING' OR EXCLUDED.start_time IS NOT NULL THEN EXCLUDED.eligible_time "
            "ELSE j.eligible_time END",
        ),
    ),
)
# One job's share of a pass: (job id, the job when its row is behind or None, its steps whose rows are behind).
_Due = tuple[int, Mapping[str, Any] | None, list[Mapping[str, Any]]]
_STEPS = _Table(
    "spur_steps", STEP_COLUMNS, ("cluster_id", "job_id", "step_id"), "j.record_version < EXCLUDED.record_version"
)


@dataclasses.dataclass
class _Status:
    connected: bool = False
    backlog: int = 0
    last_error: str = ""
    written_total: int = 0
    rejected: int = 0
    schema_version: int = 0
    last_success_time: float = 0.0  # wall clock of the last sync that left no backlog


class AccountingWriter:
    """Writes the controller's job records to PostgreSQL; one instance per leader term is fine.

    target is a Config ([accounting] database_url + password_file), a ConnectionSettings, or a URL
    (then password is the password, or None for a server that asks none).
    """

    def __init__(
        self,
        target: Config | ConnectionSettings | str,
        password: str | None = None,
        cluster_id: str = "",
        *,
        cluster_name: str = "",
        connect_timeout_secs: int = DEFAULT_CONNECT_TIMEOUT_SECS,
        retry_interval_secs: float = DEFAULT_RETRY_INTERVAL_SECS,
        batch_size: int = DEFAULT_BATCH_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not cluster_id:
            raise ValueError("AccountingWriter needs the cluster id (ClusterState.cluster_id)")
        if isinstance(target, Config):
            settings = settings_from_config(target)
            if settings is None:
                raise ConfigError("[accounting] database_url: empty, so accounting is off; do not start a writer")
            cluster_name = cluster_name or target.cluster.name
        elif isinstance(target, ConnectionSettings):
            settings = target
        else:
            check_url(target)
            settings = ConnectionSettings(url=target, password=password)
        self.settings = dataclasses.replace(settings, connect_timeout_secs=connect_timeout_secs)
        self.cluster_id = cluster_id
        self.cluster_name = cluster_name
        self.retry_interval_secs = retry_interval_secs
        self.batch_size = max(1, batch_size)
        self._clock = clock
        self._conn: psycopg.Connection | None = None
        self._known: dict[int, tuple[int, int]] = {}  # job_id -> row version known to be stored
        self._known_steps: dict[tuple[int, str], int] = {}  # (job_id, step_id) -> step version known to be stored
        self._known_trusted = False  # False until read back from the database after a (re)connect
        self._rejected: dict[Any, Any] = {}  # job_id or (job_id, step_id) -> version the database refused
        self._next_connect = 0.0
        self._io = threading.Lock()  # one database conversation at a time
        self._known_lock = threading.Lock()  # recorded_job_ids_before() must not wait for database I/O
        self._status_lock = threading.Lock()  # health() never waits for a slow database
        self._status = _Status()

    # ------------------------------------------------------------------ public API

    def open(self) -> bool:
        """Connect and migrate now (at controller start). False when the database is unreachable.

        Raises SchemaTooNewError (refuse to start: the schema is newer than this release) and
        MigrationError; a merely unreachable database is not fatal: the backlog waits for it.
        """
        with self._io:
            try:
                self._ensure_connection(ignore_retry_gate=True)
            except AccountingUnavailable as exc:
                self._failed(exc)
                return False
            except AccountingError as exc:
                self._set(last_error=scrub(str(exc), self.settings.password))
                raise
            return True

    def reconcile(self, jobs: Iterable[Mapping[str, Any]]) -> int:
        """Write every job whose stored version is behind; return how many rows changed. Given the FULL
        replicated job table by the periodic leader loop; never raises (an outage is in health()).

        Pass a consistent copy (or call it on the thread that owns the state): the dicts are read once,
        before any database I/O. Jobs missing from the table (purged) are forgotten here.
        """
        with self._io:
            latest = self._latest_by_id(jobs)
            with self._known_lock:
                self._known = {job_id: v for job_id, v in self._known.items() if job_id in latest}
                self._known_steps = {k: v for k, v in self._known_steps.items() if k[0] in latest}
            self._rejected = {
                k: v for k, v in self._rejected.items() if (k[0] if isinstance(k, tuple) else k) in latest
            }
            was_connected = self.health()["connected"]
            try:
                written = self._sync(latest)
            except AccountingUnavailable as exc:
                self._failed(exc)
                return 0
            except AccountingError as exc:
                message = scrub(str(exc), self.settings.password)
                if message != self.health()["last_error"]:
                    log.error("accounting: %s; job records are not written until this is fixed", message)
                self._set(connected=False, last_error=message)
                self._drop_connection()
                return 0
            if not was_connected:
                log.info("accounting database %s reachable; wrote %d job records", self.settings.describe(), written)
            return written

    def copy_associations(self, store: Mapping[str, Any], applied: int) -> bool:
        """Write the association store's copy (assocstore.write_store: whole, in one transaction) as of `applied`
        records. True when the database holds it now (written, or a copy as new was there); never raises: an
        outage is in health() and the copy waits for the next pass, as job records do."""
        with self._io:
            try:
                self._ensure_connection()
                assert self._conn is not None
                try:
                    assocstore.write_store(self._conn, self.cluster_id, applied, dict(store))
                except psycopg.Error as exc:
                    self._drop_connection()
                    raise self._unavailable(exc) from None
            except AccountingUnavailable as exc:
                self._failed(exc)
                return False
            except AccountingError as exc:
                self._set(connected=False, last_error=scrub(str(exc), self.settings.password))
                self._drop_connection()
                return False
            return True

    def health(self) -> dict[str, Any]:
        """connected, backlog, last_error, written_total (plus rejected, schema_version, last_success_time)."""
        with self._status_lock:
            return dataclasses.asdict(self._status)

    def recorded_job_ids_before(self, jobs: Iterable[Mapping[str, Any]], before: float) -> set[int]:
        """Ids of the given finished jobs that ended before `before` and whose final record is stored.

        Only these may be purged from the replicated state (jobs_purge keeps the others): a job's
        history, its steps included, must be in accounting before the controller forgets it.
        """
        with self._known_lock:
            known = dict(self._known)
            known_steps = dict(self._known_steps)
        return {
            int(job["job_id"])
            for job in jobs
            if job["state"] in FINISHED_STATES
            and 0 < float(job.get("end_time") or 0) < before
            and known.get(int(job["job_id"]), (0, 0))[0] >= record_version(job)
            and all(
                known_steps.get((int(job["job_id"]), str(step["step_id"])), 0) >= step_version(step)
                for step in steps_of(job)
            )
        }

    def close(self) -> None:
        with self._io:
            self._drop_connection()
            self._set(connected=False)

    # ------------------------------------------------------------------ the sync itself

    @staticmethod
    def _latest_by_id(jobs: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
        latest: dict[int, Mapping[str, Any]] = {}
        for job in jobs:
            job_id = int(job["job_id"])
            if job_id not in latest or record_version(job) > record_version(latest[job_id]):
                latest[job_id] = job
        return latest

    def _due(self, latest: Mapping[int, Mapping[str, Any]]) -> list[_Due]:
        """Per job with anything due: its id, the job when its row is behind (else None), its steps that are."""
        due = []
        for job_id, job in latest.items():
            version = row_version(job)
            job_due = version > self._known.get(job_id, (0, 0)) and self._rejected.get(job_id) != version
            steps = []
            for step in steps_of(job):
                key, step_v = (job_id, str(step["step_id"])), step_version(step)
                if step_v > self._known_steps.get(key, 0) and self._rejected.get(key) != step_v:
                    steps.append(step)
            if job_due or steps:
                due.append((job_id, job if job_due else None, steps))
        return due

    def _sync(self, latest: Mapping[int, Mapping[str, Any]]) -> int:
        due = self._due(latest)
        self._set(backlog=len(due))  # counted before connecting, so an outage shows its backlog
        self._ensure_connection()
        conn = self._conn
        assert conn is not None
        try:
            if not self._known_trusted:
                self._read_back(conn, list(latest))
                due = self._due(latest)
                self._set(backlog=len(due))
            written = 0
            for start in range(0, len(due), self.batch_size):
                chunk = due[start : start + self.batch_size]
                changed = self._write_chunk(conn, chunk)
                written += changed
                with self._status_lock:  # per committed batch: a later failure does not undo these
                    self._status.written_total += changed
                    self._status.backlog = len(due) - start - len(chunk)
        except psycopg.Error as exc:
            self._drop_connection()
            raise self._unavailable(exc) from None
        self._set(last_error="", last_success_time=time.time())
        return written

    def _read_back(self, conn: psycopg.Connection, job_ids: list[int]) -> None:
        """After a (re)connect, learn what the database really holds (it may have been restored or written by
        another leader) instead of trusting this process's memory."""
        # bigint[]: an untyped list of small ints would be sent as smallint[] and miss the key index.
        rows = conn.execute(
            "SELECT job_id, record_version, detail_version FROM spur_jobs "
            "WHERE cluster_id = %s AND job_id = ANY(%s::bigint[])",
            (self.cluster_id, job_ids),
        ).fetchall()
        step_rows = conn.execute(
            "SELECT job_id, step_id, record_version FROM spur_steps "
            "WHERE cluster_id = %s AND job_id = ANY(%s::bigint[])",
            (self.cluster_id, job_ids),
        ).fetchall()
        with self._known_lock:
            self._known = {int(job_id): (int(version), int(detail)) for job_id, version, detail in rows}
            self._known_steps = {(int(job_id), step_id): int(version) for job_id, step_id, version in step_rows}
        self._known_trusted = True

    def _write_chunk(self, conn: psycopg.Connection, chunk: list[_Due]) -> int:
        """Write the due jobs and steps of a chunk; return how many job rows changed."""
        rows = [job_row(self.cluster_id, job) for _job_id, job, _steps in chunk if job is not None]
        steps = [step_row(self.cluster_id, job_id, step) for job_id, _job, due in chunk for step in due]
        changed = self._merge_all(conn, _JOBS, rows) if rows else 0
        if steps:
            self._merge_all(conn, _STEPS, steps)
        with self._known_lock:
            for row in rows:
                job_id, version = row[1], (row[3], row[COLUMNS.index("detail_version")])
                if self._rejected.get(job_id) != version:
                    self._known[job_id] = max(self._known.get(job_id, (0, 0)), version)
            for row in steps:
                key, version = (row[1], row[2]), row[4]
                if self._rejected.get(key) != version:
                    self._known_steps[key] = max(self._known_steps.get(key, 0), version)
        return changed

    def _merge_all(self, conn: psycopg.Connection, table: _Table, rows: list[tuple[Any, ...]]) -> int:
        try:
            return self._merge(conn, table, rows)
        except (psycopg.DataError, psycopg.IntegrityError):
            if conn.broken:
                raise
            # One bad row must not block every other record forever: find it row by row.
            return self._merge_one_by_one(conn, table, rows)

    def _merge(self, conn: psycopg.Connection, table: _Table, rows: list[tuple[Any, ...]]) -> int:
        with conn.transaction(), conn.cursor() as cur:
            with cur.copy(table.copy()) as copy:
                for row in rows:
                    copy.write_row(row)
            cur.execute(table.merge())
            return len(cur.fetchall())

    def _merge_one_by_one(self, conn: psycopg.Connection, table: _Table, rows: list[tuple[Any, ...]]) -> int:
        changed = 0
        for row in rows:
            try:
                changed += self._merge(conn, table, [row])
            except (psycopg.DataError, psycopg.IntegrityError) as exc:
                if conn.broken:
                    raise
                if table is _STEPS:
                    what, key, version = f"step {row[1]}.{row[2]}", (row[1], row[2]), row[4]
                else:
                    what, key, version = f"job {row[1]}", row[1], (row[3], row[COLUMNS.index("detail_version")])
                self._rejected[key] = version
                with self._status_lock:
                    self._status.rejected = len(self._rejected)
                log.error(
                    "accounting: the database refused %s (record version %s): %s; it is skipped until it changes",
                    what,
                    row[4] if table is _STEPS else row[3],
                    describe_error(exc, self.settings.password),
                )
        return changed

    # ------------------------------------------------------------------ connection

    def _ensure_connection(self, ignore_retry_gate: bool = False) -> None:
        if self._conn is not None and not self._conn.broken:
            return
        self._drop_connection()
        now = self._clock()
        if not ignore_retry_gate and now < self._next_connect:
            # Fail fast between attempts: the leader's loop must not wait on a dead database every tick.
            raise AccountingUnavailable(self._status.last_error or "accounting database unreachable")
        self._next_connect = now + self.retry_interval_secs
        conn = connect(self.settings)
        try:
            migrations.migrate(conn, applied_by=buildinfo.describe("spurctld"))
            version = migrations.check_schema(conn)
            conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT_SECS}s'")
            conn.execute(
                "INSERT INTO spur_clusters AS c (cluster_id, name) VALUES (%s, %s) ON CONFLICT (cluster_id) DO UPDATE "
                "SET last_seen = now(), name = CASE WHEN EXCLUDED.name <> '' THEN EXCLUDED.name ELSE c.name END",
                (self.cluster_id, self.cluster_name),
            )
            for table in (_JOBS, _STEPS):
                conn.execute(
                    sql.SQL("CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS").format(
                        sql.Identifier(table.incoming), sql.Identifier(table.name)
                    )
                )
        except psycopg.Error as exc:
            conn.close()
            raise self._unavailable(exc) from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._known_trusted = False
        self._set(connected=True, schema_version=version)

    def _unavailable(self, exc: psycopg.Error) -> AccountingUnavailable:
        message = f"accounting database {self.settings.describe()}: {describe_error(exc, None)}"
        return AccountingUnavailable(scrub(message, self.settings.password))

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def _failed(self, exc: AccountingUnavailable) -> None:
        message = scrub(str(exc), self.settings.password)
        with self._status_lock:
            was_connected = self._status.connected
            first = was_connected or not self._status.last_error
            self._status.connected = False
            self._status.last_error = message
            backlog = self._status.backlog
        if first:
            log.warning("%s; %d job records wait for it", message, backlog)
        else:
            log.debug("%s; %d job records wait for it", message, backlog)

    def _set(self, **fields: Any) -> None:
        with self._status_lock:
            for key, value in fields.items():
                setattr(self._status, key, value)
