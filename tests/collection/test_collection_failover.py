"""module_utils' ControllerRpc walks the controllers with the generated copies of spur_hpc.wire (the
standard-library client and the failover policy): over real grpcio servers on 127.0.0.1, a write through a
follower lands on the leader the follower names, and a read nobody answers is one SpurUnreachable naming every
address once."""

from __future__ import annotations

import grpc
import pytest
from ansible_collections.spur.cluster.plugins.module_utils import spur_client

from spur_hpc import grpcutil
from spur_hpc.proto import slurm_pb2 as pb
from spur_hpc.proto import slurm_pb2_grpc as pb_grpc


class Controller(pb_grpc.SlurmControllerServicer):
    """A controller that leads (leader None) or refuses every call naming leader, like a follower of spurctld."""

    def __init__(self, calls: list[str], leader: str | None = None) -> None:
        self.calls, self.leader, self.address = calls, leader, ""

    def DrainNode(self, request, context):  # noqa: N802
        self.calls.append(self.address)
        if self.leader is not None:
            context.set_trailing_metadata(((grpcutil.LEADER_METADATA_KEY, self.leader),))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{self.address} is not the leader")
        return pb.Node(name=request.name, drain=True, reason=request.reason)


@pytest.fixture
def controllers():
    """Three controllers on 127.0.0.1: the third leads, the first two name it. -> (addresses, calls)."""
    calls: list[str] = []
    servers, addresses, servicers = [], [], []
    for _ in range(3):
        servicer = Controller(calls)
        server, port = grpcutil.create_server("127.0.0.1:0", workers=2)
        pb_grpc.add_SlurmControllerServicer_to_server(servicer, server)
        server.start()
        servicer.address = f"127.0.0.1:{port}"
        servers.append(server)
        servicers.append(servicer)
        addresses.append(servicer.address)
    for servicer in servicers[:2]:
        servicer.leader = addresses[2]
    yield addresses, calls
    for server in servers:
        server.stop(None)


def test_a_write_through_a_follower_goes_to_the_leader_it_names_next(controllers) -> None:
    addresses, calls = controllers
    rpc = spur_client.ControllerRpc(addresses, timeout=5, auth_type="none")
    try:
        node = rpc.call("DrainNode", dict(name="n1", reason="disk"), write=True)
    finally:
        rpc.close()
    assert node.drain and node.reason == "disk"
    assert calls == [addresses[0], addresses[2]]  # the second follower is skipped: the hint comes first


def test_a_read_nobody_answers_names_every_address_once() -> None:
    dead = ["127.0.0.1:1", "127.0.0.1:2"]
    rpc = spur_client.ControllerRpc(dead, timeout=2, auth_type="none")
    try:
        with pytest.raises(spur_client.SpurUnreachable) as caught:
            rpc.call("GetNode", dict(name="n1"))
    finally:
        rpc.close()
    message = caught.value.message
    assert message.startswith("no controller could answer GetNode (")
    # each address once, as the start of its part: "(a: why; b: why)"
    assert all(message.count(f"({address}: ") + message.count(f"; {address}: ") == 1 for address in dead), message
