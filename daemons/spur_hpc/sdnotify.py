"""systemd's readiness protocol (sd_notify) with the standard library: READY=1, STOPPING=1 and WATCHDOG=1.

A unit with Type=notify starts a daemon with $NOTIFY_SOCKET naming a unix datagram socket (a path, or an
abstract name when it starts with '@'); `systemctl start` returns once the daemon sends READY=1 there.
WatchdogSec= adds $WATCHDOG_USEC: the daemon must send WATCHDOG=1 more often than that or systemd kills it.
Without $NOTIFY_SOCKET (supervisord, a terminal, the tests) every call does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import MutableMapping

log = logging.getLogger(__name__)

# Taken out of the environment once read: spurd's job supervisors and the jobs must not inherit them (systemd
# would log every message they sent, and a job could pretend to be the daemon).
ENVIRONMENT = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def socket_address(value: str) -> str:
    """The address to connect to: '@name' is the abstract name '\\0name', a path stays as it is."""
    return "\0" + value[1:] if value.startswith("@") else value


class Notifier:
    def __init__(self, address: str | None, watchdog_usec: int = 0) -> None:
        self.address = address
        # Ping twice per period, as sd_watchdog_enabled(3) advises: one late tick must not be fatal.
        self.watchdog_interval = watchdog_usec / 2_000_000 if address and watchdog_usec > 0 else 0.0
        self._next_ping = 0.0
        self._warned = False

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        environ = os.environ if environ is None else environ
        address, usec, pid = (environ.pop(name, "") for name in ENVIRONMENT)
        if address and not address.startswith(("/", "@")):
            log.warning("NOTIFY_SOCKET=%s: not a path nor an abstract name (@...); not notifying systemd", address)
            address = ""
        watchdog = int(usec) if usec.isdigit() else 0
        if pid and pid != str(os.getpid()):
            watchdog = 0  # the watchdog is meant for another process (the one that started us)
        return cls(address or None, watchdog)

    def notify(self, *fields: str) -> bool:
        """Send one message of NAME=value lines; False when there is no socket or it cannot be reached."""
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(socket_address(self.address))
                sock.sendall("\n".join(fields).encode())
        except OSError as exc:
            if not self._warned:  # once: a daemon must not fill its log because systemd went away
                log.warning("cannot notify systemd at NOTIFY_SOCKET=%s: %s", self.address, exc)
                self._warned = True
            return False
        return True

    def ready(self) -> None:
        self.notify("READY=1", "STATUS=serving")

    def stopping(self) -> None:
        self.notify("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> None:
        """Called from the main loop on every tick; pings when half of WatchdogSec has passed."""
        if not self.watchdog_interval:
            return
        now = time.monotonic()
        if now >= self._next_ping:
            self._next_ping = now + self.watchdog_interval
            self.notify("WATCHDOG=1")
