"""priority/multifactor on one 3-controller cluster with an agent: two users with equal shares in one account, one
of whom ran a job, so the other's pending job gets the higher priority (fair share from recorded usage); sprio and
sshare show the factors and usage through the CLI (a running job is charged every period); the leader's
job_priorities records keep every member's priorities (squeue's %Q) equal, and squeue says Priority for the job
behind the higher one."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agents import AgentProc, kill_leftovers, unique_node
from harness import ControllerCluster, next_ip_base, stop_all, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

DAEMON, NOBODY = ("daemon", 1, 1), ("nobody", 65534, 65534)
SECTIONS = """
[scheduler]
priority_type = "multifactor"
priority_weight_fairshare = 10000
priority_weight_job_size = 1000
priority_weight_qos = 2000
priority_calc_period = "0:01"
priority_decay_half_life = "7-0"

[partitions.debug]
nodes = "{node}"
default = true
"""
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("prio")
    node = unique_node("q")
    sections = SECTIONS.format(node=node)
    cluster = ControllerCluster(root / "cluster", n=3, ip_base=next_ip_base(3), extra_sections=sections)
    cluster.start()
    agent = AgentProc(root / "agent", cluster.hosts, name=node, cpus=2).start()
    leader = cluster.wait_leader(timeout=30)
    modify = cluster.stub(leader).ModifyAssociations
    modify(slurm_pb2.ModifyAssociationsRequest(verb="add", entity="account", names=["phys"]), timeout=10)
    request = slurm_pb2.ModifyAssociationsRequest(verb="add", entity="user", names=["daemon", "nobody"])
    request.set["account"] = "phys"
    modify(request, timeout=10)
    yield cluster
    stop_all([agent.proc], timeout=5)
    kill_leftovers(agent.state_dir, agent.name)
    cluster.stop()


def submit(cluster, who, script: str, cpus: int = 1) -> int:
    user, uid, gid = who
    spec = slurm_pb2.JobSpec(name="prio", script="#!/bin/sh\n" + script, user=user, uid=uid, gid=gid,
                             work_dir="/tmp", stdout_path="/dev/null", tasks=1, cpus_per_task=cpus)  # fmt: skip
    request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=uuid.uuid4().hex)
    return cluster.stub(cluster.wait_leader(timeout=30)).SubmitJob(request, timeout=10).job_id


def job(cluster, job_id: int, member=None) -> slurm_pb2.Job:
    member = member or cluster.wait_leader(timeout=30)
    return cluster.stub(member).GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)


def state(cluster, job_id: int) -> str:
    return slurm_pb2.JobState.Name(job(cluster, job_id).state)


def cli(cluster, *argv: str) -> str:
    env = dict(os.environ, SPUR_CONTROLLER_ADDR=",".join(cluster.hosts), PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_user_who_used_the_cluster_waits_behind_the_one_who_did_not(env):
    cluster = env
    used = submit(cluster, DAEMON, "sleep 2\n", cpus=2)
    wait_until(lambda: state(cluster, used) == "COMPLETED", 30, "daemon's job to run and end")
    shares = {line.split()[1]: line.split() for line in cli(cluster, "sshare", "-a", "-n").splitlines()
              if len(line.split()) == 7}  # fmt: skip
    assert int(shares["daemon"][4]) >= 4  # RawUsage: 2 CPUs for about 2 seconds
    assert shares["nobody"][4] == "0"
    assert float(shares["nobody"][6]) > float(shares["daemon"][6])  # FairShare

    blocker = submit(cluster, ("root", 0, 0), "sleep 60\n", cpus=2)
    wait_until(lambda: state(cluster, blocker) == "RUNNING", 30, "the blocker to start")

    def root_usage() -> int:  # the leader's period (1 s here) charges the running blocker, as slurmctld's does
        rows = [line.split("|") for line in cli(cluster, "sshare", "-P", "-n", "-u", "root").splitlines()]
        return next(int(r[4]) for r in rows if r[1] == "root")

    wait_until(lambda: root_usage() >= 4, 15, "root's running job to be charged while it runs")
    first = submit(cluster, DAEMON, "true\n")  # submitted first, but its user has used the cluster
    second = submit(cluster, NOBODY, "true\n")
    assert job(cluster, second).priority > job(cluster, first).priority

    lines = cli(cluster, "sprio", "-l").splitlines()
    assert lines[0].split() == ["JOBID", "PARTITION", "USER", "PRIORITY", "SITE", "AGE", "ASSOC", "FAIRSHARE",
                                "JOBSIZE", "PARTITION", "QOS", "NICE", "TRES"]  # fmt: skip
    rows = {int(line.split()[0]): line.split() for line in lines[1:]}
    assert rows[first][2] == "daemon" and rows[second][2] == "nobody"
    assert int(rows[second][7]) > int(rows[first][7])  # the FAIRSHARE column: the factor times 10000
    assert int(rows[second][3]) == job(cluster, second).priority
    weights = cli(cluster, "sprio", "-w").splitlines()[1].split()
    assert weights == ["Weights", "1", "10000", "1000", "2000"]  # SITE, then the factors with a weight

    # squeue: the job behind the higher-priority one says Priority; every member agrees on the priorities
    listed = cli(cluster, "squeue", "-h", "-t", "PD", "-o", "%i %r").splitlines()
    reasons = dict(line.split(maxsplit=1) for line in listed)
    assert reasons[str(first)] == "Priority"

    def agreed():
        seen = [(job(cluster, first, m).priority, job(cluster, second, m).priority) for m in cluster.members]
        return len(set(seen)) == 1

    wait_until(agreed, 10, "every member to apply the same priorities")
    cluster.stub(cluster.wait_leader(timeout=30)).CancelJob(slurm_pb2.CancelJobRequest(job_id=blocker), timeout=5)
    wait_until(lambda: state(cluster, second) == "COMPLETED" and state(cluster, first) == "COMPLETED", 30, "both")
    assert job(cluster, second).start_time <= job(cluster, first).start_time
