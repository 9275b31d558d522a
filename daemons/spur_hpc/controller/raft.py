"""The one pysyncobj SyncObj of the controller.

All replicated changes go through ONE replicated method, apply_record(record): pysyncobj numbers
replicated methods by sorted name, so adding a method per operation would silently renumber them in a
mixed-version cluster. What pysyncobj leaves undone is done here: fsync of the journal before an entry
is acknowledged, a deadline on every write, elections held back on a member that joins with an empty
store until it has caught up, and a member that cannot read a record stops instead of guessing.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any

import pysyncobj.syncobj as _syncobj_module
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.journal import FileJournal, MemoryJournal, MetaStorer
from pysyncobj.node import TCPNode
from pysyncobj.pickle import to_bytes

from spur_hpc.controller import wal
from spur_hpc.controller.raft_transport import GuardedTransport, pysyncobj_clock
from spur_hpc.controller.state import ClusterState

log = logging.getLogger("spurctld.raft")


def close_sockets_in_snapshot_child() -> None:
    """In a fork()ed child: close every inherited socket (the child's own files are opened after the fork).

    pysyncobj writes each snapshot from a fork()ed child, which inherits the daemon's listening sockets
    (Raft, gRPC, probes). A child still writing a large snapshot when spurctld stops kept those ports, so
    a restarted spurctld could not listen on them ("Address already in use") until the child was done.
    Closing the child's copies leaves the parent's sockets and connections as they are.
    """
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        try:
            fd = int(name)
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
        except (OSError, ValueError):
            pass


# spurctld forks only there: it starts no subprocesses (whose fork_exec would not run this anyway).
os.register_at_fork(after_in_child=close_sockets_in_snapshot_child)

# A joining member with an empty store does not stand for election until it caught up: with these
# timeouts its election timer never fires, so it can vote for members that hold data but never win.
_NO_ELECTION_SECS = 10.0**7


class RaftError(Exception):
    """Base of the errors a replicated write can end with."""


class NoLeaderError(RaftError):
    """No leader is known: the cluster has no quorum, or an election is running."""


class UnknownOutcomeError(RaftError):
    """The write timed out or leadership changed: it may or may not have been committed."""


class StalledError(RaftError):
    """This member stopped applying records it cannot read."""


class DiskFullError(RaftError):
    """state_dir is (nearly) full: writes are refused until space returns."""


class DiskGuard:
    """Free space under state_dir, looked up at most once a second (statvfs costs microseconds).

    The leader checks it before it takes a write; the journal checks it before every append, so a
    follower refuses replicated entries the same way (see DurableJournal).
    """

    def __init__(self, path: str, min_free_mb: int) -> None:
        self.path = path
        self.min_free = min_free_mb * 1024 * 1024
        self.checked = 0.0
        self.free = None
        self.refusing: str | None = None  # why the journal refuses appends right now (shown in /status)
        _GUARDS[os.path.abspath(path)] = self  # the journal pysyncobj creates finds its guard here

    @staticmethod
    def for_dir(path: str) -> DiskGuard:
        return _GUARDS.get(os.path.abspath(path)) or DiskGuard(path, 0)

    def free_bytes(self) -> int:
        now = time.monotonic()
        if self.free is None or now - self.checked >= 1.0:
            st = os.statvfs(self.path)
            self.free = st.f_bavail * st.f_frsize
            self.checked = now
        return self.free

    def problem(self) -> str | None:
        free = self.free_bytes()
        if free >= self.min_free:
            return None
        return (
            f"state_dir {self.path} has {free / 2**20:.1f} MB free, below [controller] min_free_disk_mb "
            f"({self.min_free // 2**20} MB); writes are refused until space is freed there"
        )

    def check(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise DiskFullError(problem)

    def full_error(self, exc: OSError, what: str) -> DiskFullError:
        """The error for a write that failed with ENOSPC although the guard let it through."""
        self.free = None  # look again: later writes are refused by check() while space is short
        free = self.free_bytes()
        return DiskFullError(
            f"state_dir {self.path} is full ({free / 2**20:.1f} MB free): cannot write {what} ({exc.strerror}); "
            "writes are refused until space is freed there"
        )

    def full_reason(self) -> str | None:
        """The disk condition for /status: None when writes are taken."""
        return self.refusing or self.problem()


_GUARDS: dict[str, DiskGuard] = {}


class _FsyncMetaStorer(MetaStorer):
    """Term and vote reach the disk before any message that reflects them is sent."""

    def storeMeta(self, meta: dict[str, Any]) -> None:  # noqa: N802 (pysyncobj's name)
        from pysyncobj.pickle import dumps

        path = self.getPath()
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(dumps(meta))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            _unlink_quietly(tmp)  # the old file stays as it was
            raise
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(path))


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# The journal file grows by this much at a time, allocated before the mmap covers it.
_JOURNAL_GROWTH = 1024 * 1024


class DurableJournal(FileJournal):
    """pysyncobj's FileJournal writes through mmap and never syncs; this one msyncs every entry before
    pysyncobj can acknowledge it (followers answer AppendEntries right after add()).

    A full disk: FileJournal grows its file with ftruncate and writes the new pages through the mmap,
    and a page the filesystem cannot allocate is a SIGBUS that kills the process with no log line. Here
    the guard is checked and the space allocated (posix_fallocate, where ENOSPC is an exception) before
    FileJournal sees the entry, so a refused entry is neither in memory nor in the file. A follower that
    refuses stays up: the exception ends the handling of that AppendEntries before the acknowledgement
    is sent, so the leader retries, and it catches up by itself once space returns. Exiting instead would
    need a supervisor to loop on a member that cannot start either, for no gain in safety.
    """

    def __init__(self, path: str, guard: DiskGuard | None = None) -> None:
        super().__init__(path)
        self._FileJournal__metaStorer = _FsyncMetaStorer(path + ".meta")
        self._bulk = False
        self.guard = guard or DiskGuard.for_dir(os.path.dirname(path) or ".")
        self._allocated = 0  # bytes of the file known to be allocated (0: holes left by older releases)

    def add(self, command: bytes, idx: int, term: int) -> None:
        if not self._bulk:  # compaction rewrites entries in place: it needs no new space
            self._make_room(28 + len(to_bytes(command)))  # size(4) idx(8) term(8) command size(4), pysyncobj's
        super().add(command, idx, term)
        if not self._bulk:
            self.flush()
            if self.guard.refusing is not None and self.guard.problem() is None:
                self.guard.refusing = None
                log.warning("state_dir %s has space again: this controller takes replicated entries again",
                            self.guard.path)

    def _make_room(self, size: int) -> None:
        try:
            self.guard.check()
            end = self._FileJournal__currentOffset + size
            if end > self._allocated:
                self._grow(end)
        except DiskFullError as exc:
            self._refuse(exc)
        except OSError as exc:
            self._refuse_if_full(exc, "the journal")

    def _grow(self, end: int) -> None:
        rf = self._FileJournal__journalFile
        target = -(-end // _JOURNAL_GROWTH) * _JOURNAL_GROWTH
        fd = rf._ResizableFile__f.fileno()
        try:  # from 0: pages an older release left unallocated are allocated too
            os.posix_fallocate(fd, 0, target)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            target = end  # no room for a whole step: room for this entry is enough
            os.posix_fallocate(fd, 0, target)
        mm = rf._ResizableFile__mm
        if len(mm) < target:
            mm.resize(target)  # the file has that size already: this only maps the allocated pages
        self._allocated = target

    def _refuse_if_full(self, exc: OSError, what: str) -> None:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise exc
        self._refuse(self.guard.full_error(exc, what))

    def _refuse(self, exc: DiskFullError) -> None:
        if self.guard.refusing is None:
            log.error("%s: this controller acknowledges no replicated entry until then, and catches up from the "
                      "leader by itself afterwards (docs/troubleshooting.md)", exc)
        self.guard.refusing = str(exc)
        raise exc

    def setCurrentTerm(self, term: int, votedForNodeId) -> None:  # noqa: N802, N803 (pysyncobj's names)
        try:
            super().setCurrentTerm(term, votedForNodeId)  # pysyncobj sends no vote when this raises
        except OSError as exc:
            self._refuse_if_full(exc, "the term and vote")

    def onOneSecondTimer(self) -> None:  # noqa: N802
        try:
            super().onOneSecondTimer()  # stores the commit index; retried next second when refused
        except OSError as exc:
            self._refuse_if_full(exc, "the commit index")

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802 (pysyncobj's name)
        # Compaction rewrites the whole tail: sync once at the end, not per entry.
        self._bulk = True
        try:
            super().deleteEntriesTo(entryTo)
        finally:
            self._bulk = False
        self.flush()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802
        super().deleteEntriesFrom(entryFrom)
        self.flush()


def _create_journal(journal_file: str | None = None):
    return DurableJournal(journal_file) if journal_file else MemoryJournal()


# pysyncobj builds its journal through this module-level name; route it to the durable journal.
_syncobj_module.createJournal = _create_journal


@dataclass(frozen=True)
class RaftSettings:
    self_addr: str
    other_addrs: tuple[str, ...]
    journal_file: str
    dump_file: str
    password: str
    append_entries_period: float = 0.02
    election_min: float = 0.3
    election_max: float = 0.8
    leader_fallback: float = 1.0
    connection_retry: float = 0.25
    compaction_entries: int = 5000
    hold_elections: bool = False
    min_free_disk_mb: int = 100


def make_syncobj_conf(s: RaftSettings) -> SyncObjConf:
    hold = s.hold_elections
    return SyncObjConf(
        journalFile=s.journal_file,
        fullDumpFile=s.dump_file,  # never journalFile alone: compaction would lose the state
        bindAddress=s.self_addr.replace("[", "").replace("]", ""),  # pysyncobj splits at the last ':'
        password=s.password,
        autoTick=False,
        appendEntriesUseBatch=True,
        appendEntriesPeriod=s.append_entries_period,
        autoTickPeriod=min(0.01, s.append_entries_period / 2),
        raftMinTimeout=_NO_ELECTION_SECS if hold else s.election_min,
        raftMaxTimeout=_NO_ELECTION_SECS + 1 if hold else s.election_max,
        # Idle follower-follower links must not be declared dead (that loses the first vote request);
        # dead peers are found by TCP keepalive and the Raft timers instead.
        connectionTimeout=_NO_ELECTION_SECS + 1 if hold else max(60.0, s.election_max),
        connectionRetryTime=s.connection_retry,
        leaderFallbackTimeout=s.leader_fallback,
        commandsWaitLeader=True,
        commandsQueueSize=20000,
        logCompactionMinEntries=s.compaction_entries,
        logCompactionMinTime=300,
        dynamicMembershipChange=False,
    )


class RaftNode(TCPNode):
    """A member named the way Spur names it ("[::1]:6821" for IPv6) that pysyncobj can dial: it splits the
    address at the last ':' and would look up "[::1]", so the host it connects to loses the brackets."""

    def __init__(self, address: str, **kwargs: Any) -> None:
        super().__init__(address, **kwargs)
        if self.host.startswith("[") and self.host.endswith("]"):
            self._TCPNode__host = self.host[1:-1]


class SpurRaft(SyncObj):
    """The replicated controller state. Attributes set before SyncObj.__init__ stay out of snapshots."""

    def __init__(self, settings: RaftSettings) -> None:
        self._settings = settings
        self._conf = make_syncobj_conf(settings)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._tick_thread: threading.Thread | None = None
        self._apply_listeners: list = []
        self._holding_elections = settings.hold_elections
        self.disk = DiskGuard(os.path.dirname(settings.journal_file) or ".", settings.min_free_disk_mb)
        self._last_tick_error = ("", 0.0)
        # Bounded frames and handshakes on the Raft port (raft_transport.py): pysyncobj buffers any length.
        super().__init__(
            settings.self_addr,
            list(settings.other_addrs),
            conf=self._conf,
            nodeClass=RaftNode,
            transportClass=GuardedTransport,
        )
        # Created after SyncObj.__init__: this is the snapshot.
        self._state = ClusterState()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._tick_thread = threading.Thread(target=self._tick_loop, name="raft-tick", daemon=True)
        self._tick_thread.start()

    def _tick_loop(self) -> None:
        period = self._conf.autoTickPeriod
        while not self._stopping.is_set():
            try:
                self.doTick(period)
            except DiskFullError:  # the journal logged it once; pysyncobj retries what it refused
                time.sleep(period)
            except Exception as exc:  # a tick must never kill the thread silently, nor flood the log
                text, when = self._last_tick_error
                if str(exc) != text or time.monotonic() - when > 10:
                    log.exception("raft tick failed (repeats of this error are logged every 10 s)")
                    self._last_tick_error = (str(exc), time.monotonic())
                time.sleep(period)

    def stop(self) -> None:
        self._stopping.set()
        if self._tick_thread is not None:
            self._tick_thread.join(timeout=5)
        try:
            self.destroy()
        except Exception:
            log.exception("raft shutdown")

    def release_elections(self) -> None:
        """A joiner that caught up takes part in elections from now on."""
        if not self._holding_elections:
            return
        s = self._settings
        self._conf.raftMinTimeout = s.election_min
        self._conf.raftMaxTimeout = s.election_max
        self._conf.connectionTimeout = max(60.0, s.election_max)
        # pysyncobj keeps the next deadline privately; restart it with the normal timeout.
        self._SyncObj__raftElectionDeadline = time.monotonic() + s.election_max
        self._holding_elections = False
        log.info("caught up with the cluster; this member now takes part in elections")

    # ---------------------------------------------------------------- the one replicated method

    @replicated
    def apply_record(self, record):
        with self._lock:
            result = self._state.apply(record)
            stalled = self._state.stalled
        if stalled is not None and result.get("code") == "stalled":
            log.critical("stopped applying the replicated log: %s", stalled["reason"])
        for listener in self._apply_listeners:
            try:
                listener(record, result)
            except Exception:
                log.exception("apply listener failed")
        return result

    def add_apply_listener(self, fn) -> None:
        """fn(record, result) runs on the tick thread after each record: keep it short, never block."""
        self._apply_listeners.append(fn)

    # ---------------------------------------------------------------- writes

    def propose(self, record: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Commit one record and return its result; raises a RaftError subclass or WalLevelError."""
        with self._lock:
            if self._state.stalled is not None:
                raise StalledError(f"this controller stopped applying the log: {self._state.stalled['reason']}")
            enabled = self._state.wal_level
        wal.check_level(record, enabled)
        self.disk.check()
        if self.leader_addr() is None and not self._conf.commandsWaitLeader:
            raise NoLeaderError("no leader")
        try:
            return self.apply_record(record, sync=True, timeout=timeout)
        except _syncobj_module.SyncObjException as exc:
            code = exc.errorCode
            if code == _syncobj_module.FAIL_REASON.MISSING_LEADER or (code == "Timeout" and self.leader_addr() is None):
                raise NoLeaderError("no controller is leader right now (no quorum or an election is running)") from None
            raise UnknownOutcomeError(
                f"the write did not complete in {timeout:.1f} s ({code}); its outcome is unknown"
            ) from None

    # ---------------------------------------------------------------- reads

    def read(self, fn):
        """Run fn(state) under the state lock and return its result (a local, possibly stale read)."""
        with self._lock:
            return fn(self._state)

    def leader_addr(self) -> str | None:
        leader = self._getLeader()
        if leader is None or (leader == self._SyncObj__selfNode and not self.is_leader()):
            return None
        return leader.id

    def is_leader(self) -> bool:
        """Leader, and a majority answered within leader_fallback. pysyncobj steps down on the same rule, but
        only on its tick thread: a leader whose tick stalls (it was flooded, or frozen) kept answering as
        leader from the other threads while the majority had elected another."""
        return self._isLeader() and self._majority_heard(self._settings.leader_fallback)

    def _majority_heard(self, within: float) -> bool:
        """A majority (this member included) answered in the last `within` seconds."""
        others = self._SyncObj__otherNodes
        deadline = pysyncobj_clock() - within  # pysyncobj's clock (CLOCK_MONOTONIC_RAW), not time.monotonic
        for _ in range(3):
            try:  # read from another thread than the tick's: it may change the dict meanwhile
                times = dict(self._SyncObj__lastResponseTime)
                heard = sum(1 for node, t in times.items() if node in others and t > deadline)
                break
            except RuntimeError:
                continue
        else:
            return False
        return 2 * (1 + heard) > len(others) + 1

    def role(self) -> str:
        state = self._SyncObj__raftState
        return {0: "follower", 1: "candidate", 2: "leader"}.get(state, "unknown")

    def term(self) -> int:
        return self._getTerm()

    def commit_index(self) -> int:
        return self.raftCommitIndex

    def applied_index(self) -> int:
        return self.raftLastApplied

    def has_quorum(self) -> bool:
        """A majority is connected; on the leader, a majority answered within half the shortest election
        timeout. No follower starts an election sooner than that after hearing from the leader, so while this
        holds no other member can have been elected, and /metrics/nodes answers 200 on one controller only."""
        if self._isLeader():
            return self._majority_heard(min(self._settings.leader_fallback, self._settings.election_min / 2))
        return self.hasQuorum

    def holding_elections(self) -> bool:
        return self._holding_elections

    def follower_match(self) -> dict[str, int]:
        """On the leader: each follower's replicated index (for lag)."""
        try:
            return {node.id: idx for node, idx in dict(self._SyncObj__raftMatchIndex).items()}
        except RuntimeError:
            return {}

    def connected_peers(self) -> list[str]:
        try:
            return sorted(n.id for n in set(self._SyncObj__connectedNodes))
        except RuntimeError:
            return []
