"""Accounting without a database: record versions, rows, settings and secrets, sacct's window rules."""

from __future__ import annotations

import os
import socket
import threading
from datetime import UTC, datetime, timedelta

import pytest

from spur_hpc import conf
from spur_hpc.accounting import (
    AccountingUnavailable,
    AccountingWriter,
    ConnectionSettings,
    InvalidQuery,
    SchemaTooNewError,
    connect,
    record_version,
    sacct_window,
    settings_from_config,
)
from spur_hpc.accounting.connection import REDACTED, check_url, scrub
from spur_hpc.accounting.migrations import MIGRATIONS, SCHEMA_VERSION
from spur_hpc.accounting.query import normalize_states
from spur_hpc.accounting.records import COLUMNS, job_row

SECRET = "s3cret-Pa55word-for-tests"


def job(job_id: int = 1, state: str = "PENDING", attempt: int = 0, **fields: object) -> dict:
    record = {
        "job_id": job_id,
        "spec": {
            "name": "sim",
            "user": "alice",
            "uid": 1000,
            "account": "physics",
            "partition": "batch",
            "nodes": 2,
            "tasks": 4,
            "cpus_per_task": 3,
            "memory_mb": 2048,
            "work_dir": "/home/alice",
        },
        "state": state,
        "reason": "None",
        "exit_code": 0,
        "signal": 0,
        "submit_time": 1_700_000_000.0,
        "start_time": 0.0,
        "end_time": 0.0,
        "nodes": [],
        "attempt": attempt,
    }
    record.update(fields)
    return record


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


# ---------------------------------------------------------------------- record versions


def test_record_version_grows_along_a_jobs_life_including_a_requeue() -> None:
    life = [
        job(state="PENDING", attempt=0),
        job(state="RUNNING", attempt=1),
        job(state="PENDING", attempt=1),  # launch failed: requeued
        job(state="RUNNING", attempt=2),
        job(state="COMPLETED", attempt=2),
    ]
    versions = [record_version(j) for j in life]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_every_finished_state_outranks_running_of_the_same_attempt() -> None:
    running = record_version(job(state="RUNNING", attempt=3))
    for state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
        assert record_version(job(state=state, attempt=3)) > running
    # cancelled before it ever started
    assert record_version(job(state="CANCELLED", attempt=0)) > record_version(job(state="PENDING", attempt=0))


def test_job_row_maps_the_replicated_record() -> None:
    row = dict(
        zip(
            COLUMNS,
            job_row(
                "cid",
                job(
                    7,
                    "COMPLETED",
                    1,
                    start_time=1_700_000_010.0,
                    end_time=1_700_000_070.5,
                    nodes=["n1", "n2"],
                    exit_code=3,
                    reason="None",
                ),
            ),
            strict=True,
        )
    )
    assert row["cluster_id"] == "cid" and row["job_id"] == 7 and row["attempt"] == 1
    assert row["record_version"] == record_version(job(7, "COMPLETED", 1))
    assert (row["name"], row["user"], row["uid"], row["account"], row["partition"]) == (
        "sim",
        "alice",
        1000,
        "physics",
        "batch",
    )
    assert row["submit_time"] == datetime.fromtimestamp(1_700_000_000, UTC)
    assert row["end_time"] == datetime.fromtimestamp(1_700_000_070.5, UTC)
    assert row["nodes"] == "n1,n2"
    assert row["cpus"] == 12  # 4 tasks x 3 cpus over 2 nodes = 6 per node, 2 nodes
    assert row["memory_mb"] == 2048 and row["work_dir"] == "/home/alice"
    assert (row["req_nodes"], row["tasks"], row["cpus_per_task"], row["time_limit_secs"]) == (2, 4, 3, 0)
    assert row["reason"] == "" and row["exit_code"] == 3


def test_job_row_leaves_unset_times_empty_and_strips_nul_bytes() -> None:
    record = job(state="PENDING", submit_time=1.0)
    record["spec"]["name"] = "bad\x00name"
    row = dict(zip(COLUMNS, job_row("cid", record), strict=True))
    assert row["start_time"] is None and row["end_time"] is None
    assert row["name"] == "badname"


# ---------------------------------------------------------------------- settings and secrets


def test_a_job_the_controller_ended_is_recorded_with_exit_code_0_0_as_slurmdbd_records_it() -> None:
    def exit_of(state: str) -> tuple:
        row = job_row("c1", job(state=state, exit_code=0, signal=15, start_time=1.0, end_time=2.0))
        return row[COLUMNS.index("exit_code")], row[COLUMNS.index("signal")]

    assert (exit_of("CANCELLED"), exit_of("TIMEOUT"), exit_of("PREEMPTED")) == ((0, 0), (0, 0), (0, 0))
    assert (exit_of("FAILED"), exit_of("OUT_OF_MEMORY")) == ((0, 15), (0, 15))  # the job's own end is kept


def test_a_pending_job_becoming_eligible_is_a_newer_row_and_waits_with_slurmdbds_infinite_until_then() -> None:
    from spur_hpc.accounting.records import NEVER_ELIGIBLE, detail_version

    held, released = job(eligible=False), job()
    assert detail_version(released) > detail_version(held)
    assert job_row("c1", held)[COLUMNS.index("eligible_time")] == NEVER_ELIGIBLE
    # a record of a release before WAL level 3 has no eligible time: its submission stands in
    assert job_row("c1", released)[COLUMNS.index("eligible_time")] == datetime.fromtimestamp(1_700_000_000, UTC)


def test_a_url_with_a_password_is_refused_without_echoing_it() -> None:
    with pytest.raises(conf.ConfigError) as info:
        check_url(f"postgresql://spur:{SECRET}@db/spur")
    assert "password_file" in str(info.value)
    assert SECRET not in str(info.value)
    with pytest.raises(conf.ConfigError):
        check_url(f"host=db user=spur password={SECRET}")
    check_url("postgresql://spur@db.example.org:5432/spur")


def _config(tmp_path, url: str, mode: int | None = 0o600, secret: str = SECRET) -> conf.Config:
    path = tmp_path / "accounting.secret"
    if mode is not None:
        path.write_text(secret + "\n")
        os.chmod(path, mode)
    return conf.parse(f'[accounting]\ndatabase_url = "{url}"\npassword_file = "{path}"\n')


def test_settings_from_config_reads_the_0600_password_file(tmp_path) -> None:
    settings = settings_from_config(_config(tmp_path, "postgresql://spur@db/spur"))
    assert settings is not None
    assert settings.password == SECRET and settings.url == "postgresql://spur@db/spur"
    assert SECRET not in repr(settings)
    assert settings.describe() == "spur@db:5432/spur"


def test_accounting_is_off_without_a_url(tmp_path) -> None:
    assert settings_from_config(conf.parse("")) is None
    with pytest.raises(conf.ConfigError, match="accounting is off"):
        AccountingWriter(conf.parse(""), cluster_id="cid")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_readable_password_file_is_refused(tmp_path, mode: int) -> None:
    with pytest.raises(conf.ConfigError, match="chmod 0600"):
        settings_from_config(_config(tmp_path, "postgresql://spur@db/spur", mode=mode))


def test_a_missing_or_empty_password_file_is_refused(tmp_path) -> None:
    with pytest.raises(conf.ConfigError, match="does not exist"):
        settings_from_config(_config(tmp_path, "postgresql://spur@db/spur", mode=None))
    with pytest.raises(conf.ConfigError, match="empty"):
        settings_from_config(_config(tmp_path, "postgresql://spur@db/spur", secret=""))


def test_scrub_replaces_the_password() -> None:
    assert scrub(f"database {SECRET} does not exist", SECRET) == f"database {REDACTED} does not exist"
    assert scrub("nothing here", None) == "nothing here"


def test_connect_to_nothing_fails_fast_with_a_typed_scrubbed_error() -> None:
    settings = ConnectionSettings(url=f"postgresql://spur@127.0.0.1:{closed_port()}/spur", password=SECRET)
    with pytest.raises(AccountingUnavailable) as info:
        connect(settings)
    assert "cannot connect to the accounting database spur@127.0.0.1" in str(info.value)
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


# ---------------------------------------------------------------------- writer without a database


def test_writer_needs_a_cluster_id() -> None:
    with pytest.raises(ValueError, match="cluster id"):
        AccountingWriter("postgresql://spur@127.0.0.1/spur", SECRET, "")


def test_writer_during_an_outage_reports_backlog_and_fails_fast(caplog) -> None:
    caplog.set_level("DEBUG")
    writer = AccountingWriter(f"postgresql://spur@127.0.0.1:{closed_port()}/spur", SECRET, "cid", retry_interval_secs=0)
    assert writer.open() is False
    jobs = [job(i) for i in range(1, 6)]
    assert writer.reconcile(jobs) == 0
    health = writer.health()
    assert health["connected"] is False and health["backlog"] == 5 and health["written_total"] == 0
    assert "cannot connect" in health["last_error"]
    assert writer.recorded_job_ids_before(jobs, before=2e9) == set()
    assert writer.reconcile(jobs) == 0 and writer.health()["backlog"] == 5  # still nothing lost, still no raise
    assert SECRET not in caplog.text and SECRET not in health["last_error"]


class HangUpListener:
    """A TCP port on 127.0.0.1 that accepts every connection and closes it at once, counting them: a
    database that is down, seen by the writer, where each dial can be counted."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def test_retry_gate_keeps_a_dead_database_from_being_dialled_every_tick() -> None:
    now = [100.0]
    down = HangUpListener()
    try:
        writer = AccountingWriter(
            f"postgresql://spur@127.0.0.1:{down.port}/spur", SECRET, "cid", retry_interval_secs=30, clock=lambda: now[0]
        )
        writer.reconcile([job(1)])
        dialled, first_error = down.accepted, writer.health()["last_error"]
        assert dialled > 0 and first_error
        now[0] += 1
        assert writer.reconcile([job(1)]) == 0
        # answered from memory: no new connection, the same error
        assert down.accepted == dialled and writer.health()["last_error"] == first_error
        now[0] += 30
        writer.reconcile([job(1)])
        assert down.accepted > dialled  # the gate opened again
    finally:
        down.close()

# ---------------------------------------------------------------------- schema errors


def test_schema_too_new_message_names_both_versions_and_the_way_out() -> None:
    message = str(SchemaTooNewError(SCHEMA_VERSION + 1, SCHEMA_VERSION))
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert f"up to version {SCHEMA_VERSION}" in message
    assert "newer release" in message and "roll forward only" in message


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


# ---------------------------------------------------------------------- sacct's window and states

NOW = datetime(2024, 3, 5, 14, 30, 15, tzinfo=UTC)


def test_window_defaults_to_midnight_until_now() -> None:
    start, end = sacct_window(now=NOW)
    local_now = NOW.astimezone()
    assert start == local_now.replace(hour=0, minute=0, second=0, microsecond=0)
    assert end == NOW + timedelta(seconds=1)  # E == now includes the current second


def test_window_with_states_defaults_to_now() -> None:
    assert sacct_window(states=["R"], now=NOW) == (NOW, NOW + timedelta(seconds=1))
    given = NOW - timedelta(hours=2)
    assert sacct_window(start=given, states=["R"], now=NOW) == (given, given + timedelta(seconds=1))


def test_window_with_job_ids_starts_at_the_epoch() -> None:
    start, end = sacct_window(job_ids=[5], now=NOW)
    assert start == datetime(1970, 1, 1, tzinfo=UTC) and end == NOW + timedelta(seconds=1)
    assert sacct_window(job_ids=[5], states=["CD"], now=NOW)[0] == datetime(1970, 1, 1, tzinfo=UTC)


def test_window_accepts_epoch_seconds_and_refuses_an_end_before_the_start() -> None:
    start, end = sacct_window(start=1000, end=2000, now=NOW)
    assert (start.timestamp(), end.timestamp()) == (1000, 2000)
    with pytest.raises(InvalidQuery, match="before the start"):
        sacct_window(start=2000, end=1000, now=NOW)


def test_states_accept_sacct_short_forms_and_refuse_unknown_ones() -> None:
    assert normalize_states(["pd", "R", "cd", "F", "ca", "TO", "nf", "RUNNING"]) == [
        "PENDING",
        "RUNNING",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
    ]
    with pytest.raises(InvalidQuery, match="unknown job state 'XX'"):
        normalize_states(["XX"])
