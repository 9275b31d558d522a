"""Finding every process of a job, to signal or kill the whole tree.

Two ways, picked per host:
- cgroup: the job gets its own cgroup v2 directory; membership is exact (a setsid()'d or double-forked
  child stays inside) and cgroup.kill ends the whole tree at once.
- process tree: where cgroup v2 is missing or not writable. The supervisor is a child subreaper, so an
  orphaned descendant of the job is re-parented to it instead of to init; every descendant of the
  supervisor is therefore the job's, whatever session or process group it moved to.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import signal
import time

log = logging.getLogger("spurstepd.tracking")

PR_SET_CHILD_SUBREAPER = 36
CGROUP_PARENT = "spur"


def become_subreaper() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("cannot become a child subreaper (%s)", os.strerror(ctypes.get_errno()))
        return False
    return True


def find_cgroup2_mount(mounts_file: str = "/proc/mounts") -> str | None:
    """The cgroup v2 mount point (the unified root, or /sys/fs/cgroup/unified on a hybrid host)."""
    try:
        with open(mounts_file, encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 3 and fields[2] == "cgroup2":
                    # /proc/mounts escapes blanks in paths as octal (\040).
                    return fields[1].encode().decode("unicode_escape")
    except OSError:
        return None
    return None


class Tracker:
    method = "none"

    def place(self, pid: int) -> None:
        """Put a freshly forked child (which has not started the job yet) under tracking."""

    def pids(self) -> list[int]:
        raise NotImplementedError

    def signal(self, sig: int, exclude: int = 0) -> int:
        """Deliver sig to every process of the job (but pid `exclude`); returns how many were signalled."""
        count = 0
        for pid in self.pids():
            if pid == exclude:
                continue
            try:
                os.kill(pid, sig)
                count += 1
            except ProcessLookupError:
                pass
        return count

    def stop(self, stopped: bool) -> str:
        """scontrol suspend (stopped) / resume: SIGSTOP / SIGCONT to every process; says what was done."""
        sig = signal.SIGSTOP if stopped else signal.SIGCONT
        return f"{sig.name} to {self.signal(sig)} processes"

    def kill_all(self) -> None:
        # Repeat: a process may fork between listing and killing; a killed one cannot fork again.
        for _ in range(50):
            if not self.signal(signal.SIGKILL):
                return
            time.sleep(0.01)

    def alive(self) -> bool:
        return bool(self.pids())

    def wait_empty(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() >= end:
                return False
            time.sleep(0.02)
        return True

    def cleanup(self) -> None:
        """Remove what tracking created, once the job has no process left."""

    def describe(self) -> str:
        return self.method


def agent_cgroup_dir(mount: str, node: str, state_dir: str) -> str:
    """<mount>/spur/<node>-<8 hex digits of the agent's state directory>: the parent of its jobs' cgroups.

    Job ids and node names repeat between clusters, so two agents on one machine (a second cluster, a test
    beside a demo) would otherwise share job_<id>_<attempt>, and one would kill the other's job as its own
    leftover. The agent's state directory is what no two agents on a machine share.
    """
    digest = hashlib.sha256(os.path.realpath(state_dir).encode()).hexdigest()[:8]
    return os.path.join(mount, CGROUP_PARENT, f"{node}-{digest}")


class CgroupTracker(Tracker):
    method = "cgroup"

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls, mount: str, node: str, state_dir: str, job_id: int, attempt: int, step: str = "") -> CgroupTracker:
        """mkdir <agent_cgroup_dir>/job_<id>_<attempt>[_step_<step>]; raises OSError when the host does not
        allow it. A step's supervisor has a cgroup of its own beside its job's batch script's."""
        parent = agent_cgroup_dir(mount, node, state_dir)
        os.makedirs(parent, exist_ok=True)
        path = os.path.join(parent, f"job_{job_id}_{attempt}" + (f"_step_{step}" if step else ""))
        tracker = cls(path)
        try:
            os.mkdir(path)
        except FileExistsError:
            # Left by a supervisor that died with this very (job, attempt): nothing else can own it.
            if tracker.alive():
                log.warning("cgroup %s still holds processes of an earlier run of this attempt: killing them", path)
                tracker.kill_all()
                tracker.wait_empty(5.0)
        return tracker

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def place(self, pid: int) -> None:
        with open(self._file("cgroup.procs"), "w", encoding="ascii") as fh:
            fh.write(str(pid))

    def pids(self) -> list[int]:
        try:
            with open(self._file("cgroup.procs"), encoding="ascii") as fh:
                return [int(line) for line in fh if line.strip()]
        except FileNotFoundError:
            return []

    def alive(self) -> bool:
        try:
            with open(self._file("cgroup.events"), encoding="ascii") as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "populated":
                        return value.strip() == "1"
        except FileNotFoundError:
            return False
        return bool(self.pids())

    def stop(self, stopped: bool) -> str:
        """The cgroup v2 freezer (cgroup.freeze): the whole tree stops at once, a process forked meanwhile too.
        A resume also sends SIGCONT, for a process stopped by signal (a freeze that was not available then)."""
        try:
            with open(self._file("cgroup.freeze"), "w", encoding="ascii") as fh:
                fh.write("1" if stopped else "0")
        except OSError as exc:
            log.info("cgroup.freeze of %s: %s; signals instead", self.path, exc.strerror or exc)
            return super().stop(stopped)
        return "cgroup.freeze=1" if stopped else f"cgroup.freeze=0 and {super().stop(False)}"

    def kill_all(self) -> None:
        try:
            # cgroup.kill (Linux 5.14+) kills every member atomically, setsid()'d children included.
            with open(self._file("cgroup.kill"), "w", encoding="ascii") as fh:
                fh.write("1")
            return
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("writing %s failed (%s); killing its processes one by one", self._file("cgroup.kill"), exc)
        super().kill_all()

    def cleanup(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    log.warning("cannot remove cgroup %s: %s", self.path, exc.strerror)
                    return
                time.sleep(0.02)
        log.warning("cgroup %s stays busy; leaving it", self.path)

    def describe(self) -> str:
        return f"cgroup {self.path}"


class ProcessTreeTracker(Tracker):
    """Every live descendant of this process (a subreaper): the job and anything it left behind."""

    method = "process-tree"

    def __init__(self, root_pid: int | None = None) -> None:
        self.root = root_pid or os.getpid()

    def pids(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            fields = data[data.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X"):
                continue  # already dead; the supervisor reaps it
            children.setdefault(int(fields[1]), []).append(int(entry))
        found: list[int] = []
        todo = list(children.get(self.root, ()))
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, ()))
        return found

    def describe(self) -> str:
        return f"process tree of supervisor pid {self.root}"


def cgroup_of_record(path: str) -> CgroupTracker | None:
    """A tracker for a cgroup path read from a supervisor record, only when it lies where we create them."""
    mount = find_cgroup2_mount()
    if not path or mount is None:
        return None
    real = os.path.realpath(path)
    if not real.startswith(os.path.join(mount, CGROUP_PARENT) + os.sep) or not os.path.isdir(real):
        return None
    return CgroupTracker(real)
