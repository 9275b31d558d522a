"""spur.conf (TOML) -> one typed, validated Config object.

Every problem is reported as one ConfigError line that names the key, the value and the fix.
The schema below is the single source of truth for keys, types and defaults (docs/configuration.md
describes the same keys; a unit test keeps the two in step).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
import tomllib
from dataclasses import dataclass, field
from typing import Any

DEFAULT_CONF_PATH = "/etc/spur/spur.conf"
CONTROLLER_GRPC_PORT = 6817
AGENT_GRPC_PORT = 6818
RAFT_PORT = 6821


class ConfigError(Exception):
    """A bad spur.conf: the message is one line naming the key, the value and the fix."""


# section -> key -> (types, default, short description)
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], Any, str]]] = {
    "cluster": {
        "name": ((str,), "spur", "cluster name, fixed at first bootstrap"),
    },
    "controller": {
        "hosts": ((list,), [], "gRPC addresses of every controller (host[:port], port 6817 when omitted)"),
        "listen_addr": ((str,), f"0.0.0.0:{CONTROLLER_GRPC_PORT}", "this controller's gRPC address"),
        "raft_addr": ((str,), "", "this controller's Raft address (host:port); must be one of peers"),
        "peers": ((list,), [], "Raft addresses of every controller, this one included"),
        "probe_addr": ((str,), "127.0.0.1:6822", "HTTP probes (/status, /livez, /readyz, /metrics)"),
        "state_dir": ((str,), "/var/lib/spur/ctld", "Raft journal and snapshots"),
        "raft_secret_file": ((str,), "/etc/spur/raft.secret", "shared secret for the Raft port (mode 0600)"),
        "heartbeat_timeout_secs": ((int,), 60, "agent silent this long -> node DOWN, its jobs NODE_FAIL"),
        "scheduler_interval_ms": ((int,), 200, "how often the leader's scheduler runs"),
        "write_timeout_secs": ((int, float), 5.0, "deadline of one replicated write"),
        "grpc_workers": ((int,), 128, "gRPC server threads"),
        "append_entries_period_ms": ((int,), 20, "Raft batching period (commit latency floor)"),
        "election_timeout_min_ms": ((int,), 300, "Raft election timeout, lower bound"),
        "election_timeout_max_ms": ((int,), 800, "Raft election timeout, upper bound"),
        "leader_fallback_ms": ((int,), 1000, "a leader cut off from the majority steps down after this"),
        "connection_retry_ms": ((int,), 250, "reconnect interval between controllers"),
        "log_compaction_entries": ((int,), 5000, "entries between snapshots"),
        "bootstrap_probe_timeout_secs": ((int, float), 2.0, "deadline of one ClusterProbe call at start"),
        "bootstrap_wait_secs": ((int, float), 0.0, "give up waiting for unreachable peers after this (0: never)"),
        "min_job_age_secs": ((int,), 300, "finished jobs stay in the controllers' state at least this long"),
        "min_free_disk_mb": ((int,), 100, "writes are refused while state_dir has less free space than this"),
    },
    "agent": {
        "node_name": ((str,), "", "node name (default: short host name)"),
        "listen_addr": ((str,), f"0.0.0.0:{AGENT_GRPC_PORT}", "this agent's gRPC address"),
        "advertise_addr": ((str,), "", "address the controllers use to reach this agent (default: listen_addr)"),
        "probe_addr": ((str,), "127.0.0.1:6823", "HTTP probes (/status, /livez, /readyz)"),
        "state_dir": ((str,), "/var/lib/spur/agent", "supervisor session directories"),
        "heartbeat_interval_secs": ((int, float), 5.0, "how often the agent heartbeats"),
        "cpus": ((int,), 0, "CPUs offered to jobs (0: all online CPUs)"),
        "memory_mb": ((int,), 0, "memory offered to jobs in MiB (0: physical memory)"),
        "partition": ((str,), "default", "partition this node belongs to"),
        "stepd_path": ((str,), "", "spurstepd executable (default: the one next to spurd)"),
        "launch_timeout_secs": ((int, float), 10.0, "deadline for a supervisor to start a job"),
        "kill_wait_secs": ((int, float), 5.0, "between SIGTERM and SIGKILL when a job is cancelled (Slurm's KillWait)"),
    },
    "accounting": {
        "database_url": ((str,), "", "PostgreSQL URL without password (empty: accounting off)"),
        "password_file": ((str,), "", "file holding the database password (mode 0600)"),
    },
    "auth": {
        "type": ((str,), "none", "none (local demo only) or munge"),
        "admins": ((list,), ["root"], "users (or @group) allowed to drain, resume, update nodes"),
        "munge_socket": ((str,), "/run/munge/munge.socket.2", "munged socket"),
    },
    "log": {
        "level": ((str,), "info", "debug, info, warning or error"),
    },
}


@dataclass(frozen=True)
class ClusterConfig:
    name: str = "spur"


@dataclass(frozen=True)
class ControllerConfig:
    hosts: tuple[str, ...] = ()
    listen_addr: str = ""
    raft_addr: str = ""
    peers: tuple[str, ...] = ()
    probe_addr: str = ""
    state_dir: str = ""
    raft_secret_file: str = ""
    heartbeat_timeout_secs: int = 60
    scheduler_interval_ms: int = 200
    write_timeout_secs: float = 5.0
    grpc_workers: int = 128
    append_entries_period_ms: int = 20
    election_timeout_min_ms: int = 300
    election_timeout_max_ms: int = 800
    leader_fallback_ms: int = 1000
    connection_retry_ms: int = 250
    log_compaction_entries: int = 5000
    bootstrap_probe_timeout_secs: float = 2.0
    bootstrap_wait_secs: float = 0.0
    min_job_age_secs: int = 300
    min_free_disk_mb: int = 100


@dataclass(frozen=True)
class AgentConfig:
    node_name: str = ""
    listen_addr: str = ""
    advertise_addr: str = ""
    probe_addr: str = ""
    state_dir: str = ""
    heartbeat_interval_secs: float = 5.0
    cpus: int = 0
    memory_mb: int = 0
    partition: str = "default"
    stepd_path: str = ""
    launch_timeout_secs: float = 10.0
    kill_wait_secs: float = 5.0


@dataclass(frozen=True)
class AccountingConfig:
    database_url: str = ""
    password_file: str = ""


@dataclass(frozen=True)
class AuthConfig:
    type: str = "none"
    admins: tuple[str, ...] = ("root",)
    munge_socket: str = ""


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"


@dataclass(frozen=True)
class Config:
    path: str = ""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    accounting: AccountingConfig = field(default_factory=AccountingConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    log: LogConfig = field(default_factory=LogConfig)
    # sections the schema does not know, kept verbatim (the Ansible role carries them over)
    extra: dict[str, Any] = field(default_factory=dict)


_SECTION_TYPES = {
    "cluster": ClusterConfig,
    "controller": ControllerConfig,
    "agent": AgentConfig,
    "accounting": AccountingConfig,
    "auth": AuthConfig,
    "log": LogConfig,
}


# ------------------------------------------------------------------ addresses


def split_host_port(value: str, default_port: int | None = None) -> tuple[str, int]:
    """'host:port', '[v6]:port' or 'host' (with default_port) -> (host, port); ValueError with the reason."""
    text = value.strip()
    if text.startswith("http://"):
        text = text[len("http://") :]
    text = text.rstrip("/")
    if not text:
        raise ValueError("empty address")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("unclosed '[' in IPv6 address")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError("expected ':port' after ']'")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError("IPv6 addresses need brackets, like [::1]:6817")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError("missing host")
    if not port_text:
        if default_port is None:
            raise ValueError("missing ':port'")
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"port {port_text!r} is not a number from 1 to 65535")
    _check_host(host)
    return host, int(port_text)


def _check_host(host: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    labels = host.split(".")
    for label in labels:
        if not label or len(label) > 63 or not all(c.isalnum() or c == "-" for c in label) or label[0] == "-":
            raise ValueError(f"{host!r} is neither an IP address nor a host name")


def normalize_addr(value: str, default_port: int | None = None) -> str:
    host, port = split_host_port(value, default_port)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ------------------------------------------------------------------ loading


def _fail(section: str, key: str, problem: str, fix: str) -> ConfigError:
    where = f"[{section}] {key}" if key else f"[{section}]"
    return ConfigError(f"{where}: {problem}; {fix}")


def _convert(section: str, key: str, raw: Any) -> Any:
    types, _default, _doc = SCHEMA[section][key]
    if isinstance(raw, bool) and bool not in types:
        raise _fail(section, key, f"expected {_type_names(types)}, got boolean {raw!r}", "write a value of that type")
    if not isinstance(raw, types):
        raise _fail(
            section,
            key,
            f"expected {_type_names(types)}, got {type(raw).__name__} {raw!r}",
            "write a value of that type",
        )
    if list in types:
        for item in raw:
            if not isinstance(item, str):
                raise _fail(section, key, f"expected a list of strings, found {item!r}", 'quote every item: ["a", "b"]')
        return tuple(raw)
    if float in types and isinstance(raw, int):
        return float(raw)
    return raw


def _type_names(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", bool: "true or false"}
    return " or ".join(names[t] for t in types)


def parse(text: str, path: str = "<string>") -> Config:
    """Parse TOML text into a Config, checking keys and types (not the daemon-specific rules)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix the syntax at that line") from None
    sections: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for section, body in data.items():
        if section not in SCHEMA:
            if section.startswith("x-") or section.startswith("x_"):
                extra[section] = body
                continue
            raise _fail(
                section,
                "",
                "unknown section",
                f"known sections are {', '.join('[' + s + ']' for s in SCHEMA)} (site-local sections start with x-)",
            )
        if not isinstance(body, dict):
            raise _fail(section, "", f"expected a table, got {body!r}", f"write it as [{section}] followed by keys")
        values = {}
        for key, raw in body.items():
            if key not in SCHEMA[section]:
                known = ", ".join(SCHEMA[section])
                raise _fail(section, key, "unknown key", f"remove it or use one of: {known}")
            values[key] = _convert(section, key, raw)
        sections[section] = values
    built = {}
    for section, cls in _SECTION_TYPES.items():
        defaults = {k: _convert(section, k, v[1]) for k, v in SCHEMA[section].items()}
        defaults.update(sections.get(section, {}))
        built[section] = cls(**defaults)
    return Config(path=path, extra=extra, **built)


def load(path: str | None = None, role: str | None = None) -> Config:
    """Read spur.conf from path (default $SPUR_CONF or /etc/spur/spur.conf) and validate it for role."""
    path = path or os.environ.get("SPUR_CONF") or DEFAULT_CONF_PATH
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found; create it (see docs/configuration.md) or pass --conf") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror}); check its permissions") from None
    conf = parse(text, path)
    validate(conf, role)
    return conf


# ------------------------------------------------------------------ validation


def _addr(section: str, key: str, value: str, default_port: int | None = None) -> str:
    try:
        return normalize_addr(value, default_port)
    except ValueError as exc:
        raise _fail(section, key, f"bad address {value!r} ({exc})", "write host:port, like 127.0.1.1:6817") from None


def validate(conf: Config, role: str | None) -> None:
    """Cross-key rules. role is 'controller', 'agent', 'client' or None (keys and types only)."""
    c = conf.controller
    hosts = [_addr("controller", "hosts", h, CONTROLLER_GRPC_PORT) for h in c.hosts]
    if len(set(hosts)) != len(hosts):
        dup = next(h for h in hosts if hosts.count(h) > 1)
        raise _fail("controller", "hosts", f"{dup} is listed twice", "list every controller once")
    level = conf.log.level
    if level not in ("debug", "info", "warning", "error"):
        raise _fail("log", "level", f"unknown level {level!r}", "use debug, info, warning or error")
    if conf.auth.type not in ("none", "munge"):
        raise _fail("auth", "type", f"unknown type {conf.auth.type!r}", "use munge, or none for a local demo")
    if role == "controller":
        _validate_controller(conf)
    elif role == "agent":
        _validate_agent(conf)
    elif role == "client" and not hosts:
        raise _fail("controller", "hosts", "empty", 'list the controllers, like hosts = ["ctl1:6817"]')


def _validate_controller(conf: Config) -> None:
    c = conf.controller
    if not conf.cluster.name or not all(ch.isalnum() or ch in "-_" for ch in conf.cluster.name):
        raise _fail("cluster", "name", f"bad name {conf.cluster.name!r}", "use letters, digits, '-' and '_'")
    if not c.raft_addr:
        raise _fail("controller", "raft_addr", "missing", "set it to this controller's host:port, like 127.0.1.1:6821")
    own = _addr("controller", "raft_addr", c.raft_addr, RAFT_PORT)
    if own.split(":")[0] in ("0.0.0.0", "[::]"):
        raise _fail("controller", "raft_addr", f"{c.raft_addr!r} is a wildcard", "use this controller's own address")
    _addr("controller", "listen_addr", c.listen_addr, CONTROLLER_GRPC_PORT)
    _addr("controller", "probe_addr", c.probe_addr)
    if not c.peers:
        raise _fail("controller", "peers", "empty", f'list every controller\'s raft_addr, this one included: ["{own}"]')
    peers = [_addr("controller", "peers", p, RAFT_PORT) for p in c.peers]
    if len(set(peers)) != len(peers):
        dup = next(p for p in peers if peers.count(p) > 1)
        raise _fail("controller", "peers", f"{dup} is listed twice", "list every controller once")
    if own not in peers:
        raise _fail(
            "controller",
            "peers",
            f"does not contain this controller's raft_addr {own} (peers: {', '.join(peers)})",
            "add it, or fix raft_addr",
        )
    if len(peers) == 2:
        raise _fail(
            "controller", "peers", "2 controllers cannot survive the loss of either", "use 1, 3 or 5 controllers"
        )
    if not c.state_dir:
        raise _fail("controller", "state_dir", "empty", "set a directory for the Raft journal, like /var/lib/spur/ctld")
    if c.heartbeat_timeout_secs <= 0:
        raise _fail("controller", "heartbeat_timeout_secs", f"{c.heartbeat_timeout_secs} is not positive", "use 60")
    if not 0 < c.election_timeout_min_ms < c.election_timeout_max_ms:
        raise _fail(
            "controller",
            "election_timeout_min_ms",
            f"{c.election_timeout_min_ms} must be positive and below election_timeout_max_ms "
            f"({c.election_timeout_max_ms})",
            "use 300 and 800",
        )
    if c.election_timeout_min_ms <= 3 * c.append_entries_period_ms:
        raise _fail(
            "controller",
            "append_entries_period_ms",
            f"{c.append_entries_period_ms} must be under a third of election_timeout_min_ms",
            "use 20",
        )
    if c.connection_retry_ms >= c.election_timeout_min_ms:
        raise _fail(
            "controller",
            "connection_retry_ms",
            f"{c.connection_retry_ms} must be below election_timeout_min_ms ({c.election_timeout_min_ms})",
            "use 250 (a slower reconnect makes a restarted member depose the leader)",
        )
    for key in (
        "scheduler_interval_ms",
        "grpc_workers",
        "log_compaction_entries",
        "leader_fallback_ms",
        "min_job_age_secs",
    ):
        if getattr(c, key) <= 0:
            raise _fail(
                "controller",
                key,
                f"{getattr(c, key)} is not positive",
                f"use the default {SCHEMA['controller'][key][1]}",
            )
    if c.write_timeout_secs <= 0:
        raise _fail("controller", "write_timeout_secs", f"{c.write_timeout_secs} is not positive", "use 5")
    check_secret_file("controller", "raft_secret_file", c.raft_secret_file)


def _validate_agent(conf: Config) -> None:
    a = conf.agent
    if not conf.controller.hosts:
        raise _fail("controller", "hosts", "empty", 'list the controllers the agent registers with: ["ctl1:6817"]')
    _addr("agent", "listen_addr", a.listen_addr, AGENT_GRPC_PORT)
    if a.advertise_addr:
        _addr("agent", "advertise_addr", a.advertise_addr, AGENT_GRPC_PORT)
    _addr("agent", "probe_addr", a.probe_addr)
    name = a.node_name or socket.gethostname().split(".")[0]
    if not name or not all(ch.isalnum() or ch in "-_." for ch in name):
        raise _fail("agent", "node_name", f"bad name {name!r}", "use letters, digits, '-', '_' and '.'")
    if a.cpus < 0 or a.memory_mb < 0:
        raise _fail("agent", "cpus" if a.cpus < 0 else "memory_mb", "negative", "use 0 for auto-detection")
    if a.kill_wait_secs < 0 or a.launch_timeout_secs <= 0:
        key = "kill_wait_secs" if a.kill_wait_secs < 0 else "launch_timeout_secs"
        raise _fail("agent", key, f"{getattr(a, key)} is out of range", f"use the default {SCHEMA['agent'][key][1]}")
    if a.heartbeat_interval_secs <= 0:
        raise _fail("agent", "heartbeat_interval_secs", f"{a.heartbeat_interval_secs} is not positive", "use 5")
    if a.heartbeat_interval_secs * 3 > conf.controller.heartbeat_timeout_secs:
        raise _fail(
            "agent",
            "heartbeat_interval_secs",
            f"{a.heartbeat_interval_secs} s leaves fewer than 3 beats in heartbeat_timeout_secs "
            f"({conf.controller.heartbeat_timeout_secs})",
            "lower the interval or raise the timeout",
        )
    if not a.state_dir:
        raise _fail("agent", "state_dir", "empty", "set a directory for supervisor sessions, like /var/lib/spur/agent")


def check_secret_file(section: str, key: str, path: str) -> None:
    """A secret file must exist, be a regular file, and not be readable by group or others."""
    if not path:
        raise _fail(section, key, "empty", "point it at a file with mode 0600")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _fail(section, key, f"{path} does not exist", "create it with a random secret and mode 0600") from None
    if not stat.S_ISREG(st.st_mode):
        raise _fail(section, key, f"{path} is not a regular file", "point it at a file with mode 0600")
    if st.st_mode & 0o077:
        raise _fail(section, key, f"{path} has mode {stat.S_IMODE(st.st_mode):04o}", f"run: chmod 0600 {path}")


def read_secret(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        secret = fh.read().strip()
    if not secret:
        raise ConfigError(f"{path}: the secret file is empty; write a random secret into it")
    return secret


def node_name(conf: Config) -> str:
    return conf.agent.node_name or socket.gethostname().split(".")[0]
