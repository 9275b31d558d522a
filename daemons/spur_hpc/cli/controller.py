"""Talking to the controllers: where they are, which one to ask, what to do when one does not answer.

Addresses come from SPUR_CONTROLLER_ADDR (comma-separated host:port, an http:// prefix accepted), else from
[controller] hosts of spur.conf ($SPUR_CONF or /etc/spur/spur.conf). Every call walks the controllers as
wire.failover decides: the last one that answered first, the leader a refusal names next, the rest in
order. Reads take the first answer and wait READ_PATIENCE_SECS at most for an election; writes may go to any
controller (followers forward to the leader) and are retried for failover.WRITE_PATIENCE_SECS. A write is
sent byte-for-byte the same on every try, so a submission's idempotency key makes a retry return the first
job instead of creating a second one.
"""

from __future__ import annotations

import os
import stat
import time

from spur_hpc import auth, model
from spur_hpc.cli.runner import CliError
from spur_hpc.wire import failover, grpcwire, protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_CONF_PATH = "/etc/spur/spur.conf"  # spur_hpc.conf.DEFAULT_CONF_PATH (a unit test keeps them equal)
SERVICE = "SlurmController"
READ_PATIENCE_SECS = 3.0
CALL_TIMEOUT_SECS = 15.0
RETRY_PAUSE_SECS = failover.PAUSE_SECS  # read at every call, so that a test can lengthen it


def _with_port(address: str) -> str:
    return model.with_port(address, model.CONTROLLER_GRPC_PORT)


def _strip_comment(line: str) -> str:
    quote = ""
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            return line[:index]
    return line


def hosts_from_conf_text(text: str) -> list[str] | None:
    """[controller] hosts from spur.conf text, read without tomllib (which costs ~10 ms to import).

    Only the plain form is read (hosts = ["a:1", 'b'], on one or more lines); anything else answers None and
    the caller falls back to the full, validating loader (spur_hpc.conf)."""
    section = ""
    value = ""
    collecting = False
    for raw in text.splitlines():
        line = _strip_comment(raw).strip()
        if collecting:
            value += " " + line
        elif line.startswith("["):
            section = line.strip("[] \t") if not line.startswith("[[") else ""
            continue
        elif section == "controller" and line.partition("=")[0].strip() == "hosts":
            value = line.partition("=")[2].strip()
            collecting = True
        if collecting and "]" in value:
            break
    if not collecting or not value.startswith("[") or not value.endswith("]"):
        return None
    hosts = []
    for item in value[1:-1].split(","):
        item = item.strip()
        if not item:
            continue
        if len(item) < 2 or item[0] not in "\"'" or item[-1] != item[0] or item[0] in item[1:-1]:
            return None
        hosts.append(item[1:-1])
    return hosts


def controller_addresses(environ: Mapping[str, str] | None = None) -> list[str]:
    """The controllers to try, in order; CliError when none are configured or an address is malformed."""
    environ = os.environ if environ is None else environ
    raw = environ.get("SPUR_CONTROLLER_ADDR", "").strip()
    if raw:
        addresses = [_with_port(part) for part in raw.split(",") if part.strip()]
        source = "SPUR_CONTROLLER_ADDR"
    else:
        path = environ.get("SPUR_CONF") or DEFAULT_CONF_PATH
        try:
            with open(path, encoding="utf-8") as fh:
                hosts = hosts_from_conf_text(fh.read())
        except (OSError, UnicodeDecodeError):
            hosts = None  # the full loader below says what is wrong with the file
        if not hosts:
            from spur_hpc import conf

            try:
                hosts = list(conf.load(path, role="client").controller.hosts)
            except conf.ConfigError as exc:
                raise CliError(f"{exc} (or set SPUR_CONTROLLER_ADDR=host:port)") from None
        addresses = [_with_port(host) for host in hosts]
        source = f"[controller] hosts in {path}"
    for address in addresses:
        try:
            grpcwire.split_address(address)
        except ValueError as exc:
            raise CliError(f"{exc} (from {source})") from None
    if not addresses:
        raise CliError(f"no controller address in {source}; set it to host:port, like 127.0.1.1:6817")
    return list(dict.fromkeys(addresses))


# Above this size an answer is decoded by the protobuf runtime (C), whose import costs 30-60 ms once but
# which parses 10,000 jobs in a few ms where protocodec, pure Python, takes over half a second.
LARGE_REPLY_BYTES = 64 * 1024


def _decode(reply_type: str, data: bytes, address: str) -> Any:
    try:
        if len(data) > LARGE_REPLY_BYTES:
            return _decode_with_runtime(reply_type, data)
        return protocodec.decode(reply_type, data)
    except protocodec.ProtoError as exc:
        raise grpcwire.RpcError("INTERNAL", f"the answer of {address} is not a valid {reply_type} ({exc})") from None


def _decode_with_runtime(reply_type: str, data: bytes) -> Any:
    from google.protobuf.message import DecodeError

    try:
        return _runtime_class(reply_type).FromString(data)
    except DecodeError as exc:
        raise protocodec.ProtoError(str(exc)) from None


_RUNTIME_CLASSES: dict[str, Any] = {}


def _runtime_class(reply_type: str) -> Any:
    """reply_type's message class from the protobuf runtime's C core (upb), built from the descriptor that
    slurm_pb2.py carries without importing slurm_pb2: that import also loads descriptor.py, descriptor_pool.py
    and the builder's Python, about 17 of its 26 ms. slurm_pb2's own class with any other runtime."""
    if reply_type not in _RUNTIME_CLASSES:
        cls = None
        serialized = serialized_descriptor()
        if serialized is not None:
            try:
                from google._upb import _message
                from google.protobuf import message

                pool = _message.DescriptorPool()
                pool.AddSerializedFile(serialized)
                descriptor = pool.FindMessageTypeByName(f"{protocodec.schema().package}.{reply_type}")
                # as google.protobuf.message_factory builds a class (upb makes the nested ones when first read)
                with _no_well_known_types():
                    cls = _message.MessageMeta(
                        reply_type, (message.Message,), {"DESCRIPTOR": descriptor, "__module__": None}
                    )
            except (ImportError, AttributeError, TypeError, ValueError, KeyError):  # another runtime: slurm_pb2
                cls = None
        if cls is None:
            from spur_hpc.proto import slurm_pb2

            cls = getattr(slurm_pb2, reply_type)
        _RUNTIME_CLASSES[reply_type] = cls
    return _RUNTIME_CLASSES[reply_type]


_WELL_KNOWN_TYPES = "google.protobuf.internal.well_known_types"


class _no_well_known_types:
    """While upb makes its first message class, a stand-in for the module of the well-known types' methods
    (Timestamp.ToDatetime...), which upb imports then to look up its class's mixin (WKTBASES): importing it loads
    datetime, calendar, locale, re, enum, typing and descriptor.py, 13 ms of CPU in a squeue of 0.1 s. slurm.proto
    imports no other .proto, so it uses no well-known type (a unit test keeps it so) and no class here needs one."""

    def __enter__(self) -> None:
        import sys
        import types

        self.stand_in = None
        if _WELL_KNOWN_TYPES not in sys.modules:
            self.stand_in = sys.modules[_WELL_KNOWN_TYPES] = types.ModuleType(_WELL_KNOWN_TYPES)
            self.stand_in.WKTBASES = {}

    def __exit__(self, *exc: object) -> None:
        import sys

        if self.stand_in is not None and sys.modules.get(_WELL_KNOWN_TYPES) is self.stand_in:
            del sys.modules[_WELL_KNOWN_TYPES]  # a later import gets the real module


def serialized_descriptor() -> bytes | None:
    """The serialized FileDescriptorProto of slurm.proto, read from the bytes literal protoc writes into
    slurm_pb2.py (AddSerializedFile(b'...')), or None when that file does not have it in that form."""
    import codecs

    path = os.path.join(os.path.dirname(protocodec.PROTO_PATH), "slurm_pb2.py")
    marker = b"AddSerializedFile(b'"
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError:
        return None
    start = text.find(marker)
    end = text.find(b"')\n", start) if start >= 0 else -1
    if end < 0:
        return None
    try:
        return codecs.escape_decode(text[start + len(marker) : end])[0]
    except ValueError:
        return None


# ------------------------------------------------------------------ the leader hint

# A write sent to a follower is passed on to the leader inside the cluster (about 25 ms more per sbatch on this
# machine), so the address that last turned out to be the leader is kept between commands in a small file of
# the user's own. It only orders the tries: it names no identity (MUNGE authenticates the caller, not the
# controller), it is read only when it names a configured controller, and a wrong or dead one costs one try.
LEADER_HINT_FILE = "spur-leader"
LEADER_HINT_FRESH_SECS = 60.0  # older than this, the next write asks the controller that served it (one Ping)


def leader_hint_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """$XDG_RUNTIME_DIR, else /tmp/spur-$UID (made 0700 when absent): a directory only this user can write,
    or None (the hint is then neither read nor kept)."""
    environ = os.environ if environ is None else environ
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    directory = runtime if runtime.startswith("/") else f"/tmp/spur-{os.getuid()}"
    try:
        if directory != runtime:
            try:
                os.mkdir(directory, 0o700)
            except FileExistsError:
                pass
        info = os.lstat(directory)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None  # a link, someone else's, or writable by others: not a place to take a hint from
    return directory


def _hint_key(addresses: list[str]) -> str:
    return ",".join(addresses)  # one hint per set of controllers (a user may talk to several clusters)


def read_leader_hint(addresses: list[str], now: float, environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """(the hinted leader, whether the hint is fresh) for these controllers; ("", False) when none applies."""
    directory = leader_hint_dir(environ)
    if directory is None:
        return "", False
    try:
        fd = os.open(os.path.join(directory, LEADER_HINT_FILE), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            fields = fh.read(4096).decode("utf-8", "replace").split()
    except OSError:
        return "", False
    if len(fields) != 3 or fields[2] != _hint_key(addresses) or fields[1] not in addresses:
        return "", False
    try:
        written = float(fields[0])
    except ValueError:
        return "", False
    return fields[1], 0 <= now - written < LEADER_HINT_FRESH_SECS


def write_leader_hint(addresses: list[str], leader: str, now: float, environ: Mapping[str, str] | None = None) -> None:
    """Keep leader as the hint for these controllers (mode 0600, replaced atomically); any failure is ignored:
    the hint is an optimisation, never a reason for a command to fail."""
    directory = leader_hint_dir(environ)
    if directory is None or leader not in addresses:
        return
    path = os.path.join(directory, LEADER_HINT_FILE)
    scratch = f"{path}.{os.getpid()}"
    try:
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{int(now)} {leader} {_hint_key(addresses)}\n")  # whole seconds, rounded down
        os.replace(scratch, path)
    except OSError:
        try:
            os.unlink(scratch)
        except OSError:
            pass


class ControllerClient:
    """Calls SlurmController methods by name with dict requests; answers are protocodec Messages (generated
    messages when large: both read alike)."""

    def __init__(
        self,
        addresses: list[str] | None = None,
        read_patience: float = READ_PATIENCE_SECS,
        write_patience: float = failover.WRITE_PATIENCE_SECS,
        call_timeout: float = CALL_TIMEOUT_SECS,
    ) -> None:
        self.addresses = addresses if addresses is not None else controller_addresses()
        self.read_patience = read_patience
        self.write_patience = write_patience
        self.call_timeout = call_timeout
        self.connections: dict[str, grpcwire.Connection] = {}
        self.last_answered: str | None = None
        self.leader_hint: tuple[str, bool] | None = None  # (address, fresh) once read

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()

    def has_method(self, method: str) -> bool:
        return method in protocodec.schema().services[SERVICE]

    def call_one(self, address: str, method: str, request: Mapping[str, Any] | None = None) -> protocodec.Message:
        """One try at one controller (no failover): for questions about that controller itself, like Ping."""
        schema = protocodec.schema()
        request_type, reply_type = schema.services[SERVICE][method]
        body = protocodec.encode(request_type, request or {}, schema)
        data, _metadata = self._connection(address).call(
            f"/{schema.package}.{SERVICE}/{method}", body, self.call_timeout, auth.client_metadata()
        )
        return _decode(reply_type, data, address)

    def _connection(self, address: str) -> grpcwire.Connection:
        if address not in self.connections:
            self.connections[address] = grpcwire.Connection(address)
        return self.connections[address]

    def call(self, method: str, request: Mapping[str, Any] | None = None, write: bool = False) -> protocodec.Message:
        schema = protocodec.schema()
        methods = schema.services[SERVICE]
        if method not in methods:
            raise CliError(f"the installed slurm.proto has no {SERVICE}.{method}; reinstall spur-hpc")
        request_type, reply_type = methods[method]
        body = protocodec.encode(request_type, request or {}, schema)
        path = f"/{schema.package}.{SERVICE}/{method}"
        patience = self.write_patience if write else self.read_patience
        prefer = self.last_answered
        # Reads too go to the hinted leader first: a follower answers from what it has applied, which may not
        # yet hold the write the previous command made (`scontrol update ...; sinfo`, as Slurm scripts do).
        if prefer is None:
            if self.leader_hint is None:
                self.leader_hint = read_leader_hint(self.addresses, time.time())
            prefer = self.leader_hint[0] or None
        policy = failover.Failover(
            self.addresses, time.monotonic() + patience, write=write, prefer=prefer, pause=RETRY_PAUSE_SECS
        )
        for address in policy:
            try:
                # A fresh credential per try: munged refuses a replayed one.
                data, _metadata = self._connection(address).call(path, body, self.call_timeout, auth.client_metadata())
            except grpcwire.RpcError as exc:
                if exc.code not in failover.RETRY_CODES:
                    self.last_answered = address
                    raise
                hint = exc.leader_hint()
                policy.failed(
                    address,
                    exc.details.removeprefix(f"cannot reach controller {address}: "),
                    hint=_with_port(hint) if hint else None,
                    reachable=not exc.details.startswith("cannot reach"),
                )
                continue
            self.last_answered = address
            if write:
                self._learn_leader(address)
            return _decode(reply_type, data, address)
        raise grpcwire.RpcError(
            "UNAVAILABLE",
            f"no controller could answer {method} ({policy.summary()}); check that spurctld runs and that "
            "SPUR_CONTROLLER_ADDR or [controller] hosts point at it",
        )

    def _learn_leader(self, address: str) -> None:
        """After a write that address served: keep the leader for the next command, asking address who leads
        (one Ping on the open connection) unless a fresh hint already named address."""
        if self.leader_hint is None or self.leader_hint == (address, True):
            return  # the hint was not consulted (an earlier call answered) or is confirmed by this answer
        try:
            reply = self.call_one(address, "Ping")
        except (grpcwire.RpcError, OSError):
            return
        leader = address if reply.role == "leader" else _with_port(reply.leader) if reply.leader else ""
        if leader:
            write_leader_hint(self.addresses, leader, time.time())
        self.leader_hint = (leader, True)


def list_partitions(client: ControllerClient, names: list[str] | None = None) -> Any:
    """ListPartitions' reply (every partition, or those named, in configured order), or None from a controller of
    a release before it (the caller then takes the partitions the nodes name, nodeview.partitions_of)."""
    if not client.has_method("ListPartitions"):
        return None
    try:
        return client.call("ListPartitions", {"names": list(names or [])})
    except grpcwire.RpcError as exc:
        if exc.code != "UNIMPLEMENTED":
            raise
        return None
