"""The console scripts against a live local cluster: 3 controllers (tests/harness.py) and a real spurd
(tests/agents.py). What a user types, what a user reads."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agents import AgentProc
from harness import BIN, ControllerCluster, wait_until

pytestmark = pytest.mark.slow


class Shell:
    """Runs the installed commands the way a user would: spur.conf names the controllers, cwd is the work dir."""

    def __init__(self, cluster: ControllerCluster, work: Path) -> None:
        self.work = work
        self.env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
        self.env.pop("SPUR_CONTROLLER_ADDR", None)

    def __call__(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.work, env=self.env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert result.returncode == 0, f"{' '.join(argv)} -> {result.returncode}: {result.stderr}"
        return result


@pytest.fixture
def shell(cluster: ControllerCluster, tmp_path: Path) -> Shell:
    work = tmp_path / "work"
    work.mkdir()
    return Shell(cluster, work)


@pytest.fixture
def agent(cluster: ControllerCluster, tmp_path: Path) -> AgentProc:
    return AgentProc(tmp_path / "agent", cluster.hosts).start()


def job_state(shell: Shell, job_id: int) -> str:
    text = shell("scontrol", "show", "job", str(job_id)).stdout
    return text.split("JobState=", 1)[1].split()[0]


def test_sbatch_wrap_end_to_end(cluster, agent, shell) -> None:
    submitted = shell("sbatch", "--parsable", "--wrap", "echo hi")
    job_id = int(submitted.stdout)
    wait_until(lambda: job_state(shell, job_id) == "COMPLETED", 30, f"job {job_id} to complete")
    assert (shell.work / f"slurm-{job_id}.out").read_text() == "hi\n"

    assert shell("squeue", "-h", "-j", str(job_id), "-o", "%i %t %N").stdout == ""  # ended: Slurm's wait-loop idiom
    shown = shell("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%i %t %N").stdout
    assert shown == f"{job_id} CD {agent.name}\n"
    # This cluster keeps no accounting: sacct says so as Slurm does (test_accounting_sacct_cluster has the records).
    accounting = shell("sacct", "-j", str(job_id), "-P", "-n", check=False)
    assert (accounting.returncode, accounting.stdout, accounting.stderr) == (
        1, "", "Slurm accounting storage is disabled\n"
    )  # fmt: skip
    assert shell("sinfo", "-h", "-N", "-o", "%N %t").stdout == f"{agent.name} idle\n"


def test_cancel_drain_and_resume(cluster, agent, shell) -> None:
    job_id = int(shell("sbatch", "--parsable", "-J", "sleeper", "--wrap", "sleep 60").stdout)
    wait_until(lambda: job_state(shell, job_id) == "RUNNING", 20, "the job to start")
    assert shell("squeue", "-h", "-o", "%i %j %t").stdout == f"{job_id} sleeper R\n"

    shell("scontrol", "update", f"NodeName={agent.name}", "State=DRAIN", "Reason=disk check")
    assert shell("sinfo", "-h", "-o", "%t %E").stdout == "drng disk check\n"
    assert shell("scancel", str(job_id)).returncode == 0
    wait_until(lambda: job_state(shell, job_id) == "CANCELLED", 20, "the cancel to land")
    wait_until(lambda: shell("sinfo", "-h", "-o", "%t").stdout == "drain\n", 20, "the node to be drained")

    missing = shell("scancel", "999999", check=False)
    # Slurm 22.05 is silent and exits 0 for an id it does not know (tests/golden/slurm-22.05/030-scancel-unknown)
    assert (missing.returncode, missing.stdout, missing.stderr) == (0, "", "")
    assert shell("scancel", str(job_id)).returncode == 0  # already finished: not a failure

    resumed = shell("spur", "node", "resume", agent.name)
    assert resumed.stdout == f"Node {agent.name} resumed\n"
    assert shell("sinfo", "-h", "-o", "%t").stdout == "idle\n"


def test_cluster_status_shows_every_controller(cluster, shell) -> None:
    result = shell("spur", "cluster", "status", "-o", "json")
    status = json.loads(result.stdout)
    assert status["healthy"] and status["leader"] in cluster.hosts
    assert sorted(m["address"] for m in status["members"]) == sorted(cluster.hosts)
    assert {m["role"] for m in status["members"]} == {"leader", "follower"}
    assert all(m["version"] and m["build"] and m["lag"] is not None for m in status["members"])

    follower = next(m for m in cluster.members if m.grpc_addr != status["leader"])
    follower.proc.stop()
    degraded = shell("spur", "cluster", "status", check=False)
    assert degraded.returncode == 1 and f"{follower.grpc_addr}" in degraded.stdout and "down:" in degraded.stdout


def test_writes_through_a_follower_first(cluster, agent, shell) -> None:
    leader = cluster.wait_leader()
    followers = [m.grpc_addr for m in cluster.members if m is not leader]
    shell.env["SPUR_CONTROLLER_ADDR"] = ",".join(followers + [leader.grpc_addr])
    job_id = int(shell("sbatch", "--parsable", "--wrap", "true").stdout)
    wait_until(lambda: job_state(shell, job_id) == "COMPLETED", 30, "the job to complete")
    listed = shell("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()
    assert listed.count(str(job_id)) == 1
