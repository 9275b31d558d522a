"""sacct against a live cluster with accounting: an array and a job with srun steps, read back from PostgreSQL
with the exact command lines submitit and snakemake use."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import pg
from agents import AgentProc
from harness import BIN, ControllerCluster, wait_until

pytestmark = pytest.mark.slow

pg_server, pg_database = pg.pg_server, pg.pg_database  # fixtures, bound by name


class Shell:
    """The installed commands as a user runs them (Spur's srun first on PATH, no SLURM_* of the caller)."""

    def __init__(self, cluster: ControllerCluster, work: Path) -> None:
        self.work = work
        self.env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
        for name in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))]:
            del self.env[name]
        self.env.pop("SPUR_CONTROLLER_ADDR", None)
        self.env["PATH"] = f"{BIN}:{self.env.get('PATH', '/usr/bin:/bin')}"

    def __call__(self, *argv: str) -> str:
        result = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.work, env=self.env, capture_output=True, text=True, timeout=90
        )
        assert result.returncode == 0, f"{' '.join(argv)} -> {result.returncode}: {result.stderr}"
        return result.stdout


@pytest.fixture
def setup(make_cluster, tmp_path: Path, pg_database, pg_server):
    extra = f'[accounting]\ndatabase_url = "{pg_database.url}"\npassword_file = "{pg_server.password_file}"\n'
    cluster = make_cluster(1, extra_sections=extra)
    agents = [AgentProc(tmp_path / f"agent{i}", cluster.hosts, name=f"an{i}").start() for i in (1, 2)]
    work = tmp_path / "work"
    work.mkdir()
    yield cluster, Shell(cluster, work)
    for agent in agents:
        agent.stop()


def finished(shell: Shell, job_id: int) -> bool:
    lines = shell("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T").split()
    return bool(lines) and all(state not in ("PENDING", "RUNNING", "COMPLETING") for state in lines)


def test_sacct_shows_array_tasks_and_steps_from_accounting_as_workflow_tools_read_them(setup) -> None:
    cluster, shell = setup
    name = str(uuid.uuid4())
    array_id = int(shell("sbatch", "--parsable", "--job-name", name, "--array=0-2", "--wrap", "true").split(";")[0])
    script = shell.work / "steps.sh"
    script.write_text("#!/bin/sh\nsrun -n 2 -N 2 hostname\nsrun -N 1 -n 1 sh -c 'exit 3'\nexit 0\n")
    steps_id = int(shell("sbatch", "--parsable", "-N", "2", "-n", "2", str(script)).split(";")[0])
    wait_until(lambda: finished(shell, array_id), 90, "the array to finish")
    # The leader writes what is due before it answers: sacct agrees with squeue at once, with no pass to wait for.
    assert shell("sacct", "-X", "-n", "-P", "-o", "State", "-j", str(array_id)).split() == ["COMPLETED"] * 3
    wait_until(lambda: finished(shell, steps_id), 90, "the steps job to finish")
    leader = cluster.wait_leader()

    def recorded() -> bool:
        # sacct reads the database: wait until the writer's pass after both jobs ended (4 + 3 x 2 lines).
        states = shell("sacct", "-n", "-P", "-o", "State", "-j", f"{array_id},{steps_id}").split()
        return len(states) == 10 and "RUNNING" not in states and "PENDING" not in states

    wait_until(recorded, 30, "accounting to have every record")
    assert leader.status()["accounting"]["backlog"] == 0

    # submitit: sacct -o JobID,State,NodeList --parsable2 -j ID[,ID] with array task ids.
    lines = shell("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", f"{array_id}_0,{array_id}_2").splitlines()
    assert lines[0] == "JobID|State|NodeList"
    tasks = [line for line in lines[1:] if ".batch" not in line]
    assert [t.split("|")[:2] for t in tasks] == [[f"{array_id}_0", "COMPLETED"], [f"{array_id}_2", "COMPLETED"]]
    assert [line.split("|")[:2] for line in lines[1:] if ".batch" in line] == [
        [f"{array_id}_0.batch", "COMPLETED"],
        [f"{array_id}_2.batch", "COMPLETED"],
    ]

    # snakemake: the status poll by name, jobs only, every cluster, no header, raw ids.
    today = time.strftime("%Y-%m-%dT00:00")
    polled = shell(
        "sacct", "-X", "--parsable2", "--clusters", "all", "--noheader", "--format=JobIdRaw,State",
        "--starttime", today, "--endtime", "now", "--name", name,
    ).splitlines()  # fmt: skip
    assert len(polled) == 3 and all(line.endswith("|COMPLETED") for line in polled)
    assert str(array_id) in {line.split("|")[0] for line in polled}  # the last task runs in the array's record

    # A job with steps: its line, then batch, then each srun step with its own exit code.
    assert shell("sacct", "-j", str(steps_id), "-P", "-n", "-o", "JobID,State,ExitCode,NNodes,NTasks").splitlines() == [
        f"{steps_id}|COMPLETED|0:0|2|",
        f"{steps_id}.batch|COMPLETED|0:0|1|1",
        f"{steps_id}.0|COMPLETED|0:0|2|2",
        f"{steps_id}.1|FAILED|3:0|1|1",
    ]
    assert shell("sacct", "-j", f"{steps_id}.1", "-P", "-n", "-o", "JobID,State").splitlines() == [
        f"{steps_id}.1|FAILED"
    ]


def test_without_accounting_sacct_says_so_and_exits_1_as_slurm_does(make_cluster, tmp_path) -> None:
    cluster = make_cluster(1)
    env = dict(Shell(cluster, tmp_path).env)
    result = subprocess.run([str(BIN / "sacct"), "-X"], env=env, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (1, "", "Slurm accounting storage is disabled\n")
