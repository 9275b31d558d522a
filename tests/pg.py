"""A real PostgreSQL server for tests, started and stopped by the tests themselves.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the unprivileged
user `nobody` (setpriv); otherwise it runs as the current user. The server listens on a unix socket in
its own temporary directory (superuser `postgres`, trust: the tests' admin path) and on a free
127.0.0.1 port with scram-sha-256 password authentication (the path the code under test uses, so a
wrong or missing password really fails).

Use it from a test module (tests/conftest.py puts tests/ on sys.path):

    import pg

    pg_server, pg_database = pg.pg_server, pg.pg_database  # bound by name: pytest finds them as fixtures

`pg_server` is one server per test session; `pg_database` is a fresh, empty database in it per test.
Tests that stop the server (outage tests) start their own with `PostgresServer.create()` so they never
take the shared server away from other tests.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from psycopg import sql

from harness import free_port
from prereqs import require, require_tool

PG_BIN_DIRS = ("/usr/local/bin", "/usr/lib/postgresql/15/bin")
APP_USER = "spur"
UNPRIVILEGED_USER = "nobody"
UNPRIVILEGED_GROUP = "nogroup"


def pg_binary(name: str) -> str:
    for directory in PG_BIN_DIRS:
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    require(False, f"PostgreSQL's {name} is not installed (looked in {', '.join(PG_BIN_DIRS)} and PATH)",
            "apt-get install postgresql")
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Database:
    """One database of the test server, owned by the application user that has a password."""

    server: PostgresServer
    name: str
    url: str  # postgresql://spur@127.0.0.1:PORT/NAME: no password, as in spur.conf
    password: str
    password_file: str  # mode 0600

    def admin_connect(self) -> psycopg.Connection:
        """Superuser connection to this database over the unix socket (for inspecting and tampering)."""
        return self.server.admin_connect(self.name)


class PostgresServer:
    """initdb + pg_ctl around one data directory in a temporary directory."""

    def __init__(self, base_dir: str, port: int, fsync: bool = True) -> None:
        self.base_dir = base_dir
        self.data_dir = os.path.join(base_dir, "data")
        self.socket_dir = os.path.join(base_dir, "sock")
        self.log_path = os.path.join(base_dir, "log", "postgres.log")
        self.secrets_dir = os.path.join(base_dir, "secrets")
        self.port = port
        self.fsync = fsync
        self.password = secrets.token_urlsafe(24)
        self.password_file = os.path.join(self.secrets_dir, "accounting.secret")
        self._db_counter = 0
        self._lock = threading.Lock()
        self._run_as = self._unprivileged_ids() if os.geteuid() == 0 else None

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, fsync: bool = True) -> PostgresServer:
        """initdb, start, and create the application user; the caller must call destroy()."""
        # A short path under /tmp: unix socket paths are limited to 107 bytes.
        base = tempfile.mkdtemp(prefix="spur-pg-", dir="/tmp")
        os.chmod(base, 0o755)  # the unprivileged server user must traverse it
        server = cls(base, free_port("127.0.0.1"), fsync=fsync)
        try:
            server._initdb()
            server.start()
            server._create_app_user()
        except BaseException:
            server.destroy()
            raise
        return server

    def _unprivileged_ids(self) -> tuple[int, int]:
        require_tool("setpriv", "util-linux")  # initdb refuses root: the server runs as that user
        try:
            entry = pwd.getpwnam(UNPRIVILEGED_USER)
        except KeyError:
            require(False, f"running as root and there is no {UNPRIVILEGED_USER!r} user to run PostgreSQL as",
                    f"useradd --system {UNPRIVILEGED_USER}")
            raise
        return entry.pw_uid, entry.pw_gid

    def _command(self, argv: list[str]) -> list[str]:
        if self._run_as is None:
            return argv
        return ["setpriv", f"--reuid={UNPRIVILEGED_USER}", f"--regid={UNPRIVILEGED_GROUP}", "--clear-groups", *argv]

    def _run(self, argv: list[str], timeout: float = 60.0) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": self.base_dir}
        done = subprocess.run(self._command(argv), env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            log = self.read_log()
            raise RuntimeError(
                f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stdout}{done.stderr}\nserver log:\n{log}"
            )

    def _owned_dir(self, path: str, mode: int) -> None:
        os.makedirs(path, mode=mode, exist_ok=True)
        os.chmod(path, mode)
        if self._run_as is not None:
            os.chown(path, *self._run_as)

    def _initdb(self) -> None:
        self._owned_dir(self.data_dir, 0o700)
        self._owned_dir(self.socket_dir, 0o755)
        self._owned_dir(os.path.dirname(self.log_path), 0o755)
        os.makedirs(self.secrets_dir, mode=0o700, exist_ok=True)
        self._run([pg_binary("initdb"), "-D", self.data_dir, "-U", "postgres", "--auth=trust", "--no-locale",
                   "-E", "UTF8", "--no-sync", "--no-instructions"])
        # Local socket: trust (the tests' superuser path). TCP: passwords only, so the code under test
        # proves it sends the password it read from the secret file.
        hba = os.path.join(self.data_dir, "pg_hba.conf")
        with open(hba, "w", encoding="utf-8") as fh:
            fh.write("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        if self._run_as is not None:
            os.chown(hba, *self._run_as)

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.socket_dir} "
            f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=50 -c shared_buffers=32MB"
        )
        self._run([pg_binary("pg_ctl"), "-D", self.data_dir, "-l", self.log_path, "-o", options, "-w", "-t", "60",
                   "start"])

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: 'fast' (clean shutdown) or 'immediate' (like a crash)."""
        self._run([pg_binary("pg_ctl"), "-D", self.data_dir, "-m", mode, "-w", "-t", "60", "stop"])

    def is_running(self) -> bool:
        return os.path.exists(os.path.join(self.data_dir, "postmaster.pid"))

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            if self.is_running():
                self.stop("immediate")
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def read_log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-20000:]
        except OSError:
            return ""

    # ------------------------------------------------------------------ access

    def admin_connect(self, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(host=self.socket_dir, port=self.port, user="postgres", dbname=dbname,
                               autocommit=True)

    def _create_app_user(self) -> None:
        with self.admin_connect() as conn:
            # CREATE ROLE takes no bind parameters; Literal quotes the password safely.
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(APP_USER), sql.Literal(self.password)))
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(self.password + "\n")

    def url(self, dbname: str) -> str:
        return f"postgresql://{APP_USER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> Database:
        with self._lock:
            self._db_counter += 1
            name = name or f"acct_{self._db_counter}"
        with self.admin_connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(APP_USER)))
        return Database(self, name, self.url(name), self.password, self.password_file)


# ---------------------------------------------------------------------- pytest fixtures

_shared: PostgresServer | None = None
_shared_lock = threading.Lock()


def shared_server() -> PostgresServer:
    """One server per process, however many test modules import the fixtures."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = PostgresServer.create(fsync=False)  # throwaway data: skip fsync for speed
        return _shared


def destroy_shared_server() -> None:
    global _shared
    with _shared_lock:
        if _shared is not None:
            _shared.destroy()
            _shared = None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    server = shared_server()
    yield server
    destroy_shared_server()  # idempotent: every module's copy of this fixture ends here at session end


@pytest.fixture
def pg_database(pg_server: PostgresServer) -> Database:
    """A fresh, empty database per test (no schema yet)."""
    return pg_server.create_database()


@contextlib.contextmanager
def private_server(fsync: bool = True) -> Iterator[PostgresServer]:
    """A server of the caller's own, for tests that stop and start it."""
    server = PostgresServer.create(fsync=fsync)
    try:
        yield server
    finally:
        server.destroy()
