"""The Raft port's bounds (controller/raft_transport.py) on real sockets and a real pysyncobj poller, and the
leadership rule of SpurRaft.is_leader on three real in-process pysyncobj members."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time

import pytest
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection

from harness import free_port, raft_settings, wait_until
from spur_hpc.controller import raft, raft_transport, wal
from spur_hpc.controller.raft import SpurRaft
from spur_hpc.controller.raft_transport import GuardedConnection


class Pair:
    """A guarded receiving connection and a plain pysyncobj sender on a socket pair, sharing one poller."""

    def __init__(self, password: str | None = "secret") -> None:
        self.poller = createPoller("auto")
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        self.raw = b
        self.received: list = []
        self.dropped: list[bool] = []
        self.rx = GuardedConnection.adopt(TcpConnection(self.poller, socket=a, timeout=60), "test-peer")
        self.rx.setOnMessageReceivedCallback(self.received.append)
        self.rx.setOnDisconnectedCallback(lambda: self.dropped.append(True))
        self.tx = TcpConnection(self.poller, socket=b, timeout=60)
        if password:
            self.rx.encryptor = self.tx.encryptor = getEncryptor(password)

    def pump(self, until, what: str) -> None:
        def step():
            self.poller.poll(0.01)
            return until()

        wait_until(step, 10, what, interval=0)


def test_a_frame_declaring_0x7fffffff_bytes_is_refused_at_its_length(caplog):
    pair = Pair()
    pair.raw.send(struct.pack("i", 0x7FFFFFFF) + os.urandom(60000))
    pair.pump(lambda: pair.dropped, "the connection to be dropped")
    assert pair.received == []
    assert pair.rx.state == CONNECTION_STATE.DISCONNECTED
    assert "dropped the connection from test-peer: it declared a frame of 2147483647 bytes" in caplog.text


def test_negative_lengths_are_refused_too():
    pair = Pair()
    pair.raw.send(struct.pack("i", -5))
    pair.pump(lambda: pair.dropped, "the connection to be dropped")
    assert pair.received == []


def test_large_frames_pass_once_the_peer_completed_the_handshake():
    pair = Pair()
    big = {"type": "append_entries", "entries": [os.urandom(300 * 1024)]}  # larger than a handshake frame
    pair.rx.max_frame = raft_transport.PEER_FRAME_MAX
    pair.tx.send("hello")
    pair.tx.send(big)
    pair.pump(lambda: len(pair.received) == 2, "both messages")
    assert pair.received == ["hello", big] and not pair.dropped


def test_a_large_frame_before_the_handshake_is_refused():
    pair = Pair()
    pair.tx.send({"blob": os.urandom(300 * 1024)})
    pair.pump(lambda: pair.dropped, "the connection to be dropped")
    assert pair.received == []


def test_a_frame_that_does_not_decrypt_drops_the_connection_and_says_why(caplog):
    pair = Pair()
    pair.tx.encryptor = getEncryptor("another secret")
    pair.tx.send("hello")
    pair.pump(lambda: pair.dropped, "the connection to be dropped")
    assert pair.received == []
    assert "its handshake does not decrypt with raft_secret_file" in caplog.text


def test_the_peer_frame_bound_admits_the_largest_grpc_message():
    # a record comes from one gRPC request; encrypted it grows by a third (base64)
    assert raft_transport.PEER_FRAME_MAX >= raft_transport._GRPC_LIMIT * 4 // 3 + 2 * 64 * 1024
    assert raft_transport.PEER_FRAME_MAX < 2**31  # fits pysyncobj's signed 32-bit length


def start_members(tmp_path, ips: list[str], **settings) -> list[SpurRaft]:
    """A started in-process SpurRaft cluster, one member on each address, its files in tmp_path/m<i>."""
    addrs = [f"{ip}:{free_port(ip)}" for ip in ips]
    members = [SpurRaft(raft_settings(tmp_path / f"m{i}", addr, addrs, **settings)) for i, addr in enumerate(addrs)]
    for m in members:
        m.start()
    return members


@pytest.fixture
def three_members(tmp_path):
    members = start_members(tmp_path, [f"127.0.2.{i}" for i in (11, 12, 13)])
    yield members
    for m in members:
        m.stop()


def lone_member(tmp_path, addr: str, **settings) -> SpurRaft:
    """A one-member cluster in tmp_path (not started)."""
    return SpurRaft(raft_settings(tmp_path, addr, [addr], **settings))


def test_a_leader_whose_tick_thread_stalls_stops_claiming_leadership(three_members):
    leader = wait_until(lambda: next((m for m in three_members if m.is_leader()), None), 30, "a leader")
    wait_until(leader.has_quorum, 30, "the leader to be certain it leads")
    # stall its tick thread, as a flood on the Raft port did: pysyncobj's own view never gets updated
    leader._stopping.set()
    leader._tick_thread.join(timeout=10)
    others = [m for m in three_members if m is not leader]
    wait_until(lambda: any(m.is_leader() for m in others), 30, "another member to be elected")
    assert leader._isLeader(), "pysyncobj still believes it leads (its tick does not run)"
    # /metrics/nodes answers 503 on it from then on (its lease ran out before the others could elect)
    assert not leader.has_quorum()
    # and after leader_fallback it no longer claims to lead at all: writes and duties go elsewhere
    wait_until(lambda: not leader.is_leader(), 30, "the stalled leader to give up leadership")
    assert leader.leader_addr() is None
    assert not leader.has_quorum()
    # the watchdog's facts (controller/status.py): a core that does not tick ages its last sight of a leader,
    # while the members that tick keep theirs fresh
    assert not leader.core_alive() and all(m.core_alive() for m in others)
    wait_until(lambda: leader.leaderless_secs() > 2.0, 30, "the stalled member's last leader to age")
    assert max(m.leaderless_secs() for m in others) < 1.0


def test_handshakes_in_progress_are_capped_and_time_out(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(raft_transport, "MAX_PENDING_CONNECTIONS", 3)
    monkeypatch.setattr(raft_transport, "HANDSHAKE_DEADLINE_SECS", 600.0)  # first the cap alone
    ip = "127.0.2.31"
    port = free_port(ip)
    raft = lone_member(tmp_path, f"{ip}:{port}")
    raft.start()
    conns: list[socket.socket] = []
    try:
        conns.append(wait_until(lambda: socket.create_connection((ip, port), timeout=5), 20, "the Raft port"))
        oldest = "{}:{}".format(*conns[0].getsockname())
        for _ in range(3):
            conns.append(socket.create_connection((ip, port), timeout=5))
        wait_until(lambda: "3 connections were waiting to complete the handshake" in caplog.text, 20, "the cap")
        assert f"dropped the connection from {oldest}: " in caplog.text  # the oldest one is pushed out
        conns[0].settimeout(30)
        assert conns[0].recv(1) == b""

        monkeypatch.setattr(raft_transport, "HANDSHAKE_DEADLINE_SECS", 0.5)
        for c in conns[1:]:  # none stays open past the handshake deadline
            c.settimeout(30)
            assert c.recv(1) == b""
        assert "did not complete the handshake within 0.5 s" in caplog.text
        # nothing of this reached Raft: the lone member elects itself once, at term 1
        wait_until(raft.is_leader, 20, "the member to elect itself")
        assert raft.term() == 1
    finally:
        for c in conns:
            c.close()
        raft.stop()


def test_a_follower_that_is_behind_receives_each_entry_once_in_large_batches(three_members, caplog):
    leader = wait_until(lambda: next((m for m in three_members if m.is_leader()), None), 30, "a leader")
    wait_until(leader.has_quorum, 30, "the leader to be certain it leads")
    late = next(m for m in three_members if m is not leader)
    late._stopping.set()  # its tick stops: it reads nothing while the backlog is committed
    late._tick_thread.join(timeout=10)
    node = next(n for n in leader._SyncObj__otherNodes if n.id == late.self_addr)
    sent: list[tuple[int, int]] = []  # (term, index) of each entry sent to the late follower
    transport = leader._SyncObj__transport
    plain_send = transport.send
    term0 = leader.term()

    def counting_send(to, message):
        if to == node and message.get("type") == "append_entries":
            sent.extend((message["term"], e[1]) for e in message.get("entries", ()))
        return plain_send(to, message)

    transport.send = counting_send
    done: list = []
    count = 3000  # below compaction_entries: it catches up from the journal, not from a snapshot
    for i in range(count):
        record = {"op": "node_drain", "name": f"n{i}", "reason": "x" * 800}  # refused (no such node), still an entry
        leader.apply_record(record, callback=lambda _r, e: done.append(e))
    wait_until(lambda: len(done) == count, 60, "the backlog to be committed by the other two members")
    target = leader.commit_index()
    late._stopping.clear()
    late.start()
    wait_until(lambda: late.applied_index() >= target, 60, "the late follower to catch up")
    backlog = [(term, i) for term, i in sent if i <= target]
    # within a term each entry goes once (a new leader starts again from its own log's end: a mismatch sends
    # it back, and it resends what the follower lacks, as Raft has it)
    assert len(backlog) == len(set(backlog)), "entries in flight were sent again after the first acknowledgement"
    assert len({i for _term, i in backlog}) >= count
    if leader.term() == term0:  # no election on this loaded machine meanwhile
        assert "truncating already-applied" not in caplog.text


@pytest.mark.parametrize("ratio, expected", [(1.0, 3), (0.0, 5)])
def test_a_snapshot_waits_for_as_many_entries_as_the_last_one_held_jobs(tmp_path, ratio, expected):
    """A snapshot costs in proportion to the state: with log_compaction_job_ratio 1 one is written after 20
    entries (the minimum), then each after as many entries as the one before held jobs (at about 17, 37 and 75
    jobs: 3 for 100 jobs); with 0, every 20 entries (5)."""
    ip = "127.0.2.41"
    raft = lone_member(tmp_path, f"{ip}:{free_port(ip)}", compaction_entries=20, compaction_job_ratio=ratio)
    serializer = raft._SyncObj__serializer
    written: list[int] = []
    fork_writer = serializer.serialize

    def counted(data, entry_id):
        written.append(len(raft._state.jobs))
        return fork_writer(data, entry_id)

    serializer.serialize = counted
    raft.start()
    try:
        wait_until(raft.is_leader, 20, "the member to elect itself")
        raft.propose(wal.make_record("cluster_init", name="c", cluster_id="id", members=[raft.self_addr]), 10)
        for i in range(100):
            spec = {"name": f"j{i}", "script": "#!/bin/sh\ntrue\n", "user": "root", "work_dir": "/tmp"}
            raft.propose(wal.make_record("job_submit", spec=spec, key="", time=1.0), 10)
            wait_until(lambda: serializer._Serializer__pid == 0, 20, "the snapshot writer to end")
        assert len(written) == expected, written
    finally:
        raft.stop()


# ---------------------------------------------------------------- a follower behind the leader's snapshot


def submit_records(count: int, script_bytes: int = 64) -> list[dict]:
    """Job submissions whose scripts hold script_bytes that do not compress (the snapshot's size)."""
    records = []
    for _ in range(count):
        script = "#!/bin/sh\n# " + os.urandom(script_bytes // 2).hex() + "\ntrue\n"
        spec = {"name": "j", "script": script, "user": "root", "work_dir": "/tmp"}
        records.append(wal.make_record("job_submit", spec=spec, key="", time=1.0))
    return records


def commit(leader: SpurRaft, records: list[dict]) -> None:
    done: list = []
    for record in records:
        leader.apply_record(record, callback=lambda _r, e: done.append(e))
    wait_until(lambda: len(done) == len(records), 60, f"{len(records)} records committed")


def behind_the_snapshot(tmp_path, ips: list[str]):
    """Three members snapshotting every 20 entries; one stopped while the other two commit enough that the
    leader's journal begins after the stopped member's last entry: started again, it must be sent the snapshot."""
    members = start_members(tmp_path, ips, compaction_entries=20, compaction_job_ratio=0)
    leader = wait_until(lambda: next((m for m in members if m.is_leader()), None), 30, "a leader")
    wait_until(leader.has_quorum, 30, "the leader to be certain it leads")
    init = wal.make_record("cluster_init", name="c", cluster_id="id", members=[m.self_addr for m in members])
    leader.propose(init, 10)
    late = next(m for m in members if m is not leader)
    late.stop()
    commit(leader, submit_records(100))
    wait_until(lambda: leader._journal[0][1] > late.applied_index() + 1, 30, "the leader to compact past the late one")
    return members, leader, late


def restart(members: list[SpurRaft], member: SpurRaft) -> SpurRaft:
    """The same member started again on its files (its state as a restarted spurctld finds it)."""
    again = SpurRaft(member._settings)
    members[members.index(member)] = again
    again.start()
    return again


def is_stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_follower_behind_the_snapshot_catches_up_while_the_leader_writes_the_next_one(tmp_path):
    """pysyncobj sent no snapshot while a writer ran: with the writer starved (here stopped) the follower waited as
    long as the writer did. The complete snapshot on disk is sent meanwhile."""
    members, leader, late = behind_the_snapshot(tmp_path, [f"127.0.2.{i}" for i in (21, 22, 23)])
    serializer = leader._SyncObj__serializer
    writer = 0
    try:
        for _ in range(50):  # until a writer is caught before it ends (it runs for milliseconds)
            fork_writer = serializer.serialize
            caught: list[int] = []

            def stop_at_fork(data, entry_id, fork_writer=fork_writer, caught=caught):
                result = fork_writer(data, entry_id)
                pid = serializer._Serializer__pid
                if pid > 0 and not caught:
                    os.kill(pid, signal.SIGSTOP)
                    caught.append(pid)
                return result

            serializer.serialize = stop_at_fork
            wait_until(lambda: serializer._Serializer__pid == 0, 30, "the leader's writer to end")
            commit(leader, submit_records(25))
            serializer.serialize = fork_writer
            if caught and serializer._Serializer__pid == caught[0] and is_stopped(caught[0]):
                writer = caught[0]
                break
            if caught:
                os.kill(caught[0], signal.SIGCONT)
        assert writer, "no snapshot writer was caught running"
        target = leader.commit_index()
        late = restart(members, late)
        wait_until(lambda: late.applied_index() >= target, 30, "the late follower to catch up")
        assert serializer._Serializer__pid == writer and is_stopped(writer)  # it did, with the writer still stopped
    finally:
        if writer:
            os.kill(writer, signal.SIGCONT)
        for m in members:
            m.stop()


def test_no_snapshot_is_written_while_one_is_being_sent(tmp_path):
    """A writer that finished in the middle of a transmission made pysyncobj begin the transmission again, and
    with snapshots every few hundred entries in a burst a follower never received a whole one."""
    members, leader, late = behind_the_snapshot(tmp_path, [f"127.0.2.{i}" for i in (31, 32, 33)])
    commit(leader, submit_records(60, script_bytes=40 * 1024))  # a snapshot of several chunks
    serializer = leader._SyncObj__serializer
    dump = leader._settings.dump_file
    wait_until(
        lambda: serializer._Serializer__pid == 0 and os.path.getsize(dump) > 3 * raft_transport.RAFT_BATCH_BYTES,
        30,
        "the leader's snapshot of the large jobs",
    )
    node = next(n for n in leader._SyncObj__otherNodes if n.id == late.self_addr)
    transport = leader._SyncObj__transport
    plain_send = transport.send
    chunks: list[int] = []
    written_while_sending: list[int] = []
    fork_writer = serializer.serialize

    def slow_chunks(to, message):
        if to == node and message.get("serialized"):
            chunks.append(len(message["serialized"][0]))
            time.sleep(0.01)  # a slow link: the transmission spans many ticks (each one still ends in time)
        return plain_send(to, message)

    def sending() -> bool:
        return bool(serializer._Serializer__transmissions)  # a follower's transmission under way

    def counted(data, entry_id):
        if sending():
            written_while_sending.append(entry_id)
        return fork_writer(data, entry_id)

    transport.send = slow_chunks
    serializer.serialize = counted
    serializer._Serializer__transmissionBatchSize = 16 * 1024  # many small chunks
    try:
        late = restart(members, late)
        wait_until(sending, 30, "the transmission to begin")
        cap = raft.SNAPSHOT_SEND_HOLDS_COMPACTION_UP_TO * leader.compaction_threshold()  # then one is written
        while sending() and len(leader._journal) + 25 < cap:
            commit(leader, submit_records(25))  # past the threshold: a snapshot would be due
        target = leader.commit_index()
        wait_until(lambda: late.applied_index() >= target, 60, "the late follower to catch up")
        assert len(chunks) >= 3, chunks
        assert written_while_sending == []
    finally:
        transport.send = plain_send
        for m in members:
            m.stop()


def test_a_restarted_member_counts_its_next_snapshot_from_the_jobs_it_loaded(tmp_path):
    ip = "127.0.2.42"
    addr = f"{ip}:{free_port(ip)}"
    raft = lone_member(tmp_path, addr, compaction_entries=20, compaction_job_ratio=1.0)
    raft.start()
    try:
        wait_until(raft.is_leader, 20, "the member to elect itself")
        raft.propose(wal.make_record("cluster_init", name="c", cluster_id="id", members=[raft.self_addr]), 10)
        for record in submit_records(100):
            raft.propose(record, 10)
        serializer = raft._SyncObj__serializer
        wait_until(lambda: serializer._Serializer__pid == 0, 20, "the snapshot writer to end")
    finally:
        raft.stop()
    again = lone_member(tmp_path, addr, compaction_entries=20, compaction_job_ratio=1.0)
    written: list[int] = []
    fork_writer = again._SyncObj__serializer.serialize

    def counted(data, entry_id):
        written.append(entry_id)
        return fork_writer(data, entry_id)

    again._SyncObj__serializer.serialize = counted
    again.start()
    try:
        wait_until(lambda: len(again._state.jobs) == 100, 20, "the state to be loaded and the journal replayed")
        time.sleep(0.5)  # some 50 ticks, each of which would start a snapshot that is due
        # Counted from 0, the journal's tail past the snapshot (more than 20 entries) made one due at once.
        assert written == [] and again.compaction_threshold() > 20
    finally:
        again.stop()
