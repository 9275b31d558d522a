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
from spur_hpc.accounting import migrations
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
from spur_hpc.accounting.records import COLUMNS, job_row, record_version
from spur_hpc.conf import Config, ConfigError
from spur_hpc.model import FINISHED_STATES

log = logging.getLogger("spurctld.accounting")

DEFAULT_BATCH_SIZE = 5000  # rows per transaction: large enough for COPY to pay off, small enough to commit often
DEFAULT_RETRY_INTERVAL_SECS = 1.0
STATEMENT_TIMEOUT_SECS = 60

_INCOMING = "spur_jobs_incoming"
_UPDATED = [c for c in COLUMNS if c not in ("cluster_id", "job_id")]

# COPY into a per-connection temporary table, then one INSERT ... ON CONFLICT: one round trip per
# batch instead of one per row. The WHERE makes the upsert monotonic and the same version a no-op.
_MERGE = sql.SQL(
    "INSERT INTO spur_jobs AS j ({cols}) SELECT {cols} FROM {incoming} "
    "ON CONFLICT (cluster_id, job_id) DO UPDATE SET {updates}, updated_at = now() "
    "WHERE j.record_version < EXCLUDED.record_version "
    "RETURNING j.job_id"
).format(
    cols=sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
    incoming=sql.Identifier(_INCOMING),
    updates=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in _UPDATED),
)
_COPY = sql.SQL("COPY {incoming} ({cols}) FROM STDIN").format(
    incoming=sql.Identifier(_INCOMING), cols=sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
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
        self._known: dict[int, int] = {}  # job_id -> record version known to be stored
        self._known_trusted = False  # False until read back from the database after a (re)connect
        self._rejected: dict[int, int] = {}  # job_id -> version the database refused (bad data), not retried
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
            self._rejected = {job_id: v for job_id, v in self._rejected.items() if job_id in latest}
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

    def health(self) -> dict[str, Any]:
        """connected, backlog, last_error, written_total (plus rejected, schema_version, last_success_time)."""
        with self._status_lock:
            return dataclasses.asdict(self._status)

    def recorded_job_ids_before(self, jobs: Iterable[Mapping[str, Any]], before: float) -> set[int]:
        """Ids of the given finished jobs that ended before `before` and whose final record is stored.

        Only these may be purged from the replicated state (jobs_purge keeps the others): a job's
        history must be in accounting before the controller forgets it.
        """
        with self._known_lock:
            known = dict(self._known)
        return {
            int(job["job_id"])
            for job in jobs
            if job["state"] in FINISHED_STATES
            and 0 < float(job.get("end_time") or 0) < before
            and known.get(int(job["job_id"]), 0) >= record_version(job)
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

    def _due(self, latest: Mapping[int, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        due = []
        for job_id, job in latest.items():
            version = record_version(job)
            if version > self._known.get(job_id, 0) and self._rejected.get(job_id) != version:
                due.append(job)
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
        rows = conn.execute(
            # bigint[]: an untyped list of small ints would be sent as smallint[] and miss the key index.
            "SELECT job_id, record_version FROM spur_jobs WHERE cluster_id = %s AND job_id = ANY(%s::bigint[])",
            (self.cluster_id, job_ids),
        ).fetchall()
        with self._known_lock:
            self._known = {int(job_id): int(version) for job_id, version in rows}
        self._known_trusted = True

    def _write_chunk(self, conn: psycopg.Connection, chunk: list[Mapping[str, Any]]) -> int:
        rows = [job_row(self.cluster_id, job) for job in chunk]
        try:
            changed = self._merge(conn, rows)
        except (psycopg.DataError, psycopg.IntegrityError):
            if conn.broken:
                raise
            # One bad row must not block every other record forever: find it row by row.
            changed = self._merge_one_by_one(conn, rows)
        with self._known_lock:
            for row in rows:
                job_id, version = row[1], row[3]
                if self._rejected.get(job_id) != version:
                    self._known[job_id] = max(self._known.get(job_id, 0), version)
        return changed

    def _merge(self, conn: psycopg.Connection, rows: list[tuple[Any, ...]]) -> int:
        with conn.transaction(), conn.cursor() as cur:
            with cur.copy(_COPY) as copy:
                for row in rows:
                    copy.write_row(row)
            cur.execute(_MERGE)
            return len(cur.fetchall())

    def _merge_one_by_one(self, conn: psycopg.Connection, rows: list[tuple[Any, ...]]) -> int:
        changed = 0
        for row in rows:
            try:
                changed += self._merge(conn, [row])
            except (psycopg.DataError, psycopg.IntegrityError) as exc:
                if conn.broken:
                    raise
                self._rejected[row[1]] = row[3]
                with self._status_lock:
                    self._status.rejected = len(self._rejected)
                log.error(
                    "accounting: the database refused job %s (record version %s): %s; it is skipped until it changes",
                    row[1],
                    row[3],
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
            conn.execute(
                sql.SQL("CREATE TEMP TABLE {} (LIKE spur_jobs INCLUDING DEFAULTS) ON COMMIT DELETE ROWS").format(
                    sql.Identifier(_INCOMING)
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
