"""Unit tests of the spur.cluster module spur_cluster_health.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py).
"""

from __future__ import annotations

import time

import pytest
from ansible_collections.spur.cluster.plugins.modules import (
    spur_cluster_health,
)
from collection_fakes import conn
from collection_helpers import run_module

# ------------------------------------------------------------------ spur_cluster_health


def test_health_passes_after_the_leader_was_stable(fake_cluster):
    start = time.monotonic()
    result = run_module(spur_cluster_health, conn(fake_cluster, stable_for=0.6, poll_interval=0.1))
    assert "failed" not in result and result["healthy"] is True and result["unmet"] == []
    assert time.monotonic() - start >= 0.6 and result["leader"] == "ctl-1"


@pytest.mark.parametrize(
    "state, needle, override",
    [
        (dict(leader=None), "no controller answers as leader", "wait_timeout"),
        (dict(leader=0, commit=900, applied=100), "lags 800 entries behind the leader (max_lag 100)", "wait_timeout"),
        (dict(leader=0, down=(1,)), "controller ctl-1 does not answer", "wait_timeout"),
    ],
)
def test_health_fails_naming_the_unmet_condition(fake_cluster, state, needle, override):
    fake_cluster.set(**state)
    result = run_module(spur_cluster_health, conn(fake_cluster, stable_for=0, wait_timeout=0.4, poll_interval=0.1))
    assert result["failed"] and result["healthy"] is False
    assert needle in result["msg"] and override in result["msg"]
    assert any(needle in line for line in result["unmet"])


def test_health_checks_expected_nodes(fake_cluster, controller):
    controller.add_node("n1")
    controller.add_node("n2", registered=False)
    args = conn(fake_cluster, stable_for=0, wait_timeout=0.3, poll_interval=0.1, expected_nodes=["n1", "n2", "n3"])
    result = run_module(spur_cluster_health, args)
    assert result["failed"]
    assert "n3 are unknown" in result["msg"] and "n2 are not registered" in result["msg"]
    args["expected_nodes"] = ["n1"]
    assert run_module(spur_cluster_health, args)["healthy"] is True
