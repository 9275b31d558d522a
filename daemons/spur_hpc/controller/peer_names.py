"""The host name of a gRPC client, as slurmctld names a job's AllocNode: the client's address resolved by the
controller (127.0.0.1 is `localhost`), never what the client says of itself.

Lookups are cached per address (failures too) and bounded in time: an address the resolver cannot answer for
quickly is named by the address itself while the lookup finishes in the background for the next call.
"""

from __future__ import annotations

import socket
import threading

LOOKUP_WAIT_SECS = 0.5  # a submit never waits longer than this for a reverse lookup
MAX_CACHED = 4096

_names: dict[str, str] = {}
_lock = threading.Lock()


def address_of(peer: str) -> str:
    """grpc's context.peer() ('ipv4:127.0.0.1:5000', 'ipv6:[::1]:5000', 'unix:/path') -> the address alone."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]").split("%", 1)[0]
    return "localhost" if kind == "unix" else rest or peer


def _resolve(address: str) -> None:
    try:
        name = socket.gethostbyaddr(address)[0]
    except (OSError, UnicodeError):
        name = address
    with _lock:
        if len(_names) >= MAX_CACHED:
            _names.clear()
        _names[address] = name.split(".", 1)[0] if name != address else name  # Slurm shows the short name


def host_of(peer: str) -> str:
    """The client's host name (short form), or its address when it has none or the lookup is slow."""
    address = address_of(peer)
    with _lock:
        if address in _names:
            return _names[address]
    lookup = threading.Thread(target=_resolve, args=(address,), name=f"resolve {address}", daemon=True)
    lookup.start()
    lookup.join(LOOKUP_WAIT_SECS)
    with _lock:
        return _names.get(address, address)
