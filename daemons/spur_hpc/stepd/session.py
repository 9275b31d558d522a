"""Session directories: one per (job, attempt) under [agent] state_dir, shared by spurd and spurstepd.

A session directory is owned by the daemon's uid with mode 0700 and holds only files of mode 0600.
Everything is opened relative to a directory file descriptor with O_NOFOLLOW, so a planted symlink is
refused instead of followed, and every record is written to a temporary file, fsynced and renamed into
place, so a crash never leaves half a record behind. Records carry a sha256 of their body: a truncated
or edited record is refused with a message that names the file and what is wrong with it.

A job step's supervisor (srun's step N.M on this node) has a session of its own,
<state_dir>/<job_id>.<attempt>.<step_id>: the batch session's name is unchanged, so a spurd that meets
sessions written before steps existed reads them as before.

Layout of <state_dir>/<job_id>.<attempt>[.<step_id>]/:
  launch.json      what to run (written by spurd before it starts the supervisor)
  script           the batch script (written by spurd; empty for a step, whose launch record names its command)
  supervisor.json  supervisor pid, its start time, the job pid, how the job's processes are tracked
  result.json      how the job ended (written by spurstepd, deleted with the session once reported)
  stepd.sock       the supervisor's unix socket (status, wait, signal, release)
  stepd.log        the supervisor's log
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("spur.session")

RECORD_FORMAT = 1
SESSION_NAME = re.compile(r"^(\d{1,18})\.(\d{1,9})(?:\.(\d{1,9}))?$")
LAUNCH_FILE = "launch.json"
SCRIPT_FILE = "script"
SUPERVISOR_FILE = "supervisor.json"
RESULT_FILE = "result.json"
SOCKET_FILE = "stepd.sock"
LOG_FILE = "stepd.log"
# Large enough for any sane batch script, small enough that a corrupt size cannot exhaust memory.
MAX_RECORD_BYTES = 16 * 1024 * 1024


class SessionError(Exception):
    """A session directory or record that is unsafe or unreadable; the message names it and why."""


def session_name(job_id: int, attempt: int, step: str = "") -> str:
    return f"{job_id}.{attempt}.{step}" if step else f"{job_id}.{attempt}"


def parse_session_name(name: str) -> tuple[int, int] | None:
    """(job_id, attempt) of a batch or step session's name; None when it is not one."""
    match = SESSION_NAME.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def session_step(name: str) -> str:
    """The step id of a step session's name ("" for a batch session)."""
    match = SESSION_NAME.match(name)
    return (match.group(3) or "") if match else ""


def _check_owner_mode(what: str, st: os.stat_result, want_type: str) -> None:
    is_dir = stat.S_ISDIR(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        raise SessionError(f"{what} is a symlink; refusing to follow it")
    if want_type == "dir" and not is_dir:
        raise SessionError(f"{what} is not a directory")
    if want_type == "file" and not stat.S_ISREG(st.st_mode):
        raise SessionError(f"{what} is not a regular file")
    if st.st_uid != os.geteuid():
        raise SessionError(f"{what} is owned by uid {st.st_uid}, expected {os.geteuid()}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        expected = "0700" if is_dir else "0600"
        raise SessionError(f"{what} has mode {stat.S_IMODE(st.st_mode):04o}, expected {expected}")


def open_state_dir(path: str, create: bool = True) -> int:
    """Open (creating it 0700 if asked) the state directory and return its fd.

    The state directory itself may be a symlink an administrator placed (the path is configuration),
    but it must belong to this uid and not be group/world accessible: a looser mode is tightened.
    """
    if create:
        os.makedirs(path, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise SessionError(f"state_dir {path} is owned by uid {st.st_uid}, expected {os.geteuid()}")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
            log.warning(
                "state_dir %s had mode %04o (job scripts and environments open to other users): fixed, now 0700",
                path,
                stat.S_IMODE(st.st_mode),
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def encode_record(kind: str, body: dict[str, Any]) -> bytes:
    envelope = {"format": RECORD_FORMAT, "kind": kind, "sha256": _digest(body), "body": body}
    return (json.dumps(envelope, sort_keys=True, indent=1) + "\n").encode()


def decode_record(what: str, kind: str, data: bytes) -> dict[str, Any]:
    try:
        envelope = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SessionError(f"{what} is corrupt or truncated ({len(data)} bytes: {exc})") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("body"), dict):
        raise SessionError(f"{what} is not a session record")
    if envelope.get("format") != RECORD_FORMAT:
        raise SessionError(
            f"{what} has record format {envelope.get('format')!r}; this release reads format {RECORD_FORMAT}"
        )
    if envelope.get("kind") != kind:
        raise SessionError(f"{what} holds a {envelope.get('kind')!r} record, expected {kind!r}")
    if envelope.get("sha256") != _digest(envelope["body"]):
        raise SessionError(f"{what} fails its checksum (edited or partly written)")
    return envelope["body"]


@dataclass
class SessionDir:
    """An open, verified session directory. All access goes through its directory fd."""

    path: str
    fd: int
    job_id: int
    attempt: int
    step: str = ""  # "" for the batch session; "0", "1", ... for a step's

    @property
    def name(self) -> str:
        return session_name(self.job_id, self.attempt, self.step)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def fd_path(self, name: str) -> str:
        """A short path to a file in this directory through /proc (unix socket paths are capped at 108 bytes)."""
        return f"/proc/self/fd/{self.fd}/{name}"

    # -- reading ----------------------------------------------------------------------------
    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def read_bytes(self, name: str, limit: int = MAX_RECORD_BYTES) -> bytes:
        what = f"{self.path}/{name}"
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == 40:  # ELOOP: the final component is a symlink
                raise SessionError(f"{what} is a symlink; refusing to follow it") from None
            raise
        try:
            st = os.fstat(fd)
            _check_owner_mode(what, st, "file")
            if st.st_size > limit:
                raise SessionError(f"{what} is {st.st_size} bytes, more than the {limit} a record may hold")
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_record(self, name: str, kind: str) -> dict[str, Any]:
        return decode_record(f"{self.path}/{name}", kind, self.read_bytes(name))

    def read_record_if_present(self, name: str, kind: str) -> dict[str, Any] | None:
        try:
            return self.read_record(name, kind)
        except FileNotFoundError:
            return None

    # -- writing ----------------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes) -> None:
        """Write name atomically: temp file (0600, O_EXCL, O_NOFOLLOW) + fsync + rename + fsync of the dir."""
        tmp = f".{name}.tmp"
        try:
            os.unlink(tmp, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        os.fsync(self.fd)

    def write_record(self, name: str, kind: str, body: dict[str, Any]) -> None:
        self.write_bytes(name, encode_record(kind, body))

    def open_log(self) -> int:
        """The supervisor's log file (append, 0600, never through a symlink)."""
        return os.open(
            LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd
        )

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass


def _verify_entry(state_fd: int, state_path: str, name: str) -> tuple[int, int, os.stat_result]:
    ids = parse_session_name(name)
    what = f"session {state_path}/{name}"
    if ids is None:
        raise SessionError(f"{what}: not a session name (expected <job_id>.<attempt>[.<step_id>])")
    st = os.stat(name, dir_fd=state_fd, follow_symlinks=False)
    _check_owner_mode(what, st, "dir")
    return ids[0], ids[1], st


def open_session(state_fd: int, state_path: str, name: str) -> SessionDir:
    """Open an existing session directory after checking it is a real directory we own with mode 0700."""
    job_id, attempt, st = _verify_entry(state_fd, state_path, name)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=state_fd)
    except OSError as exc:
        if exc.errno in (20, 40):  # ENOTDIR / ELOOP: swapped for something else after the check
            raise SessionError(f"session {state_path}/{name} changed under us; refusing it") from None
        raise
    st2 = os.fstat(fd)
    if (st2.st_dev, st2.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise SessionError(f"session {state_path}/{name} changed under us; refusing it")
    return SessionDir(path=f"{state_path}/{name}", fd=fd, job_id=job_id, attempt=attempt, step=session_step(name))


def open_session_path(path: str) -> SessionDir:
    """Open a session by its full path (spurstepd is given one on its command line)."""
    parent, name = os.path.split(os.path.normpath(path))
    state_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_session(state_fd, parent, name)
    finally:
        os.close(state_fd)


def create_session(state_fd: int, state_path: str, job_id: int, attempt: int, step: str = "") -> SessionDir:
    name = session_name(job_id, attempt, step)
    os.mkdir(name, 0o700, dir_fd=state_fd)
    os.fsync(state_fd)
    return open_session(state_fd, state_path, name)


def remove_session(state_fd: int, name: str) -> None:
    """Remove a session tree without following any symlink inside it (rmtree's fd-based walk)."""
    st = os.stat(name, dir_fd=state_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=state_fd)
    else:
        os.unlink(name, dir_fd=state_fd)
    os.fsync(state_fd)


def list_session_names(state_fd: int) -> Iterator[str]:
    with os.scandir(state_fd) as entries:
        names = sorted(e.name for e in entries)
    yield from names


def proc_start_ticks(pid: int) -> int | None:
    """Start time of pid in clock ticks since boot (field 22 of /proc/pid/stat), None when pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # a zombie has ended; only its parent has not collected it yet
        return None
    return int(fields[19])


def pid_matches(pid: int, start_ticks: int) -> bool:
    """True when pid is alive and is the same process (same start time) that a record names."""
    return pid > 0 and proc_start_ticks(pid) == start_ticks


# The Job fields a launch record carries besides its spec (SLURM_ARRAY_*, SLURM_RESTART_COUNT, %A/%a); a record
# written before they existed lacks them, and readers take 0 (launch_job_field).
LAUNCH_JOB_FIELDS = ("array_job_id", "array_task_id", "restart_count")


def launch_job_field(launch: dict[str, Any], key: str) -> int:
    """One of LAUNCH_JOB_FIELDS from a launch record; 0 when an older record lacks it."""
    value = launch.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def write_launch(
    session: SessionDir,
    node: str,
    nodes: list[str],
    spec: dict[str, Any],
    script: bytes,
    job_fields: dict[str, int] | None = None,
    enforce: dict[str, Any] | None = None,
    step: dict[str, Any] | None = None,
) -> None:
    """Write the script, then the launch record that names its checksum (spurd, before starting spurstepd).

    job_fields: the Job's LAUNCH_JOB_FIELDS (array_job_id, array_task_id, restart_count), 0 when absent.
    enforce: what spurstepd enforces (stepd/enforce.py: the node allocation, [cgroup], gres files).
    step: for a step session, this node's part of the step (its task ids, the command, the I/O address and
    token); its script is then empty."""
    session.write_bytes(SCRIPT_FILE, script)
    fields = job_fields or {}
    body = {
        "job_id": session.job_id,
        "attempt": session.attempt,
        "node": node,
        "nodes": list(nodes) or [node],
        "spec": spec,
        "script_sha256": hashlib.sha256(script).hexdigest(),
        **{key: int(fields.get(key, 0)) for key in LAUNCH_JOB_FIELDS},
    }
    if step is not None:
        body["step"] = step
    if enforce is not None:
        body["enforce"] = enforce
    session.write_record(LAUNCH_FILE, "launch", body)


def write_step_launch(
    session: SessionDir,
    node: str,
    nodes: list[str],
    spec: dict[str, Any],
    step: dict[str, Any],
    enforce: dict[str, Any] | None = None,
    job_fields: dict[str, int] | None = None,
) -> None:
    """A step session's launch record: write_launch with an empty script and this node's part of the step."""
    write_launch(session, node, nodes, spec, b"", job_fields, enforce, step=step)
