"""spurd's supervisor table and SlurmAgent service, in-process, over real gRPC and real supervisors.

No controller here: results land on the table's queue, which is what the reporter would deliver.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agents import LIVE_STATE_DIRS, cleanup, next_agent_ip, pid_alive, unique_node
from harness import wait_until
from spur_hpc import grpcutil
from spur_hpc.agent.daemon import detect_cpus, detect_memory_mb
from spur_hpc.agent.servicer import AgentServicer
from spur_hpc.agent.supervisors import Session, SupervisorTable, stepd_command
from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc
from spur_hpc.stepd.session import SUPERVISOR_FILE, create_session, write_launch


class Agent:
    """A SupervisorTable served by AgentServicer on 127.0.1.N:<free port>, wired as spurd wires them."""

    def __init__(self, state: Path, node: str) -> None:
        self.state = state
        self.node = node
        self.stopping = threading.Event()
        self.table = SupervisorTable(str(state), node, stepd_command(""), 10.0, self.stopping)
        LIVE_STATE_DIRS.append((state, node))
        ip = next_agent_ip()
        self.server, port = grpcutil.create_server(f"{ip}:0")
        slurm_pb2_grpc.add_SlurmAgentServicer_to_server(AgentServicer(node, self.table, lambda: True), self.server)
        self.server.start()
        self.stub = slurm_pb2_grpc.SlurmAgentStub(grpcutil.channel(f"{ip}:{port}"))

    def close(self) -> None:
        """Like stopping spurd: watchers end, supervisors keep running."""
        if not self.stopping.is_set():
            self.stopping.set()
            self.server.stop(0)
            self.table.close()

    def finished(self, timeout: float = 15.0) -> Session:
        return self.table.finished.get(timeout=timeout)


@pytest.fixture
def make_agent(tmp_path: Path) -> Iterator:
    made: list[Agent] = []

    def make(node: str | None = None) -> Agent:
        agent = Agent(tmp_path / "state", node or unique_node())
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()
    cleanup()


def launch_request(job_id: int, script: str, work: Path, attempt: int = 1, **spec) -> slurm_pb2.LaunchJobRequest:
    fields = {"name": f"j{job_id}", "script": script, "user": "root", "work_dir": str(work)}
    fields.update(spec)
    return slurm_pb2.LaunchJobRequest(
        job=slurm_pb2.Job(job_id=job_id, attempt=attempt, spec=slurm_pb2.JobSpec(**fields))
    )


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"script": ""}, "spec.script is missing or empty"),
        ({"time_limit_secs": -5}, "spec.time_limit_secs is -5"),
        ({"user": "no-such-user-xyz"}, "unknown user: user 'no-such-user-xyz' does not exist on this node"),
    ],
)
def test_bad_launch_is_invalid_argument_with_one_line(make_agent, tmp_path: Path, spec, message) -> None:
    agent = make_agent()
    request = launch_request(5, "true\n", tmp_path)
    for key, value in spec.items():
        setattr(request.job.spec, key, value)
    with pytest.raises(grpc.RpcError) as info:
        agent.stub.LaunchJob(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details() and "\n" not in info.value.details()
    assert not any(agent.state.iterdir()), "a refused launch leaves no session behind"


def test_launch_is_idempotent_per_attempt_and_cancel_kills(make_agent, tmp_path: Path) -> None:
    agent = make_agent()
    request = launch_request(6, "sleep 300\n", tmp_path)
    first = agent.stub.LaunchJob(request, timeout=10)
    assert first.supervisor_pid > 0 and not first.already_running
    again = agent.stub.LaunchJob(request, timeout=10)
    assert (again.supervisor_pid, again.already_running) == (first.supervisor_pid, True)
    ping = agent.stub.Ping(slurm_pb2.PingRequest(), timeout=5)
    assert [(r.job_id, r.attempt, r.supervisor_pid) for r in ping.running] == [(6, 1, first.supervisor_pid)]

    reply = agent.stub.SignalJob(slurm_pb2.SignalJobRequest(job_id=6, attempt=0, signal=0), timeout=10)
    assert reply.delivered
    done = agent.finished()
    assert (done.job_id, done.result["state"]) == (6, "CANCELLED")
    agent.table.collect(done)
    assert not (agent.state / "6.1").exists()
    late = agent.stub.LaunchJob(request, timeout=10)
    assert late.already_running and not (agent.state / "6.1").exists(), "a late retry must not rerun the job"
    wait_until(lambda: not pid_alive(first.supervisor_pid), 5, "the released supervisor to exit")
    missing = agent.stub.SignalJob(slurm_pb2.SignalJobRequest(job_id=6, signal=0), timeout=5)
    assert not missing.delivered


def test_restart_readopts_running_and_reports_finished(make_agent, tmp_path: Path) -> None:
    """A new table on the same state dir is a restarted spurd: same supervisors, true exit codes."""
    node = unique_node()
    first = make_agent(node)
    running = first.stub.LaunchJob(launch_request(11, "sleep 6\nexit 7\n", tmp_path), timeout=10)
    first.stub.LaunchJob(launch_request(12, "exit 3\n", tmp_path), timeout=10)
    old = first.stub.LaunchJob(launch_request(13, "sleep 300\n", tmp_path, attempt=1), timeout=10)
    first.close()  # spurd stops; its supervisors do not
    # Job 13 was redispatched to this node as attempt 2 while attempt 1 still lingered.
    second = make_agent(node)
    newer = second.stub.LaunchJob(launch_request(13, "sleep 300\n", tmp_path, attempt=2), timeout=10)
    second.close()
    wait_until(lambda: (tmp_path / "state" / "12.1" / "result.json").exists(), 5, "job 12 to end while spurd is down")

    third = make_agent(node)
    third.table.reconcile()
    held = {(j, a): p for j, a, p in third.table.running_jobs()}
    assert held[(11, 1)] == running.supervisor_pid, "the running job keeps its supervisor"
    assert held[(13, 2)] == newer.supervisor_pid
    assert (13, 1) not in held, "an older attempt is dropped, not reported"
    # Job 12 ended while spurd was down, job 11 ends later; on a loaded machine both may be ready at once.
    ended = {}
    for _ in range(2):
        done = third.finished()
        ended[done.job_id] = (done.result["state"], done.result["exit_code"])
        third.table.collect(done)
    assert ended == {12: ("FAILED", 3), 11: ("FAILED", 7)}
    wait_until(lambda: not (tmp_path / "state" / "13.1").exists(), 10, "the older attempt's session to go")
    wait_until(lambda: not pid_alive(old.supervisor_pid), 5, "the older attempt's supervisor to exit")
    assert sorted(p.name for p in (tmp_path / "state").iterdir() if not p.name.startswith(".")) == ["13.2"]


def test_lost_supervisor_is_reported_node_fail_and_its_job_killed(make_agent, tmp_path: Path) -> None:
    agent = make_agent()
    reply = agent.stub.LaunchJob(launch_request(31, "echo $$ > job.pid; exec sleep 300\n", tmp_path), timeout=10)
    wait_until(lambda: (tmp_path / "job.pid").exists(), 5, "the job to start")
    job_pid = int((tmp_path / "job.pid").read_text())
    os.kill(reply.supervisor_pid, signal.SIGKILL)  # the supervisor dies without recording anything
    done = agent.finished()
    assert (done.result["state"], done.result["reason"]) == ("NODE_FAIL", "job supervisor lost")
    wait_until(lambda: not pid_alive(job_pid), 5, "the orphaned job to be killed")


def test_stale_attempts_are_cancelled(make_agent, tmp_path: Path) -> None:
    agent = make_agent()
    agent.stub.LaunchJob(launch_request(41, "sleep 300\n", tmp_path), timeout=10)
    agent.table.cancel_stale([(41, 1), (99, 1)])
    done = agent.finished()
    assert (done.job_id, done.result["state"]) == (41, "CANCELLED")


def test_resources_are_detected() -> None:
    assert detect_cpus() >= 1
    assert detect_memory_mb() > 0


def test_supervisor_record_names_the_job(make_agent, tmp_path: Path) -> None:
    agent = make_agent()
    reply = agent.stub.LaunchJob(launch_request(51, "sleep 300\n", tmp_path), timeout=10)
    session = agent.table.find(51)
    record = session.dir.read_record(SUPERVISOR_FILE, "supervisor")
    assert record["pid"] == reply.supervisor_pid and record["job_pid"] > 0
    assert record["tracking"] in ("cgroup", "process-tree")


def test_a_launch_cut_short_by_a_stopped_spurd_is_refused_then_replaced(make_agent, tmp_path: Path) -> None:
    """spurd was killed after writing job 51's session and before any supervisor ran: the restarted spurd must
    not answer the controller's retry with "already running" (no supervisor would ever report the job)."""
    node = unique_node()
    first = make_agent(node)
    session = create_session(first.table.state_fd, first.table.state_path, 51, 1)
    write_launch(session, node, [node], {"user": "root", "work_dir": str(tmp_path)}, b"#!/bin/sh\nexit 4\n")
    session.close()
    first.close()
    second = make_agent(node)
    second.table.reconcile()
    with pytest.raises(grpc.RpcError) as refused:
        second.stub.LaunchJob(launch_request(51, "exit 4\n", tmp_path), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "stopped while launching it" in refused.value.details()
    # The controller requeues it; the next attempt runs and replaces the half-launched one.
    second.stub.LaunchJob(launch_request(51, "exit 4\n", tmp_path, attempt=2), timeout=10)
    done = second.finished()
    assert (done.job_id, done.attempt, done.result["state"], done.result["exit_code"]) == (51, 2, "FAILED", 4)
