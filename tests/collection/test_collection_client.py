"""Unit tests of what every gRPC module of spur.cluster shares (module_utils/spur_client): missing
libraries, credentials.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py).
"""

from __future__ import annotations

import os

import pytest
from ansible_collections.spur.cluster.plugins.module_utils import spur_client
from ansible_collections.spur.cluster.plugins.modules import (
    spur_controller_info,
    spur_node,
)
from collection_fakes import conn, node_args
from collection_helpers import run_module

# ------------------------------------------------------------------ missing libraries


def test_a_module_without_grpc_says_which_interpreter_to_use(fake_cluster, monkeypatch):
    monkeypatch.setattr(spur_client, "GRPC_IMPORT_ERROR", "Traceback: No module named 'grpc'")
    result = run_module(spur_node, node_args(fake_cluster))
    assert result["failed"]
    assert "grpcio and spur-hpc" in result["msg"] and "ansible_python_interpreter" in result["msg"]
    assert result["exception"].startswith("Traceback")
    # probe-only modules do not need it
    assert "failed" not in run_module(spur_controller_info, conn(fake_cluster))


# ------------------------------------------------------------------ credentials


def test_every_grpc_call_carries_a_credential(tmp_path):
    rpc = spur_client.ControllerRpc(["127.0.0.1:9"], 1, auth_type="none")
    ((key, value),) = rpc.credential()
    assert key == "spur-auth" and value == f"none:{os.getuid()}:{os.getgid()}"
    munge = spur_client.ControllerRpc(["127.0.0.1:9"], 1, auth_type="munge", munge_socket=str(tmp_path / "no.sock"))
    with pytest.raises(spur_client.SpurRefused) as info:
        munge.credential()
    assert "MUNGE credential" in info.value.message and info.value.override == "auth_type"
