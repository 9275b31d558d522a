"""The controller names a job's AllocNode by the client's address, resolved as slurmctld does."""

from __future__ import annotations

import socket

from spur_hpc.controller import peer_names


def test_grpc_peers_are_named_by_their_resolved_address(monkeypatch) -> None:
    asked: list[str] = []

    def resolve(address: str):
        asked.append(address)
        if address == "10.1.2.3":
            raise socket.herror(1, "Unknown host")
        return ("login1.example.org" if address == "192.0.2.7" else "localhost", [], [address])

    monkeypatch.setattr(peer_names, "_names", {})
    monkeypatch.setattr(socket, "gethostbyaddr", resolve)
    assert peer_names.host_of("ipv4:127.0.0.1:40112") == "localhost"
    assert peer_names.host_of("ipv4:192.0.2.7:40112") == "login1"  # the short name, as Slurm shows it
    assert peer_names.host_of("ipv6:[::1]:40112") == "localhost"
    assert peer_names.host_of("ipv4:10.1.2.3:5") == "10.1.2.3"  # no name: the address itself
    assert peer_names.host_of("ipv4:127.0.0.1:50000") == "localhost"
    assert asked == ["127.0.0.1", "192.0.2.7", "::1", "10.1.2.3"], "each address is looked up once"
