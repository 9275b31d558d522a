"""A tiny HTTP server for probes (/livez, /readyz, /status, ...), shared by spurctld and spurd.

Routes map a path to a function returning (status, content_type, body). It binds before it serves,
so a port conflict is reported at start, and it never blocks the daemon's own threads.

Anyone who can reach the port can open connections, so each one is bounded: its request line and headers
must arrive within REQUEST_SECS and MAX_REQUEST_BYTES, at most MAX_CONNECTIONS are open at once, and when
that many are open a new connection pushes out the oldest one still waiting for its request, so idle or
trickling sockets can delay a probe by no more than a moment.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spur_hpc.model import split_host_port

log = logging.getLogger("spur.probe")

Response = tuple[int, str, bytes]
Route = Callable[[], Response]

REQUEST_SECS = 5.0  # for the whole request line and headers, however slowly they trickle in
MAX_REQUEST_BYTES = 16384  # request line plus headers; a probe needs a few hundred
MAX_CONNECTIONS = 64


def json_response(status: int, body: Any) -> Response:
    return status, "application/json", (json.dumps(body, sort_keys=True, indent=1) + "\n").encode()


def text_response(status: int, text: str) -> Response:
    return status, "text/plain; charset=utf-8", (text if text.endswith("\n") else text + "\n").encode()


class _RequestReader:
    """The handler's rfile: reads the request line and headers straight from the socket, within the byte
    budget and the deadline of the whole request (a per-read timeout alone lets a byte every few seconds
    hold a connection forever)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.left = MAX_REQUEST_BYTES
        self.deadline = time.monotonic() + REQUEST_SECS
        self.eof = False  # the peer hung up (or was pushed out) before the request was complete

    def readline(self, size: int = -1) -> bytes:
        limit = self.left if size < 0 else min(size, self.left)
        while b"\n" not in self.buffer and len(self.buffer) < limit and not self.eof:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("request not complete in time")
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(4096)
            self.eof = not chunk
            self.buffer += chunk
        newline = self.buffer.find(b"\n", 0, limit)
        end = newline + 1 if newline >= 0 else min(limit, len(self.buffer))
        line, self.buffer = self.buffer[:end], self.buffer[end:]
        self.left -= len(line)
        return line

    def close(self) -> None:
        pass  # the socket is the server's to close


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args, **kwargs) -> None:
        self.lock = threading.Lock()
        self.open: dict[socket.socket, bool] = {}  # connection -> its request arrived; oldest first
        self.address_family = socket.AF_INET6 if ":" in args[0][0] else socket.AF_INET  # [::1]:6822 too
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        with self.lock:
            if len(self.open) >= MAX_CONNECTIONS:
                waiting = next((conn for conn, arrived in self.open.items() if not arrived), None)
                if waiting is None:  # every connection is being answered: this one must wait for a retry
                    self.shutdown_request(request)
                    return
                del self.open[waiting]
                try:
                    waiting.shutdown(socket.SHUT_RDWR)  # its thread sees end-of-file and ends
                except OSError:
                    pass
            self.open[request] = False
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.lock:
                self.open.pop(request, None)

    def request_arrived(self, request) -> None:
        with self.lock:
            if request in self.open:
                self.open[request] = True

    def handle_error(self, request, client_address) -> None:
        # A client that went away mid-answer is not the daemon's problem (the default prints a traceback).
        log.debug("probe connection from %s failed", client_address, exc_info=True)


class ProbeServer:
    def __init__(self, address: str, routes: dict[str, Route]) -> None:
        host, port = split_host_port(address)
        routes = dict(routes)

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                super().setup()
                self.rfile.close()
                self.rfile = _RequestReader(self.connection)

            def parse_request(self) -> bool:
                if not super().parse_request():
                    return False
                if self.rfile.eof:
                    self.close_connection = True
                    return False
                if self.rfile.left <= 0:
                    self.send_error(431, f"request line and headers exceed {MAX_REQUEST_BYTES} bytes")
                    self.linger()
                    return False
                self.server.request_arrived(self.connection)
                self.connection.settimeout(REQUEST_SECS)  # for writing the answer
                return True

            def linger(self) -> None:
                """Read a little of what the client still sends: closing with unread data would reset the
                connection, and the client could lose the answer."""
                try:
                    self.connection.shutdown(socket.SHUT_WR)
                    self.connection.settimeout(1.0)
                    for _ in range(16):
                        if not self.connection.recv(4096):
                            break
                except OSError:
                    pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    status, ctype, body = text_response(404, f"no such probe; try {', '.join(sorted(routes))}")
                else:
                    try:
                        status, ctype, body = route()
                    except Exception:
                        log.exception("probe %s failed", self.path)
                        status, ctype, body = text_response(500, "probe failed; see the daemon log")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                pass

        try:
            self.httpd = _Server((host, port), Handler)
        except OSError as exc:
            raise OSError(f"cannot listen on {address} for probes: {exc.strerror}") from None
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="probe-http", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
