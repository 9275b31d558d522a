"""The accounting schema and its migrations: numbered, applied once, in order, roll forward only.

`spur_schema_version` holds one row per applied migration. migrate() takes a session advisory lock
with a fixed key, so when several controllers start at once exactly one applies each migration and
the others wait, then find nothing to do. Each migration runs in its own transaction together with
its version row: a failed migration leaves the schema exactly as it was before it.

Never edit a released migration; append a new one. A migration must keep the previous release
working on an open connection (add columns with defaults, never drop or rename), because during a
rolling upgrade the old leader still writes while the first upgraded controller migrates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from spur_hpc.accounting.errors import AccountingUnavailable, MigrationError, SchemaTooNewError

log = logging.getLogger("spurctld.accounting")

# pg_advisory_lock key shared by every release: ASCII "spurmigr". Never change it, or two releases
# could migrate at the same time.
MIGRATION_LOCK_KEY = 0x737075726D696772
LOCK_WAIT_SECS = 120

VERSION_TABLE = "spur_schema_version"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "clusters and job records",
        """
        CREATE TABLE spur_clusters (
            cluster_id  text PRIMARY KEY,
            name        text NOT NULL DEFAULT '',
            first_seen  timestamptz NOT NULL DEFAULT now(),
            last_seen   timestamptz NOT NULL DEFAULT now()
        );
        -- One row per job of a cluster. cluster_id is part of the key: a re-bootstrapped cluster counts
        -- job ids from 1 again and must not overwrite an earlier cluster's history.
        CREATE TABLE spur_jobs (
            cluster_id      text        NOT NULL,
            job_id          bigint      NOT NULL,
            attempt         integer     NOT NULL DEFAULT 0,
            record_version  bigint      NOT NULL,
            name            text        NOT NULL DEFAULT '',
            "user"          text        NOT NULL DEFAULT '',
            uid             bigint,
            gid             bigint,
            account         text        NOT NULL DEFAULT '',
            partition       text        NOT NULL DEFAULT '',
            state           text        NOT NULL,
            reason          text        NOT NULL DEFAULT '',
            exit_code       integer     NOT NULL DEFAULT 0,
            signal          integer     NOT NULL DEFAULT 0,
            submit_time     timestamptz,
            start_time      timestamptz,
            end_time        timestamptz,
            nodes           text        NOT NULL DEFAULT '',
            cpus            integer,
            req_nodes       integer     NOT NULL DEFAULT 1,
            tasks           integer     NOT NULL DEFAULT 1,
            cpus_per_task   integer     NOT NULL DEFAULT 1,
            memory_mb       bigint,
            time_limit_secs bigint      NOT NULL DEFAULT 0,
            work_dir        text        NOT NULL DEFAULT '',
            updated_at      timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (cluster_id, job_id)
        );
        -- sacct selects by time window and by user.
        CREATE INDEX spur_jobs_submit_time ON spur_jobs (submit_time);
        CREATE INDEX spur_jobs_end_time ON spur_jobs (end_time);
        CREATE INDEX spur_jobs_user ON spur_jobs ("user", submit_time);
        """,
    ),
    Migration(
        2,
        "array tasks, the spec fields sacct shows, and job steps",
        """
        -- Additive only: a controller of the previous release keeps writing spur_jobs on its open
        -- connection (its COPY names the old columns; these take their defaults).
        ALTER TABLE spur_jobs
            ADD COLUMN array_job_id      bigint      NOT NULL DEFAULT 0,
            ADD COLUMN array_task_id     bigint,
            ADD COLUMN array_pending     text        NOT NULL DEFAULT '',
            ADD COLUMN array_max_running integer     NOT NULL DEFAULT 0,
            ADD COLUMN detail_version    bigint      NOT NULL DEFAULT 0,
            ADD COLUMN "comment"         text        NOT NULL DEFAULT '',
            ADD COLUMN wckey             text        NOT NULL DEFAULT '',
            ADD COLUMN qos               text        NOT NULL DEFAULT '',
            ADD COLUMN constraints       text        NOT NULL DEFAULT '',
            ADD COLUMN req_nodelist      text        NOT NULL DEFAULT '',
            ADD COLUMN exc_nodelist      text        NOT NULL DEFAULT '',
            ADD COLUMN restart_count     integer     NOT NULL DEFAULT 0,
            ADD COLUMN eligible_time     timestamptz,
            ADD COLUMN std_out           text        NOT NULL DEFAULT '',
            ADD COLUMN std_err           text        NOT NULL DEFAULT '';
        -- sacct -j N lists every task of array N; --name is snakemake's status poll.
        CREATE INDEX spur_jobs_array ON spur_jobs (cluster_id, array_job_id) WHERE array_job_id <> 0;
        CREATE INDEX spur_jobs_name ON spur_jobs (name, submit_time);
        -- One row per step of a job (N.batch, N.0, N.1, ...), the latest attempt's.
        CREATE TABLE spur_steps (
            cluster_id      text        NOT NULL,
            job_id          bigint      NOT NULL,
            step_id         text        NOT NULL,
            attempt         integer     NOT NULL DEFAULT 0,
            record_version  bigint      NOT NULL,
            name            text        NOT NULL DEFAULT '',
            state           text        NOT NULL,
            exit_code       integer     NOT NULL DEFAULT 0,
            signal          integer     NOT NULL DEFAULT 0,
            nodes           text        NOT NULL DEFAULT '',
            tasks           integer     NOT NULL DEFAULT 1,
            cpus_per_task   integer     NOT NULL DEFAULT 1,
            cpus            integer,
            start_time      timestamptz,
            end_time        timestamptz,
            updated_at      timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (cluster_id, job_id, step_id)
        );
        """,
    ),
    Migration(
        3,
        "a requeued job's earlier runs",
        """
        -- spur_jobs holds a job's latest run; each earlier run of a requeued job is kept here, as slurmdbd keeps
        -- a REQUEUED record per run (sacct -D lists them). The trigger copies the row as it was when a started
        -- run is replaced by the next (the requeue clears the start, or a later attempt arrives), so a writer
        -- of any release keeps them. A migration that adds a column to spur_jobs adds it here too, in order.
        CREATE TABLE spur_job_runs (LIKE spur_jobs INCLUDING DEFAULTS);
        ALTER TABLE spur_job_runs ADD PRIMARY KEY (cluster_id, job_id, attempt);
        CREATE FUNCTION spur_keep_earlier_run() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            run spur_jobs%ROWTYPE;
        BEGIN
            IF OLD.start_time IS NOT NULL AND (NEW.attempt > OLD.attempt OR NEW.start_time IS NULL) THEN
                run := OLD;
                run.state := 'REQUEUED';
                -- The run ended when its record was replaced, unless it had ended before (a finished job requeued).
                run.end_time := coalesce(OLD.end_time, now());
                INSERT INTO spur_job_runs SELECT (run).* ON CONFLICT DO NOTHING;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER spur_jobs_keep_earlier_run BEFORE UPDATE ON spur_jobs
            FOR EACH ROW EXECUTE FUNCTION spur_keep_earlier_run();
        """,
    ),
    Migration(
        4,
        "who cancelled a job",
        """
        -- Slurm's requid: the authenticated uid of who cancelled the job (sacct: CANCELLED by UID); -1 when nobody
        -- did (it ended by itself, by its time limit, a node failure), and for the rows of a release before this.
        ALTER TABLE spur_jobs ADD COLUMN cancelled_by_uid integer NOT NULL DEFAULT -1;
        ALTER TABLE spur_job_runs ADD COLUMN cancelled_by_uid integer NOT NULL DEFAULT -1;
        """,
    ),
    Migration(
        5,
        "accounts, users, QOS and associations",
        """
        -- A copy of the controllers' replicated association store (controller/associations.py), written whole by
        -- the leader in one transaction when it changed (accounting/assocstore.py). The store stays the source of
        -- truth: these tables are what a report or an operator's SQL reads. spur_assoc_copies keeps, per cluster,
        -- the state's applied-record count of the copy, so an older leader's late copy never replaces a newer one.
        CREATE TABLE spur_assoc_copies (
            cluster_id  text PRIMARY KEY,
            applied     bigint      NOT NULL,
            copied_at   timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE spur_qos (
            cluster_id                text    NOT NULL,
            name                      text    NOT NULL,
            id                        bigint  NOT NULL,
            description               text    NOT NULL DEFAULT '',
            priority                  bigint  NOT NULL DEFAULT 0,
            preempt                   text[]  NOT NULL DEFAULT '{}',
            preempt_mode              text    NOT NULL DEFAULT '',
            grp_tres                  jsonb   NOT NULL DEFAULT '{}',
            grp_jobs                  integer NOT NULL DEFAULT -1,
            grp_submit_jobs           integer NOT NULL DEFAULT -1,
            max_jobs_per_user         integer NOT NULL DEFAULT -1,
            max_submit_jobs_per_user  integer NOT NULL DEFAULT -1,
            max_wall_secs             bigint  NOT NULL DEFAULT -1,
            max_tres_per_job          jsonb   NOT NULL DEFAULT '{}',
            max_tres_per_user         jsonb   NOT NULL DEFAULT '{}',
            usage_factor              double precision NOT NULL DEFAULT 1,
            flags                     text[]  NOT NULL DEFAULT '{}',
            PRIMARY KEY (cluster_id, name)
        );
        CREATE TABLE spur_accounts (
            cluster_id    text   NOT NULL,
            name          text   NOT NULL,
            description   text   NOT NULL DEFAULT '',
            organization  text   NOT NULL DEFAULT '',
            parent        text   NOT NULL DEFAULT '',
            coordinators  text[] NOT NULL DEFAULT '{}',
            PRIMARY KEY (cluster_id, name)
        );
        CREATE TABLE spur_users (
            cluster_id       text NOT NULL,
            name             text NOT NULL,
            default_account  text NOT NULL,
            admin_level      text NOT NULL DEFAULT 'None',
            default_wckey    text NOT NULL DEFAULT '',
            PRIMARY KEY (cluster_id, name)
        );
        CREATE TABLE spur_associations (
            cluster_id        text    NOT NULL,
            id                bigint  NOT NULL,
            account           text    NOT NULL,
            "user"            text    NOT NULL DEFAULT '',
            partition         text    NOT NULL DEFAULT '',
            parent_account    text    NOT NULL DEFAULT '',
            shares            integer NOT NULL DEFAULT 1,
            grp_tres          jsonb   NOT NULL DEFAULT '{}',
            grp_jobs          integer NOT NULL DEFAULT -1,
            grp_submit_jobs   integer NOT NULL DEFAULT -1,
            max_jobs          integer NOT NULL DEFAULT -1,
            max_submit_jobs   integer NOT NULL DEFAULT -1,
            max_wall_secs     bigint  NOT NULL DEFAULT -1,
            max_tres_per_job  jsonb   NOT NULL DEFAULT '{}',
            qos               text[]  NOT NULL DEFAULT '{}',
            default_qos       text    NOT NULL DEFAULT '',
            priority          bigint  NOT NULL DEFAULT 0,
            PRIMARY KEY (cluster_id, account, "user", partition)
        );
        """,
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version  # the newest schema this release knows


def _check_sequence(migrations: tuple[Migration, ...]) -> None:
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise AssertionError(f"migration {migration.version} is out of sequence (expected {expected})")


_check_sequence(MIGRATIONS)


def database_version(conn: psycopg.Connection) -> int:
    """The schema version of the database (0 when it has never been migrated)."""
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,)).fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}").fetchone()
    return int(row[0]) if row else 0


def check_schema(conn: psycopg.Connection, known: int = SCHEMA_VERSION) -> int:
    """The database's schema version; SchemaTooNewError when it is newer than this release knows."""
    version = database_version(conn)
    if version > known:
        raise SchemaTooNewError(version, known)
    return version


def migrate(
    conn: psycopg.Connection,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    applied_by: str = "",
) -> list[int]:
    """Bring the schema up to the newest migration; return the versions this call applied.

    conn must be in autocommit mode (each migration opens its own transaction). Raises
    SchemaTooNewError (database newer than `migrations`), MigrationError (a migration failed or the
    lock could not be had within LOCK_WAIT_SECS) or AccountingUnavailable (connection lost).
    """
    if not conn.autocommit:
        raise MigrationError("migrate() needs an autocommit connection: each migration is its own transaction")
    known = migrations[-1].version if migrations else 0
    try:
        _lock(conn)
        try:
            return _apply_pending(conn, migrations, known, applied_by)
        finally:
            if not conn.broken:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    except psycopg.Error as exc:
        if conn.broken or conn.closed:
            raise AccountingUnavailable(
                f"accounting database connection lost while migrating: {_one_line(exc)}"
            ) from None
        raise MigrationError(f"accounting schema migration failed: {_one_line(exc)}") from None


def _lock(conn: psycopg.Connection) -> None:
    # lock_timeout bounds the wait for a peer's migration; a session lock because migrations commit.
    conn.execute(f"SET lock_timeout = '{LOCK_WAIT_SECS}s'")
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
    except psycopg.errors.LockNotAvailable:
        raise MigrationError(
            f"another process held the accounting migration lock (pg_advisory_lock {MIGRATION_LOCK_KEY}) for "
            f"{LOCK_WAIT_SECS} s; find it with: SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
        ) from None
    finally:
        conn.execute("RESET lock_timeout")


def _apply_pending(
    conn: psycopg.Connection, migrations: tuple[Migration, ...], known: int, applied_by: str
) -> list[int]:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
        " version integer PRIMARY KEY,"
        " description text NOT NULL,"
        " applied_by text NOT NULL DEFAULT '',"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    current = check_schema(conn, known)
    applied = []
    for migration in migrations:
        if migration.version <= current:
            continue
        try:
            with conn.transaction():
                conn.execute(migration.sql)
                conn.execute(
                    f"INSERT INTO {VERSION_TABLE} (version, description, applied_by) VALUES (%s, %s, %s)",
                    (migration.version, migration.description, applied_by),
                )
        except psycopg.Error as exc:
            if conn.broken:
                raise  # migrate() reports a lost connection as AccountingUnavailable
            raise MigrationError(
                f"accounting schema migration {migration.version} ({migration.description}) failed and was rolled "
                f"back: {_one_line(exc)}"
            ) from None
        log.info("accounting schema migrated to version %d (%s)", migration.version, migration.description)
        applied.append(migration.version)
    return applied


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
