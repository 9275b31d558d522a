"""gRPC plumbing shared by daemons and clients: servers that bind before they serve, channels, errors."""

from __future__ import annotations

from concurrent import futures

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
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if port == 0:
        raise OSError(f"cannot listen on {address}: the address is in use or not on this host")
    return server, port


def channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)


def leader_hint(error: grpc.RpcError) -> str | None:
    """The leader a refusal names; None also for an error that is not a call's (it has no metadata)."""
    try:
        metadata = error.trailing_metadata()
    except Exception:
        return None
    return failover.leader_hint(metadata)
