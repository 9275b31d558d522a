"""How to reach the accounting database: settings from spur.conf, connecting, keeping the password secret.

The password lives only in `[accounting] password_file` (mode 0600). It is handed to libpq as a
keyword argument, so it never appears in spur.conf, in a URL, or in any process's arguments; every
error text that leaves this module has been scrubbed of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg
from psycopg import conninfo

from spur_hpc.accounting.errors import AccountingUnavailable
from spur_hpc.conf import Config, ConfigError, check_secret_file, read_secret

log = logging.getLogger("spurctld.accounting")

DEFAULT_CONNECT_TIMEOUT_SECS = 2
REDACTED = "[redacted]"


@dataclass(frozen=True)
class ConnectionSettings:
    url: str  # libpq URL or key=value string, never with a password
    password: str | None = field(default=None, repr=False)  # repr=False: never printed by accident
    connect_timeout_secs: int = DEFAULT_CONNECT_TIMEOUT_SECS
    application_name: str = "spurctld"

    def describe(self) -> str:
        """Where we connect, for log lines: host, port, database and user (no secret can be in the URL)."""
        try:
            parts = conninfo.conninfo_to_dict(self.url)
        except psycopg.ProgrammingError:
            return "<unparsable database_url>"
        host = parts.get("host") or "localhost"
        where = f"{parts.get('user') or '?'}@{host}:{parts.get('port') or 5432}/{parts.get('dbname') or '?'}"
        return scrub(where, self.password)


def check_url(url: str, key: str = "database_url") -> None:
    """The URL must parse and must not carry a password (it belongs in the 0600 password_file)."""
    try:
        parts = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        # libpq's parse error may quote the URL back; drop it in case the URL holds a secret after all.
        raise ConfigError(
            f"[accounting] {key}: not a PostgreSQL URL ({type(exc).__name__}); "
            "write it like postgresql://spur@db.example.org:5432/spur"
        ) from None
    if parts.get("password"):
        raise ConfigError(
            f"[accounting] {key}: contains a password; remove it from the URL and put it in "
            "[accounting] password_file (mode 0600)"
        )


def settings_from_config(conf: Config, application_name: str = "spurctld") -> ConnectionSettings | None:
    """ConnectionSettings for [accounting], or None when accounting is off (empty database_url).

    Raises ConfigError for a bad URL, a URL with a password, or a missing, empty or group/world-readable
    password_file.
    """
    acct = conf.accounting
    if not acct.database_url:
        return None
    check_url(acct.database_url)
    check_secret_file("accounting", "password_file", acct.password_file)
    try:
        password = read_secret(acct.password_file)
    except OSError as exc:
        raise ConfigError(
            f"[accounting] password_file: cannot read {acct.password_file} ({exc.strerror}); check its owner"
        ) from None
    return ConnectionSettings(url=acct.database_url, password=password, application_name=application_name)


def scrub(text: str, password: str | None) -> str:
    """text with every occurrence of the password replaced (libpq normally never echoes it; be sure)."""
    if password:
        text = text.replace(password, REDACTED)
    return text


def describe_error(exc: BaseException, password: str | None) -> str:
    """One scrubbed line for an exception from psycopg."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return scrub(f"{type(exc).__name__}: {message}", password)


def connect(settings: ConnectionSettings, autocommit: bool = True) -> psycopg.Connection:
    """An open connection, or AccountingUnavailable (scrubbed, without the psycopg exception chained)."""
    try:
        return psycopg.connect(
            settings.url,
            password=settings.password,  # a keyword: never part of the URL, a command line or a log line
            connect_timeout=settings.connect_timeout_secs,
            application_name=settings.application_name,
            autocommit=autocommit,
            # A database host that vanishes without a RST must not hang the leader for minutes.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            tcp_user_timeout=max(1, settings.connect_timeout_secs) * 5000,
        )
    except psycopg.Error as exc:
        # `from None`: the original exception (and its traceback locals) could carry the conninfo.
        message = f"cannot connect to the accounting database {settings.describe()}: {describe_error(exc, None)}"
        raise AccountingUnavailable(scrub(message, settings.password)) from None
