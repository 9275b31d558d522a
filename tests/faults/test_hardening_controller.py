"""The controller attacked through its agents and clients (issue 16 items 4-6): a launch that keeps failing is
bounded (the job held, the node drained), a second spurd cannot take over a live node's name, and one user's
idempotency key never hands out another user's job."""

from __future__ import annotations

import pytest

from agents import AgentProc
from harness import free_port, wait_until
from spur_hpc.auth import METADATA_KEY
from spur_hpc.controller.leader import LAUNCH_ATTEMPTS
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow


def submit(
    cluster, script: str, work, key: str = "", claim: str = "", user: str = "root", partition: str = ""
) -> slurm_pb2.SubmitJobReply:
    """SubmitJob straight over gRPC; claim is an [auth] type = none identity "uid:gid" (default: none sent)."""
    spec = slurm_pb2.JobSpec(
        name="h", script="#!/bin/sh\n" + script, user=user, work_dir=str(work), partition=partition
    )
    metadata = ((METADATA_KEY, f"none:{claim}"),) if claim else None
    request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=key)
    return cluster.stub(cluster.wait_leader()).SubmitJob(request, timeout=10, metadata=metadata)


def job(cluster, job_id: int) -> slurm_pb2.Job:
    return cluster.stub(cluster.wait_leader()).GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)


def job_when(cluster, job_id: int, predicate) -> slurm_pb2.Job | None:
    j = job(cluster, job_id)
    return j if predicate(j) else None


def node(cluster, name: str) -> slurm_pb2.Node:
    return cluster.stub(cluster.wait_leader()).GetNode(slurm_pb2.GetNodeRequest(name=name), timeout=5)


def state(j: slurm_pb2.Job) -> str:
    return slurm_pb2.JobState.Name(j.state)


def test_a_job_whose_launch_keeps_failing_is_held_and_its_node_drained(make_cluster, tmp_path, work):
    cluster = make_cluster(1)
    closed = free_port("127.0.0.1")  # nothing listens there: every LaunchJob is refused
    agent = AgentProc(tmp_path / "agent", cluster.hosts, extra=f'advertise_addr = "127.0.0.1:{closed}"').start()
    job_id = submit(cluster, "exit 0\n", work).job_id

    # Between attempts the job waits PENDING with the reason, not RUNNING.
    retrying = wait_until(
        lambda: job_when(cluster, job_id, lambda j: state(j) == "PENDING" and "retrying" in j.reason),
        30,
        "the job to wait for its next launch attempt",
    )
    assert retrying.reason.startswith(f"launch failed 1 time on {agent.name}: UNAVAILABLE"), retrying.reason

    held = wait_until(lambda: job_when(cluster, job_id, lambda j: j.held), 60, "the job to be held")
    assert state(held) == "PENDING"
    assert held.reason.startswith(f"launch failed 3 times on {agent.name}: UNAVAILABLE"), held.reason
    assert f"127.0.0.1:{closed}" in held.reason  # the address the controller could not reach
    assert held.attempt == 3  # three launches (Restarts=2), and a held job is not scheduled again

    drained = node(cluster, agent.name)
    assert slurm_pb2.NodeState.Name(drained.state) == "DRAINED"
    assert drained.reason == "spurctld: " + held.reason
    assert drained.reason_set_by == "spurctld"



def test_launches_that_fail_while_the_agent_is_silent_do_not_drain_its_node(make_cluster, tmp_path, work):
    """A spurd that is down (restarting, in an in-place upgrade) stops heartbeating: its failed launches are retried
    without counting toward the bound, and the job runs once the agent is back."""
    cluster = make_cluster(1)
    agent = AgentProc(tmp_path / "agent", cluster.hosts).start()
    agent.kill9()  # still registered, silent, its port closed
    marker = work / "ran"
    job_id = submit(cluster, f"touch {marker}\n", work).job_id
    tried = wait_until(lambda: job_when(cluster, job_id, lambda j: j.attempt >= LAUNCH_ATTEMPTS + 1), 90,
                       "more launch attempts than the bound")
    assert not tried.held, tried.reason
    assert slurm_pb2.NodeState.Name(node(cluster, agent.name).state) not in ("DRAINED", "DRAINING")
    agent.start()
    wait_until(lambda: state(job(cluster, job_id)) == "COMPLETED", 60, "the job to run once its agent is back")
    assert marker.exists()


def test_a_node_registered_under_another_agents_address_is_held_and_drained_and_the_job_never_runs_there(
    make_cluster, tmp_path, work
):
    cluster = make_cluster(1)
    other = AgentProc(tmp_path / "other", cluster.hosts).start()  # a live spurd, in the default partition
    wrong = AgentProc(
        tmp_path / "wrong", cluster.hosts, extra=f'advertise_addr = "{other.address}"\npartition = "p2"'
    ).start()
    marker = work / "ran"
    job_id = submit(cluster, f"touch {marker}\n", work, partition="p2").job_id

    held = wait_until(lambda: job_when(cluster, job_id, lambda j: j.held), 60, "the job to be held")
    assert held.reason.startswith(f"launch failed 3 times on {wrong.name}: FAILED_PRECONDITION"), held.reason
    assert f"this spurd is node {other.name}" in held.reason and "advertise_addr" in held.reason
    assert slurm_pb2.NodeState.Name(node(cluster, wrong.name).state) == "DRAINED"
    assert not marker.exists() and not other.running(), "the other node never ran the job"
    assert slurm_pb2.NodeState.Name(node(cluster, other.name).state) == "IDLE"


def test_a_second_spurd_cannot_take_over_a_live_node_name(make_cluster, tmp_path, work):
    cluster = make_cluster(1)
    first = AgentProc(tmp_path / "first", cluster.hosts).start()
    job_id = submit(cluster, "sleep 60\n", work).job_id
    wait_until(lambda: job_id in first.running(), 20, "the job to run on the first spurd")

    clone = AgentProc(tmp_path / "clone", cluster.hosts, name=first.name)  # a cloned host: same name, other address
    clone.start(wait_registered=False)
    rc = clone.proc.wait_exit(30)
    assert rc != 0
    refusal = [line for line in clone.log_text().splitlines() if "refused the registration" in line]
    assert len(refusal) == 1, clone.log_text()[-3000:]
    assert f"node {first.name} is registered by a live spurd at {first.address}" in refusal[0]
    assert "set [agent] node_name" in refusal[0] and "Traceback" not in clone.log_text()

    # The first spurd keeps the node and its job.
    held = node(cluster, first.name)
    assert held.address == first.address and held.registered
    assert state(job(cluster, job_id)) == "RUNNING" and job_id in first.running()

    # The same spurd restarted at its own address re-registers at once (the in-place upgrade relies on it).
    first.stop()
    first.start()
    assert job_id in first.running() and state(job(cluster, job_id)) == "RUNNING"

    # Once the first spurd deregisters, the name is free.
    cluster.stub(cluster.wait_leader()).CancelJob(slurm_pb2.CancelJobRequest(job_id=job_id), timeout=10)
    wait_until(lambda: state(job(cluster, job_id)) == "CANCELLED" and not first.running(), 30, "the job to end")
    assert first.stop() == 0
    wait_until(lambda: not node(cluster, first.name).registered, 10, "the first spurd to deregister")
    clone.start()
    assert node(cluster, first.name).address == clone.address


def test_idempotency_keys_are_scoped_per_user(make_cluster, work):
    cluster = make_cluster(1)
    root = submit(cluster, "exit 0\n", work, key="same-key", claim="0:0", user="")
    nobody = submit(cluster, "exit 0\n", work, key="same-key", claim="65534:65534", user="")
    assert not root.duplicate and not nobody.duplicate
    assert nobody.job_id != root.job_id  # not root's job
    assert job(cluster, nobody.job_id).spec.uid == 65534

    again = submit(cluster, "exit 0\n", work, key="same-key", claim="65534:65534", user="")
    assert again.duplicate and again.job_id == nobody.job_id
    root_again = submit(cluster, "exit 0\n", work, key="same-key", claim="0:0", user="")
    assert root_again.duplicate and root_again.job_id == root.job_id
