"""The one pysyncobj SyncObj of the controller.

All replicated changes go through ONE replicated method, apply_record(record): pysyncobj numbers
replicated methods by sorted name, so adding a method per operation would silently renumber them in a
mixed-version cluster. What pysyncobj leaves undone is done here: the journal synced before an entry
is acknowledged or sent (group commit: once per batch, see DurableJournal), a deadline on every write,
elections held back on a member that joins with an empty store until it has caught up, a member that
cannot read a record stops instead of guessing, and the membership followed from the replicated state
(ClusterState.members and .learners, changed by member_change records; controller/membership.py): pysyncobj's
own dynamic membership is left off, see follow_membership.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import stat
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

import pysyncobj.syncobj as _syncobj_module
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.journal import FileJournal, MemoryJournal, MetaStorer, ResizableFile
from pysyncobj.node import TCPNode
from pysyncobj.pickle import to_bytes
from pysyncobj.pipe_notifier import PipeNotifier

from spur_hpc import conf
from spur_hpc.controller import wal
from spur_hpc.controller.raft_transport import RAFT_BATCH_BYTES, GuardedTransport, pysyncobj_clock
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


def yield_cpu_in_snapshot_child() -> None:
    """In a fork()ed snapshot writer: the lowest CPU priority. Pickling the whole state took a core for a good part
    of a second per 20,000 jobs on each member at once, and the serving processes lost that time: 64 clients
    submitted at 1,100-1,200 jobs/s with snapshots every 5,000 entries, 1,500 without. Nothing waits for a snapshot
    (the journal keeps every entry until it is written), so it can use what the controllers leave idle."""
    try:
        os.nice(19)
    except OSError:
        pass


# spurctld forks only there: it starts no subprocesses (whose fork_exec would not run this anyway).
os.register_at_fork(after_in_child=close_sockets_in_snapshot_child)
os.register_at_fork(after_in_child=yield_cpu_in_snapshot_child)

# A stop waits this long for a snapshot being written, then kills the writer: the journal holds every entry anyway.
SNAPSHOT_STOP_WAIT_SECS = 5.0
# A snapshot is also written after this long with fewer entries than the threshold (pysyncobj's logCompactionMinTime).
SNAPSHOT_EVERY_SECS = 300
# While a follower is sent a snapshot no new one is written, until the journal holds this many times the threshold
# (see SpurRaft._sending_snapshot).
SNAPSHOT_SEND_HOLDS_COMPACTION_UP_TO = 10

# A joining member with an empty store does not stand for election until it caught up: with these
# timeouts its election timer never fires, so it can vote for members that hold data but never win.
_NO_ELECTION_SECS = 10.0**7

# A follower with nothing to apply waits up to this long between ticks (woken at once by a message, a proposal or
# a call for the tick thread, and never past its election deadline). Ticking every 10 ms regardless was most of
# an idle controller's CPU (2.5-3.5 % of a core each, the tick thread's).
IDLE_TICK_SECS = 0.1


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


def end_orphan_snapshot_writers(dump_file: str) -> list[int]:
    """Before the store is opened: kill the processes that still write dump_file's temporary file (a snapshot
    writer forked by a spurctld that was killed, which outlives it) and remove the file; returns their pids.
    Left running, such a writer renames its snapshot into place after this process loaded the store, or shares
    the temporary file with this process's own writer (see SpurRaft._end_snapshot_writer)."""
    tmp = os.path.realpath(dump_file + ".tmp")
    if not os.path.exists(tmp):
        return []
    killed = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            holds = any(os.readlink(f"/proc/{name}/fd/{fd}") == tmp for fd in os.listdir(f"/proc/{name}/fd"))
        except OSError:  # gone, or not ours to look at
            continue
        if holds:
            try:
                os.kill(int(name), signal.SIGKILL)
                killed.append(int(name))
            except OSError:
                pass
    _unlink_quietly(tmp)
    if killed:
        log.warning("killed the snapshot writer(s) %s a previous spurctld left writing %s", killed, tmp)
    return killed


def _fsync_dir(path: str) -> None:
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# The journal file grows by this much at a time, allocated before the mmap covers it.
_JOURNAL_GROWTH = 1024 * 1024
# pysyncobj 0.3.17 FileJournal: the header's last 4 bytes (at 36) are the end of the last record.
_LAST_RECORD_OFFSET_AT = 36


class DurableJournal(FileJournal):
    """pysyncobj's FileJournal writes through mmap and never syncs; this one is synced (fdatasync of its file)
    before anything that carries or acknowledges its new entries leaves the
    process: group commit. add() only writes; SpurRaft calls sync() once per batch, on the leader after the
    commands of one tick were appended and before every AppendEntries, on a follower after the entries of
    one AppendEntries were appended and before its answer (see SpurRaft). A clean stop syncs too (_destroy).

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
        self._path = path
        self._FileJournal__metaStorer = _FsyncMetaStorer(path + ".meta")
        self._bulk = False
        self.guard = guard or DiskGuard.for_dir(os.path.dirname(path) or ".")
        self._allocated = 0  # bytes of the file known to be allocated (0: holes left by older releases)
        self._dirty = False  # entries were added since the last sync
        self.syncs = 0  # syncs done (read by /status and the group commit tests)

    def add(self, command: bytes, idx: int, term: int) -> None:
        if not self._bulk:  # compaction rewrites entries in place: it needs no new space
            self._make_room(28 + len(to_bytes(command)))  # size(4) idx(8) term(8) command size(4), pysyncobj's
        super().add(command, idx, term)
        self._dirty = True
        if not self._bulk:
            if self.guard.refusing is not None and self.guard.problem() is None:
                self.guard.refusing = None
                log.warning(
                    "state_dir %s has space again: this controller takes replicated entries again", self.guard.path
                )

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
            log.error(
                "%s: this controller acknowledges no replicated entry until then, and catches up from the "
                "leader by itself afterwards (docs/troubleshooting.md)",
                exc,
            )
        self.guard.refusing = str(exc)
        raise exc

    def setCurrentTerm(self, term: int, votedForNodeId) -> None:  # noqa: N802, N803 (pysyncobj's names)
        try:
            super().setCurrentTerm(term, votedForNodeId)  # pysyncobj sends no vote when this raises
        except OSError as exc:
            self._refuse_if_full(exc, "the term and vote")

    def onOneSecondTimer(self) -> None:  # noqa: N802
        try:
            self.sync()  # the commit index stored next never points past the synced journal
            super().onOneSecondTimer()  # stores the commit index; retried next second when refused
        except OSError as exc:
            self._refuse_if_full(exc, "the commit index")

    @property
    def dirty(self) -> bool:
        return self._dirty

    def sync(self) -> None:
        """Make every entry added so far durable; a no-op when nothing was added. fdatasync of the journal's file,
        not msync of the mapping: on Linux both write back the pages written through the mmap and flush the
        disk, but CPython's mmap.flush holds the GIL through the msync (every other thread of the controller,
        the API's among them, stopped for each batch's sync: 43 % of a loaded submission run), os.fdatasync
        releases it."""
        if not self._dirty:
            return
        os.fdatasync(self._FileJournal__journalFile._ResizableFile__f.fileno())
        self._dirty = False
        self.syncs += 1

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802 (pysyncobj's name)
        """Compaction: keep the entries from entryTo on. FileJournal rewrites them in place from the first
        record, so a crash in the middle left a journal that ends part-way (the entries after that point
        gone from this member, and its stored commit index past the end). Here the tail is written to a new
        file, synced and renamed over the journal: a crash leaves the old journal or the new one, whole."""
        entries = self._FileJournal__journal[entryTo:]
        old = self._FileJournal__journalFile
        header = bytes(old.read(0, _LAST_RECORD_OFFSET_AT))
        records = []
        for command, idx, term in entries:
            data = struct.pack("<QQ", idx, term) + to_bytes(command)
            size = struct.pack("<I", len(data))
            records.append(size + data + size)
        body = b"".join(records)
        end = _LAST_RECORD_OFFSET_AT + 4 + len(body)
        path = self._path
        tmp = path + ".compact"
        try:
            with open(tmp, "wb") as fh:
                fh.write(header + struct.pack("<I", end) + body)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            _unlink_quietly(tmp)
            self._refuse_if_full(exc, "the compacted journal")
            return
        old._destroy()
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(path))
        self._FileJournal__journalFile = ResizableFile(path)
        self._FileJournal__journal = list(entries)
        self._FileJournal__currentOffset = end
        self._allocated = 0  # allocated again (posix_fallocate) by the next add
        self._dirty = False

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802
        super().deleteEntriesFrom(entryFrom)  # rewrites the header's end through the mmap
        self._dirty = True
        self.sync()

    def _destroy(self) -> None:
        self.sync()  # a clean stop leaves nothing unsynced (FileJournal._destroy msyncs too, then closes)
        super()._destroy()


def _create_journal(journal_file: str | None = None):
    return DurableJournal(journal_file) if journal_file else MemoryJournal()


# pysyncobj builds its journal through this module-level name; route it to the durable journal.
_syncobj_module.createJournal = _create_journal


def _controller_default(key: str):
    return conf.SCHEMA["controller"][key].default


@dataclass(frozen=True)
class RaftSettings:
    """What spurctld gives SpurRaft from [controller]; the defaults are spur.conf's (conf.SCHEMA), in seconds."""

    self_addr: str
    other_addrs: tuple[str, ...]
    journal_file: str
    dump_file: str
    password: str
    append_entries_period: float = _controller_default("append_entries_period_ms") / 1000
    election_min: float = _controller_default("election_timeout_min_ms") / 1000
    election_max: float = _controller_default("election_timeout_max_ms") / 1000
    leader_fallback: float = _controller_default("leader_fallback_ms") / 1000
    connection_retry: float = _controller_default("connection_retry_ms") / 1000
    compaction_entries: int = _controller_default("log_compaction_entries")
    compaction_job_ratio: float = _controller_default("log_compaction_job_ratio")
    hold_elections: bool = False
    min_free_disk_mb: int = _controller_default("min_free_disk_mb")


def make_syncobj_conf(s: RaftSettings) -> SyncObjConf:
    hold = s.hold_elections
    return SyncObjConf(
        journalFile=s.journal_file,
        fullDumpFile=s.dump_file,  # never journalFile alone: compaction would lose the state
        bindAddress=s.self_addr.replace("[", "").replace("]", ""),  # pysyncobj splits at the last ':'
        password=s.password,
        autoTick=False,
        appendEntriesUseBatch=True,
        # larger batches for a follower that is behind (raft_transport.RAFT_BATCH_BYTES)
        appendEntriesBatchSizeBytes=RAFT_BATCH_BYTES,
        logCompactionBatchSize=RAFT_BATCH_BYTES,
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
        logCompactionMinTime=SNAPSHOT_EVERY_SECS,
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
        end_orphan_snapshot_writers(settings.dump_file)
        self._settings = settings
        self._conf = make_syncobj_conf(settings)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._tick_thread: threading.Thread | None = None
        self._apply_listeners: list = []
        self._state_listeners: list = []
        self._holding_elections = settings.hold_elections
        self.disk = DiskGuard(os.path.dirname(settings.journal_file) or ".", settings.min_free_disk_mb)
        self._last_tick_error = ("", 0.0)
        # The watchdog's facts (controller/status.py): why the tick thread ended, and when this member last knew a
        # leader (heard from one, or was one). Updated by the tick thread only, so a tick that never returns (a
        # stuck journal write) ages it too. Counted from the start: a member that never finds a leader trips it.
        self.core_error: str | None = None
        self._leader_seen = time.monotonic()
        self._wakeup: list[PipeNotifier] = []  # filled after SyncObj.__init__ (it needs the poller)
        self._commit_sent = 0  # the commit index the leader's last AppendEntries carried (_checkCommandsToApply)
        # Membership (follow_membership): the (voters, learners) last given to pysyncobj, the raft addresses that
        # receive the log without voting (read by GuardedTransport when a connection completes), removed voters
        # still sent the log until their deadline so they learn of their removal, and calls for the tick thread.
        self._membership_view: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self.learner_addrs: frozenset[str] = frozenset()
        self._leaving: dict[str, float] = {}
        self._tick_calls: list = []
        self._tick_calls_lock = threading.Lock()
        self.removed = False  # the committed membership no longer lists this controller
        self._snapshot_started = 0.0  # wall time pysyncobj last forked a snapshot writer (see _end_snapshot_writer)
        self._snapshot_jobs = 0  # jobs in the state the last snapshot wrote (compaction_threshold)
        # Bounded frames and handshakes on the Raft port (raft_transport.py): pysyncobj buffers any length.
        super().__init__(
            settings.self_addr,
            list(settings.other_addrs),
            conf=self._conf,
            nodeClass=RaftNode,
            transportClass=GuardedTransport,
        )
        # A command wakes the tick thread at once (pysyncobj does it only without batching): with group
        # commit it is appended, synced and sent in that tick instead of waiting for the next heartbeat.
        self._wakeup.append(PipeNotifier(self._poller))
        serializer = self._SyncObj__serializer
        fork_writer = serializer.serialize

        def serialize(data, entry_id):
            self._snapshot_started = time.time()
            self._snapshot_jobs = len(self._state.jobs)
            return fork_writer(data, entry_id)

        serializer.serialize = serialize
        send_chunk, receive_chunk = serializer.getTransmissionData, serializer.setTransmissionData
        serializer.getTransmissionData = lambda node: self._snapshot_chunk_to_send(send_chunk, node)
        serializer.setTransmissionData = lambda data: self._receive_snapshot_chunk(receive_chunk, data)
        # Created after SyncObj.__init__: this is the snapshot.
        self._state = ClusterState()

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._leader_seen = time.monotonic()  # loading the store (in SyncObj.__init__) is not time without a leader
        self._tick_thread = threading.Thread(target=self._tick_loop, name="raft-tick", daemon=True)
        self._tick_thread.start()

    def _tick_loop(self) -> None:
        try:
            self._ticks()
        except BaseException as exc:  # what _ticks does not catch ends the core: keep why for the probes
            self.core_error = f"{type(exc).__name__}: {exc}"
            raise

    def _ticks(self) -> None:
        period = self._conf.autoTickPeriod
        while not self._stopping.is_set():
            try:
                self._hold_election_while_applying()
                self.doTick(self._tick_wait(period))
                self.follow_membership()
                self._run_tick_calls()
                if self.leader_addr() is not None:
                    self._leader_seen = time.monotonic()
            except DiskFullError:  # the journal logged it once; pysyncobj retries what it refused
                time.sleep(period)
            except Exception as exc:  # a tick must never kill the thread silently, nor flood the log
                text, when = self._last_tick_error
                if str(exc) != text or time.monotonic() - when > 10:
                    log.exception("raft tick failed (repeats of this error are logged every 10 s)")
                    self._last_tick_error = (str(exc), time.monotonic())
                time.sleep(period)

    def _tick_wait(self, period: float) -> float:
        """How long the next tick may wait for a socket event or a wake-up (see IDLE_TICK_SECS). A leader waits
        until its next AppendEntries (its heartbeat) is due; a member that is applying, not yet listening, or has
        calls queued for the tick thread waits `period`."""
        now = pysyncobj_clock()
        if self._isLeader():
            return min(IDLE_TICK_SECS, max(0.001, self._SyncObj__newAppendEntriesTime - now))
        if (
            self.raftCommitIndex > self.raftLastApplied
            or self._tick_calls
            or not self._SyncObj__transport.ready
            or self._SyncObj__raftState != _syncobj_module._RAFT_STATE.FOLLOWER
        ):
            return period
        return max(period, min(IDLE_TICK_SECS, self._SyncObj__raftElectionDeadline - now))

    def stop(self) -> None:
        """Stop the tick thread, then sync and close the journal from this thread alone. Closing it while a
        tick still appended (the tick had 5 s to end before) could leave the stored commit index past the
        journal's end: pysyncobj then clamps it at the next start and the entries past the end are gone."""
        self._stopping.set()
        thread = self._tick_thread
        if thread is not None:
            thread.join(timeout=30)
            if thread.is_alive():
                log.error("the raft tick did not end within 30 s of the stop: journal synced, left open")
                self._sync_journal()
                return
        try:
            self._end_snapshot_writer(SNAPSHOT_STOP_WAIT_SECS)
            self._sync_journal()
            self._journal.onOneSecondTimer()  # the commit index, after the entries it covers
            self.destroy()
        except Exception:
            log.exception("raft shutdown")

    def _end_snapshot_writer(self, wait: float) -> None:
        """After the tick ended: a snapshot that pysyncobj's forked child is still writing is waited for (a finished
        one compacts the journal as on the tick), else the child is killed.

        Left running, the child outlived this process and renamed its snapshot into place after the stop, while
        the journal still began before it: at the next start pysyncobj, finding a journal that does not begin at
        the snapshot, replaced the journal with the snapshot's two boundary entries, and every entry after the
        snapshot's was gone (`raftCommitIndex exceeds journal end ... clamping`: acknowledged writes lost on a
        single controller). And the restarted controller's own writer, opening the same raft.dump.tmp, had the
        two write one file (its rename then failed: `Failed to store full dump`). A killed writer leaves the
        previous snapshot and the whole journal; one killed just after its rename is compacted here."""
        serializer = self._SyncObj__serializer
        deadline = time.monotonic() + wait
        while serializer._Serializer__pid > 0 and time.monotonic() < deadline:
            self._SyncObj__tryLogCompaction()  # reaps the child; on success deletes the entries it covers
            time.sleep(0.05)
        if serializer._Serializer__pid <= 0:
            return
        renamed = self._kill_snapshot_writer()
        if renamed:
            self._SyncObj__deleteEntriesTo(serializer._Serializer__currentID)
        log.warning(
            "stopped the snapshot writer %s s into its work (%s); the journal holds every entry",
            f"{time.time() - self._snapshot_started:.0f}",
            "its snapshot was in place: journal compacted to it" if renamed else "the previous snapshot stays",
        )

    def _kill_snapshot_writer(self) -> bool:
        """Kill and reap the forked snapshot writer, if one runs, and remove its temporary file; True when it had
        renamed its snapshot into place already (the journal may then be compacted to it)."""
        serializer = self._SyncObj__serializer
        pid = serializer._Serializer__pid
        if pid <= 0:
            return False
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        serializer._Serializer__pid = 0
        dump = self._settings.dump_file
        tmp = dump + ".tmp"
        renamed = not os.path.exists(tmp) and os.path.exists(dump) and os.stat(dump).st_mtime >= self._snapshot_started
        _unlink_quietly(tmp)
        return renamed

    def _SyncObj__loadDumpFile(self, clearJournal):  # noqa: N802, N803 (pysyncobj's private name)
        """Load the snapshot at start, keeping the journal's entries after it.

        pysyncobj keeps the journal only when it begins exactly at the snapshot's two boundary entries, and
        otherwise replaces it with them. A kill -9 after the forked writer renamed its snapshot into place and
        before the journal was compacted leaves a journal that begins before the snapshot and goes on after it:
        replacing it dropped every entry after the snapshot (acknowledged writes that only the journal held).
        That journal is compacted to the snapshot here first, so pysyncobj finds it beginning at the boundary and
        keeps the rest. A snapshot received from the leader (clearJournal) replaces the journal, as it must.

        The next snapshot's threshold (compaction_threshold) counts from the loaded state's jobs: counted from 0,
        a controller restarted with 100,000 jobs wrote its first snapshot after log_compaction_entries."""
        try:
            return self._load_snapshot(clearJournal)
        finally:
            self._snapshot_jobs = len(self._state.jobs)

    def _load_snapshot(self, clear_journal: bool):
        load = SyncObj._SyncObj__loadDumpFile
        serializer = self._SyncObj__serializer
        if clear_journal:
            return load(self, clear_journal)
        try:
            data = serializer.deserialize()
        except Exception:
            return load(self, clear_journal)  # it reads the snapshot again and logs why it cannot
        self._compact_journal_to_snapshot(before=data[2], last=data[1])
        serializer.deserialize = lambda: data  # read once: a snapshot of 100,000 jobs takes seconds to unpickle
        try:
            return load(self, clear_journal)
        finally:
            del serializer.deserialize  # the class's method again

    def _compact_journal_to_snapshot(self, before: tuple, last: tuple) -> None:
        """Drop the journal's entries before the snapshot's boundary entries (before, last: (command, index, term)),
        when the journal holds them: the compaction a crash interrupted, done now."""
        journal = self._journal
        at = before[1] - journal[0][1] if len(journal) else -1
        if at <= 0 or at + 1 >= len(journal):
            return  # it begins at the snapshot already, or ends before the snapshot's last entry (pysyncobj's cases)
        if journal[at] != before or journal[at + 1] != last:
            log.warning(
                "the journal's entries %d and %d differ from the snapshot's: the snapshot replaces the journal",
                before[1],
                last[1],
            )
            return
        kept = len(journal) - at - 2
        journal.deleteEntriesTo(at)
        log.warning(
            "the journal began before the snapshot (a crash between the snapshot and the journal's compaction): "
            "compacted to the snapshot's entry %d, the %d entries after it kept",
            last[1],
            kept,
        )

    # ---------------------------------------------------------------- group commit
    # pysyncobj appends on its tick thread only: on the leader in _checkCommandsToApply (the commands that
    # queued since the last tick) and when it becomes leader (a no-op), on a follower while handling one
    # AppendEntries. The journal is synced once for each of those batches, before the first message that
    # carries the entries (AppendEntries) or acknowledges them (a follower's next_node_idx) is sent. A
    # client's write is answered after it is applied, which needs a majority's acknowledgements, so every
    # answered write is on the disk of a majority.

    @property
    def _journal(self):
        return self._SyncObj__raftLog

    def _sync_journal(self) -> None:
        journal = self._journal
        if getattr(journal, "dirty", False):
            journal.sync()

    def _applyCommand(self, command, callback, commandType=None):  # noqa: N802, N803 (pysyncobj's names)
        super()._applyCommand(command, callback, commandType)
        self._wake_tick()

    def _wake_tick(self) -> None:
        """End the tick thread's wait for socket events now (a proposal, a call for it)."""
        if self._wakeup:
            try:
                self._wakeup[0].notify()
            except BlockingIOError:  # the pipe is full: the tick thread is being woken already
                pass

    def _checkCommandsToApply(self):  # noqa: N802 (pysyncobj's name)
        before = len(self._journal)
        super()._checkCommandsToApply()
        if not self._isLeader():
            return
        # New entries are sent now, not at the next heartbeat (one sync for every command of this tick), and so is
        # a commit index the followers have not been told: with batched AppendEntries pysyncobj would leave it to
        # the next heartbeat, and a follower would answer reads without the jobs just acknowledged for that long
        # (squeue or sprio right after sbatch, on a follower, missed them).
        if len(self._journal) != before or self.raftCommitIndex > self._commit_sent:
            self._SyncObj__sendAppendEntries()

    def _SyncObj__sendAppendEntries(self):  # noqa: N802 (pysyncobj's private name)
        self._sync_journal()
        self._commit_sent = self.raftCommitIndex
        SyncObj._SyncObj__sendAppendEntries(self)

    def _SyncObj__sendNextNodeIdx(self, node, reset=False, nextNodeIdx=None, success=False):  # noqa: N802, N803
        self._sync_journal()  # a follower's answer to one AppendEntries: its entries synced once
        SyncObj._SyncObj__sendNextNodeIdx(self, node, reset=reset, nextNodeIdx=nextNodeIdx, success=success)

    # ---------------------------------------------------------------- catch-up
    # pysyncobj's leader sends a follower that is behind several AppendEntries in one tick (up to
    # appendEntriesPeriod of sending), moving nextIndex past each, but the first acknowledgement then set nextIndex
    # back to just after that batch: every batch still in flight was sent again, and each duplicate made the
    # follower truncate and re-append the entries after it (pysyncobj truncates from prevLogIdx + 1 whenever it has
    # more entries; "truncating already-applied log entries" in the log). A 50,000-entry catch-up on a loaded host
    # took 136 s, with 23 elections. Here a success moves nextIndex forward only; a reset (a mismatch) still moves it
    # back, as Raft has it.

    def _SyncObj__onMessageReceived(self, node, message):  # noqa: N802 (pysyncobj's private name)
        if (
            message.get("type") == "next_node_idx"
            and message.get("success")
            and not message.get("reset")
            and self._SyncObj__raftState == _syncobj_module._RAFT_STATE.LEADER
        ):
            sent = self._SyncObj__raftNextIndex.get(node)
            SyncObj._SyncObj__onMessageReceived(self, node, message)
            nxt = self._SyncObj__raftNextIndex
            if sent is not None and node in nxt and nxt[node] < sent:
                nxt[node] = sent  # batches past the acknowledged one are in flight: not sent again
            return
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    # ---------------------------------------------------------------- snapshots
    # A snapshot (a forked writer pickling the whole state) costs in proportion to the state; taken every
    # log_compaction_entries entries whatever the state's size, its cost per entry grew with the queue (at 50,000
    # jobs a writer was nearly always running beside the leader, on every member at once). Waiting for as many
    # entries as the last snapshot held jobs (times log_compaction_job_ratio) keeps it constant: a growing queue
    # is written at 2x, 4x ... its first size, a steady one of N jobs every N entries, as Redis rewrites its
    # append-only file once it has grown by a share of its size at the last rewrite.

    def _SyncObj__tryLogCompaction(self):  # noqa: N802 (pysyncobj's private name)
        threshold = self.compaction_threshold()
        conf = self._conf
        if self._sending_snapshot() and len(self._journal) < SNAPSHOT_SEND_HOLDS_COMPACTION_UP_TO * threshold:
            # A finished writer is still reaped (and the journal compacted to it); no new one starts.
            conf.logCompactionMinEntries, conf.logCompactionMinTime = len(self._journal), float("inf")
        else:
            conf.logCompactionMinEntries, conf.logCompactionMinTime = threshold, SNAPSHOT_EVERY_SECS
        SyncObj._SyncObj__tryLogCompaction(self)

    def compaction_threshold(self) -> int:
        """Journal entries past which the next snapshot is written."""
        s = self._settings
        return max(s.compaction_entries, int(s.compaction_job_ratio * self._snapshot_jobs))

    # ---------------------------------------------------------------- snapshot transmission
    # A follower behind the leader's snapshot is sent the snapshot file in chunks over several ticks. pysyncobj sends
    # none while a writer runs and, when a writer finishes, drops every transmission under way (the follower begins
    # the file again). With snapshots every few hundred entries in a burst, and the writer at nice 19 on a busy host
    # (it ran for tens of seconds beside CPU-bound processes), a follower restarted by kill -9 waited past 30 s
    # without a single complete snapshot (CI of stop 31). Here the complete snapshot on disk is sent while the next
    # one is written (the writer renames its file into place: an open transmission reads the old one to its end),
    # and no new snapshot starts while one is being sent, unless the journal grew past
    # SNAPSHOT_SEND_HOLDS_COMPACTION_UP_TO times the threshold (a follower that takes that long costs disk only).

    def _sending_snapshot(self) -> bool:
        transmissions = self._SyncObj__serializer._Serializer__transmissions
        members = self._SyncObj__otherNodes | self._SyncObj__readonlyNodes
        for node in [n for n in transmissions if n not in members]:
            transmissions.pop(node, None)  # a member removed in the middle of its transmission
        return bool(transmissions)

    def _snapshot_chunk_to_send(self, send_chunk, node):
        serializer = self._SyncObj__serializer
        writer = serializer._Serializer__pid
        if writer and not os.path.exists(self._settings.dump_file):
            return None  # the first snapshot is still being written: nothing complete to send yet
        serializer._Serializer__pid = 0  # what getTransmissionData checks: the file on disk is complete
        try:
            return send_chunk(node)
        finally:
            serializer._Serializer__pid = writer

    def _receive_snapshot_chunk(self, receive_chunk, data) -> bool:
        """A follower's own writer, still writing its older state when the leader's last chunk arrives, would
        rename that over the received snapshot after it was loaded: at the next start the snapshot would be older
        than the journal, and pysyncobj would replace the journal (entries this member acknowledged, gone). The
        writer is ended before the received file is put in place."""
        if data is not None and data[2]:  # the last chunk
            self._kill_snapshot_writer()
        return receive_chunk(data)

    def _SyncObj__onBecomeLeader(self):  # noqa: N802 (pysyncobj's private name)
        """A snapshot transmission begun in an earlier term of this member (it kept its position while another
        led) would go on from the middle of the file: the follower, which began the file again from another
        leader's first chunk, appended the rest to it and could not load it ("invalid load key"). Begin anew."""
        serializer = self._SyncObj__serializer
        for node in list(self._SyncObj__otherNodes | self._SyncObj__readonlyNodes):
            serializer.cancelTransmisstion(node)
        SyncObj._SyncObj__onBecomeLeader(self)

    @property
    def self_addr(self) -> str:
        return self._settings.self_addr

    def journal_syncs(self) -> int:
        return getattr(self._journal, "syncs", 0)

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

    # ---------------------------------------------------------------- membership
    # pysyncobj's dynamicMembershipChange applies a change when the entry is appended, undoes it when the entry is
    # truncated, and keeps the member set in its own snapshot beside ours; it has no learner and cannot remove the
    # member that proposes. Here the membership is the replicated state's (member_change records, applied in log
    # order, in our snapshot and fingerprint) and takes effect on every member when that record is applied, as
    # etcd's Raft does: one change at a time (the state refuses a second while a learner joins, and each record
    # names the voters it was decided on), and a member does not stand for election while it has committed
    # records it has not applied, so it never counts votes with a membership older than the committed one.

    def _SyncObj__connectedToAnyone(self) -> bool:  # noqa: N802 (pysyncobj's private name)
        """Asked by pysyncobj only once a follower's election deadline has passed, right before it stands.

        pysyncobj judges that deadline at the start of a tick, just after the journal's once-a-second sync, and
        reads its sockets at the end of the tick. A tick thread held up in between (an fsync on a busy disk, a
        loaded host) finds the deadline passed while the leader's appends wait unread in the socket, and a
        healthy leader was deposed: 56 elections in one 50,000-entry fill on a loaded machine. Read what waits
        first; stand only if the deadline has still passed and this member is still a follower or candidate."""
        self._poller.poll(0)
        states = _syncobj_module._RAFT_STATE
        if self._SyncObj__raftState not in (states.FOLLOWER, states.CANDIDATE):
            return False
        if self._SyncObj__raftElectionDeadline >= pysyncobj_clock():
            return False
        return SyncObj._SyncObj__connectedToAnyone(self)

    def _hold_election_while_applying(self) -> None:
        if self.raftCommitIndex > self.raftLastApplied and not self._holding_elections:
            deadline = self._SyncObj__raftElectionDeadline
            now = pysyncobj_clock()
            if deadline < now + self._conf.autoTickPeriod:
                self._SyncObj__raftElectionDeadline = now + self._conf.autoTickPeriod

    def follow_membership(self) -> None:
        """On the tick thread: give pysyncobj the committed voters and learners once this member applied
        everything the leader committed (while it replays, its state passes through older memberships)."""
        self._drop_leaving()
        state = self._state
        if not state.members or self._state.stalled is not None:
            return
        known = self._SyncObj__leaderCommitIndex
        if self.raftLastApplied < max(self.raftCommitIndex, known or 0):
            return
        view = (tuple(state.members), tuple(sorted(state.learners)))
        if view == self._membership_view:
            return
        self._membership_view = view
        me = self._settings.self_addr
        voters = {m for m in view[0] if m != me}
        learners = {m for m in view[1] if m != me}
        if me not in view[0] and me not in view[1]:
            if not self.removed:
                log.warning("the committed membership (%s) no longer lists this controller", ", ".join(view[0]))
            self.removed = True
            self._hold_elections()
        others = self._SyncObj__otherNodes
        readonly = self._SyncObj__readonlyNodes
        transport = self._SyncObj__transport
        nxt, match = self._SyncObj__raftNextIndex, self._SyncObj__raftMatchIndex
        heard = self._SyncObj__lastResponseTime
        last = self._SyncObj__getCurrentLogIndex()
        now = pysyncobj_clock()
        for node in list(others):
            if node.id not in voters:  # removed: sent the log (not counted) a little longer, then dropped
                others.discard(node)
                heard.pop(node, None)
                readonly.add(node)
                nxt.setdefault(node, last + 1)
                match.setdefault(node, 0)
                self._leaving[node.id] = time.monotonic() + 2 * self._settings.election_max + 1
        for addr in sorted(voters):
            node = RaftNode(addr)
            if node in others:
                continue
            self._leaving.pop(addr, None)
            if addr not in transport._nodeAddrToNode:
                transport.addNode(node)
            else:
                node = transport._nodeAddrToNode[addr]
            readonly.discard(node)
            others.add(node)
            nxt.setdefault(node, last + 1)
            match.setdefault(node, 0)
            heard[node] = now
        for addr in sorted(learners):
            self._leaving.pop(addr, None)
            if addr not in transport._nodeAddrToNode:
                transport.addNode(RaftNode(addr))
        self.learner_addrs = frozenset(learners) | frozenset(self._leaving)
        for addr, node in list(transport._nodeAddrToNode.items()):
            if addr not in voters and addr not in learners and addr not in self._leaving:
                self._drop_node(node)
        log.info(
            "membership: voters %s%s",
            ", ".join(view[0]),
            f"; joining {', '.join(view[1])}" if view[1] else "",
        )

    def _drop_leaving(self) -> None:
        if not self._leaving:
            return
        now = time.monotonic()
        transport = self._SyncObj__transport
        for addr, deadline in list(self._leaving.items()):
            if deadline <= now:
                del self._leaving[addr]
                node = transport._nodeAddrToNode.get(addr)
                if node is not None:
                    self._drop_node(node)
                self.learner_addrs = self.learner_addrs - {addr}

    def _drop_node(self, node) -> None:
        self._SyncObj__transport.dropNode(node)  # disconnects without calling back: forget it here too
        self._SyncObj__otherNodes.discard(node)
        self._SyncObj__readonlyNodes.discard(node)
        self._SyncObj__connectedNodes.discard(node)
        self._SyncObj__raftNextIndex.pop(node, None)
        self._SyncObj__raftMatchIndex.pop(node, None)
        self._SyncObj__lastResponseTime.pop(node, None)

    def _hold_elections(self) -> None:
        self._conf.raftMinTimeout = _NO_ELECTION_SECS
        self._conf.raftMaxTimeout = _NO_ELECTION_SECS + 1
        self._SyncObj__raftElectionDeadline = pysyncobj_clock() + _NO_ELECTION_SECS

    def on_tick(self, fn, timeout: float = 5.0):
        """Run fn() on the tick thread (pysyncobj's structures are the tick thread's) and return its result."""
        done = threading.Event()
        box: list = []

        def call() -> None:
            try:
                box.append((True, fn()))
            except Exception as exc:
                box.append((False, exc))
            done.set()

        with self._tick_calls_lock:
            self._tick_calls.append(call)
        self._wake_tick()
        if not done.wait(timeout):
            raise UnknownOutcomeError(f"the Raft core did not run the request within {timeout:.0f} s")
        good, value = box[0]
        if not good:
            raise value
        return value

    def _run_tick_calls(self) -> None:
        if not self._tick_calls:
            return
        with self._tick_calls_lock:
            calls, self._tick_calls = self._tick_calls, []
        for call in calls:
            call()

    def progress(self) -> dict[str, dict[str, Any]]:
        """On the tick thread, on the leader: each other voter's and learner's match index, whether it answered
        within leader_fallback, and whether it is connected."""
        match = self._SyncObj__raftMatchIndex
        heard = self._SyncObj__lastResponseTime
        connected = {n.id for n in self._SyncObj__connectedNodes}
        recent = pysyncobj_clock() - self._settings.leader_fallback
        out = {}
        for node in set(self._SyncObj__otherNodes) | set(self._SyncObj__readonlyNodes):
            if not isinstance(node, TCPNode):
                continue  # a read-only client of pysyncobj's own, not a controller
            out[node.id] = {
                "match": match.get(node, 0),
                "heard": heard.get(node, 0.0) > recent,
                "connected": node.id in connected,
                "voter": node in self._SyncObj__otherNodes,
            }
        return out

    def leaving(self) -> list[str]:
        """Removed voters still sent the log (so that they learn of their removal) until their grace ends."""
        return sorted(dict(self._leaving))

    def last_log_index(self) -> int:
        return self._SyncObj__getCurrentLogIndex()

    def transfer_leadership(self) -> bool:
        """On the tick thread: ask the most caught-up voter to stand for election now; False when none can."""
        outcome: list = []
        self.transferLeadership(callback=lambda _res, err: outcome.append(err))
        return bool(outcome) and outcome[0] == _syncobj_module.FAIL_REASON.SUCCESS

    # ---------------------------------------------------------------- the one replicated method

    @replicated
    def apply_record(self, record):
        with self._lock:
            result = self._state.apply(record)
            stalled = self._state.stalled
            for note in self._state_listeners:
                try:
                    note(self._state, record, result)
                except Exception:
                    log.exception("state listener failed")
        if stalled is not None and result.get("code") == "stalled":
            log.critical("stopped applying the replicated log: %s", stalled["reason"])
        for listener in self._apply_listeners:
            try:
                listener(record, result)
            except Exception:
                log.exception("apply listener failed")
        return result

    def add_state_listener(self, fn) -> None:
        """fn(state, record, result) runs under the state lock right after each record is applied, so a
        reader under the lock sees the state and what fn kept of it in step (scheduler.JobIndex.note)."""
        self._state_listeners.append(fn)

    def add_apply_listener(self, fn) -> None:
        """fn(record, result) runs on the tick thread after each record: keep it short, never block."""
        self._apply_listeners.append(fn)

    # ---------------------------------------------------------------- writes

    def propose(self, record: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Commit one record and return its result; raises a RaftError subclass or WalLevelError."""
        self._check_proposal(record)
        try:
            return self.apply_record(record, sync=True, timeout=timeout)
        except _syncobj_module.SyncObjException as exc:
            raise self._write_failure(exc.errorCode, timeout) from None

    async def propose_async(self, record: dict[str, Any], timeout: float) -> dict[str, Any]:
        """propose() for a coroutine on an event loop (the API server's): the same checks, result and errors, but
        no thread is parked until the commit (a thread handoff per submission cost a fifth of the leader's CPU)."""
        self._check_proposal(record)
        loop = asyncio.get_running_loop()
        outcome = loop.create_future()

        def settle(result: Any, error: Any) -> None:
            if not outcome.done():
                outcome.set_result((result, error))

        timer = loop.call_later(timeout, settle, None, "Timeout")
        # the callback runs on the tick thread (or here, when the queue of commands is full)
        self.apply_record(record, callback=lambda result, error: loop.call_soon_threadsafe(settle, result, error))
        try:
            result, error = await outcome
        finally:
            timer.cancel()
        if error != _syncobj_module.FAIL_REASON.SUCCESS:
            raise self._write_failure(error, timeout)
        return result

    def _check_proposal(self, record: dict[str, Any]) -> None:
        with self._lock:
            if self._state.stalled is not None:
                raise StalledError(f"this controller stopped applying the log: {self._state.stalled['reason']}")
            enabled = self._state.wal_level
        wal.check_level(record, enabled)
        self.disk.check()
        if self.leader_addr() is None and not self._conf.commandsWaitLeader:
            raise NoLeaderError("no leader")

    def _write_failure(self, code: Any, timeout: float) -> RaftError:
        """The error a write that did not commit raises (code: pysyncobj's FAIL_REASON, or "Timeout")."""
        if code == _syncobj_module.FAIL_REASON.MISSING_LEADER or (code == "Timeout" and self.leader_addr() is None):
            return NoLeaderError("no controller is leader right now (no quorum or an election is running)")
        return UnknownOutcomeError(f"the write did not complete in {timeout:.1f} s ({code}); its outcome is unknown")

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

    def core_alive(self) -> bool:
        """The tick thread runs: without it this member neither votes, replicates nor applies."""
        thread = self._tick_thread
        return thread is not None and thread.is_alive()

    def leaderless_secs(self) -> float:
        """Seconds since a tick last ended with a leader known (this member or another), or since the start."""
        return time.monotonic() - self._leader_seen

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
