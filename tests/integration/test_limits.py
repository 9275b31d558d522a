"""Association and QOS limits through a real controller and agent ([accounting] enforce = ["limits"]): a job over
its account's GrpTRES pends with AssocGrpCpuLimit (squeue shows it) and starts when the running job ends, a QOS
MaxJobsPerUser pends the user's next job with QOSMaxJobsPerUserLimit, a job over a QOS MaxWall pends with
QOSMaxWallDurationPerJobLimit while one without -t gets the MaxWall as its time limit, and MaxSubmitJobs refuses
at submit with Slurm's lines. Limits are set through ModifyAssociations, as sacctmgr sets them. One cluster."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agents import AgentProc, kill_leftovers, unique_node
from harness import BIN, ControllerCluster, next_ip_base, stop_all, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

SECTIONS = """
[accounting]
enforce = ["limits"]
"""


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
        result = self.sh("sbatch", "--parsable", *argv)
        assert result.returncode == 0, result.stderr
        return int(result.stdout)

    def modify(self, verb: str, entity: str, names=(), where=None, **values: str) -> None:
        request = slurm_pb2.ModifyAssociationsRequest(
            verb=verb, entity=entity, names=list(names), where=where or {}, set=values
        )
        self.cluster.stub(self.cluster.wait_leader()).ModifyAssociations(request, timeout=10)

    def squeue(self, job_id: int) -> tuple[str, str]:
        """(state code, reason) as squeue prints them."""
        out = self.sh("squeue", "-h", "-j", str(job_id), "-o", "%t %r").stdout.split()
        return (out[0], out[1]) if len(out) == 2 else ("", "")

    def wait(self, job_id: int, state: str, reason: str | None = None, timeout: float = 20.0) -> None:
        def reached():
            got = self.squeue(job_id)
            return got[0] == state and (reason is None or got[1] == reason)

        wait_until(reached, timeout, f"job {job_id} {state} {reason or ''} (squeue says {self.squeue(job_id)})")

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
    for account in ("phys", "chem", "bio"):
        lim.modify("add", "account", [account])
    lim.modify("add", "user", ["root"], account="phys,chem,bio")
    lim.modify("add", "qos", ["one"], maxjobsperuser="1")
    lim.modify("add", "qos", ["short"], maxwall="1")
    yield lim
    stop_all([agent.proc], timeout=5)
    kill_leftovers(agent.state_dir, agent.name)
    cluster.stop()


def test_a_job_over_its_accounts_grptres_pends_and_starts_when_usage_falls(env) -> None:
    env.modify("modify", "account", where={"name": "phys"}, grptres="cpu=2")
    first = env.sbatch("-A", "phys", "-c", "2", "--wrap", "sleep 60")
    env.wait(first, "R")
    second = env.sbatch("-A", "phys", "-c", "1", "--wrap", "true")
    env.wait(second, "PD", "AssocGrpCpuLimit")
    other = env.sbatch("-A", "chem", "-c", "1", "--wrap", "sleep 60")
    env.wait(other, "R")  # chem is not under phys's limit
    env.cancel(first)
    wait_until(lambda: env.squeue(second)[0] != "PD", 20, f"job {second} starting once phys has room")
    env.cancel(other)


def test_a_qos_maxjobsperuser_pends_the_users_next_job(env) -> None:
    first = env.sbatch("-A", "bio", "--qos", "one", "--wrap", "sleep 60")
    env.wait(first, "R")
    second = env.sbatch("-A", "bio", "--qos", "one", "--wrap", "true")
    env.wait(second, "PD", "QOSMaxJobsPerUserLimit")
    env.cancel(first, second)


def test_maxwall_pends_a_longer_job_and_gives_one_without_t_the_maxwall(env) -> None:
    longer = env.sbatch("-A", "bio", "--qos", "short", "-t", "5", "--wrap", "true")
    env.wait(longer, "PD", "QOSMaxWallDurationPerJobLimit")
    plain = env.sbatch("-A", "bio", "--qos", "short", "-H", "--wrap", "true")
    assert env.sh("squeue", "-h", "-j", str(plain), "-o", "%l").stdout.strip() == "1:00"
    env.cancel(longer, plain)


def test_maxsubmitjobs_refuses_at_submit_with_slurms_words(env) -> None:
    env.modify("modify", "user", where={"name": "root", "account": "chem"}, maxsubmitjobs="1")
    held = env.sbatch("-A", "chem", "-H", "--wrap", "true")
    refused = env.sh("sbatch", "-A", "chem", "--wrap", "true")
    assert refused.returncode == 1, refused
    lines = refused.stderr.splitlines()
    assert lines[0].startswith("sbatch: error: AssocMaxSubmitJobLimit: user root in account chem may have at most 1")
    assert lines[-1] == (
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's "
        "size and/or time limits)"
    )
    env.cancel(held)
    wait_until(lambda: env.sh("sbatch", "-A", "chem", "-H", "--wrap", "true").returncode == 0, 10, "room again")
