"""The controller's state directory: journal, snapshot, identity file, and their checks at start.

A controller never serves from files it cannot read: a truncated or corrupt journal or snapshot, or
one written by a newer release, stops the start with one line naming the file and the way out.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import pickle
import stat
import struct
from dataclasses import dataclass
from typing import Any

from spur_hpc.controller.state import StateFormatError

log = logging.getLogger("spurctld")

JOURNAL = "raft.journal"
DUMP = "raft.dump"
IDENTITY = "cluster.json"
IDENTITY_FORMAT = 1

# pysyncobj 0.3.17 FileJournal layout: name(24) version(8) format(4) last_record_offset(4), then records
# of size(4) + [idx(8) term(8) command] + size(4).
_HEADER = 40
_LAST_OFFSET_AT = 36
_JOURNAL_MAGIC = b"PYSYNCOBJ"

RECOVERY_HINT = (
    "to recover, stop this controller, move its state_dir aside and start it again: it rejoins the "
    "cluster from the other members (docs/reliability.md)"
)


class StorageError(Exception):
    """A state file cannot be trusted; the message names the file and the recovery."""


@dataclass(frozen=True)
class StatePaths:
    state_dir: str

    @property
    def journal(self) -> str:
        return os.path.join(self.state_dir, JOURNAL)

    @property
    def dump(self) -> str:
        return os.path.join(self.state_dir, DUMP)

    @property
    def identity(self) -> str:
        return os.path.join(self.state_dir, IDENTITY)


def prepare(paths: StatePaths) -> None:
    try:
        os.makedirs(paths.state_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"[controller] state_dir {paths.state_dir}: cannot create it ({exc.strerror})") from None
    if not os.access(paths.state_dir, os.W_OK):
        raise StorageError(f"[controller] state_dir {paths.state_dir}: not writable by this user; fix its owner")


def tighten_state_dir(state_dir: str) -> None:
    """Take group and other access off the state directory and everything in it (an older release, or a
    directory made by hand, may have left them readable), and say so once."""
    fixed = []
    for root, _dirs, files in os.walk(state_dir):
        for path in [root] + [os.path.join(root, name) for name in files]:
            st = os.stat(path) if path == state_dir else os.lstat(path)  # state_dir itself may be a symlink
            if stat.S_ISLNK(st.st_mode) or not stat.S_IMODE(st.st_mode) & 0o077:
                continue
            try:
                os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
            except OSError as exc:
                raise StorageError(
                    f"[controller] state_dir {state_dir}: cannot make {path} private ({exc.strerror}); fix its owner"
                ) from None
            fixed.append(f"{os.path.relpath(path, state_dir)} {stat.S_IMODE(st.st_mode):04o}")
    if fixed:
        log.warning(
            "[controller] state_dir %s was open to other users (%s): fixed, now for this user only (0700/0600)",
            state_dir,
            ", ".join(fixed[:5]) + (f" and {len(fixed) - 5} more" if len(fixed) > 5 else ""),
        )


def journal_records(path: str) -> int:
    """Count the records of a pysyncobj journal, checking its structure; StorageError when damaged."""
    return len(journal_commands(path))


def journal_commands(path: str) -> list[bytes]:
    """The command bytes of every record of a pysyncobj journal, checking its structure."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return []
    if len(data) < _HEADER or not data.startswith(_JOURNAL_MAGIC):
        raise StorageError(f"journal {path} has no valid header (truncated or not a journal); {RECOVERY_HINT}")
    (last,) = struct.unpack_from("<I", data, _LAST_OFFSET_AT)
    if last < _HEADER or last > len(data):
        raise StorageError(
            f"journal {path} says it holds {last} bytes but the file has {len(data)} (truncated); {RECOVERY_HINT}"
        )
    offset, count, commands = _HEADER, 0, []
    while offset < last:
        if offset + 4 > last:
            raise StorageError(f"journal {path} is damaged at byte {offset}; {RECOVERY_HINT}")
        (size,) = struct.unpack_from("<I", data, offset)
        end = offset + 4 + size
        if size < 16 or end + 4 > last or struct.unpack_from("<I", data, end)[0] != size:
            raise StorageError(f"journal {path} is damaged at byte {offset} (record {count + 1}); {RECOVERY_HINT}")
        commands.append(data[offset + 4 + 16 : end])
        offset = end + 4
        count += 1
    return commands


def check_dump(path: str) -> bool:
    """True when a snapshot exists and this release can read it; StorageError when it cannot."""
    return load_dump_state(path) is not None


def load_dump_state(path: str) -> Any:
    """The ClusterState inside a snapshot, None without one; StorageError when it cannot be read."""
    if not os.path.exists(path):
        return None
    try:
        with gzip.open(path, "rb") as fh:
            data = pickle.load(fh)
    except StateFormatError as exc:
        raise StorageError(f"snapshot {path}: {exc}; install the release that wrote it or a newer one") from None
    except Exception as exc:
        raise StorageError(f"snapshot {path} cannot be read ({type(exc).__name__}: {exc}); {RECOVERY_HINT}") from None
    if not isinstance(data, tuple) or len(data) < 4 or not isinstance(data[0], dict) or "_state" not in data[0]:
        raise StorageError(f"snapshot {path} is not a Spur controller snapshot; {RECOVERY_HINT}")
    return data[0]["_state"]


def read_identity(paths: StatePaths) -> dict[str, Any] | None:
    try:
        with open(paths.identity, encoding="utf-8") as fh:
            identity = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StorageError(f"identity file {paths.identity} cannot be read ({exc}); {RECOVERY_HINT}") from None
    if identity.get("format", 0) > IDENTITY_FORMAT:
        raise StorageError(f"identity file {paths.identity} was written by a newer release; install it or a newer one")
    return identity


def recover_identity(paths: StatePaths) -> dict[str, Any] | None:
    """Cluster identity from the replicated data itself when cluster.json is missing (a crash right after
    the first bootstrap): the snapshot's state, else the journal's cluster_init record."""
    state = load_dump_state(paths.dump)
    if state is not None and state.cluster_id:
        return {"cluster_name": state.cluster_name, "cluster_id": state.cluster_id, "members": list(state.members)}
    for command in journal_commands(paths.journal):
        # pysyncobj stores a regular command as a type byte (0) and a pickle of (method id, args, kwargs).
        if not command or command[0] != 0:
            continue
        try:
            _method, args, _kwargs = pickle.loads(command[1:])
        except Exception:
            continue
        record = args[0] if args else None
        if isinstance(record, dict) and record.get("op") == "cluster_init":
            return {
                "cluster_name": record["name"],
                "cluster_id": record["cluster_id"],
                "members": sorted(record["members"]),
            }
    return None


def write_identity(paths: StatePaths, name: str, cluster_id: str, members: list[str]) -> None:
    body = json.dumps(
        {"format": IDENTITY_FORMAT, "cluster_name": name, "cluster_id": cluster_id, "members": sorted(members)},
        indent=2,
    )
    atomic_write(paths.identity, body.encode())


def atomic_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write to a temporary file, fsync, rename into place, fsync the directory."""
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def has_data(paths: StatePaths) -> bool:
    """True when this member holds Raft state of its own (then it never asks peers before starting)."""
    has_dump = check_dump(paths.dump)
    records = journal_records(paths.journal)
    # pysyncobj writes one NO_OP record into a fresh journal; more than that is real state.
    return has_dump or records > 1 or os.path.exists(paths.identity)
