"""Unit tests of the spur.cluster modules spur_controller_info and spur_node_info.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py).
"""

from __future__ import annotations

from ansible_collections.spur.cluster.plugins.modules import (
    spur_controller_info,
    spur_node_info,
)
from collection_fakes import ProbeServer, conn, dead_url
from collection_helpers import run_module

# ------------------------------------------------------------------ spur_controller_info


def test_controller_info_names_the_single_leader(fake_cluster):
    result = run_module(spur_controller_info, conn(fake_cluster))
    assert result["changed"] is False and "failed" not in result
    assert result["one_leader"] is True
    assert result["leader"] == "ctl-1" and result["leaders"] == ["ctl-1"]
    assert result["term"] == 3 and result["cluster_id"] == "c0ffee" and result["wal_level"] == 1
    assert result["members"] == ["127.0.1.1:6821", "127.0.1.2:6821", "127.0.1.3:6821"]
    by_name = {c["name"]: c for c in result["controllers"]}
    assert by_name["ctl-1"]["is_leader"] and by_name["ctl-1"]["role"] == "leader"
    assert by_name["ctl-0"]["role"] == "follower" and by_name["ctl-0"]["lag"] == 0
    assert by_name["ctl-2"]["build"] == "build-a" and by_name["ctl-2"]["grpc_addr"] == "127.0.1.3:6817"


def test_controller_info_reports_lag_against_the_leader(fake_cluster):
    fake_cluster.set(leader=1, commit=500, applied=480)
    result = run_module(spur_controller_info, conn(fake_cluster))
    assert {c["name"]: c["lag"] for c in result["controllers"]} == {"ctl-0": 20, "ctl-1": 0, "ctl-2": 20}


def test_controller_info_does_not_fail_on_a_down_controller(fake_cluster):
    fake_cluster.set(leader=0, down=(2,))
    urls = [*fake_cluster.urls, dead_url()]
    result = run_module(spur_controller_info, dict(controllers=urls, timeout=2), check_mode=True)
    assert "failed" not in result and result["changed"] is False
    assert result["one_leader"] is True and result["reachable_count"] == 2
    down = [c for c in result["controllers"] if not c["reachable"]]
    assert len(down) == 2 and all(c["error"] for c in down)
    assert "HTTP 503" in down[0]["error"]
    assert "refused" in down[1]["error"].lower()
    assert result["unreachable_controllers"] == [c["name"] for c in down]


def test_controller_info_without_a_leader_is_a_result_not_a_failure(fake_cluster):
    fake_cluster.set(leader=None)
    result = run_module(spur_controller_info, conn(fake_cluster))
    assert "failed" not in result
    assert result["one_leader"] is False and result["leader"] is None and result["term"] is None


def test_controller_info_accepts_host_port_and_names_must_match(fake_cluster):
    bare = [u.removeprefix("http://") for u in fake_cluster.urls]
    assert run_module(spur_controller_info, dict(controllers=bare))["one_leader"] is True
    result = run_module(spur_controller_info, dict(controllers=bare, controller_names=["a", "b"]))
    assert result["failed"] and "controller_names" in result["msg"] and result["override"] == "controller_names"
    result = run_module(spur_controller_info, dict(controllers=bare, timeout=0))
    assert result["failed"] and "timeout" in result["msg"]


# ------------------------------------------------------------------ spur_node_info


def test_node_info_merges_the_agents_view(fake_cluster, controller):
    controller.add_node("n1")
    controller.add_node("n2")
    job = controller.start_job("n1")
    agent = ProbeServer(
        {
            "/status": (
                200,
                {
                    "node": "n1",
                    "registered": True,
                    "controller": "127.0.1.2:6817",
                    "running_jobs": [{"job_id": job, "attempt": 1, "supervisor_pid": 4242}],
                    "version": "1.0.0",
                    "build": "build-a",
                },
            )
        }
    )
    try:
        result = run_module(
            spur_node_info, conn(fake_cluster, agent_probes=[agent.url, dead_url()], names=["n1", "n2", "n9"])
        )
    finally:
        agent.close()
    assert "failed" not in result and result["changed"] is False
    nodes = {n["name"]: n for n in result["nodes"]}
    assert nodes["n1"]["state"] == "MIXED" and nodes["n1"]["registered"]
    assert nodes["n1"]["running_jobs"] == [{"job_id": job, "attempt": 1, "supervisor_pid": 4242}]
    assert nodes["n1"]["running_jobs_source"] == "agent"
    assert nodes["n2"]["state"] == "IDLE" and nodes["n2"]["running_jobs"] == []
    assert nodes["n2"]["running_jobs_source"] == "controller"
    assert result["missing"] == ["n9"]
    assert len(result["agents_unreachable"]) == 1
