"""Which controller to ask next, how long to keep asking, when to give up: one policy for every client.

The CLI and the Ansible modules (wire.grpcwire; the modules through the generated copies
module_utils/spur_grpcwire.py and spur_failover.py) and spurd (grpcio) each bring their transport and walk
the controllers with a Failover:

    policy = Failover(addresses, deadline=time.monotonic() + WRITE_PATIENCE_SECS, write=True)
    for address in policy:
        try:
            return send(address)
        except TransientError as exc:  # UNAVAILABLE, DEADLINE_EXCEEDED: another controller may answer
            policy.failed(address, str(exc), hint=leader_hint(exc.trailing_metadata))
    raise Unavailable(policy.summary())

A round tries the leader a refusal named (the hint) first, then the preferred address (the last one that
answered), then the rest in the order given, each at most once. Every address gets its try in the first
round whatever the deadline. Between rounds the policy pauses (an election takes about a second) and
gives up when the pause would end past the deadline. A read also gives up after a round in which no
controller answered at all (nothing listens: waiting does not help); a write keeps trying until its
deadline, since a controller may be restarting. Pure Python, standard library only, Python 3.8+.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

# Trailing metadata key of a "not the leader" refusal; its value is the leader's gRPC address.
LEADER_METADATA_KEY = "spur-leader"
# A write may land in the middle of an election (about a second); retry it for this long at most.
WRITE_PATIENCE_SECS = 15.0
PAUSE_SECS = 0.25
# gRPC status names that mean "another controller may answer": not the leader, down, or too slow.
RETRY_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})


def leader_hint(metadata: Iterable[tuple[str, str]] | None) -> str | None:
    """The leader's address from a refusal's trailing metadata ((key, value) pairs), or None."""
    for key, value in metadata or ():
        if key == LEADER_METADATA_KEY and value:
            return value
    return None


class Failover:
    """One call's walk over the controllers. Iterate for the address to try next; report each failure."""

    def __init__(
        self,
        addresses: Iterable[str],
        deadline: float,
        write: bool = True,
        prefer: str | None = None,
        pause: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
        stopped: Callable[[], bool] | None = None,
    ) -> None:
        self.addresses = list(dict.fromkeys(addresses))
        if not self.addresses:
            raise ValueError("no controller address to try")
        self.deadline = deadline
        self.write = write
        self.prefer = prefer
        self.pause = PAUSE_SECS if pause is None else pause
        self.clock, self.sleep, self.stopped = clock, sleep, stopped
        self.errors: dict[str, str] = {}  # address -> its last error, in the order they first failed
        self.rounds = 0
        self._hint: str | None = None
        self._queue: list[str] = []
        self._tried: set[str] = set()
        self._answered = False

    def failed(self, address: str, error: str, hint: str | None = None, reachable: bool = True) -> None:
        """address did not serve the call: error says why (one line), hint names the leader it pointed at,
        reachable is False when nothing answered at that address (refused, unresolvable)."""
        self.errors[address] = error
        self._answered = self._answered or reachable
        if hint and hint != address:
            self._hint = hint
            if hint not in self.addresses:
                self.addresses.append(hint)  # a leader we were not configured with: keep it for later rounds
            if hint not in self._tried:
                if hint in self._queue:
                    self._queue.remove(hint)
                self._queue.insert(0, hint)

    def __iter__(self) -> Iterator[str]:
        while True:
            self._start_round()
            while self._queue:
                if self.stopped is not None and self.stopped():
                    return
                if self.rounds > 1 and self.clock() >= self.deadline:
                    return
                address = self._queue.pop(0)
                self._tried.add(address)
                yield address
            if self.clock() + self.pause >= self.deadline or not (self.write or self._answered):
                return
            if self.stopped is not None and self.stopped():
                return
            self.sleep(self.pause)

    def _start_round(self) -> None:
        self.rounds += 1
        first = [a for a in (self._hint, self.prefer) if a]
        self._queue = list(dict.fromkeys(first + self.addresses))
        self._tried = set()
        self._answered = False

    def remaining(self) -> float:
        """Seconds left before the deadline (0 when past it)."""
        return max(0.0, self.deadline - self.clock())

    def summary(self) -> str:
        """Every address's last error on one line: 'a:1: why; b:2: why' ('no answer' before any try)."""
        return "; ".join(f"{address}: {error}" for address, error in self.errors.items()) or "no answer"
