"""spurd's way to the controllers: find the Raft leader among [controller] hosts and stay with it.

Agent RPCs are answered by the leader only. A follower refuses with UNAVAILABLE and, when it knows
the leader, names it in the "spur-leader" trailing metadata; the client then goes there at once.
Otherwise it tries the next host, round robin, until the deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import grpc

from spur_hpc import auth, grpcutil
from spur_hpc.proto import slurm_pb2_grpc

log = logging.getLogger("spurd.controller")

# Codes that mean "another controller may answer": not the leader, down, or too slow.
RETRY_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


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
        order = [self._current] + [h for h in self.hosts if h != self._current]
        queue = list(order)
        answers: dict[str, str] = {}
        while True:
            now = time.monotonic()
            if now >= deadline or (stop is not None and stop.is_set()):
                seen = "; ".join(f"{h}: {a}" for h, a in answers.items()) or "no answer"
                raise ControllerUnavailable(f"{method}: no controller leader answered ({seen})")
            if not queue:
                queue = list(order)
                # Every host refused: an election is probably running. Give it a moment.
                pause = min(0.25, max(0.0, deadline - now))
                if stop is not None:
                    stop.wait(pause)
                else:
                    time.sleep(pause)
                continue
            address = queue.pop(0)
            timeout = max(0.05, min(self.call_timeout, deadline - now))
            try:
                # A fresh credential per try: munged refuses a replayed one.
                metadata = auth.client_metadata(self.auth_type, self.munge_socket)
                reply = getattr(self._stub(address), method)(request, timeout=timeout, metadata=metadata)
            except grpc.RpcError as exc:
                code = exc.code()
                if code not in RETRY_CODES:
                    if address != self._current:
                        self._switch(address, "answered")
                    raise
                hint = grpcutil.leader_hint(exc)
                answers[address] = f"{code.name} {exc.details() or ''}".strip() + (f" (leader {hint})" if hint else "")
                if hint and hint != address:
                    if hint in queue:
                        queue.remove(hint)
                    queue.insert(0, hint)
                    if hint not in order:
                        order.append(hint)  # a leader address we were not configured with; keep trying it
                continue
            if address != self._current:
                self._switch(address, "is the leader")
            return reply

    def _switch(self, address: str, why: str) -> None:
        log.info("controller %s %s; switching from %s", address, why, self._current)
        self._current = address
