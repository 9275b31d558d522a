"""pysyncobj's TCP transport with bounds in front of it: what an unauthenticated peer on the Raft port can cost.

pysyncobj (0.3.x) reads a frame as a 4-byte length and then buffers that many bytes before anything is
decrypted, on the one thread that also runs Raft: a peer without the secret that declared 0x7fffffff bytes
and kept sending starved the tick thread, so the majority elected another leader while this one, frozen,
still believed it led. Here every frame's declared length is checked as soon as its 4 bytes arrive, one
read event reads a bounded amount, and connections that have not completed the handshake are capped in
number and in time. Only a connection that completed the encrypted handshake (it proved it holds the
secret and named a configured peer) reaches the Raft core; pysyncobj already routes messages that way.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import threading
import time
import zlib

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj.monotonic import monotonic as pysyncobj_clock  # CLOCK_MONOTONIC_RAW: not time.monotonic
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from spur_hpc import grpcutil

log = logging.getLogger("spurctld.raft")

# Handshake frames (a 32-byte random key, a node address, 'readonly', a syncobj_admin command) are a few
# hundred bytes once pickled, compressed and encrypted.
HANDSHAKE_FRAME_MAX = 64 * 1024
# One AppendEntries carries up to this many bytes of entries, and a snapshot travels in chunks of this size
# (raft.make_syncobj_conf). pysyncobj's default, 64 KiB, made a 50,000-entry backlog some 250 messages, each
# synced and acknowledged by the follower on its own, and a 13 MB snapshot 210 encrypted messages. Not larger:
# each message is compressed and encrypted on the tick thread at once, and with 1 MiB (and 1 MiB socket reads)
# the kill -9 fault test of a follower failed twice on a host at load average 30 (a member's ListJobs timed out).
RAFT_BATCH_BYTES = 256 * 1024
# A peer's frame holds at most one AppendEntries batch: entries are added until appendEntriesBatchSizeBytes
# (RAFT_BATCH_BYTES, 256 KiB; 64 KiB before) is reached, so the last one can be a whole record, and a record
# comes from one gRPC request (at most the gRPC message limit, 64 MiB). Snapshots travel in logCompactionBatchSize
# chunks (the same size). Fernet's base64 adds a third; twice that leaves a wide margin (and a release that
# allowed for 64 KiB batches, with the same formula, accepts these: the gRPC limit dominates).
_GRPC_LIMIT = dict(grpcutil._CHANNEL_OPTIONS)["grpc.max_receive_message_length"]
PEER_FRAME_MAX = 2 * (_GRPC_LIMIT * 4 // 3 + 2 * RAFT_BATCH_BYTES)
# Bytes read from one connection per poll event: the tick thread gets back to Raft in between.
READ_BUDGET = 1024 * 1024
# Inbound connections that have not completed the handshake; a peer completes it in two round trips.
MAX_PENDING_CONNECTIONS = 32
HANDSHAKE_DEADLINE_SECS = 5.0
LOG_EVERY_SECS = 10.0

_LENGTH = struct.Struct("i")  # pysyncobj's framing: native signed 32-bit length

# The read and write paths replaced below: if a pysyncobj release renamed it, the bounds would silently not apply.
for _name in ("_TcpConnection__tryReadBuffer", "_TcpConnection__processParseMessage", "_TcpConnection__processSend"):
    if not callable(getattr(TcpConnection, _name, None)):
        raise ImportError(f"pysyncobj's TcpConnection has no {_name}: this pysyncobj release is not supported")


class DropLog:
    """At most one log line per reason every LOG_EVERY_SECS, with the count of the drops it did not log."""

    def __init__(self, every: float = LOG_EVERY_SECS) -> None:
        self.every = every
        self.lock = threading.Lock()
        self.last: dict[str, float] = {}
        self.suppressed: dict[str, int] = {}

    def drop(self, reason: str, peer: str, detail: str) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.last.get(reason, -self.every) < self.every:
                self.suppressed[reason] = self.suppressed.get(reason, 0) + 1
                return
            more = self.suppressed.pop(reason, 0)
            self.last[reason] = now
        extra = f" ({more} more dropped for this reason since the last such line)" if more else ""
        log.warning("raft port: dropped the connection from %s: %s%s", peer, detail, extra)


drops = DropLog()


class GuardedConnection(TcpConnection):
    """A TcpConnection whose frames are bounded; max_frame is raised once the peer completed the handshake.

    pysyncobj has no hook for its read path, so two of its name-mangled methods are replaced here;
    the reading buffer is a bytearray (pysyncobj's bytes += made a large frame cost quadratic time).
    """

    peer = "?"
    max_frame = HANDSHAKE_FRAME_MAX
    accepted_at = 0.0

    @classmethod
    def adopt(cls, conn: TcpConnection, peer: str) -> GuardedConnection:
        """Turn a TcpConnection pysyncobj just created (nothing read yet) into a guarded one."""
        conn.__class__ = cls
        conn.peer = peer
        conn.max_frame = HANDSHAKE_FRAME_MAX
        conn.accepted_at = pysyncobj_clock()
        return conn

    def connect(self, host, port):
        self.max_frame = HANDSHAKE_FRAME_MAX  # a new connection shakes hands again
        return super().connect(host, port)

    def _buffer(self) -> bytearray:
        buf = self._TcpConnection__readBuffer
        if type(buf) is not bytearray:  # connect() and disconnect() reset it to bytes()
            buf = self._TcpConnection__readBuffer = bytearray(buf)
        return buf

    def _frame_length(self, buf: bytearray) -> int | None:
        """The declared length of the frame at the start of buf; drops the connection if it is out of bounds."""
        if len(buf) < _LENGTH.size:
            return None
        length = _LENGTH.unpack_from(buf)[0]
        if 0 < length <= self.max_frame:
            return length
        bound = "handshake " if self.max_frame == HANDSHAKE_FRAME_MAX else ""
        drops.drop(
            "frame",
            self.peer,
            f"it declared a frame of {length} bytes (0x{length & 0xFFFFFFFF:x}), the {bound}limit is "
            f"{self.max_frame} bytes; a Spur controller never sends that",
        )
        self.disconnect()
        return None

    # The write side: pysyncobj's write buffer is bytes, grown with += and trimmed with [sent:] after every
    # send(), each a copy of all that is still unsent. A leader sending a follower a backlog holds megabytes
    # there, and these copies were 40 % of its tick thread (bench/catchup.py --profile): slow enough that the
    # other follower's heartbeats came late and it stood for election. A bytearray appends and drops its front
    # in place.

    def _write_buffer(self) -> bytearray:
        buf = self._TcpConnection__writeBuffer
        if type(buf) is not bytearray:  # connect() and disconnect() reset it to bytes()
            buf = self._TcpConnection__writeBuffer = bytearray(buf)
        return buf

    def send(self, message):
        if self.sendRandKey:
            message = (self.sendRandKey, message)
        data = zlib.compress(pysyncobj_pickle.dumps(message), 3)
        if self.encryptor:
            data = self.encryptor.encrypt_at_time(data, int(pysyncobj_clock()))
        buf = self._write_buffer()
        buf += _LENGTH.pack(len(data))
        buf += data
        self._TcpConnection__trySendBuffer()

    def _TcpConnection__processSend(self):  # noqa: N802 (replaces pysyncobj's, same outcomes)
        buf = self._write_buffer()
        if not buf:
            return False
        try:
            sent = self._TcpConnection__socket.send(buf)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if sent < 0:
            self.disconnect()
            return False
        if sent == 0:
            return False
        del buf[:sent]
        return True

    def _TcpConnection__tryReadBuffer(self):  # noqa: N802 (replaces pysyncobj's)
        budget = READ_BUDGET
        while budget > 0 and self.state != CONNECTION_STATE.DISCONNECTED:
            got = self._read_once()
            if not got:
                break
            budget -= got
        self._TcpConnection__lastReadTime = pysyncobj_clock()

    def _read_once(self) -> int:
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(self._TcpConnection__recvBufferSize)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return 0
        if not incoming or sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.disconnect()
            return 0
        buf = self._buffer()
        buf += incoming
        self._frame_length(buf)  # refuse an oversized frame at its first 4 bytes, not after buffering it
        return len(incoming)

    def _TcpConnection__processParseMessage(self):  # noqa: N802 (replaces pysyncobj's, same checks)
        if self.state == CONNECTION_STATE.DISCONNECTED:
            return None
        buf = self._buffer()
        length = self._frame_length(buf)
        if length is None or len(buf) - _LENGTH.size < length:
            return None
        data = bytes(buf[_LENGTH.size : _LENGTH.size + length])
        del buf[: _LENGTH.size + length]
        try:
            message = self._decode(data)
        except Exception:
            if self.max_frame == HANDSHAKE_FRAME_MAX:
                drops.drop("secret", self.peer, "its handshake does not decrypt with raft_secret_file")
            self.disconnect()
            return None
        return message

    def _decode(self, data: bytes):
        if self.encryptor:
            stamp = self.encryptor.extract_timestamp(data)
            if stamp < self.recvLastTimestamp:
                raise ValueError("replayed frame")
            self.recvLastTimestamp = stamp
            data = self.encryptor.decrypt(data)
        message = pysyncobj_pickle.loads(zlib.decompress(data))
        if self.recvRandKey:
            rand_key, message = message
            if rand_key != self.recvRandKey:
                raise ValueError("wrong session key")
        return message


class GuardedTransport(TCPTransport):
    """TCPTransport whose connections are GuardedConnections, with a cap on handshakes in progress."""

    def addNode(self, node):  # noqa: N802 (pysyncobj's name)
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None and not isinstance(conn, GuardedConnection):
            GuardedConnection.adopt(conn, node.address)

    def _onNewIncomingConnection(self, conn):  # noqa: N802
        try:
            host, port = conn._TcpConnection__socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        GuardedConnection.adopt(conn, peer)
        if len(self._unknownConnections) >= MAX_PENDING_CONNECTIONS:
            # Drop the oldest: a real peer completes its handshake in milliseconds, so holding slots open
            # does not lock peers out, and a burst of new connections only pushes out other idle ones.
            oldest = min(self._unknownConnections, key=lambda c: getattr(c, "accepted_at", 0.0))
            drops.drop(
                "cap",
                getattr(oldest, "peer", "?"),
                f"{MAX_PENDING_CONNECTIONS} connections were waiting to complete the handshake",
            )
            oldest.disconnect()
        super()._onNewIncomingConnection(conn)

    def _onNodeConnected(self, node):  # noqa: N802
        # A controller that is joining (or was just removed) receives the log but neither votes nor counts for a
        # majority: pysyncobj's read-only role, given here to a peer that names itself (SpurRaft.learner_addrs).
        if node.id in getattr(self._syncObj, "learner_addrs", ()):
            self._onReadonlyNodeConnected(node)
        else:
            super()._onNodeConnected(node)

    def _onNodeDisconnected(self, node):  # noqa: N802
        if node.id in getattr(self._syncObj, "learner_addrs", ()):
            self._onReadonlyNodeDisconnected(node)
        else:
            super()._onNodeDisconnected(node)

    def _onIncomingMessageReceived(self, conn, message):  # noqa: N802
        super()._onIncomingMessageReceived(conn, message)
        if conn not in self._unknownConnections and conn.state == CONNECTION_STATE.CONNECTED:
            conn.max_frame = PEER_FRAME_MAX  # a configured peer that holds the secret: full-size frames

    def _onOutgoingConnected(self, conn):  # noqa: N802
        super()._onOutgoingConnected(conn)
        if not self._syncObj.encryptor:
            conn.max_frame = PEER_FRAME_MAX

    def _onOutgoingMessageReceived(self, conn, message):  # noqa: N802
        super()._onOutgoingMessageReceived(conn, message)
        conn.max_frame = PEER_FRAME_MAX  # its first frame decrypted with the secret

    def _onTick(self):  # noqa: N802
        super()._onTick()
        if not self._unknownConnections:
            return
        deadline = pysyncobj_clock() - HANDSHAKE_DEADLINE_SECS
        for conn in [c for c in self._unknownConnections if getattr(c, "accepted_at", 0.0) < deadline]:
            drops.drop(
                "deadline",
                getattr(conn, "peer", "?"),
                f"it did not complete the handshake within {HANDSHAKE_DEADLINE_SECS:g} s",
            )
            conn.disconnect()
