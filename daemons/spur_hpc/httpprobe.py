"""A tiny HTTP server for probes (/livez, /readyz, /status, ...), shared by spurctld and spurd.

Routes map a path to a function returning (status, content_type, body). It binds before it serves,
so a port conflict is reported at start, and it never blocks the daemon's own threads.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spur_hpc.conf import split_host_port

log = logging.getLogger("spur.probe")

Response = tuple[int, str, bytes]
Route = Callable[[], Response]


def json_response(status: int, body: Any) -> Response:
    return status, "application/json", (json.dumps(body, sort_keys=True, indent=1) + "\n").encode()


def text_response(status: int, text: str) -> Response:
    return status, "text/plain; charset=utf-8", (text if text.endswith("\n") else text + "\n").encode()


class ProbeServer:
    def __init__(self, address: str, routes: dict[str, Route]) -> None:
        host, port = split_host_port(address)
        routes = dict(routes)

        class Handler(BaseHTTPRequestHandler):
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
            self.httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise OSError(f"cannot listen on {address} for probes: {exc.strerror}") from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="probe-http", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
