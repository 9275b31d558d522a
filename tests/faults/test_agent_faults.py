"""Agents and supervisors broken on purpose: a killed supervisor's job is reported, never lost; a spurd killed
while it launches jobs loses none of them."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from agents import AgentProc
from harness import wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


def submit(cluster, script: str, work: Path) -> int:
    spec = slurm_pb2.JobSpec(name="f", script="#!/bin/sh\n" + script, user="root", work_dir=str(work))
    return cluster.stub(cluster.wait_leader()).SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec), timeout=10).job_id


def state(cluster, job_id: int) -> slurm_pb2.Job:
    return cluster.stub(cluster.wait_leader()).GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)


def name(job: slurm_pb2.Job) -> str:
    return slurm_pb2.JobState.Name(job.state)


def test_killed_supervisor_reports_its_job_failed_not_lost(cluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    agent = AgentProc(tmp_path / "agent", cluster.hosts).start()
    job_id = submit(cluster, "sleep 60\n", work)
    wait_until(lambda: job_id in agent.running(), 15, "the job to run")
    os.kill(agent.running()[job_id]["supervisor_pid"], signal.SIGKILL)
    ended = wait_until(
        lambda: state(cluster, job_id) if name(state(cluster, job_id)) in ENDED else None,
        40,
        "the job to be reported ended",
    )
    assert name(ended) in ("NODE_FAIL", "FAILED"), name(ended)
    assert ended.reason and ended.reason != "None"
    wait_until(lambda: not agent.running(), 15, "the agent to let the job go")
    # The node is usable again.
    again = submit(cluster, "exit 0\n", work)
    wait_until(lambda: name(state(cluster, again)) == "COMPLETED", 30, "the next job to complete")


def test_spurd_killed_while_launching_loses_no_job(cluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    agent = AgentProc(tmp_path / "agent", cluster.hosts, cpus=16).start()
    ids = [submit(cluster, f"sleep 1\nexit {i % 3}\n", work) for i in range(12)]
    agent.kill9()  # some launches are in flight, some not yet sent
    agent.start()
    wait_until(lambda: all(name(state(cluster, j)) in ENDED for j in ids), 90, "every job to end")
    ends = {j: state(cluster, j) for j in ids}
    wrong = {
        j: (name(job), job.exit_code)
        for j, job in ends.items()
        if (name(job), job.exit_code) != ("COMPLETED" if ids.index(j) % 3 == 0 else "FAILED", ids.index(j) % 3)
    }
    assert wrong == {}, f"jobs lost or mis-reported: {wrong}"
