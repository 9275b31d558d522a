"""Unit tests of what every gRPC module of spur.cluster shares (module_utils/spur_client): the managed host's
plain Python, credentials.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py), or a real
grpcio server where the wire itself is the point.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from ansible_collections.spur.cluster.plugins.module_utils import spur_client, spur_probes
from collection_helpers import bare_python

from spur_hpc import grpcutil
from spur_hpc.proto import slurm_pb2 as pb
from spur_hpc.proto import slurm_pb2_grpc as pb_grpc

# ------------------------------------------------------------------ the managed host's Python


class Controller(pb_grpc.SlurmControllerServicer):
    """A leader that knows one node and keeps the spur-auth credential of every call."""

    def __init__(self) -> None:
        self.credentials: list[str] = []

    def ListNodes(self, request, context):  # noqa: N802
        self.credentials.append(dict(context.invocation_metadata()).get("spur-auth", ""))
        node = pb.Node(name="n1", state=pb.NodeState.Value("IDLE"), registered=True, resources=pb.NodeResources(cpus=4))
        return pb.ListNodesReply(nodes=[node] if list(request.names) in ([], ["n1"]) else [])


@pytest.fixture
def grpc_controller():
    servicer = Controller()
    server, port = grpcutil.create_server("127.0.0.1:0", workers=2)
    pb_grpc.add_SlurmControllerServicer_to_server(servicer, server)
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


def test_the_tests_managed_host_python_has_neither_grpcio_nor_spur_hpc():
    for name in ("grpc", "google.protobuf", "spur_hpc"):
        found = subprocess.run([str(bare_python()), "-c", f"import {name}"], capture_output=True, timeout=60)
        assert found.returncode != 0, f"{bare_python()} imports {name}: the modules' side would not be plain"


def test_a_grpc_module_runs_on_a_python_with_the_standard_library_only(grpc_controller, fake_cluster, playbook):
    servicer, address = grpc_controller
    args = {"controllers": fake_cluster.urls, "grpc_hosts": [address], "auth_type": "none", "timeout": 5}
    results = playbook([{"spur.cluster.spur_node_info": {**args, "names": ["n1"]}, "register": "info"}])
    (node,) = results["info"]["nodes"]
    assert node["name"] == "n1" and node["state"] == "IDLE" and node["cpus"] == 4 and node["registered"] is True
    assert servicer.credentials == [f"none:{os.getuid()}:{os.getgid()}"]  # the credential reached the controller


def test_a_request_field_slurm_proto_does_not_have_is_one_error_before_any_call():
    rpc = spur_client.ControllerRpc(["127.0.0.1:9"], 1, auth_type="none")
    with pytest.raises(spur_client.SpurInvalid) as info:
        rpc.call("ListNodes", dict(nmes=["n1"]))
    assert info.value.message == "ListNodes: ListNodesRequest has no field 'nmes'"
    assert rpc.connections == {}


# ------------------------------------------------------------------ credentials


def test_every_grpc_call_carries_a_credential(tmp_path):
    rpc = spur_client.ControllerRpc(["127.0.0.1:9"], 1, auth_type="none")
    ((key, value),) = rpc.credential()
    assert key == "spur-auth" and value == f"none:{os.getuid()}:{os.getgid()}"
    munge = spur_client.ControllerRpc(["127.0.0.1:9"], 1, auth_type="munge", munge_socket=str(tmp_path / "no.sock"))
    with pytest.raises(spur_client.SpurRefused) as info:
        munge.credential()
    assert "MUNGE credential" in info.value.message and info.value.override == "auth_type"


# ------------------------------------------------------------------ discovery


@pytest.mark.parametrize(
    ("reported", "probe", "dialled"),
    [
        ("0.0.0.0:6817", "http://127.0.1.2:6822", "127.0.1.2:6817"),
        ("[::]:7000", "http://[::1]:6822", "[::1]:7000"),
        ("0.0.0.0", "http://127.0.1.2:6822", "127.0.1.2:6817"),  # the default gRPC port, not a port "0.0.0.0"
        ("127.0.1.3:6817", "http://127.0.1.2:6822", "127.0.1.3:6817"),
        ("::1:6817", "http://127.0.1.2:6822", "::1:6817"),  # not an address: left for the call to name
    ],
)
def test_a_wildcard_grpc_address_is_dialled_on_the_host_whose_probe_answered(reported, probe, dialled):
    assert spur_probes.reachable_grpc_addr(reported, probe) == dialled


# ------------------------------------------------------------------ the HTTP probes' client


def test_a_probe_answer_is_its_own_status_and_nothing_that_does_not_answer_is_one():
    import socket
    import threading

    from collection_fakes import ProbeServer
    from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurUnreachable

    probe = ProbeServer({"/status": (200, {"role": "leader"}), "/readyz": (503, "not registered"),
                         "/moved": (302, "elsewhere")})  # fmt: skip
    try:
        assert spur_probes.get_json(probe.url + "/status", 2.0) == {"role": "leader"}
        assert spur_probes.http_get(probe.url + "/readyz", 2.0) == (503, "not registered")
        assert spur_probes.http_get(probe.url + "/moved", 2.0)[0] == 302  # never followed
        with pytest.raises(SpurUnreachable, match="answered HTTP 503"):
            spur_probes.get_json(probe.url + "/readyz", 2.0)
    finally:
        probe.close()

    # a port nothing listens on, and one that answers something other than HTTP
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(SpurUnreachable, match=f"127.0.0.1:{port}"):
        spur_probes.http_get(f"http://127.0.0.1:{port}/status", 2.0)
    garbled = socket.socket()
    garbled.bind(("127.0.0.1", 0))
    garbled.listen()

    def answer_garbage() -> None:
        conn, _ = garbled.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        conn.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        with pytest.raises(SpurUnreachable):
            spur_probes.http_get(f"http://127.0.0.1:{garbled.getsockname()[1]}/status", 2.0)
    finally:
        garbled.close()
