"""The launches the leader is sending to each node right now, so HoldDispatch answers only once nothing more is
on its way to an agent that is about to restart (a launch that left before the hold must land first)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class DispatchGate:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._sending: dict[str, int] = {}  # node -> launches between "decided" and "the agent answered"

    def begin(self, node: str) -> None:
        """Count a launch to `node` from before its start is written (the hold check comes after)."""
        with self._changed:
            self._sending[node] = self._sending.get(node, 0) + 1

    def end(self, node: str) -> None:
        with self._changed:
            left = self._sending.get(node, 0) - 1
            if left > 0:
                self._sending[node] = left
            else:
                self._sending.pop(node, None)
                self._changed.notify_all()

    @contextmanager
    def sending(self, node: str) -> Iterator[None]:
        self.begin(node)
        try:
            yield
        finally:
            self.end(node)

    def in_flight(self, node: str) -> int:
        with self._changed:
            return self._sending.get(node, 0)

    def wait_idle(self, node: str, timeout: float) -> bool:
        """Wait until no launch to `node` is in flight; False when `timeout` seconds passed first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._sending.get(node):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True
