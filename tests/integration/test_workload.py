"""The workload path end to end: controllers + real agents + supervisors. Scheduling, drain, timeouts,
cancel, failover during a job, and requests that cannot fit."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from agents import AgentProc, pid_alive
from harness import wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow
PENDING, RUNNING = slurm_pb2.PENDING, slurm_pb2.RUNNING


class Client:
    """Talks to whichever controller leads (reads and writes alike)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster

    def stub(self):
        return self.cluster.stub(self.cluster.wait_leader())

    def submit(self, script: str, work: Path, **spec) -> int:
        fields = {"name": "w", "script": "#!/bin/sh\n" + script, "user": "root", "work_dir": str(work)}
        fields.update(spec)
        return self.stub().SubmitJob(slurm_pb2.SubmitJobRequest(spec=slurm_pb2.JobSpec(**fields)), timeout=10).job_id

    def job(self, job_id: int) -> slurm_pb2.Job:
        return self.stub().GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)

    def node(self, name: str) -> slurm_pb2.Node:
        return self.stub().GetNode(slurm_pb2.GetNodeRequest(name=name), timeout=5)

    def state(self, job_id: int) -> str:
        return slurm_pb2.JobState.Name(self.job(job_id).state)

    def node_state(self, name: str) -> str:
        return slurm_pb2.NodeState.Name(self.node(name).state)

    def wait_state(self, job_id: int, states: set[str], timeout: float = 20.0) -> slurm_pb2.Job:
        return wait_until(
            lambda: self.job(job_id) if self.state(job_id) in states else None,
            timeout,
            f"job {job_id} to reach {states}",
        )


def start_agent(cluster, tmp_path: Path, name: str = "", **kw) -> AgentProc:
    return AgentProc(tmp_path / f"agent-{name or 'x'}", cluster.hosts, **kw).start()


def test_whole_node_job_waits_until_the_first_ends_even_across_a_restart(cluster, tmp_path, work):
    c = Client(cluster)
    agent = start_agent(cluster, tmp_path)
    first = c.submit("sleep 10\n", work, cpus_per_task=4)
    c.wait_state(first, {"RUNNING"})
    assert c.node_state(agent.name) == "ALLOCATED"
    agent.stop()
    agent.start()
    second = c.submit("true\n", work, cpus_per_task=4)
    time.sleep(1.0)
    assert c.state(second) == "PENDING", "the restored allocation must keep the node full"
    assert list(c.node(agent.name).job_ids) == [first], "the allocation is neither lost nor doubled"
    c.wait_state(first, {"COMPLETED"}, timeout=40)
    c.wait_state(second, {"COMPLETED"})


def test_drain_a_busy_node_then_resume(cluster, tmp_path, work):
    c = Client(cluster)
    agent = start_agent(cluster, tmp_path)
    busy = c.submit("sleep 2\n", work)
    c.wait_state(busy, {"RUNNING"})
    stub = c.stub()
    stub.DrainNode(slurm_pb2.DrainNodeRequest(name=agent.name, reason="disk swap", set_by="admin"), timeout=5)
    assert c.node_state(agent.name) == "DRAINING"
    waiting = c.submit("true\n", work)
    time.sleep(0.8)
    assert c.state(waiting) == "PENDING", "no new job lands on a draining node"
    c.wait_state(busy, {"COMPLETED"})
    wait_until(lambda: c.node_state(agent.name) == "DRAINED", 10, "DRAINED once the job ended")
    node = c.node(agent.name)
    assert node.reason == "disk swap" and node.reason_set_by == "admin"
    # An administrator's drain survives an agent restart and re-registration.
    agent.stop()
    agent.start()
    assert c.node_state(agent.name) == "DRAINED"
    assert c.state(waiting) == "PENDING"
    c.stub().ResumeNode(slurm_pb2.ResumeNodeRequest(name=agent.name), timeout=5)
    c.wait_state(waiting, {"COMPLETED"})
    wait_until(lambda: c.node_state(agent.name) == "IDLE", 10, "IDLE after resume")


def test_heartbeat_timeout_marks_node_down_and_job_node_fail(make_cluster, tmp_path, work):
    cluster = make_cluster(3, heartbeat_timeout=3)
    c = Client(cluster)
    agent = start_agent(cluster, tmp_path, heartbeat=0.5, heartbeat_timeout=3)
    job = c.submit("sleep 30\n", work, requeue=2)  # --no-requeue: it ends (see test_arrays_dependencies)
    c.wait_state(job, {"RUNNING"})
    wait_until(lambda: job in agent.running(), 10, "the agent to run the job")
    supervisor = agent.running()[job]["supervisor_pid"]
    agent.kill9()
    failed = c.wait_state(job, {"NODE_FAIL"}, timeout=15)
    assert "Not responding" in failed.reason
    node = c.node(agent.name)
    assert slurm_pb2.NodeState.Name(node.state) == "DOWN" and not node.job_ids
    # It comes back: the node returns to service and the orphaned job is killed as stale.
    agent.start()
    wait_until(lambda: c.node_state(agent.name) == "IDLE", 10, "node back in service")
    wait_until(lambda: not pid_alive(supervisor), 15, "the stale job's supervisor to be stopped")


def test_cancel_kills_the_whole_tree_including_setsid_children(cluster, tmp_path, work):
    c = Client(cluster)
    start_agent(cluster, tmp_path)
    pidfile = work / "child.pid"
    job = c.submit(f"setsid sh -c 'echo $$ > {pidfile}; sleep 300' &\nsleep 300\n", work)
    c.wait_state(job, {"RUNNING"})
    wait_until(pidfile.exists, 10, "the setsid child to start")
    child = int(pidfile.read_text().strip())
    assert pid_alive(child)
    reply = c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=job, requested_by="root"), timeout=5)
    assert not reply.already_finished
    c.wait_state(job, {"CANCELLED"}, timeout=20)
    wait_until(lambda: not pid_alive(child), 10, "the setsid child to die")
    again = c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=job), timeout=5)
    assert again.already_finished


def test_time_limit_ends_the_job_as_timeout(cluster, tmp_path, work):
    c = Client(cluster)
    start_agent(cluster, tmp_path)
    job = c.submit("sleep 60\n", work, time_limit_secs=1)
    ended = c.wait_state(job, {"TIMEOUT"}, timeout=20)
    assert ended.end_time - ended.start_time < 15


def test_leader_failover_during_a_job_changes_nothing_for_it(cluster, tmp_path, work):
    c = Client(cluster)
    agent = start_agent(cluster, tmp_path)
    job = c.submit("sleep 3\nexit 7\n", work)
    c.wait_state(job, {"RUNNING"})
    wait_until(lambda: job in agent.running(), 10, "the agent to run the job")
    supervisor = agent.running()[job]["supervisor_pid"]
    for _ in range(2):
        leader = cluster.wait_leader()
        cluster.kill9(leader.index)
        cluster.wait_leader(timeout=15, exclude=leader)
        cluster.restart(leader.index)
    assert agent.running().get(job, {}).get("supervisor_pid") in (supervisor, None)
    ended = c.wait_state(job, {"FAILED"}, timeout=30)
    assert ended.exit_code == 7 and ended.attempt == 1
    assert c.node_state(agent.name) == "IDLE"


def test_job_larger_than_any_node_is_refused(cluster, tmp_path, work):
    c = Client(cluster)
    start_agent(cluster, tmp_path)
    with pytest.raises(grpc.RpcError) as info:
        c.submit("true\n", work, cpus_per_task=64)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "largest node" in info.value.details()
    # More nodes than its partition has is queued, as Slurm's default EnforcePartLimits=NO does: it pends.
    job = c.job(c.submit("true\n", work, nodes=5))
    assert slurm_pb2.JobState.Name(job.state) == "PENDING" and job.reason == "PartitionNodeLimit"
