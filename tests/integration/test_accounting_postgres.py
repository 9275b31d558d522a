"""Accounting against a real PostgreSQL started by the tests (tests/pg.py)."""

from __future__ import annotations

import logging
import multiprocessing
import time
from datetime import UTC, datetime

import psycopg
import pytest

import pg
from pg import Database, private_server
from spur_hpc import conf
from spur_hpc.accounting import (
    SCHEMA_VERSION,
    AccountingUnavailable,
    AccountingWriter,
    ConnectionSettings,
    MigrationError,
    SchemaTooNewError,
    clusters,
    connect,
    migrate,
    query_jobs,
    record_version,
)
from spur_hpc.accounting.migrations import MIGRATION_LOCK_KEY, MIGRATIONS, Migration

pg_server, pg_database = pg.pg_server, pg.pg_database  # pytest fixtures, bound by name: one server per session

CLUSTER = "11111111-aaaa-4bbb-8ccc-000000000001"
OTHER_CLUSTER = "22222222-aaaa-4bbb-8ccc-000000000002"
T0 = 1_700_000_000.0


def job(job_id: int, state: str = "PENDING", attempt: int = 0, **fields: object) -> dict:
    record = {
        "job_id": job_id,
        "spec": {"name": f"job{job_id}", "user": "alice", "uid": 1000, "account": "physics", "partition": "batch",
                 "nodes": 1, "tasks": 1, "cpus_per_task": 2, "memory_mb": 512, "work_dir": "/home/alice"},
        "state": state,
        "reason": "None",
        "exit_code": 0,
        "signal": 0,
        "submit_time": T0 + job_id,
        "start_time": 0.0,
        "end_time": 0.0,
        "nodes": [],
        "attempt": attempt,
    }
    if state != "PENDING" or attempt:
        record["start_time"] = T0 + job_id + 10
        record["nodes"] = ["node1"]
    if state not in ("PENDING", "RUNNING"):
        record["end_time"] = T0 + job_id + 100
    if state == "PENDING" and attempt:
        record.update(start_time=0.0, nodes=[])  # requeued: the state machine clears the failed start
    record.update(fields)
    return record


def writer_for(db: Database, cluster_id: str = CLUSTER, **kwargs: object) -> AccountingWriter:
    kwargs.setdefault("retry_interval_secs", 0)
    return AccountingWriter(db.url, db.password, cluster_id, **kwargs)


def settings_for(db: Database) -> ConnectionSettings:
    return ConnectionSettings(url=db.url, password=db.password)


def stored(db: Database, cluster_id: str = CLUSTER) -> dict[int, tuple]:
    with db.admin_connect() as conn:
        rows = conn.execute(
            "SELECT job_id, state, attempt, record_version, updated_at, xmin::text FROM spur_jobs "
            "WHERE cluster_id = %s ORDER BY job_id",
            (cluster_id,),
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


def version_rows(db: Database) -> list[tuple]:
    with db.admin_connect() as conn:
        return conn.execute("SELECT version, description FROM spur_schema_version ORDER BY version").fetchall()


# ---------------------------------------------------------------------- migrations


def test_migrations_apply_once(pg_database: Database) -> None:
    with connect(settings_for(pg_database)) as conn:
        assert migrate(conn) == [m.version for m in MIGRATIONS]
        assert migrate(conn) == []
    assert [v for v, _ in version_rows(pg_database)] == list(range(1, SCHEMA_VERSION + 1))


def _migrate_in_child(settings: ConnectionSettings, barrier, results) -> None:
    try:
        with connect(settings) as conn:
            barrier.wait(timeout=30)
            results.put(("ok", migrate(conn)))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def _race(settings: ConnectionSettings, processes: int = 2, holder: psycopg.Connection | None = None) -> list:
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    children = [ctx.Process(target=_migrate_in_child, args=(settings, barrier, results)) for _ in range(processes)]
    for child in children:
        child.start()
    if holder is not None:
        time.sleep(1.0)  # both children are now blocked on the advisory lock the test holds
        assert results.empty(), "a migration ran while another session held the migration lock"
        holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    outcomes = [results.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    return outcomes


def test_two_processes_racing_to_migrate_apply_it_exactly_once(pg_database: Database) -> None:
    outcomes = _race(settings_for(pg_database), processes=4)
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    applied = sorted((versions for _, versions in outcomes), key=len)
    assert applied[:-1] == [[], [], []] and applied[-1] == [m.version for m in MIGRATIONS]
    assert len(version_rows(pg_database)) == SCHEMA_VERSION


def test_migration_waits_for_the_advisory_lock(pg_database: Database) -> None:
    with pg_database.admin_connect() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        outcomes = _race(settings_for(pg_database), processes=2, holder=holder)
    assert sorted(len(versions) for _, versions in outcomes) == [0, SCHEMA_VERSION]


def test_a_schema_newer_than_this_release_is_refused(pg_database: Database) -> None:
    with connect(settings_for(pg_database)) as conn:
        migrate(conn)
        conn.execute("INSERT INTO spur_schema_version (version, description) VALUES (%s, 'from the future')",
                     (SCHEMA_VERSION + 1,))
        with pytest.raises(SchemaTooNewError) as info:
            migrate(conn)
    message = str(info.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert f"this release knows only up to version {SCHEMA_VERSION}" in message
    assert "newer release" in message
    # A controller refuses to start...
    writer = writer_for(pg_database)
    with pytest.raises(SchemaTooNewError):
        writer.open()
    # ...and a running one never writes into it.
    assert writer.reconcile([job(1)]) == 0
    assert "newer release" in writer.health()["last_error"]
    assert stored(pg_database) == {}


def test_a_failed_migration_is_rolled_back_whole(pg_database: Database) -> None:
    broken = (*MIGRATIONS, Migration(SCHEMA_VERSION + 1, "broken", "CREATE TABLE half_done (x int); SELECT 1/0"))
    with connect(settings_for(pg_database)) as conn:
        with pytest.raises(MigrationError, match=f"migration {SCHEMA_VERSION + 1} \\(broken\\) failed"):
            migrate(conn, broken)
        assert conn.execute("SELECT to_regclass('half_done')").fetchone() == (None,)
        assert migrate(conn) == []  # the lock was released; the known schema is intact
    assert len(version_rows(pg_database)) == SCHEMA_VERSION


# ---------------------------------------------------------------------- writing job records


def test_recording_the_same_state_twice_changes_nothing(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    jobs = [job(1, "COMPLETED", 1), job(2, "RUNNING", 1), job(3)]
    assert writer.reconcile(jobs) == 3
    before = stored(pg_database)
    assert writer.reconcile(jobs) == 0
    # A writer without memory (a new leader) reads back what is stored and writes nothing either.
    assert writer_for(pg_database).reconcile(jobs) == 0
    assert stored(pg_database) == before  # same updated_at and the same tuple (xmin): not even rewritten
    assert writer.health()["written_total"] == 3


def test_a_record_follows_the_job_through_a_requeue(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    for step in (job(1), job(1, "RUNNING", 1), job(1, "PENDING", 1), job(1, "RUNNING", 2), job(1, "COMPLETED", 2)):
        assert writer.reconcile([step]) == 1
        state, attempt, version = stored(pg_database)[1][:3]
        assert (state, attempt, version) == (step["state"], step["attempt"], record_version(step))
    earlier, row = query_jobs(pg_database.admin_connect(), job_ids=[1])
    assert row["start_time"] == T0 + 11 and row["end_time"] == T0 + 101 and row["nodes"] == ["node1"]
    # The first run is kept as Slurm's REQUEUED record, ended when the requeue replaced it (its end is unknown).
    assert (earlier["attempt"], earlier["state"], earlier["start_time"]) == (1, "REQUEUED", T0 + 11)
    assert earlier["end_time"] >= T0 + 11
    requeued = query_jobs(pg_database.admin_connect(), states=["RQ"], start=T0, end=time.time() + 60)
    assert [r["state"] for r in requeued] == ["REQUEUED"]


def test_a_record_never_goes_backwards_even_from_a_stale_leader(pg_database: Database) -> None:
    stale, current = writer_for(pg_database), writer_for(pg_database)
    assert stale.reconcile([job(1)]) == 1  # the old leader saw the job pending
    assert current.reconcile([job(1, "COMPLETED", 1)]) == 1  # the new leader saw it finish
    # The old leader, cut off, now reports it running: its own memory says that is news, the database refuses.
    assert stale.reconcile([job(1, "RUNNING", 1)]) == 0
    assert stored(pg_database)[1][0] == "COMPLETED"
    # The same writer never sends an older record again either.
    assert current.reconcile([job(1, "RUNNING", 1)]) == 0
    assert stored(pg_database)[1][0] == "COMPLETED"


def test_a_rebootstrapped_cluster_does_not_overwrite_the_old_clusters_history(pg_database: Database) -> None:
    old = writer_for(pg_database, CLUSTER, cluster_name="spur")
    assert old.reconcile([job(i, "COMPLETED", 1) for i in (1, 2, 3)]) == 3
    new = writer_for(pg_database, OTHER_CLUSTER, cluster_name="spur")
    again = [job(i, "RUNNING", 1, spec={"name": "second life", "user": "bob"}) for i in (1, 2)]
    assert new.reconcile(again) == 2
    assert {k: v[0] for k, v in stored(pg_database, CLUSTER).items()} == {1: "COMPLETED", 2: "COMPLETED",
                                                                          3: "COMPLETED"}
    assert {k: v[0] for k, v in stored(pg_database, OTHER_CLUSTER).items()} == {1: "RUNNING", 2: "RUNNING"}
    with pg_database.admin_connect() as conn:
        assert [r["spec"]["name"] for r in query_jobs(conn, cluster_id=CLUSTER, job_ids=[1])] == ["job1"]
        assert [r["spec"]["user"] for r in query_jobs(conn, cluster_id=OTHER_CLUSTER, job_ids=[1])] == ["bob"]
        assert len(query_jobs(conn, job_ids=[1])) == 2  # every cluster when none is named
        assert {c["cluster_id"] for c in clusters(conn) if c["name"] == "spur"} == {CLUSTER, OTHER_CLUSTER}


def test_a_queried_record_has_the_replicated_jobs_shape(pg_database: Database) -> None:
    from spur_hpc.controller.grpc_api import job_to_pb

    original = job(4, "FAILED", 2, exit_code=0, signal=9, reason="NonZeroExitCode", nodes=["n1", "n2"])
    original["spec"].update(gid=100, nodes=2, tasks=8, cpus_per_task=2, time_limit_secs=3600, memory_mb=4096)
    writer_for(pg_database).reconcile([original])
    with pg_database.admin_connect() as conn:
        (record,) = query_jobs(conn, job_ids=[4])
    for key in ("job_id", "state", "reason", "exit_code", "signal", "submit_time", "start_time", "end_time", "nodes",
                "attempt"):
        assert record[key] == original[key], key
    for key in ("name", "user", "uid", "gid", "account", "partition", "nodes", "tasks", "cpus_per_task",
                "memory_mb", "time_limit_secs", "work_dir"):
        assert record["spec"][key] == original["spec"][key], key
    assert record["cpus"] == 16 and record["cluster_id"] == CLUSTER
    # The controller's live-job conversion serves sacct records as they are.
    message = job_to_pb(record)
    assert (message.job_id, message.spec.tasks, list(message.nodes)) == (4, 8, ["n1", "n2"])


def test_job_ids_are_64_bit(pg_database: Database) -> None:
    big = 2**40 + 7
    record = job(big, "COMPLETED", 1, submit_time=T0, start_time=T0 + 1, end_time=T0 + 2)
    assert writer_for(pg_database).reconcile([record]) == 1
    with pg_database.admin_connect() as conn:
        assert [r["job_id"] for r in query_jobs(conn, job_ids=[big])] == [big]


def test_only_recorded_finished_jobs_may_be_purged(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    done, running, late = job(1, "COMPLETED", 1), job(2, "RUNNING", 1), job(3, "FAILED", 1)
    writer.reconcile([done, running])
    table = [done, running, late]  # job 3 finished after the last reconcile: not recorded yet
    assert writer.recorded_job_ids_before(table, before=T0 + 1000) == {1}
    assert writer.recorded_job_ids_before(table, before=T0 + 50) == set()  # job 1 ended at T0 + 101
    writer.reconcile(table)
    assert writer.recorded_job_ids_before(table, before=T0 + 1000) == {1, 3}


def test_a_row_the_database_refuses_does_not_block_the_others(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    bad = job(2, "COMPLETED", 1, exit_code=2**40)  # does not fit the integer column
    assert writer.reconcile([job(1, "COMPLETED", 1), bad, job(3, "COMPLETED", 1)]) == 2
    assert sorted(stored(pg_database)) == [1, 3]
    health = writer.health()
    # Refused: job 2's row and its batch step's (the same exit code).
    assert health["rejected"] == 2 and health["backlog"] == 0 and health["connected"]
    assert writer.reconcile([job(1, "COMPLETED", 1), bad, job(3, "COMPLETED", 1)]) == 0  # not retried


# ---------------------------------------------------------------------- outage


def test_an_outage_keeps_the_backlog_and_loses_nothing() -> None:
    with private_server() as server:
        db = server.create_database()
        writer = writer_for(db)
        assert writer.open()
        first = [job(i, "COMPLETED", 1) for i in range(1, 101)]
        assert writer.reconcile(first) == 100

        server.stop("immediate")  # like a crash of the database host
        table = first + [job(i, "RUNNING", 1) for i in range(101, 151)] + [job(i) for i in range(151, 201)]
        for _ in range(3):  # each call returns with nothing written: the leader's loop goes on
            assert writer.reconcile(table) == 0
        health = writer.health()
        assert health["connected"] is False and health["backlog"] == 100
        assert "accounting database" in health["last_error"], health
        assert writer.recorded_job_ids_before(table, before=T0 + 10_000) == {j["job_id"] for j in first}

        server.start()
        table[150:] = [job(i, "CANCELLED", 0) for i in range(151, 201)]  # they changed while it was down
        assert writer.reconcile(table) == 100
        health = writer.health()
        assert health["connected"] is True and health["backlog"] == 0 and health["last_error"] == ""
        assert writer.reconcile(table) == 0
        with db.admin_connect() as conn:
            count, distinct = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM spur_jobs").fetchone()
        assert count == distinct == 200
        assert {v[0] for k, v in stored(db).items() if k > 150} == {"CANCELLED"}


def test_a_backlog_after_an_outage_is_written_in_batches() -> None:
    # How fast it drains is measured in bench/; here: one transaction per batch, not one per row.
    records = 20_000
    with private_server(fsync=True) as server:
        db = server.create_database()
        writer = writer_for(db)
        assert writer.open()
        server.stop()
        table = [job(i, "COMPLETED", 1) for i in range(1, records + 1)]
        assert writer.reconcile(table) == 0
        assert writer.health()["backlog"] == records
        server.start()
        assert writer.reconcile(table) == records
        assert writer.health()["backlog"] == 0
        with db.admin_connect() as conn:
            # xmin is the transaction that wrote a row: a fall back to row by row would show one per record.
            count, transactions = conn.execute("SELECT count(*), count(DISTINCT xmin::text) FROM spur_jobs").fetchone()
        assert count == records
        assert transactions == -(-records // writer.batch_size), transactions


# ---------------------------------------------------------------------- the password stays secret


def test_the_password_never_appears_in_logs_or_errors(pg_database: Database, tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    password = pg_database.password
    seen: list[str] = []

    # spur.conf names the 0600 file; the writer reads it and connects.
    spur_conf = conf.parse(
        f'[cluster]\nname = "spur"\n[accounting]\ndatabase_url = "{pg_database.url}"\n'
        f'password_file = "{pg_database.password_file}"\n'
    )
    writer = AccountingWriter(spur_conf, cluster_id=CLUSTER, retry_interval_secs=0)
    assert writer.open() and writer.reconcile([job(1, "COMPLETED", 1)]) == 1
    seen.append(repr(writer.settings))

    # libpq quotes an unknown database name back: make that name the password, so scrubbing must work.
    host_part = pg_database.url.rsplit("/", 1)[0]
    echo = ConnectionSettings(url=f"{host_part}/{password}", password=password)
    with pytest.raises(AccountingUnavailable) as info:
        connect(echo)
    seen.append(str(info.value))
    assert "[redacted]" in str(info.value)

    echoing_writer = AccountingWriter(echo, cluster_id=CLUSTER, retry_interval_secs=0)
    assert echoing_writer.reconcile([job(2)]) == 0
    seen.append(echoing_writer.health()["last_error"])

    # A wrong password is not echoed either.
    wrong = "Wrong-" + password[::-1]
    with pytest.raises(AccountingUnavailable) as info:
        connect(ConnectionSettings(url=pg_database.url, password=wrong))
    assert "password authentication failed" in str(info.value)
    assert wrong not in str(info.value)

    seen.append(caplog.text)
    for text in seen:
        assert password not in text
    assert any("[redacted]" in record.getMessage() for record in caplog.records)


# ---------------------------------------------------------------------- sacct's selection


def _at(hour: int, minute: int = 0) -> float:
    return datetime(2024, 3, 5, hour, minute, tzinfo=UTC).timestamp()


SACCT_JOBS = [
    # job id, state, submit, start, end, user
    (1, "COMPLETED", _at(10), _at(10, 5), _at(10, 30), "alice"),
    (2, "RUNNING", _at(9), _at(9, 10), 0.0, "alice"),
    (3, "PENDING", _at(11), 0.0, 0.0, "alice"),
    (4, "CANCELLED", _at(8), 0.0, _at(8, 30), "alice"),  # cancelled while pending
    (5, "FAILED", _at(10), _at(10, 1), _at(10, 20), "alice"),
    (6, "COMPLETED", _at(10), _at(10, 2), _at(10, 40), "bob"),
]


@pytest.fixture
def sacct_db(pg_database: Database):
    jobs = []
    for job_id, state, submit, start, end, user in SACCT_JOBS:
        jobs.append({**job(job_id, state, 1 if start else 0), "submit_time": submit, "start_time": start,
                     "end_time": end, "spec": {"name": f"j{job_id}", "user": user}})
    writer_for(pg_database).reconcile(jobs)
    writer_for(pg_database, OTHER_CLUSTER).reconcile([{**jobs[0], "job_id": 99}])
    with pg_database.admin_connect() as conn:
        yield conn


def _ids(rows: list[dict]) -> list[int]:
    return [r["job_id"] for r in rows]


def test_sacct_window_selects_jobs_eligible_before_the_end_and_not_ended_before_the_start(sacct_db) -> None:
    rows = query_jobs(sacct_db, cluster_id=CLUSTER, start=_at(10, 10), end=_at(10, 25), now=_at(12))
    assert _ids(rows) == [1, 2, 5, 6]


def test_sacct_state_running_means_running_during_the_window(sacct_db) -> None:
    rows = query_jobs(sacct_db, cluster_id=CLUSTER, start=_at(10, 25), end=_at(10, 35), states=["R"], now=_at(12))
    assert _ids(rows) == [1, 2, 6]
    # sacct -s R without times: running now.
    assert _ids(query_jobs(sacct_db, cluster_id=CLUSTER, states=["RUNNING"], now=_at(12))) == [2]


def test_sacct_finished_states_match_jobs_that_ended_in_the_window_in_that_state(sacct_db) -> None:
    rows = query_jobs(sacct_db, cluster_id=CLUSTER, start=_at(10), end=_at(10, 35), states=["CD"], now=_at(12))
    assert _ids(rows) == [1]
    rows = query_jobs(sacct_db, cluster_id=CLUSTER, start=_at(8), end=_at(9), states=["CA", "F"], now=_at(12))
    assert _ids(rows) == [4]


def test_sacct_pending_means_waiting_at_some_point_of_the_window(sacct_db) -> None:
    rows = query_jobs(sacct_db, cluster_id=CLUSTER, start=_at(10, 2), end=_at(10, 3), states=["PD"], now=_at(12))
    assert _ids(rows) == [1]  # job 5 started at 10:01, job 6 at 10:02, job 3 arrived at 11:00
    assert _ids(query_jobs(sacct_db, cluster_id=CLUSTER, states=["PD"], now=_at(12))) == [3]


def test_sacct_job_ids_and_users_filters(sacct_db) -> None:
    assert _ids(query_jobs(sacct_db, cluster_id=CLUSTER, job_ids=[4, 6], now=_at(12))) == [4, 6]
    assert _ids(query_jobs(sacct_db, cluster_id=CLUSTER, users=["bob"], start=_at(0), now=_at(12))) == [6]
    assert _ids(query_jobs(sacct_db, job_ids=[99], now=_at(12))) == [99]
    assert query_jobs(sacct_db, cluster_id=CLUSTER, job_ids=[99], now=_at(12)) == []


def test_a_job_that_never_became_eligible_is_in_no_window_but_its_id_finds_it(pg_database: Database) -> None:
    # slurmdbd has no eligible time for a held job, one waiting on a dependency or an array's throttled rest:
    # sacct's window leaves them out, and sacct -j still lists them.
    held = {**job(1), "eligible": False, "submit_time": _at(10)}
    waiting = {**job(2), "submit_time": _at(10)}
    older = {**job(3), "submit_time": _at(10)}  # a release before WAL level 3 records no eligible time
    held_then_cancelled = {**job(4), "eligible": False, "submit_time": _at(10)}
    writer = writer_for(pg_database)
    writer.reconcile([held, waiting, older, held_then_cancelled])
    # Ended without starting: it keeps what was seen while it waited (the copy of an ended job says nothing).
    writer.reconcile([held, waiting, older, {**job(4, "CANCELLED"), "submit_time": _at(10), "start_time": 0.0}])
    with pg_database.admin_connect() as conn:
        window = query_jobs(conn, cluster_id=CLUSTER, start=_at(9), now=_at(12))
        assert _ids(window) == [2, 3]
        assert _ids(query_jobs(conn, cluster_id=CLUSTER, states=["PD"], start=_at(11), now=_at(12))) == [2, 3]
        by_id = query_jobs(conn, cluster_id=CLUSTER, job_ids=[1, 4], now=_at(12))
        found = [(r["job_id"], r["state"], r["eligible_time"]) for r in by_id]
        assert found == [(1, "PENDING", 0.0), (4, "CANCELLED", 0.0)]
    # Released: written again, now eligible.
    released = {k: v for k, v in held.items() if k != "eligible"}
    writer.reconcile([{**released, "eligible_time": _at(11)}, waiting, older])
    with pg_database.admin_connect() as conn:
        assert _ids(query_jobs(conn, cluster_id=CLUSTER, start=_at(9), now=_at(12))) == [1, 2, 3]


def test_the_table_of_earlier_runs_has_the_columns_of_spur_jobs_in_order(pg_database: Database) -> None:
    # The trigger copies a whole spur_jobs row into spur_job_runs: a migration that adds a column to one adds it to
    # the other, or every requeue's write would fail.
    writer_for(pg_database).reconcile([job(1)])  # connects, so every migration has run
    with pg_database.admin_connect() as conn:
        columns = {
            table: conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s "
                "ORDER BY ordinal_position",
                (table,),
            ).fetchall()
            for table in ("spur_jobs", "spur_job_runs")
        }
    assert columns["spur_job_runs"] == columns["spur_jobs"] and len(columns["spur_jobs"]) > 30


def test_who_cancelled_a_job_is_stored_and_a_row_of_an_older_schema_names_nobody(pg_database: Database) -> None:
    from spur_hpc.controller.grpc_api import job_to_pb

    with connect(settings_for(pg_database)) as conn:  # a database a release of schema 3 wrote
        assert migrate(conn, MIGRATIONS[:3]) == [1, 2, 3]
        conn.execute("INSERT INTO spur_clusters (cluster_id, name) VALUES (%s, 'spur') ON CONFLICT DO NOTHING",
                     (CLUSTER,))
        conn.execute("INSERT INTO spur_jobs (cluster_id, job_id, record_version, state, submit_time, end_time) "
                     "VALUES (%s, 1, 4, 'CANCELLED', to_timestamp(%s), to_timestamp(%s))", (CLUSTER, T0, T0 + 50))
    writer = writer_for(pg_database)  # migrates to 4 as it connects
    assert writer.reconcile([job(2, "CANCELLED", 1, cancelled_by_uid=0), job(3, "CANCELLED")]) == 2
    with pg_database.admin_connect() as conn:
        by_id = {r["job_id"]: r for r in query_jobs(conn, job_ids=[1, 2, 3], start=T0, end=T0 + 3600)}
    assert {job_id: r["cancelled_by_uid"] for job_id, r in by_id.items()} == {1: -1, 2: 0, 3: -1}
    assert [job_to_pb(by_id[j]).cancelled_by_uid for j in (1, 2)] == [-1, 0]  # what sacct gets
