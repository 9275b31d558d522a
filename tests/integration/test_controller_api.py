"""The controller's gRPC API: bad inputs get one clear error and change nothing; damaged state refuses to start."""

from __future__ import annotations

import subprocess
import uuid

import grpc
import pytest

from harness import BIN, wait_until
from spur_hpc.proto import slurm_pb2


def good_spec(**over) -> slurm_pb2.JobSpec:
    fields = {"name": "t", "script": "#!/bin/sh\ntrue\n", "user": "root", "work_dir": "/tmp"}
    fields.update(over)
    return slurm_pb2.JobSpec(**fields)


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"script": ""}, "the job has no script"),
        ({"time_limit_secs": -5}, "time limit -5 s is negative"),
        ({"nodes": -1}, "nodes=-1 is out of range"),
        ({"memory_mb": -1}, "is negative"),
        ({"work_dir": "relative/dir"}, "must be an absolute path"),
        ({"cpus_per_task": -2}, "cpus_per_task=-2 is out of range"),
        ({"name": "x" * 5000}, "name is 5000 characters long"),
        ({"uid": -3}, "must not be negative"),
    ],
)
def test_bad_job_specs_are_refused_with_one_line(cluster, over, needle):
    leader = cluster.wait_leader()
    stub = cluster.stub(leader)
    before = stub.GetClusterInfo(slurm_pb2.ClusterInfoRequest(), timeout=5).next_job_id
    with pytest.raises(grpc.RpcError) as info:
        stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=good_spec(**over), idempotency_key=uuid.uuid4().hex), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details() and "\n" not in info.value.details()
    assert stub.GetClusterInfo(slurm_pb2.ClusterInfoRequest(), timeout=5).next_job_id == before


def test_unknown_nodes_and_jobs_are_not_found(cluster):
    stub = cluster.stub(cluster.wait_leader())
    for call in (
        lambda: stub.DrainNode(slurm_pb2.DrainNodeRequest(name="nosuch", reason="x"), timeout=5),
        lambda: stub.GetNode(slurm_pb2.GetNodeRequest(name="nosuch"), timeout=5),
        lambda: stub.GetJob(slurm_pb2.GetJobRequest(job_id=999999), timeout=5),
        lambda: stub.CancelJob(slurm_pb2.CancelJobRequest(job_id=999999), timeout=5),
    ):
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == grpc.StatusCode.NOT_FOUND, info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stub.GetJob(slurm_pb2.GetJobRequest(job_id=-4), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        stub.DrainNode(slurm_pb2.DrainNodeRequest(name="bad name!", reason="x"), timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not valid" in info.value.details()


def test_agent_calls_on_a_follower_point_at_the_leader(cluster):
    leader = cluster.wait_leader()
    wait_until(lambda: all(m.status()["leader_grpc"] for m in cluster.members), 10, "member directory")
    follower = next(m for m in cluster.members if m is not leader)
    with pytest.raises(grpc.RpcError) as info:
        cluster.stub(follower).Heartbeat(slurm_pb2.HeartbeatRequest(name="n1"), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    hints = dict(info.value.trailing_metadata())
    assert hints.get("spur-leader") == leader.grpc_addr


def test_wal_level_cannot_go_down_or_past_the_code(cluster):
    stub = cluster.stub(cluster.wait_leader())
    info = stub.Ping(slurm_pb2.PingRequest(), timeout=5)
    assert info.wal_level == info.max_wal_level
    for level in (0, info.max_wal_level + 1):
        with pytest.raises(grpc.RpcError) as err:
            stub.SetWalLevel(slurm_pb2.SetWalLevelRequest(level=level), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    reply = stub.SetWalLevel(slurm_pb2.SetWalLevelRequest(level=info.wal_level), timeout=5)
    assert reply.changed is False


def test_corrupt_journal_refuses_to_start_naming_the_file(cluster):
    leader = cluster.wait_leader()
    stub = cluster.stub(leader)
    for _ in range(5):
        stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=good_spec(), idempotency_key=uuid.uuid4().hex), timeout=5)
    victim = next(m for m in cluster.members if m is not leader)
    victim.proc.stop()
    journal = victim.state_dir / "raft.journal"
    data = journal.read_bytes()
    journal.write_bytes(data[:45])  # the header survives, the records it declares do not
    result = subprocess.run([str(BIN / "spurctld"), "--conf", str(victim.conf_path)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert str(journal) in result.stderr and "move its state_dir aside" in result.stderr
    assert "Traceback" not in result.stderr


def test_hold_and_release_a_pending_job(cluster):
    stub = cluster.stub(cluster.wait_leader())
    job_id = stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=good_spec(), idempotency_key=uuid.uuid4().hex),
                            timeout=5).job_id
    held = stub.HoldJob(slurm_pb2.HoldJobRequest(job_id=job_id), timeout=5)
    assert held.held and held.reason == "JobHeldAdmin" and held.state == slurm_pb2.PENDING
    released = stub.ReleaseJob(slurm_pb2.ReleaseJobRequest(job_id=job_id), timeout=5)
    # No node can take it (this cluster has none): Slurm's reason for a job that waits for nodes.
    assert not released.held and released.reason == "Resources"
    with pytest.raises(grpc.RpcError) as info:
        stub.HoldJob(slurm_pb2.HoldJobRequest(job_id=987654), timeout=5)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
