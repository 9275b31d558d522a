"""Unary gRPC calls over plaintext HTTP/2, standard library only.

Why not grpcio: `import grpc` alone takes 80-100 ms, twice the CLI's whole budget. The controller speaks
ordinary gRPC (insecure channels, see grpcutil.channel), and a unary call is a small exchange: the
HTTP/2 preface and SETTINGS, one HEADERS and one DATA frame out, then HEADERS, DATA and trailers back.
This module does exactly that, with flow control in both directions and HPACK from wire.hpack.
tests/unit/test_wire.py runs it against a real grpcio server.
"""

from __future__ import annotations

import _socket  # the C module: `socket` pulls in enum and selectors, ~4 ms the CLI does not need
import struct
import time

from spur_hpc import model
from spur_hpc.wire import failover, hpack

STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS, _PUSH_PROMISE, _PING, _GOAWAY, _WINDOW_UPDATE, _CONTINUATION = (
    range(10)
)
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
_SETTINGS_HEADER_TABLE_SIZE, _SETTINGS_ENABLE_PUSH, _SETTINGS_INITIAL_WINDOW_SIZE, _SETTINGS_MAX_FRAME_SIZE = 1, 2, 4, 5
_MAX_WINDOW = 2**31 - 1
_DEFAULT_WINDOW = 65535
_RECEIVE_LIMIT = 64 * 1024 * 1024  # same limit as grpcutil's channels
# A socket's timeout is TimeoutError from Python 3.10 only; before, _socket.timeout (an OSError), which the
# modules' copy of this file (module_utils/spur_grpcwire.py, run on the managed host's Python 3.8+) meets.
_TIMEOUT = (TimeoutError, _socket.timeout)


class RpcError(Exception):
    """A call that did not return OK. code is the status name (e.g. "UNAVAILABLE"), details the server's text."""

    def __init__(self, code: str, details: str, trailing: list[tuple[str, str]] | None = None, address: str = ""):
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details
        self.trailing = trailing or []
        self.address = address

    def leader_hint(self) -> str | None:
        """The leader's gRPC address a follower put in the trailing metadata, if any."""
        return failover.leader_hint(self.trailing)


def split_address(address: str) -> tuple[str, int]:
    """'host:port', '[v6]:port' or 'http://host:port' -> (host, port), as model.split_host_port reads them."""
    try:
        return model.split_host_port(address)
    except ValueError as exc:
        raise ValueError(f"bad controller address {address!r} ({exc}): write host:port, like 127.0.1.1:6817") from None


def _percent_decode(text: str) -> str:
    """grpc-message is percent-encoded UTF-8 (gRPC over HTTP/2 spec)."""
    if "%" not in text:
        return text
    raw = bytearray()
    i = 0
    data = text.encode("utf-8")
    while i < len(data):
        if data[i] == 0x25 and i + 3 <= len(data):
            try:
                raw.append(int(data[i + 1 : i + 3], 16))
                i += 3
                continue
            except ValueError:
                pass
        raw.append(data[i])
        i += 1
    return raw.decode("utf-8", errors="replace")


def _frame(frame_type: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([frame_type, flags]) + struct.pack(">I", stream_id) + payload


class _Call:
    """State of one stream."""

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.stream_id = stream_id
        self.send_window = send_window
        self.header_block = bytearray()
        self.header_blocks: list[list[tuple[str, str]]] = []
        self.data = bytearray()
        self.ended = False
        self.reset_code: int | None = None


class Connection:
    """One HTTP/2 connection to one gRPC server; calls on it run one after another."""

    def __init__(self, address: str, connect_timeout: float = 2.0) -> None:
        self.address = address
        self.host, self.port = split_address(address)
        self.connect_timeout = connect_timeout
        self.sock: _socket.socket | None = None
        self._reset()

    def _reset(self) -> None:
        """Per-connection HTTP/2 state, fresh for every new TCP connection."""
        self.decoder = hpack.HeaderDecoder()
        self.next_stream_id = 1
        self.send_window = _DEFAULT_WINDOW
        self.peer_initial_window = _DEFAULT_WINDOW
        self.peer_max_frame = 16384
        self.buffer = bytearray()
        self.goaway_last_stream: int | None = None
        self.unacked_bytes = 0

    # -------------------------------------------------------------- connection

    def _unavailable(self, reason: str) -> RpcError:
        return RpcError("UNAVAILABLE", f"cannot reach controller {self.address}: {reason}", address=self.address)

    def _open_socket(self, deadline: float) -> _socket.socket:
        """socket.create_connection without the socket module; the host goes in as bytes, skipping the idna
        codec (another ~2 ms of imports)."""
        try:
            candidates = _socket.getaddrinfo(self.host.encode(), self.port, 0, _socket.SOCK_STREAM)
        except OSError as exc:
            raise self._unavailable(f"cannot resolve {self.host} ({exc.strerror or exc})") from None
        last_error = "no address"
        for family, kind, proto, _name, address in candidates:
            sock = _socket.socket(family, kind, proto)
            try:
                sock.settimeout(max(0.05, min(self.connect_timeout, deadline - time.monotonic())))
                sock.connect(address)
                return sock
            except OSError as exc:
                last_error = exc.strerror or str(exc) or type(exc).__name__
                sock.close()
        raise self._unavailable(last_error)

    def _connect(self, deadline: float) -> None:
        sock = self._open_socket(deadline)
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        settings = struct.pack(
            ">HIHIHI",
            _SETTINGS_ENABLE_PUSH,
            0,
            _SETTINGS_INITIAL_WINDOW_SIZE,
            _MAX_WINDOW,
            _SETTINGS_HEADER_TABLE_SIZE,
            4096,
        )
        greeting = (
            _PREFACE
            + _frame(_SETTINGS, 0, 0, settings)
            + _frame(_WINDOW_UPDATE, 0, 0, struct.pack(">I", _MAX_WINDOW - _DEFAULT_WINDOW))
        )
        self.sock = sock
        self._send(greeting, deadline)

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def _fail_connection(self, error: RpcError) -> RpcError:
        self.close()
        return error

    def _connected(self) -> _socket.socket:
        """The open socket (every call connects first; a failure closes it and raises, so this always holds)."""
        if self.sock is None:
            raise self._unavailable("the connection was closed")
        return self.sock

    def _send(self, data: bytes, deadline: float) -> None:
        sock = self._connected()
        try:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            sock.sendall(data)
        except _TIMEOUT:
            raise self._fail_connection(
                RpcError("DEADLINE_EXCEEDED", f"{self.address} did not answer in time")
            ) from None
        except OSError as exc:
            raise self._fail_connection(self._unavailable(exc.strerror or str(exc))) from None

    def _read_exact(self, size: int, deadline: float) -> bytes:
        sock = self._connected()
        while len(self.buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._fail_connection(
                    RpcError("DEADLINE_EXCEEDED", f"{self.address} did not answer in time", address=self.address)
                )
            try:
                sock.settimeout(remaining)
                chunk = sock.recv(max(65536, size - len(self.buffer)))
            except _TIMEOUT:
                raise self._fail_connection(
                    RpcError("DEADLINE_EXCEEDED", f"{self.address} did not answer in time", address=self.address)
                ) from None
            except OSError as exc:
                raise self._fail_connection(self._unavailable(exc.strerror or str(exc))) from None
            if not chunk:
                raise self._fail_connection(self._unavailable("the connection was closed"))
            self.buffer += chunk
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out

    def _read_frame(self, deadline: float) -> tuple[int, int, int, bytes]:
        header = self._read_exact(9, deadline)
        length = int.from_bytes(header[0:3], "big")
        frame_type, flags = header[3], header[4]
        stream_id = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
        payload = self._read_exact(length, deadline) if length else b""
        return frame_type, flags, stream_id, payload

    # -------------------------------------------------------------- frames

    def _handle_frame(self, call: _Call, deadline: float) -> None:
        frame_type, flags, stream_id, payload = self._read_frame(deadline)
        if frame_type == _SETTINGS:
            if not flags & _ACK:
                self._apply_settings(payload, call)
                self._send(_frame(_SETTINGS, _ACK, 0), deadline)
        elif frame_type == _PING:
            if not flags & _ACK:
                self._send(_frame(_PING, _ACK, 0, payload), deadline)
        elif frame_type == _WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream_id == 0:
                self.send_window += increment
            elif stream_id == call.stream_id:
                call.send_window += increment
        elif frame_type == _GOAWAY:
            self.goaway_last_stream = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if call.stream_id > self.goaway_last_stream:
                raise self._fail_connection(self._unavailable("the server is shutting down this connection"))
        elif frame_type in (_HEADERS, _CONTINUATION):
            block = payload
            if frame_type == _HEADERS:
                block = self._strip_headers_frame(flags, payload)
            if stream_id == call.stream_id:
                call.header_block += block
            if flags & _END_HEADERS:
                # every block goes through the decoder: the dynamic table is shared by the connection
                try:
                    headers = self.decoder.decode(bytes(call.header_block if stream_id == call.stream_id else block))
                except hpack.HpackError as exc:
                    raise self._fail_connection(
                        RpcError("INTERNAL", f"{self.address} sent headers this client cannot read ({exc})")
                    ) from None
                if stream_id == call.stream_id:
                    call.header_blocks.append(headers)
                    call.header_block.clear()
            if stream_id == call.stream_id and flags & _END_STREAM:
                call.ended = True
        elif frame_type == _DATA:
            data = payload
            if flags & _PADDED:
                pad = payload[0]
                data = payload[1 : len(payload) - pad]
            self.unacked_bytes += len(payload)
            if stream_id == call.stream_id:
                call.data += data
                if len(call.data) > _RECEIVE_LIMIT:
                    raise self._fail_connection(
                        RpcError("RESOURCE_EXHAUSTED", f"answer from {self.address} is larger than 64 MiB")
                    )
                if flags & _END_STREAM:
                    call.ended = True
        elif frame_type == _RST_STREAM and stream_id == call.stream_id:
            call.reset_code = int.from_bytes(payload[:4], "big")
            call.ended = True
        elif frame_type == _PUSH_PROMISE:
            raise self._fail_connection(RpcError("INTERNAL", f"{self.address} pushed although push is disabled"))

    @staticmethod
    def _strip_headers_frame(flags: int, payload: bytes) -> bytes:
        start, end = 0, len(payload)
        if flags & _PADDED:
            start = 1
            end -= payload[0]
        if flags & _PRIORITY_FLAG:
            start += 5
        return payload[start:end]

    def _apply_settings(self, payload: bytes, call: _Call) -> None:
        for offset in range(0, len(payload) - len(payload) % 6, 6):
            key, value = struct.unpack(">HI", payload[offset : offset + 6])
            if key == _SETTINGS_INITIAL_WINDOW_SIZE:
                call.send_window += value - self.peer_initial_window
                self.peer_initial_window = value
            elif key == _SETTINGS_MAX_FRAME_SIZE:
                self.peer_max_frame = value

    # -------------------------------------------------------------- calls

    def call(
        self, path: str, request: bytes, timeout: float = 10.0, metadata: tuple[tuple[str, str], ...] = ()
    ) -> tuple[bytes, list[tuple[str, str]]]:
        """POST one request message to path ('/package.Service/Method'); -> (reply bytes, trailing metadata).

        metadata: extra request headers (lower-case keys), such as the spur-auth credential."""
        deadline = time.monotonic() + timeout
        if self.sock is None or self.goaway_last_stream is not None:
            self.close()
            self._reset()
            self._connect(deadline)
        call = _Call(self.next_stream_id, self.peer_initial_window)
        self.next_stream_id += 2
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", f"{self.host}:{self.port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-accept-encoding", "identity"),
            ("grpc-timeout", f"{max(1, int(timeout * 1000))}m"),
            ("user-agent", "spur-cli"),
        ]
        headers.extend(metadata)
        block = hpack.encode_headers(headers)
        out = bytearray()
        for start in range(0, len(block), self.peer_max_frame):
            chunk = block[start : start + self.peer_max_frame]
            last = start + self.peer_max_frame >= len(block)
            frame_type = _HEADERS if start == 0 else _CONTINUATION
            out += _frame(frame_type, _END_HEADERS if last else 0, call.stream_id, chunk)
        self._send(bytes(out), deadline)
        self._send_body(call, b"\x00" + struct.pack(">I", len(request)) + request, deadline)
        while not call.ended:
            self._handle_frame(call, deadline)
        if self.unacked_bytes:
            self._send(_frame(_WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacked_bytes)), deadline)
            self.unacked_bytes = 0
        return self._finish(call)

    def _send_body(self, call: _Call, body: bytes, deadline: float) -> None:
        sent = 0
        while True:
            if call.ended:  # the server answered (an error) before reading everything
                return
            allowed = min(self.send_window, call.send_window, self.peer_max_frame, len(body) - sent)
            if allowed <= 0 and sent < len(body):
                self._handle_frame(call, deadline)
                continue
            chunk = body[sent : sent + allowed]
            sent += len(chunk)
            self.send_window -= len(chunk)
            call.send_window -= len(chunk)
            self._send(_frame(_DATA, _END_STREAM if sent >= len(body) else 0, call.stream_id, chunk), deadline)
            if sent >= len(body):
                return

    def _finish(self, call: _Call) -> tuple[bytes, list[tuple[str, str]]]:
        if call.reset_code is not None:
            code = {7: "UNAVAILABLE", 8: "CANCELLED", 11: "RESOURCE_EXHAUSTED"}.get(call.reset_code, "INTERNAL")
            raise RpcError(
                code, f"{self.address} reset the call (HTTP/2 error {call.reset_code})", address=self.address
            )
        if not call.header_blocks:
            raise RpcError("INTERNAL", f"{self.address} answered without headers", address=self.address)
        first = dict(call.header_blocks[0])
        trailers = call.header_blocks[-1]
        status_text = first.get(":status", "")
        if status_text and status_text != "200":
            http_codes = {
                "400": "INTERNAL",
                "401": "UNAUTHENTICATED",
                "403": "PERMISSION_DENIED",
                "404": "UNIMPLEMENTED",
            }
            code = http_codes.get(status_text, "UNAVAILABLE")
            raise RpcError(
                code, f"{self.address} answered HTTP {status_text}; is it a Spur controller?", address=self.address
            )
        trailer_map = dict(trailers)
        status = trailer_map.get("grpc-status")
        if status is None:
            raise RpcError("INTERNAL", f"{self.address} answered without a grpc-status", address=self.address)
        metadata = [(k, v) for k, v in trailers if not k.startswith(":") and not k.startswith("grpc-")]
        if status != "0":
            number = int(status) if status.isdigit() else 2
            name = STATUS_NAMES[number] if number < len(STATUS_NAMES) else "UNKNOWN"
            details = _percent_decode(trailer_map.get("grpc-message", ""))
            raise RpcError(name, details or name.lower().replace("_", " "), metadata, self.address)
        data = bytes(call.data)
        if len(data) < 5:
            raise RpcError("INTERNAL", f"{self.address} answered OK without a message", address=self.address)
        if data[0] != 0:
            raise RpcError("INTERNAL", f"{self.address} sent a compressed message although none was accepted")
        length = struct.unpack(">I", data[1:5])[0]
        if len(data) < 5 + length:
            raise RpcError("INTERNAL", f"{self.address} sent a truncated message", address=self.address)
        return data[5 : 5 + length], metadata
