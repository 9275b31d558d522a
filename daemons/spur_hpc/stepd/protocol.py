"""The supervisor's control socket: one JSON request line, one JSON reply line, per connection.

Requests ({"op": ...}):
  status                         -> the supervisor's state (always answers at once)
  wait     {"timeout": secs}     -> like status, but first waits up to timeout for the job to end
  signal   {"signal": n}         -> n = 0 cancels the job (whole tree); other n are delivered to every process
  suspend  {"resume": bool}      -> scontrol suspend: SIGSTOP to every process, the time limit held; resume:
                                    SIGCONT, the limit moved on by the time suspended (an older supervisor
                                    answers "unknown op": spurd then sends the bare signal)
  release                        -> spurd has delivered the result: the supervisor exits
Replies carry "ok" and, on failure, "error". "protocol" lets a newer spurd talk to an older supervisor
left running across an upgrade; a new field is only ever added, never renamed.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

PROTOCOL_VERSION = 1
MAX_LINE = 64 * 1024

log = logging.getLogger("spurstepd.control")

Handler = Callable[[dict[str, Any]], dict[str, Any]]
AfterReply = Callable[[dict[str, Any]], None]


class SupervisorUnreachable(Exception):
    """Nothing answers on the session's socket (the supervisor is gone or not started yet)."""


def call(path: str, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one request to the supervisor listening on path and return its reply."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise SupervisorUnreachable(f"no supervisor listens on {path} ({exc.strerror})") from None
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(MAX_LINE)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_LINE:
                raise SupervisorUnreachable(f"reply from {path} is longer than {MAX_LINE} bytes")
    except OSError as exc:
        raise SupervisorUnreachable(f"talking to the supervisor on {path} failed: {exc}") from None
    finally:
        sock.close()
    if not data:
        raise SupervisorUnreachable(f"the supervisor on {path} closed the connection without answering")
    try:
        reply = json.loads(data)
    except ValueError:
        raise SupervisorUnreachable(f"the supervisor on {path} sent a reply that is not JSON") from None
    if not isinstance(reply, dict):
        raise SupervisorUnreachable(f"the supervisor on {path} sent a reply that is not an object")
    return reply


class ControlServer:
    """Serves the control socket from background threads; handler(request) -> reply."""

    def __init__(self, sock: socket.socket, handler: Handler, on_sent: AfterReply | None = None):
        self.sock = sock
        self.handler = handler
        self.on_sent = on_sent  # called once a reply has gone out (release exits only after answering)
        self._closed = threading.Event()

    @classmethod
    def bind(cls, path: str, handler: Handler, on_sent: AfterReply | None = None) -> ControlServer:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.unlink(path)  # a socket file left by an earlier supervisor of this session
        except FileNotFoundError:
            pass
        sock.bind(path)
        sock.listen(16)
        return cls(sock, handler, on_sent)

    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="control", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                if self._closed.is_set():
                    return
                continue
            threading.Thread(target=self._serve, args=(conn,), name="control-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                # Only root and this daemon's own uid may talk to a supervisor (the directory is 0700 too).
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                pid, uid, _gid = struct.unpack("3i", creds)
                if uid not in (0, os.geteuid()):
                    log.warning("refusing control connection from pid %d uid %d", pid, uid)
                    return
                conn.settimeout(10)
                data = b""
                while not data.endswith(b"\n") and len(data) <= MAX_LINE:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                try:
                    request = json.loads(data)
                    if not isinstance(request, dict):
                        raise ValueError("not an object")
                except ValueError as exc:
                    reply: dict[str, Any] = {"ok": False, "error": f"bad request: {exc}"}
                else:
                    conn.settimeout(None)  # "wait" may legitimately take a while
                    reply = self.handler(request)
                reply.setdefault("protocol", PROTOCOL_VERSION)
                conn.sendall(json.dumps(reply).encode() + b"\n")
                if reply.get("ok") and self.on_sent is not None:
                    self.on_sent(request)
            except OSError as exc:
                log.debug("control connection failed: %s", exc)
