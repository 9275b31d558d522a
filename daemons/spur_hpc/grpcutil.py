"""gRPC plumbing shared by daemons and clients: servers that bind before they serve, channels, errors."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from spur_hpc.wire import failover

LEADER_METADATA_KEY = failover.LEADER_METADATA_KEY

_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.enable_retries", 0),
]


def create_server(address: str, workers: int = 16) -> tuple[grpc.Server, int]:
    """Bind a server to address ("host:0" picks a free port) without starting it; returns (server, port)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc"),
        options=[("grpc.so_reuseport", 0)] + _CHANNEL_OPTIONS[1:3],
    )
    return server, _bind(server, address)


class AioServer:
    """A grpc.aio server on one event-loop thread of its own, for a daemon whose other threads are not asyncio's.

    Coroutine handlers run on the loop; synchronous handlers (grpc.aio's migration_thread_pool) in a pool of
    `workers` threads. grpc.aio objects may only be used on the thread that made them: everything here runs on
    the loop, and the daemon's threads reach it through start() and stop().
    """

    def __init__(self, address: str, workers: int) -> None:
        self.pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc")
        self.loop = asyncio.new_event_loop()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, name="grpc-loop", daemon=True)
        self._thread.start()
        try:
            self.server, self.port = self._call(self._make(address)).result()
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()
            self.pool.shutdown(wait=False)
            self._ended.set()

    def _call(self, coroutine) -> futures.Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def _make(self, address: str) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(
            migration_thread_pool=self.pool, options=[("grpc.so_reuseport", 0)] + _CHANNEL_OPTIONS[1:3]
        )
        return server, _bind(server, address)

    def add(self, adder: Callable[[Any, Any], None], servicer: Any) -> None:
        """adder(servicer, server): a generated add_*Servicer_to_server, run on the loop before start()."""

        async def add() -> None:
            adder(servicer, self.server)

        self._call(add()).result()

    def start(self) -> None:
        self._call(self.server.start()).result()

    def stop(self, grace: float | None) -> threading.Event:
        """Refuse new calls and give those in flight up to grace seconds (None: none) to finish; the event is set
        once the server has stopped and the loop has ended."""
        if self._ended.is_set():
            return self._ended
        self._call(self.server.stop(grace)).add_done_callback(lambda _f: self.loop.call_soon_threadsafe(self.loop.stop))
        return self._ended


def create_aio_server(address: str, workers: int) -> tuple[AioServer, int]:
    """create_server() for grpc.aio (AioServer): bound, not started; returns (server, port)."""
    server = AioServer(address, workers)
    return server, server.port


def _bind(server: grpc.Server | grpc.aio.Server, address: str) -> int:
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}: the address is in use or not on this host")
    return port


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)


def leader_hint(error: grpc.RpcError) -> str | None:
    """The leader a refusal names; None also for an error that is not a call's (it has no metadata)."""
    try:
        metadata = error.trailing_metadata()
    except Exception:
        return None
    return failover.leader_hint(metadata)
