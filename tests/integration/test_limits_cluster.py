"""Association and QOS limits through a real controller and agent ([accounting] enforce = ["limits"]), checked
against what Slurm 22.05 printed for the same commands (tests/golden/slurm-22.05-limits, capture-limits): a job
over its account's GrpTRES pends with AssocGrpCpuLimit and starts when the running job ends, a QOS MaxJobsPerUser
pends the user's next job with QOSMaxJobsPerUserLimit, a job over a QOS MaxWall pends with
QOSMaxWallDurationPerJobLimit while one without -t gets the MaxWall as its time limit, MaxSubmitJobs refuses at
submit and so does DenyOnLimit, with Slurm's lines. Limits are set with the capture's own sacctmgr commands.
One cluster for the module."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from agents import AgentProc, kill_leftovers, unique_node
from harness import BIN, ControllerCluster, next_ip_base, stop_all, wait_until

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05-limits"
SECTIONS = """
[accounting]
enforce = ["limits"]
"""
OUT = ["--output=/dev/null", "--chdir=/tmp"]


def shown_lines(text: str) -> list[str]:
    """scontrol show job's state and time lines, the times as T: JobState/Reason, Eligible and Accrue."""
    keep = ("JobState=", "SubmitTime=", "AccrueTime=")
    return [
        re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", "T", ln) for ln in text.splitlines() if ln.strip().startswith(keep)
    ]


def golden(name: str) -> dict:
    (path,) = GOLDEN.glob(f"[0-9][0-9][0-9]-{name}.json")
    return json.loads(path.read_text())


class Limits:
    def __init__(self, cluster: ControllerCluster, work: Path) -> None:
        self.cluster, self.work = cluster, work
        self.env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
        self.env.pop("SPUR_CONTROLLER_ADDR", None)
        for name in [n for n in self.env if n.startswith(("SBATCH_", "SLURM_"))]:
            del self.env[name]

    def sh(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.work, env=self.env, capture_output=True, text=True, timeout=60
        )

    def sbatch(self, *argv: str) -> int:
        result = self.sh("sbatch", "--parsable", *OUT, *argv)
        assert result.returncode == 0, result.stderr
        return int(result.stdout)

    def sacctmgr(self, capture: str) -> None:
        """The capture's sacctmgr command, run on Spur as it ran on Slurm."""
        argv = shlex.split(golden(capture)["resolved"])
        result = self.sh(*argv)
        assert result.returncode == 0, f"{argv}: {result.stderr}"

    def squeue(self, job_id: int, fmt: str = "%t %r") -> str:
        return self.sh("squeue", "-h", "-j", str(job_id), "-o", fmt).stdout

    def wait(self, job_id: int, capture: str, timeout: float = 20.0) -> None:
        """Until squeue prints for the job what Slurm's squeue printed in `capture`."""
        want = golden(capture)["stdout"]
        wait_until(lambda: self.squeue(job_id) == want, timeout, f"job {job_id}: {want!r} ({self.squeue(job_id)!r})")

    def refused_as(self, capture: str, *argv: str) -> None:
        """sbatch is refused as Slurm's was: its exit status, Slurm's reason first and Slurm's last line."""
        slurm = golden(capture)
        result = self.sh("sbatch", *OUT, *argv)
        want, got = slurm["stderr"].splitlines(), result.stderr.splitlines()
        assert (result.returncode, result.stdout) == (slurm["rc"], slurm["stdout"]), result
        assert got[-1] == want[-1], got
        assert got[0].startswith(want[0] + ": "), f"{got[0]!r} does not start with Slurm's {want[0]!r}"

    def shows_as(self, job_id: int, capture: str) -> None:
        """scontrol show job's state, reason, eligible and accrue lines are Slurm's (times aside)."""
        spur = self.sh("scontrol", "show", "job", str(job_id)).stdout
        assert shown_lines(spur) == shown_lines(golden(capture)["stdout"]), spur

    def cancel(self, *job_ids: int) -> None:
        assert self.sh("scancel", *map(str, job_ids)).returncode == 0


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    node = unique_node("l")
    cluster = ControllerCluster(root / "cluster", n=1, ip_base=next_ip_base(1), extra_sections=SECTIONS)
    cluster.start()
    agent = AgentProc(root / "agent", cluster.hosts, name=node, cpus=4).start()
    work = root / "work"
    work.mkdir()
    lim = Limits(cluster, work)
    for capture in ("add-accounts", "add-user", "add-qos-one", "add-qos-short", "user-qos", "phys-grptres"):
        lim.sacctmgr(f"sacctmgr-{capture}")
    yield lim
    stop_all([agent.proc], timeout=5)
    kill_leftovers(agent.state_dir, agent.name)
    cluster.stop()


def test_a_job_over_its_accounts_grptres_pends_and_starts_when_usage_falls(env) -> None:
    first = env.sbatch("-A", "phys", "-n", "2", "-J", "first", "--wrap", "sleep 300")
    wait_until(lambda: env.squeue(first, "%t") == "R\n", 20, f"job {first} running")
    second = env.sbatch("-A", "phys", "-n", "1", "-J", "second", "--wrap", "sleep 300")
    env.wait(second, "squeue-grptres")  # PD AssocGrpCpuLimit
    env.shows_as(second, "scontrol-show-job-grptres")  # eligible, accruing
    other = env.sbatch("-A", "chem", "-n", "1", "--wrap", "sleep 300")
    wait_until(lambda: env.squeue(other, "%t") == "R\n", 20, "a chem job running beside phys's")
    env.cancel(first)
    env.wait(second, "squeue-grptres-freed")  # R None
    env.cancel(second, other)


def test_a_qos_maxjobsperuser_pends_the_users_next_job(env) -> None:
    first = env.sbatch("-A", "chem", "--qos=one", "-J", "one1", "--wrap", "sleep 300")
    wait_until(lambda: env.squeue(first, "%t") == "R\n", 20, f"job {first} running")
    second = env.sbatch("-A", "chem", "--qos=one", "-J", "one2", "--wrap", "sleep 300")
    env.wait(second, "squeue-maxjobsperuser")  # PD QOSMaxJobsPerUserLimit
    env.shows_as(second, "scontrol-show-job-maxjobsperuser")  # eligible, not accruing (AccrueTime=Unknown)
    env.cancel(first, second)


def test_maxwall_pends_a_longer_job_and_gives_one_without_t_the_maxwall(env) -> None:
    longer = env.sbatch("-A", "chem", "--qos=short", "-t", "5", "-J", "longer", "--wrap", "true")
    env.wait(longer, "squeue-maxwall")  # PD QOSMaxWallDurationPerJobLimit
    env.shows_as(longer, "scontrol-show-job-maxwall")
    plain = env.sbatch("-A", "chem", "--qos=short", "-H", "-J", "plain", "--wrap", "true")
    assert env.squeue(plain, "%l") == golden("squeue-maxwall-default")["stdout"]  # 1:00
    env.cancel(longer, plain)


def test_maxsubmitjobs_and_denyonlimit_refuse_at_submit_with_slurms_lines(env) -> None:
    env.sacctmgr("sacctmgr-chem-maxsubmit")
    held = env.sbatch("-A", "chem", "-H", "-J", "held", "--wrap", "true")
    env.refused_as("sbatch-chem-refused", "-A", "chem", "-J", "refused", "--wrap", "true")
    env.cancel(held)
    env.sacctmgr("sacctmgr-chem-maxsubmit-clear")
    env.sacctmgr("sacctmgr-short-deny")
    env.refused_as("sbatch-short-denied", "-A", "chem", "--qos=short", "-t", "5", "-J", "denied", "--wrap", "true")
