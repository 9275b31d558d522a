"""spurd's way to the controllers: find the Raft leader among [controller] hosts and stay with it.

Agent RPCs are answered by the leader only. A follower refuses with UNAVAILABLE and, when it knows
the leader, names it in the "spur-leader" trailing metadata; the client then goes there at once.
Otherwise it tries the next host, until the deadline: wire.failover decides the order and the pauses.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import grpc

from spur_hpc import auth, grpcutil
from spur_hpc.proto import slurm_pb2_grpc
from spur_hpc.wire import failover

log = logging.getLogger("spurd.controller")


class ControllerUnavailable(Exception):
    """No leader accepted the call before the deadline; the message says what each host answered."""


class ControllerClient:
    def __init__(
        self, hosts: list[str], call_timeout: float = 5.0, auth_type: str = "none", munge_socket: str = ""
    ) -> None:
        if not hosts:
            raise ValueError("no controller hosts")
        self.hosts = list(hosts)
        self.call_timeout = call_timeout
        self.auth_type, self.munge_socket = auth_type, munge_socket
        self._current = self.hosts[0]
        self._stubs: dict[str, slurm_pb2_grpc.SlurmControllerStub] = {}
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    @property
    def current(self) -> str:
        """The controller this agent talks to (the last one that answered as leader)."""
        return self._current

    def _stub(self, address: str) -> slurm_pb2_grpc.SlurmControllerStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                self._channels[address] = grpcutil.channel(address)
                stub = slurm_pb2_grpc.SlurmControllerStub(self._channels[address])
                self._stubs[address] = stub
            return stub

    def close(self) -> None:
        with self._lock:
            for chan in self._channels.values():
                chan.close()
            self._channels.clear()
            self._stubs.clear()

    def call(self, method: str, request: Any, deadline: float, stop: threading.Event | None = None) -> Any:
        """Call method on the leader; retry elsewhere until time.monotonic() >= deadline.

        Errors other than "try another controller" (INVALID_ARGUMENT, FAILED_PRECONDITION, ...) are raised
        at once as grpc.RpcError: retrying them elsewhere cannot help.
        """
        policy = failover.Failover(
            self.hosts,
            deadline,
            prefer=self._current,
            sleep=stop.wait if stop is not None else time.sleep,
            stopped=stop.is_set if stop is not None else None,
        )
        for address in policy:
            timeout = max(0.05, min(self.call_timeout, policy.remaining()))
            try:
                # A fresh credential per try: munged refuses a replayed one.
                metadata = auth.client_metadata(self.auth_type, self.munge_socket)
                reply = getattr(self._stub(address), method)(request, timeout=timeout, metadata=metadata)
            except grpc.RpcError as exc:
                code = exc.code()
                if code is None or code.name not in failover.RETRY_CODES:
                    if address != self._current:
                        self._switch(address, "answered")
                    raise
                hint = grpcutil.leader_hint(exc)
                why = f"{code.name} {exc.details() or ''}".strip() + (f" (leader {hint})" if hint else "")
                policy.failed(address, why, hint=hint)
                continue
            if address != self._current:
                self._switch(address, "is the leader")
            return reply
        raise ControllerUnavailable(f"{method}: no controller leader answered ({policy.summary()})")

    def _switch(self, address: str, why: str) -> None:
        log.info("controller %s %s; switching from %s", address, why, self._current)
        self._current = address
