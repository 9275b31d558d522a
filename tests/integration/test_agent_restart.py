"""spurd with a real 3-controller cluster: restarts (graceful and kill -9) leave jobs running under the
same supervisor, true exit codes reach the controller, results of jobs that ended while spurd was down
are reported before it registers, and a node the controller forgot registers again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agents import AgentProc, pid_alive
from harness import BIN, ControllerCluster, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

RUNNING = slurm_pb2.RUNNING


def leader_stub(cluster: ControllerCluster):
    return cluster.stub(cluster.wait_leader())


def submit(cluster: ControllerCluster, script: str, work: Path, **spec) -> int:
    fields = {"name": "t", "script": script, "user": "root", "work_dir": str(work), "nodes": 1, "tasks": 1}
    fields.update(spec)
    reply = leader_stub(cluster).SubmitJob(slurm_pb2.SubmitJobRequest(spec=slurm_pb2.JobSpec(**fields)), timeout=10)
    return reply.job_id


def get_job(cluster: ControllerCluster, job_id: int) -> slurm_pb2.Job:
    return leader_stub(cluster).GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)


def get_node(cluster: ControllerCluster, name: str) -> slurm_pb2.Node:
    return leader_stub(cluster).GetNode(slurm_pb2.GetNodeRequest(name=name), timeout=5)


def wait_ended(cluster: ControllerCluster, job_id: int, timeout: float = 20.0) -> slurm_pb2.Job:
    def ended():
        job = get_job(cluster, job_id)
        return job if job.state not in (slurm_pb2.PENDING, RUNNING) else None

    return wait_until(ended, timeout, f"job {job_id} to end")


def end_of(job: slurm_pb2.Job) -> tuple[str, int]:
    return slurm_pb2.JobState.Name(job.state), job.exit_code


@pytest.mark.parametrize("how", ["graceful", "kill9"])
def test_restart_mid_job_keeps_jobs_and_true_exit_codes(cluster, tmp_path: Path, work: Path, how: str) -> None:
    agent = AgentProc(tmp_path / "agent", cluster.hosts).start()
    status = agent.status()
    assert status["registered"] and status["controller"] in cluster.hosts
    assert {"node", "running_jobs", "version", "build"} <= status.keys()

    ok = submit(cluster, "sleep 2.5\nexit 0\n", work)
    bad = submit(cluster, "sleep 2.5\nexit 7\n", work)
    wait_until(lambda: {ok, bad} <= agent.running().keys(), 10, "both jobs to run")
    before = {j: r["supervisor_pid"] for j, r in agent.running().items()}

    if how == "graceful":
        assert agent.stop() == 0
        assert "not deregistering" in agent.log_text()
    else:
        agent.kill9()
    assert all(pid_alive(pid) for pid in before.values()), "supervisors outlive spurd"
    node = get_node(cluster, agent.name)
    assert node.registered and sorted(node.job_ids) == sorted([ok, bad]), "the controller keeps the allocation"

    agent.start()
    after = {j: r["supervisor_pid"] for j, r in agent.running().items()}
    assert after == before, "the restarted spurd re-adopts the same supervisors"
    assert "re-adopted job" in agent.log_text()
    assert end_of(wait_ended(cluster, ok)) == ("COMPLETED", 0)
    assert end_of(wait_ended(cluster, bad)) == ("FAILED", 7)
    wait_until(lambda: not agent.running(), 5, "spurd to collect both results")
    wait_until(lambda: not get_node(cluster, agent.name).job_ids, 5, "the allocation to be released")
    assert not [p for p in (agent.state_dir).iterdir() if not p.name.startswith(".")], "sessions are removed"
    for pid in before.values():
        wait_until(lambda pid=pid: not pid_alive(pid), 5, f"supervisor {pid} to exit once collected")


@pytest.mark.parametrize("how", ["graceful", "kill9"])
def test_job_that_ends_while_spurd_is_down_reports_its_exit_code(cluster, tmp_path: Path, work: Path, how) -> None:
    agent = AgentProc(tmp_path / "agent", cluster.hosts).start()
    job_id = submit(cluster, "sleep 1\nexit 7\n", work)
    wait_until(lambda: job_id in agent.running(), 10, "the job to run")
    agent.stop() if how == "graceful" else agent.kill9()
    result = agent.state_dir / f"{job_id}.1" / "result.json"
    wait_until(result.exists, 10, "the supervisor to record the result")
    assert get_job(cluster, job_id).state == RUNNING, "nobody has told the controller yet"

    agent.start()  # returns once /readyz says registered
    # The result was delivered inline before registering: no waiting needed.
    assert end_of(get_job(cluster, job_id)) == ("FAILED", 7)
    log = agent.log_text()
    assert "ended while spurd was down" in log
    assert log.index("reported FAILED exit_code=7") < log.rindex("registered with controller")


def test_idle_spurd_deregisters_on_stop(cluster, tmp_path: Path) -> None:
    agent = AgentProc(tmp_path / "agent", cluster.hosts).start()
    assert get_node(cluster, agent.name).registered
    # A second spurd on the same state_dir would adopt and report the same jobs twice: it refuses.
    second = subprocess.run([str(BIN / "spurd"), "--conf", str(agent.conf_path)], capture_output=True, timeout=30)
    assert second.returncode == 2
    assert f"is in use by spurd pid {agent.proc.pid}" in second.stderr.decode()
    assert agent.stop() == 0
    node = get_node(cluster, agent.name)
    assert not node.registered and node.reason == "spurd stopped"
    assert "deregistered node" in agent.log_text()


def test_forgotten_node_registers_again(make_cluster, tmp_path: Path) -> None:
    """The controller declares a silent node DOWN; its next heartbeat is told to re-register, and it does."""
    cluster = make_cluster(3, heartbeat_timeout=2)
    agent = AgentProc(tmp_path / "agent", cluster.hosts, heartbeat=0.5, heartbeat_timeout=2).start()
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: not get_node(cluster, agent.name).registered, 15, "the node to be declared DOWN")
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    wait_until(lambda: "registering again" in agent.log_text(), 10, "spurd to be told to re-register")
    wait_until(lambda: get_node(cluster, agent.name).registered, 10, "the node to be registered again")
    time.sleep(1.5)
    assert get_node(cluster, agent.name).registered, "and it stays registered"


def test_agent_follows_the_leader_after_failover(cluster, tmp_path: Path, work: Path) -> None:
    agent = AgentProc(tmp_path / "agent", cluster.hosts).start()
    first = agent.status()["controller"]
    job_id = submit(cluster, "sleep 2\nexit 7\n", work)
    wait_until(lambda: job_id in agent.running(), 10, "the job to run")
    old = next(m for m in cluster.members if m.grpc_addr == first)
    old.proc.kill9()
    new_leader = cluster.wait_leader(exclude=old)
    assert end_of(wait_ended(cluster, job_id, 30)) == ("FAILED", 7)
    wait_until(lambda: agent.status()["controller"] == new_leader.grpc_addr, 10, "spurd to talk to the new leader")


def test_follower_points_the_agent_to_the_leader(cluster, tmp_path: Path) -> None:
    """Given only a follower, spurd still registers: the follower names the leader in its refusal."""
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m is not leader)
    agent = AgentProc(tmp_path / "agent", [follower.grpc_addr]).start()
    assert agent.status()["controller"] == leader.grpc_addr
    assert get_node(cluster, agent.name).registered


def restart_in_place(agent: AgentProc) -> None:
    assert agent.stop() == 0
    agent.start()


def test_agents_restarted_all_at_once_behind_a_dispatch_hold_lose_no_launch(make_cluster, tmp_path: Path, work: Path):
    """Issue 19 item 3: every agent restarts in place at once (batch = all) while a client keeps submitting. Each
    node asked HoldDispatch first, so no job is sent to a restarting spurd: none needs a second attempt. (The same
    cluster's controllers were started with an [update] index that lists a newer build: each logs it, item 7.)"""
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    newer = {"version": "99.0.0", "build": "newer", "path": "99.0.0-newer"}
    (index_dir / "index.json").write_text(json.dumps({"format": 1, "channels": {"stable": [newer]}}))
    update = f'[update]\nindex = "{index_dir}"\ncache_dir = "{tmp_path / "update-cache"}"\n'
    cluster = make_cluster(3, extra_sections=update)
    wait_until(lambda: cluster.logs().count("-> 99.0.0 (build newer)") >= 3, 20, "every spurctld to log the update")
    # 4 CPUs: a restarting node keeps free CPUs even with the jobs whose ends its stopped spurd has not reported.
    agents = [AgentProc(tmp_path / f"agent{i}", cluster.hosts, cpus=4).start() for i in range(3)]
    # A long job per node keeps each node busy, so a stopping spurd does not deregister it (the window to close).
    holders = [submit(cluster, "sleep 600\n", work, nodelist=a.name) for a in agents]
    wait_until(
        lambda: all(h in a.running() for h, a in zip(holders, agents, strict=True)), 15, "a long job on every node"
    )
    submitted: list[int] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            submitted.extend(submit(cluster, "true\n", work) for _ in range(3))  # more jobs than one node takes
            stop.wait(0.02)

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(submitted) >= 10, 10, "the client to be submitting")
        for _round in range(2):
            stub = leader_stub(cluster)
            for agent in agents:
                held = stub.HoldDispatch(slurm_pb2.HoldDispatchRequest(name=agent.name, hold_secs=30), timeout=30)
                assert held.dispatch_hold_until > time.time() + 20
                assert not held.drain and held.reason == "", "the node is not drained, its reason is unchanged"
            restarts = [threading.Thread(target=restart_in_place, args=(a,)) for a in agents]
            for restart in restarts:
                restart.start()
            for restart in restarts:
                restart.join(timeout=60)
            assert all(a.proc.alive() for a in agents), "every spurd is back"
            assert all(get_node(cluster, a.name).dispatch_hold_until == 0.0 for a in agents), "registering ends it"
    finally:
        stop.set()
        thread.join(timeout=30)
    jobs = [wait_ended(cluster, job_id, timeout=60) for job_id in submitted]
    retried = [(j.job_id, j.attempt, j.reason) for j in jobs if j.attempt != 1 or j.state != slurm_pb2.COMPLETED]
    assert not retried, f"jobs launched more than once or not completed: {retried}"
    assert all(get_job(cluster, h).state == RUNNING and get_job(cluster, h).attempt == 1 for h in holders), (
        "the long jobs ran on throughout"
    )
