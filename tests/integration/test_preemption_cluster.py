"""qos_priority preemption through a real controller and agent: a high-QOS job preempts a low-QOS one in cancel
mode (PREEMPTED) and in requeue mode (it runs again with SLURM_RESTART_COUNT=1), a QOS preempt_mode=off protects
its job against a partition that says cancel, and with preempt_type back to none (SIGHUP) nothing is preempted.
The QOS are made through the store's ModifyAssociations RPC, as sacctmgr makes them. One cluster for the module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agents import AgentProc, kill_leftovers, unique_node
from harness import BIN, ControllerCluster, next_ip_base, stop_all, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05-preempt"

SECTIONS = """
[scheduler]
preempt_type = "{preempt_type}"

[partitions.work]
nodes = "{node}"
default = true
preempt_mode = "cancel"

[partitions.scavenge]
nodes = "{node}"
preempt_mode = "requeue"
"""


class Preemption:
    def __init__(self, cluster: ControllerCluster, agent: AgentProc, work: Path) -> None:
        self.cluster, self.agent, self.work = cluster, agent, work

    def stub(self):
        return self.cluster.stub(self.cluster.wait_leader())

    def submit(self, script: str, qos: str, cpus: int, partition: str = "work") -> int:
        spec = slurm_pb2.JobSpec(
            name="p", script="#!/bin/bash\n" + script, user="root", work_dir=str(self.work), qos=qos,
            partition=partition, tasks=1, cpus_per_task=cpus,
        )  # fmt: skip
        return self.stub().SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec), timeout=10).job_id

    def job(self, job_id: int) -> slurm_pb2.Job:
        return self.stub().GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)

    def wait_state(self, job_id: int, states: set[str], timeout: float = 30.0) -> slurm_pb2.Job:
        def reached():
            job = self.job(job_id)
            return job if slurm_pb2.JobState.Name(job.state) in states else None

        return wait_until(reached, timeout, f"job {job_id} in {states}")

    def add_qos(self, name: str, **values: str) -> None:
        """sacctmgr add qos NAME set ...: through the store's RPC."""
        request = slurm_pb2.ModifyAssociationsRequest(verb="add", entity="qos", names=[name], set=values)
        self.stub().ModifyAssociations(request, timeout=10)

    def cli(self, *argv: str) -> str:
        env = dict(os.environ, SPUR_CONF=str(self.cluster.client_conf()))
        proc = subprocess.run([str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def cancel(self, *job_ids: int) -> None:
        for job_id in job_ids:
            self.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=job_id), timeout=5)
        for job_id in job_ids:
            self.wait_state(job_id, {"CANCELLED", "COMPLETED", "PREEMPTED"})

    def stays(self, victim: int, pending: int, secs: float = 2.0) -> None:
        """For `secs` (ten scheduler passes), `victim` keeps running and `pending` waits."""
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            assert slurm_pb2.JobState.Name(self.job(victim).state) == "RUNNING"
            assert slurm_pb2.JobState.Name(self.job(pending).state) == "PENDING"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("preempt")
    node = unique_node("p")
    cluster = ControllerCluster(
        root / "cluster",
        n=1,
        ip_base=next_ip_base(1),
        extra_sections=SECTIONS.format(preempt_type="qos_priority", node=node),
    )
    cluster.start()
    agent = AgentProc(root / "agent", cluster.hosts, name=node, cpus=2).start()
    work = root / "work"
    work.mkdir()
    p = Preemption(cluster, agent, work)
    p.add_qos("low", priority="10")
    p.add_qos("guarded", priority="10", preemptmode="off")
    p.add_qos("high", priority="100", preempt="low,guarded")
    yield p
    stop_all([agent.proc], timeout=5)
    kill_leftovers(agent.state_dir, agent.name)
    cluster.stop()


def test_cancel_mode_the_high_qos_job_preempts_and_the_victim_ends_preempted(env) -> None:
    victim = env.submit("sleep 300\n", "low", 2)
    env.wait_state(victim, {"RUNNING"})
    high = env.submit("echo high\n", "high", 1)
    ended = env.wait_state(victim, {"PREEMPTED"})
    # as Slurm 22.05's (tests/golden/slurm-22.05-preempt/012): JobState=PREEMPTED Reason=None ExitCode=0:15
    assert (ended.preempted_by, ended.reason, ended.exit_code, ended.signal) == (high, "None", 0, 15)
    assert ended.preempt_time > 0
    assert env.wait_state(high, {"COMPLETED"}).start_time >= ended.end_time - 0.001  # on the victim's CPUs
    slurm = json.loads((GOLDEN / "012-scontrol-show-job-preempted.json").read_text())["stdout"].splitlines()
    spur = env.cli("scontrol", "show", "job", str(victim)).splitlines()
    assert spur[3:5] == slurm[3:5]  # JobState=PREEMPTED Reason=None ...; Requeue=1 Restarts=0 ... ExitCode=0:15
    assert [line.split("=")[0] for line in spur if "Preempt" in line] == ["   PreemptEligibleTime"]
    row = env.cli("squeue", "-h", "-t", "all", "-j", str(victim), "-o", "%t %N").split()
    assert row == ["PR", env.agent.name]  # as Slurm's squeue: PR, and its nodes rather than a reason


def test_requeue_mode_the_victim_runs_again_with_its_restart_counted(env) -> None:
    out = env.work / "requeue.out"
    script = f'echo "restart=$SLURM_RESTART_COUNT" >> {out}\n[ "$SLURM_RESTART_COUNT" = 0 ] && sleep 300\nexit 0\n'
    victim = env.submit(script, "low", 2, partition="scavenge")
    env.wait_state(victim, {"RUNNING"})
    wait_until(out.exists, 15, "the victim's first run writing its file")
    high = env.submit("sleep 1\n", "high", 2)
    requeued = env.wait_state(victim, {"PENDING"})
    assert (requeued.restart_count, requeued.preempted_by, requeued.reason) == (1, high, "BeginTime")  # as Slurm's
    env.wait_state(high, {"COMPLETED"})
    assert env.wait_state(victim, {"COMPLETED"}, timeout=40).restart_count == 1
    assert out.read_text().split() == ["restart=0", "restart=1"]


def test_a_high_job_behind_an_older_waiting_low_job_still_preempts(env) -> None:
    """The queue puts a preemptor before the jobs it may preempt (as Slurm sorts it), so the older low job that
    does not fit blocks nothing for it."""
    victim = env.submit("sleep 300\n", "low", 2)
    env.wait_state(victim, {"RUNNING"})
    older = env.submit("sleep 300\n", "low", 2)
    high = env.submit("true\n", "high", 2)
    assert env.wait_state(victim, {"PREEMPTED"}).preempted_by == high
    env.wait_state(high, {"COMPLETED"})
    env.cancel(env.wait_state(older, {"RUNNING"}).job_id)  # then the older one runs


def test_qos_preempt_mode_off_protects_its_job_even_where_the_partition_says_cancel(env) -> None:
    victim = env.submit("sleep 300\n", "guarded", 2)
    env.wait_state(victim, {"RUNNING"})
    high = env.submit("true\n", "high", 1)
    env.stays(victim, high)
    assert env.job(victim).preempted_by == 0
    env.cancel(victim)
    env.wait_state(high, {"COMPLETED"})


def test_without_preempt_type_nothing_is_preempted(env) -> None:
    member = env.cluster.members[0]
    member.conf_path.write_text(
        env.cluster.conf_text(member).replace('preempt_type = "qos_priority"', 'preempt_type = "none"')
    )
    before = member.proc.log_text().count("SIGHUP:")
    member.proc.signal(signal.SIGHUP)
    wait_until(lambda: member.proc.log_text().count("SIGHUP:") > before, 10, "the controller reading spur.conf again")
    victim = env.submit("sleep 300\n", "low", 2)
    env.wait_state(victim, {"RUNNING"})
    high = env.submit("true\n", "high", 1)
    env.stays(victim, high)
    env.cancel(victim)
    env.wait_state(high, {"COMPLETED"})
