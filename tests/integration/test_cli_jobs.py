"""The job commands a user types, against real controllers and a real agent: sbatch's option surface
(holds, arrays, dependencies, script arguments, --test-only), squeue's array lines, scancel of tasks,
scontrol release, update, requeue and show config."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from agents import AgentProc
from harness import BIN, wait_until

pytestmark = pytest.mark.slow


class Shell:
    """The installed commands, as a user runs them: spur.conf names the controllers, cwd is the work dir."""

    def __init__(self, cluster, work: Path) -> None:
        self.work = work
        self.env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
        self.env.pop("SPUR_CONTROLLER_ADDR", None)
        for name in [n for n in self.env if n.startswith(("SBATCH_", "SLURM_"))]:
            del self.env[name]

    def __call__(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.work, env=self.env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert result.returncode == 0, f"{' '.join(argv)} -> {result.returncode}: {result.stderr}"
        return result

    def submit(self, *argv: str) -> int:
        return int(self("sbatch", "--parsable", *argv).stdout)

    def field(self, job_id: int | str, key: str) -> str:
        text = self("scontrol", "show", "job", str(job_id)).stdout
        return text.split(f"{key}=", 1)[1].split()[0]

    def ids(self, *argv: str) -> list[str]:
        return self("squeue", "-h", "-o", "%i", *argv).stdout.split()


@pytest.fixture
def one(make_cluster):
    return make_cluster(1)


@pytest.fixture
def shell(one, tmp_path: Path) -> Shell:
    work = tmp_path / "work"
    work.mkdir()
    return Shell(one, work)


@pytest.fixture
def agent(one, tmp_path: Path) -> AgentProc:
    return AgentProc(tmp_path / "agent", one.hosts, cpus=2).start()


def test_a_held_job_does_not_start_until_released(agent, shell) -> None:
    job_id = shell.submit("-H", "--wrap", "echo ran")
    assert shell("squeue", "-h", "-j", str(job_id), "-o", "%t %R").stdout == "PD (JobHeldUser)\n"
    shell("scontrol", "update", f"JobId={job_id}", "TimeLimit=10", "Name=renamed", "Nice=5")
    assert (shell.field(job_id, "TimeLimit"), shell.field(job_id, "JobName"), shell.field(job_id, "Nice")) == (
        "00:10:00", "renamed", "5"
    )  # fmt: skip
    assert shell.field(job_id, "JobState") == "PENDING"  # still held after the update
    shell("scontrol", "release", str(job_id))
    wait_until(lambda: shell.field(job_id, "JobState") == "COMPLETED", 30, "the released job to run")
    assert (shell.work / f"slurm-{job_id}.out").read_text() == "ran\n"


def test_script_arguments_and_directives_reach_the_job(agent, shell) -> None:
    script = shell.work / "job.sh"
    script.write_text('#!/bin/sh\n#SBATCH -J from-directive\n#SBATCH --open-mode=append\necho "$1|$2"\n')
    (shell.work / "out.txt").write_text("before\n")
    job_id = shell.submit("-o", "out.txt", str(script), "first arg", "-2")
    wait_until(lambda: shell.field(job_id, "JobState") == "COMPLETED", 30, "the job to run")
    assert shell.field(job_id, "JobName") == "from-directive"
    assert (shell.work / "out.txt").read_text() == "before\nfirst arg|-2\n"


def test_an_array_shows_its_pending_rest_and_its_tasks_and_cancels_by_task(agent, shell) -> None:
    array = shell.submit("--array=0-5%1", "--wrap", "sleep 60")
    wait_until(lambda: f"{array}_0" in shell.ids(), 30, "task 0 to start")
    assert shell.ids() == [f"{array}_[1-5%1]", f"{array}_0"]
    assert shell("squeue", "-h", "-j", str(array), "-o", "%i %r").stdout.splitlines()[0] == (
        f"{array}_[1-5%1] JobArrayTaskLimit"
    )
    shell("scancel", f"{array}_[2-3]")
    assert shell.ids("-r", "-t", "PD") == [f"{array}_1", f"{array}_4", f"{array}_5"]
    assert shell("squeue", "-h", "-j", f"{array}_4", "-o", "%i %T").stdout == f"{array}_4 PENDING\n"
    shell("scancel", str(array))
    wait_until(lambda: not shell.ids(), 30, "the whole array to be cancelled")


def test_a_dependency_waits_for_its_job(agent, shell) -> None:
    first = shell.submit("-H", "--wrap", "true")
    second = shell.submit(f"--dependency=afterok:{first}", "--wrap", "true")
    shown = shell("squeue", "-h", "-j", str(second), "-o", "%R %E").stdout
    assert shown == f"(Dependency) afterok:{first}(unfulfilled)\n"
    shell("scontrol", "release", str(first))
    wait_until(lambda: shell.field(second, "JobState") == "COMPLETED", 30, "the dependent job to run")


def test_requeue_runs_a_job_again_and_counts_the_restart(agent, shell) -> None:
    job_id = shell.submit("--wrap", "sleep 60")
    wait_until(lambda: shell.field(job_id, "JobState") == "RUNNING", 30, "the job to start")
    shell("scontrol", "requeuehold", str(job_id))
    wait_until(lambda: shell.field(job_id, "Restarts") == "1", 30, "the restart to be counted")
    wait_until(lambda: shell.field(job_id, "JobState") == "PENDING", 30, "the requeued job to be pending")
    assert shell.field(job_id, "Reason") == "JobHeldUser"
    shell("scancel", str(job_id))


def test_a_job_that_requeues_itself_is_told_the_requeue_was_done_and_runs_again(agent, shell) -> None:
    """A checkpointing script's (and submitit's) `scontrol requeue $SLURM_JOB_ID`: the requeue's own SIGTERM
    must not turn its answer into 143. The script traps TERM as submitit does, so it can write the exit code."""
    out = shell.work / "self-requeue.out"
    script = shell.work / "self-requeue.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"trap 'echo TERM >> {out}' TERM\n"
        'if [ "$SLURM_RESTART_COUNT" = 0 ]; then\n'
        f"  {BIN}/scontrol requeue $SLURM_JOB_ID\n"
        f'  echo "requeue exit $?" >> {out}\n'
        "  sleep 60\n"
        "else\n"
        f'  echo "run $SLURM_RESTART_COUNT" >> {out}\n'
        "fi\n"
    )
    job_id = shell.submit(str(script))
    wait_until(lambda: shell.field(job_id, "JobState") == "COMPLETED", 60, "the requeued job to run again")
    lines = [line for line in out.read_text().splitlines() if line != "TERM"]  # bash runs the trap when it may
    assert lines == ["requeue exit 0", "run 1"]
    assert shell.field(job_id, "Restarts") == "1"


def test_test_only_names_the_node_and_submits_nothing(agent, shell) -> None:
    result = shell("sbatch", "--test-only", "-n", "2", "--wrap", "true")
    assert result.stdout == "" and f"using 2 processors on nodes {agent.name} in partition" in result.stderr
    assert result.stderr.startswith("sbatch: Job ") and result.stderr.count("\n") == 1
    assert shell.ids("-t", "all") == []


def test_show_config_names_the_cluster_and_clusters_takes_it(one, agent, shell) -> None:
    lines = shell("scontrol", "show", "config").stdout.splitlines()
    keys = {k.strip(): v for k, _, v in (line.partition(" = ") for line in lines[1:])}
    name = keys["ClusterName"]
    assert name and keys["MaxArraySize"].isdigit() and keys["MinJobAge"].endswith(" sec")
    assert shell("sbatch", "--parsable", "-M", name, "-H", "--wrap", "true").stdout.endswith(f";{name}\n")
    refused = shell("sbatch", "-M", "elsewhere", "--wrap", "true", check=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "no such cluster" in refused.stderr


def test_wait_returns_when_the_job_ends_with_its_exit_code(agent, shell) -> None:
    failing = shell("sbatch", "-W", "--wrap", "exit 3", check=False)
    assert failing.returncode == 3 and failing.stdout.startswith("Submitted batch job ")
    array = shell("sbatch", "--wait", "--parsable", "--array=0-2", "--wrap", "true", check=False)
    assert array.returncode == 0
    assert shell.field(array.stdout.strip(), "JobState") == "COMPLETED"


def test_open_ondemands_calls_answer_on_a_live_cluster(agent, shell) -> None:
    name = shell("scontrol", "show", "config").stdout.split("ClusterName", 1)[1].split("=", 1)[1].split()[0]
    job_id = int(shell("sbatch", "--parsable", "-M", name, "--wrap", "sleep 60").stdout.split(";")[0])
    wait_until(lambda: shell.field(job_id, "JobState") == "RUNNING", 30, "the job to start")
    counts = shell("sinfo", "-aho", "%A/%D/%C", "-M", name).stdout.strip().split("/")
    assert counts[:3] == ["1", "0", "1"] and counts[3:] == ["1", "1", "0", "2"]
    partition = shell("scontrol", "show", "part", "-o", "-M", name).stdout
    assert partition.startswith("PartitionName=") and f"Nodes={agent.name}" in partition
    record = shell("squeue", "--all", "--states=all", "--noconvert", "-M", name, "-o", "\x1e%A\x1f%t\x1f%i").stdout
    assert (
        record.split("\x1e")[0] == f"CLUSTER: {name}\n"
        and record.split("\x1e")[2].strip() == f"{job_id}\x1fR\x1f{job_id}"
    )
    shell("scancel", str(job_id), "-M", name)
    wait_until(lambda: shell.field(job_id, "JobState") == "CANCELLED", 30, "the cancel")


def test_suspend_stops_every_process_of_the_job_and_resume_lets_it_go_on(agent, shell) -> None:
    """scontrol suspend: ST S / SUSPENDED, the job's processes (the script's child too) stop and its RunTime stands
    still; scontrol resume: RUNNING again, the processes go on, SuspendTime is the resume."""
    ticks = shell.work / "ticks.txt"
    job_id = shell.submit("--wrap", f"sh -c 'while :; do echo x >> {ticks}; sleep 0.1; done' & wait")
    wait_until(lambda: ticks.exists() and ticks.stat().st_size > 30, 30, "the job to tick for 1.5 s")
    assert shell("scontrol", "suspend", str(job_id)).stdout == ""
    assert shell("squeue", "-h", "-j", str(job_id), "-o", "%t %T").stdout == "S SUSPENDED\n"
    assert shell("squeue", "-h", "-t", "R", "-o", "%i").stdout == ""  # not RUNNING while suspended
    assert shell("squeue", "-h", "-t", "S", "-o", "%i").stdout == f"{job_id}\n"
    assert shell.field(job_id, "SuspendTime") != "None"

    def settled() -> bool:  # no tick for 0.3 s: every ticking process has stopped
        before = ticks.stat().st_size
        time.sleep(0.3)
        return ticks.stat().st_size == before

    wait_until(settled, 10, "the ticks to stop")
    size, run_time = ticks.stat().st_size, shell.field(job_id, "RunTime")
    watch_until = time.monotonic() + 1.5
    while time.monotonic() < watch_until:
        assert ticks.stat().st_size == size, "a process of the suspended job went on"
        time.sleep(0.1)
    assert shell.field(job_id, "RunTime") == run_time  # suspended time is not run time
    again = shell("scontrol", "suspend", str(job_id), check=False)
    assert again.returncode == 1 and f"for job {job_id}" in again.stderr

    shell("scontrol", "resume", str(job_id))
    assert shell("squeue", "-h", "-j", str(job_id), "-o", "%t %T").stdout == "R RUNNING\n"
    wait_until(lambda: ticks.stat().st_size > size, 10, "the resumed job to tick again")
    assert int(shell.field(job_id, "SecsPreSuspend")) >= 1  # the run time before the suspend
    shell("scancel", str(job_id))
    wait_until(lambda: shell.field(job_id, "JobState") == "CANCELLED", 30, "the job to be cancelled")
