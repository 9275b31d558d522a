"""Job steps end to end: real controllers, two real spurd on 127.0.1.x, real spurstepd per step and node,
and the commands a user types (sbatch, srun, salloc, squeue -s, scancel N.M, scontrol show step)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agents import AgentProc, pid_alive
from harness import BIN, ControllerCluster, wait_until

pytestmark = pytest.mark.slow


class Shell:
    """The installed commands as a user runs them: spur.conf names the controllers, cwd is the work dir."""

    def __init__(self, cluster: ControllerCluster, work: Path) -> None:
        self.work = work
        self.env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
        for name in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))]:
            del self.env[name]
        self.env.pop("SPUR_CONTROLLER_ADDR", None)
        # Jobs find Spur's srun first (this machine may have Slurm's own commands too).
        self.env["PATH"] = f"{BIN}:{self.env.get('PATH', '/usr/bin:/bin')}"

    def __call__(self, *argv: str, check: bool = True, timeout: float = 90) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.work, env=self.env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        if check:
            assert result.returncode == 0, f"{' '.join(argv)} -> {result.returncode}: {result.stderr}"
        return result

    def popen(self, *argv: str) -> subprocess.Popen:
        return subprocess.Popen(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.work, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip


@pytest.fixture
def shell(cluster: ControllerCluster, tmp_path: Path) -> Shell:
    work = tmp_path / "work"
    work.mkdir()
    return Shell(cluster, work)


@pytest.fixture
def agents(cluster: ControllerCluster, tmp_path: Path) -> list[AgentProc]:
    first = AgentProc(tmp_path / "agent1", cluster.hosts, name="sn1").start()
    second = AgentProc(tmp_path / "agent2", cluster.hosts, name="sn2").start()
    return [first, second]


def job_field(shell: Shell, job_id: int, field: str) -> str:
    text = shell("scontrol", "show", "job", str(job_id)).stdout
    return text.split(f"{field}=", 1)[1].split()[0]


def submit(shell: Shell, *options: str, script: str) -> int:
    path = shell.work / f"job{time.monotonic_ns()}.sh"
    path.write_text(script)
    return int(shell("sbatch", "--parsable", *options, str(path)).stdout.split(";")[0])


def wait_state(shell: Shell, job_id: int, states: tuple[str, ...], timeout: float = 60) -> str:
    return wait_until(
        lambda: (s := job_field(shell, job_id, "JobState")) in states and s, timeout, f"job {job_id} to be {states}"
    )


def test_srun_inside_sbatch_runs_four_tasks_over_two_nodes_and_exits_with_the_worst_task(agents, shell) -> None:
    job_id = submit(
        shell,
        "-N",
        "2",
        "-n",
        "4",
        script="#!/bin/sh\n"
        "srun --label sh -c 'echo task $SLURM_PROCID of $SLURM_STEP_NUM_TASKS on $SLURMD_NODENAME "
        "node $SLURM_NODEID local $SLURM_LOCALID step $SLURM_STEP_ID; exit $SLURM_PROCID'\n"
        'echo "srun exit $?"\n',
    )
    wait_state(shell, job_id, ("COMPLETED", "FAILED"))
    output = (shell.work / f"slurm-{job_id}.out").read_text().splitlines()
    tasks = sorted(line for line in output if line[:1].isdigit())
    assert tasks == [
        "0: task 0 of 4 on sn1 node 0 local 0 step 0",
        "1: task 1 of 4 on sn1 node 0 local 1 step 0",
        "2: task 2 of 4 on sn2 node 1 local 0 step 0",
        "3: task 3 of 4 on sn2 node 1 local 1 step 0",
    ], output
    assert "srun exit 3" in output


def test_steps_are_listed_by_squeue_s_cancelled_by_scancel_n_m_and_shown_by_scontrol(agents, shell) -> None:
    job_id = submit(
        shell,
        "-N",
        "2",
        "-n",
        "2",
        "-J",
        "stepper",
        script='#!/bin/sh\nsrun -n 2 sleep 300\necho "srun exit $?"\nsleep 0.5\necho after\n',
    )
    step = f"{job_id}.0"

    def listed() -> list[str]:
        return shell("squeue", "-s", "-h").stdout.splitlines()

    lines = wait_until(lambda: [x for x in listed() if x.split()[0] == step], 30, "the step to be listed")
    assert lines[0].split()[1:4] == ["sleep", "default", shell.env.get("USER") or lines[0].split()[3]]
    assert lines[0].split()[-1] == "sn[1-2]"
    assert [x.split()[0] for x in listed()] == [step, f"{job_id}.batch"]  # Slurm's order: N.0 before N.batch
    header = shell("squeue", "-s").stdout.splitlines()[0]
    assert header.split() == ["STEPID", "NAME", "PARTITION", "USER", "TIME", "NODELIST"]
    running = shell("scontrol", "show", "step", step).stdout
    assert "State=RUNNING" in running and "Tasks=2" in running and "NodeList=sn[1-2]" in running, running

    shell("scancel", step)
    wait_state(shell, job_id, ("COMPLETED",))
    output = (shell.work / f"slurm-{job_id}.out").read_text()
    assert "srun exit 143" in output and "after" in output, output  # the step ended; the batch script went on
    shown = shell("scontrol", "show", "step", step).stdout
    assert "State=CANCELLED" in shown, shown
    assert shell("squeue", "-s", "-h", "-j", str(job_id)).stdout == ""
    bad = shell("scancel", f"{job_id}.x", check=False)
    assert bad.returncode == 1 and "invalid step id" in bad.stderr


def test_a_step_outlives_a_spurd_restart_with_the_same_supervisor_and_its_end_is_reported_after(agents, shell) -> None:
    job_id = submit(
        shell,
        "-N",
        "2",
        "-n",
        "2",
        script="#!/bin/sh\n"
        "srun -l sh -c 'while [ ! -e go ]; do sleep 0.2; done; echo done $SLURM_PROCID; exit 4'\n"
        'echo "srun exit $?"\n',
    )
    second = agents[1]  # it runs only the step's part (the batch script is on the first node)

    def step_supervisor() -> int:
        held = [r for r in second.status()["running_jobs"] if r["job_id"] == job_id]
        return held[0]["supervisor_pid"] if held else 0

    pid = wait_until(step_supervisor, 30, "the step's supervisor on the second node")
    second.stop()
    assert pid_alive(pid), "stopping spurd must not stop the step's supervisor"
    (shell.work / "go").write_text("")  # the tasks end while that spurd is down
    time.sleep(2)
    second.start()
    assert step_supervisor() in (pid, 0)  # re-adopted: the same supervisor (or already collected)
    wait_state(shell, job_id, ("COMPLETED",))
    output = (shell.work / f"slurm-{job_id}.out").read_text().splitlines()
    assert sorted(line for line in output if line[:1].isdigit()) == ["0: done 0", "1: done 1"], output
    assert "srun exit 4" in output
    shown = wait_until(
        lambda: (text := shell("scontrol", "show", "step", f"{job_id}.0").stdout) and "State=FAILED" in text and text,
        30,
        "the step's end to be recorded",
    )
    assert "ExitCode=4:0" in shown
    assert (
        f"re-adopted job {job_id} attempt 1" in second.log_text() or "ended while spurd was down" in second.log_text()
    )


def test_salloc_runs_a_command_in_an_allocation_whose_srun_steps_use_it_then_ends_it(agents, shell) -> None:
    result = shell(
        "salloc", "-N", "2", "-n", "2", "sh", "-c",
        'echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"; srun -l sh -c \'echo on $SLURMD_NODENAME\'; exit 3',
        check=False,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    granted = [line for line in result.stderr.splitlines() if "Granted job allocation" in line]
    assert granted, result.stderr
    job_id = int(granted[0].split()[-1])
    assert f"job {job_id} on sn[1-2]" in result.stdout
    assert sorted(line for line in result.stdout.splitlines() if line[:1].isdigit()) == ["0: on sn1", "1: on sn2"]
    assert f"Relinquishing job allocation {job_id}" in result.stderr
    assert job_field(shell, job_id, "JobState") == "FAILED" and job_field(shell, job_id, "ExitCode") == "3:0"


def test_srun_outside_an_allocation_gets_one_runs_its_step_there_and_ends_it(agents, shell) -> None:
    result = shell(
        "srun", "-N", "2", "-n", "4", "-l", "sh", "-c", "echo rank $SLURM_PROCID; exit $SLURM_NODEID", check=False
    )
    assert result.returncode == 1, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line[:1].isdigit()) == [
        "0: rank 0", "1: rank 1", "2: rank 2", "3: rank 3",
    ]  # fmt: skip
    assert "task 2: Exited with exit code 1" in result.stderr
    jobs = shell("squeue", "-h", "-t", "all", "-o", "%i %T").stdout.split()
    assert jobs[-1] == "FAILED", jobs


def wait_ready(shell: Shell, count: int) -> None:
    wait_until(lambda: all((shell.work / f"ready.{i}").exists() for i in range(count)), 30, "the tasks to start")


def test_ctrl_c_sends_sigint_to_every_task_and_a_second_one_within_a_second_cancels_the_step(agents, shell) -> None:
    catch = "trap 'echo caught $SLURM_PROCID; exit 7' INT; touch ready.$SLURM_PROCID; while :; do sleep 0.1; done"
    srun = shell.popen("srun", "-N", "2", "-n", "2", "sh", "-c", catch)
    wait_ready(shell, 2)
    srun.send_signal(signal.SIGINT)
    out, err = srun.communicate(timeout=60)
    assert srun.returncode == 7, err
    assert sorted(out.split()) == ["0", "1", "caught", "caught"], out
    assert "interrupt (one more within 1 sec to abort)" in err

    for i in range(2):
        (shell.work / f"ready.{i}").unlink()
    ignore = "trap '' INT; touch ready.$SLURM_PROCID; while :; do sleep 0.1; done"
    srun = shell.popen("srun", "-N", "2", "-n", "2", "sh", "-c", ignore)
    wait_ready(shell, 2)
    srun.send_signal(signal.SIGINT)
    time.sleep(0.2)
    srun.send_signal(signal.SIGINT)
    out, err = srun.communicate(timeout=60)
    assert "forcing job termination" in err, err
    assert srun.returncode == 128 + signal.SIGTERM, err


def test_a_step_and_its_output_survive_a_failover_of_the_leader(cluster, agents, shell) -> None:
    wait = "touch ready.$SLURM_PROCID; while [ ! -e go ]; do sleep 0.1; done; echo finished $SLURM_PROCID; exit 5"
    srun = shell.popen("srun", "-N", "2", "-n", "2", "-l", "sh", "-c", wait)
    wait_ready(shell, 2)
    leader = cluster.wait_leader()
    cluster.kill9(leader.index)
    cluster.wait_leader(timeout=30, exclude=leader)
    (shell.work / "go").write_text("")
    out, err = srun.communicate(timeout=90)
    assert srun.returncode == 5, err
    assert sorted(out.splitlines()) == ["0: finished 0", "1: finished 1"], out
    jobs = shell("squeue", "-h", "-t", "all", "-o", "%i %T").stdout.split()
    job_id = int(jobs[-2])
    shown = wait_until(
        lambda: (text := shell("scontrol", "show", "step", f"{job_id}.0").stdout) and "State=FAILED" in text and text,
        30,
        "the new leader to record the step's end",
    )
    assert "ExitCode=5:0" in shown
    assert job_field(shell, job_id, "JobState") == "FAILED"


def test_a_suspended_step_stays_stopped_across_a_failover_and_resumes_from_the_new_leader(
    cluster, agents, shell
) -> None:
    """scontrol suspend stops the tasks of a two-node step (each node's spurstepd); the new leader after a failover
    still shows the job SUSPENDED, and its scontrol resume lets the tasks go on."""
    tick = "touch ready.$SLURM_PROCID; while :; do echo x >> ticks.$SLURM_PROCID; sleep 0.1; done"
    job_id = submit(shell, "-N", "2", "-n", "2", script=f"#!/bin/sh\nsrun sh -c '{tick}'\n")
    wait_ready(shell, 2)
    ticks = [shell.work / f"ticks.{i}" for i in range(2)]
    shell("scontrol", "suspend", str(job_id))

    def settled() -> bool:  # no tick on either node for 0.3 s: every task has stopped
        before = [t.stat().st_size for t in ticks]
        time.sleep(0.3)
        return [t.stat().st_size for t in ticks] == before

    wait_until(settled, 10, "both tasks to stop")
    sizes = [t.stat().st_size for t in ticks]
    leader = cluster.wait_leader()
    cluster.kill9(leader.index)
    cluster.wait_leader(timeout=30, exclude=leader)
    assert wait_until(lambda: job_field(shell, job_id, "JobState"), 30, "the new leader") == "SUSPENDED"
    assert [t.stat().st_size for t in ticks] == sizes, "a task went on while its job was suspended"
    shell("scontrol", "resume", str(job_id))
    wait_until(lambda: all(t.stat().st_size > n for t, n in zip(ticks, sizes, strict=True)), 15, "both to go on")
    assert job_field(shell, job_id, "JobState") == "RUNNING"
    shell("scancel", str(job_id))
    wait_state(shell, job_id, ("CANCELLED",))


def test_srun_says_once_that_no_controller_answers_and_keeps_streaming(cluster, agents, shell) -> None:
    wait = "touch ready.$SLURM_PROCID; while [ ! -e go ]; do sleep 0.1; done; echo still here $SLURM_PROCID"
    srun = shell.popen("srun", "-N", "2", "-n", "2", "-l", "sh", "-c", wait)
    wait_ready(shell, 2)
    for member in cluster.members:
        cluster.kill9(member.index)
    time.sleep(8)  # more than srun's status poll and read patience: it has noticed
    (shell.work / "go").write_text("")
    out, err = srun.communicate(timeout=120)
    assert sorted(out.splitlines()) == ["0: still here 0", "1: still here 1"], out
    warnings = [line for line in err.splitlines() if "no controller answers" in line]
    assert len(warnings) == 1, err
    assert srun.returncode == 0, err


def test_steps_left_running_when_the_batch_script_ends_are_cancelled_on_every_node(agents, shell) -> None:
    job_id = submit(
        shell, "-N", "2", "-n", "2",
        script="#!/bin/sh\nsrun sh -c 'touch ready.$SLURM_PROCID; exec sleep 300' &\n"
        "while [ ! -e ready.0 ] || [ ! -e ready.1 ]; do sleep 0.1; done\n",
    )  # fmt: skip
    wait_state(shell, job_id, ("COMPLETED",))
    shown = wait_until(
        lambda: (
            (text := shell("scontrol", "show", "step", f"{job_id}.0").stdout) and "State=CANCELLED" in text and text
        ),
        30,
        "the step to be cancelled",
    )
    assert "NodeList=sn[1-2]" in shown
    wait_until(lambda: not any(a.status()["running_jobs"] for a in agents), 30, "both nodes to let the step go")


def test_srun_output_patterns_write_one_file_per_task_and_kill_on_bad_exit_ends_the_step(agents, shell) -> None:
    job_id = submit(
        shell, "-N", "2", "-n", "2",
        script="#!/bin/sh\n"
        "srun -o out-%j.%s.%t.txt -e err-%J-%n.txt sh -c 'echo out $SLURM_PROCID; echo err $SLURM_PROCID >&2'\n"
        "srun -K sh -c 'if [ $SLURM_PROCID = 0 ]; then exit 3; fi; exec sleep 300'\n"
        'echo "killed step exit $?"\n',
    )  # fmt: skip
    wait_state(shell, job_id, ("COMPLETED",))
    for task in (0, 1):
        assert (shell.work / f"out-{job_id}.0.{task}.txt").read_text() == f"out {task}\n"
        assert (shell.work / f"err-{job_id}.0-{task}.txt").read_text() == f"err {task}\n"
    output = (shell.work / f"slurm-{job_id}.out").read_text()
    assert "killed step exit 137" in output, output  # the other node's task was killed (SIGKILL)
    shown = shell("scontrol", "show", "step", f"{job_id}.1").stdout
    assert "State=FAILED" in shown and "--kill-on-bad-exit" in shown, shown


def test_srun_passes_the_jobs_signal_before_its_time_limit_on_to_its_tasks(agents, shell) -> None:
    job_id = submit(
        shell, "-N", "2", "-n", "2", "-t", "1", "--signal=USR2@57",
        script="#!/bin/sh\n"
        "srun -l sh -c 'trap \"echo got USR2; exit 0\" USR2; while :; do sleep 0.1; done'\n"
        'echo "srun exit $?"\n',
    )  # fmt: skip
    wait_state(shell, job_id, ("COMPLETED",), timeout=45)
    output = (shell.work / f"slurm-{job_id}.out").read_text().splitlines()
    # Every process of each task gets it (the shell's sleep too, as Slurm signals the step's whole cgroup).
    assert "0: got USR2" in output and "1: got USR2" in output, output
    assert "srun exit 0" in output


def test_a_step_of_an_array_task_names_its_files_after_the_array_and_sees_the_restart_count(agents, shell) -> None:
    # submitit's map_array: each task runs srun --output %A_%a_%t...; %A must be the array's id, %a the task's.
    array_id = submit(shell, "--array=0-1", "-o", "batch-%A_%a.out", script=(
        "#!/bin/sh\n"
        "srun -n1 --output=step-%A_%a_%t.out sh -c 'echo $SLURM_ARRAY_TASK_ID $SLURM_RESTART_COUNT'\n"
    ))  # fmt: skip
    for task in (0, 1):
        out = shell.work / f"step-{array_id}_{task}_0.out"
        wait_until(lambda o=out: o.exists() and o.read_text().strip(), 60, f"{out.name} to be written")
        assert out.read_text().split() == [str(task), "0"]
