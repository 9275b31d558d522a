"""spurstepd as a real process: it runs the script, records true exit codes, kills whole trees on cancel
(cgroup and process-tree fallback), enforces the time limit, and outlives the process that started it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agents import (
    kill_leftovers,
    launch_supervisor,
    new_session,
    pid_alive,
    unique_node,
)
from harness import wait_until
from prereqs import needs
from spur_hpc.stepd.session import RESULT_FILE
from spur_hpc.stepd.tracking import CGROUP_PARENT, find_cgroup2_mount


def cgroup_writable() -> bool:
    mount = find_cgroup2_mount()
    if mount is None:
        return False
    probe = Path(mount) / CGROUP_PARENT / f"probe-{os.getpid()}"
    try:
        probe.mkdir(parents=True)
        probe.rmdir()
        return (Path(mount) / "cgroup.procs").exists()
    except OSError:
        return False


NEEDS_CGROUP = needs(cgroup_writable(), "cgroup v2 is not writable here", "run the tests as root on a cgroup2 host")


@pytest.fixture
def public_work():
    """A work dir an unprivileged job can reach (pytest's tmp_path sits under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="spur-test-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("code, state", [(0, "COMPLETED"), (7, "FAILED")])
def test_runs_script_and_records_true_exit_code(tmp_path: Path, work: Path, code: int, state: str) -> None:
    node = unique_node()
    script = (
        f'echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST in $PWD name=$SLURM_JOB_NAME"\necho oops >&2\nexit {code}\n'
    )
    session = new_session(tmp_path / "state", node, 41, script, work_dir=str(work), name="demo")
    sup = launch_supervisor(session, node)
    assert sup.handshake["ok"], sup.handshake
    assert sup.launcher_rc == 0

    result = sup.wait_result()
    assert (result["state"], result["exit_code"], result["signal"]) == (state, code, 0)
    # The same result is on disk, atomically written, for a spurd that was down when the job ended.
    on_disk = json.loads(session.read_bytes(RESULT_FILE))["body"]
    assert on_disk == result
    # Slurm's default output: slurm-<jobid>.out in the work dir, stderr merged into it.
    assert (work / "slurm-41.out").read_text() == f"job 41 on {node} in {work} name=demo\noops\n"


def test_result_is_held_until_released(tmp_path: Path, work: Path) -> None:
    node = unique_node()
    session = new_session(tmp_path / "state", node, 42, "exit 3\n", work_dir=str(work))
    sup = launch_supervisor(session, node)
    assert sup.wait_result()["exit_code"] == 3
    time.sleep(0.3)
    assert pid_alive(sup.pid), "the supervisor must keep the result until spurd collects it"
    assert sup.call("status")["state"] == "finished"
    assert sup.call("release")["ok"]
    wait_until(lambda: not pid_alive(sup.pid), 5, "the supervisor to exit after release")


def test_job_runs_as_its_user_with_output_paths(tmp_path: Path, public_work: Path) -> None:
    work = public_work
    node = unique_node()
    session = new_session(
        tmp_path / "state",
        node,
        43,
        'id -u; id -g; echo "$HOME $USER"; echo err >&2\n',
        user="nobody",
        work_dir=str(work),
        stdout_path="out-%j-%x.txt",
        stderr_path=str(work / "err-%j.txt"),
        name="named",
    )
    sup = launch_supervisor(session, node)
    assert sup.wait_result()["state"] == "COMPLETED"
    assert (work / "out-43-named.txt").read_text().split("\n")[:2] == ["65534", "65534"]
    assert (work / "err-43.txt").read_text() == "err\n"
    assert (work / "out-43-named.txt").stat().st_uid == 65534  # opened as the user, not as root


def test_shebang_script_runs_with_its_interpreter(tmp_path: Path, work: Path) -> None:
    node = unique_node()
    script = f"#!{sys.executable}\nimport os, sys\nprint('py', os.environ['SLURM_JOB_ID'])\nsys.exit(5)\n"
    session = new_session(tmp_path / "state", node, 44, script, work_dir=str(work))
    sup = launch_supervisor(session, node)
    assert sup.wait_result()["exit_code"] == 5
    assert (work / "slurm-44.out").read_text() == "py 44\n"


def test_job_that_cannot_start_fails_with_a_reason(tmp_path: Path) -> None:
    node = unique_node()
    session = new_session(tmp_path / "state", node, 45, "echo never\n", work_dir=str(tmp_path / "missing"))
    sup = launch_supervisor(session, node)
    result = sup.wait_result()
    assert (result["state"], result["exit_code"]) == ("FAILED", 1)
    assert "enter work_dir" in result["reason"] and "No such file" in result["reason"]


TREE_SCRIPT = """
trap '' TERM
setsid bash -c 'echo $$ > {work}/escaped.pid; exec sleep 300' &
bash -c 'echo $$ > {work}/child.pid; while true; do sleep 0.1; done' &
echo $$ > {work}/main.pid
while true; do sleep 0.1; done
"""


@pytest.mark.parametrize(
    "tracking",
    [
        pytest.param("cgroup", marks=NEEDS_CGROUP),
        "process-tree",
    ],
)
def test_cancel_kills_the_whole_tree(tmp_path: Path, work: Path, tracking: str) -> None:
    """A child that moved to its own session dies on cancel, and so does a script that ignores SIGTERM."""
    node = unique_node()
    session = new_session(tmp_path / "state", node, 46, TREE_SCRIPT.format(work=work), work_dir=str(work))
    args = ["--kill-wait", "0.5"] + (["--no-cgroup"] if tracking == "process-tree" else [])
    sup = launch_supervisor(session, node, *args)
    assert sup.handshake["ok"], sup.handshake
    pid_files = [work / "escaped.pid", work / "child.pid", work / "main.pid"]
    wait_until(lambda: all(p.exists() and p.read_text().strip() for p in pid_files), 5, "the job's processes")
    pids = [int(p.read_text()) for p in pid_files]
    assert os.getsid(pids[0]) != os.getsid(pids[2]), "the escaped child must sit in a session of its own"
    assert sup.call("status")["tracking"].startswith("cgroup" if tracking == "cgroup" else "process tree")

    assert sup.call("signal", signal=0)["delivered"]
    result = sup.wait_result(10)
    assert (result["state"], result["signal"]) == ("CANCELLED", signal.SIGKILL)
    for pid in pids:
        wait_until(lambda pid=pid: not pid_alive(pid), 3, f"pid {pid} to die")
    expected = "tracking the job by its process tree" if tracking == "process-tree" else "tracked by cgroup"
    assert expected in sup.log_text()
    assert "sending SIGKILL" in sup.log_text(), "the TERM-ignoring script needed the SIGKILL after the grace"


@NEEDS_CGROUP
def test_two_agents_with_the_same_node_name_and_job_id_keep_their_own_jobs(tmp_path: Path, work: Path) -> None:
    """Node names and job ids repeat between clusters on one machine: a second cluster's job 51 on "node-0" must
    not take the first one's cgroup for a leftover of its own and kill it."""
    node = unique_node()
    first = new_session(tmp_path / "cluster-a", node, 51, "sleep 30\n", work_dir=str(work))
    sup_a = launch_supervisor(first, node)
    assert sup_a.handshake["ok"], sup_a.handshake
    second = new_session(tmp_path / "cluster-b", node, 51, "sleep 30\n", work_dir=str(work))
    sup_b = launch_supervisor(second, node)
    assert sup_b.handshake["ok"], sup_b.handshake
    time.sleep(0.5)
    status_a, status_b = sup_a.call("status"), sup_b.call("status")
    assert status_a["state"] == status_b["state"] == "running", (status_a, status_b)
    assert status_a["tracking"] != status_b["tracking"], "each job in a cgroup of its own"
    assert "earlier run of this attempt" not in sup_b.log_text()


def test_time_limit_ends_job_with_timeout(tmp_path: Path, work: Path) -> None:
    node = unique_node()
    session = new_session(tmp_path / "state", node, 47, "sleep 30\n", work_dir=str(work), time_limit_secs=1)
    sup = launch_supervisor(session, node, "--kill-wait", "1")
    result = sup.wait_result(30)
    assert result["state"] == "TIMEOUT"
    assert result["signal"] == signal.SIGTERM
    # The job's own record (what sacct shows): it ran its whole time limit, not less.
    assert result["end_time"] - result["start_time"] >= 1, result


def test_a_suspended_job_stops_and_its_time_limit_waits_until_it_resumes(tmp_path: Path, work: Path) -> None:
    """scontrol suspend's request: the job's processes stop (its cgroup frozen where it has one, else SIGSTOP),
    the 2 s limit does not run out while stopped for 2.5 s, and after resume the job gets its whole limit."""
    node = unique_node()
    ticks = work / "ticks"
    script = f"while :; do echo x >> {ticks}; sleep 0.05; done\n"
    session = new_session(tmp_path / "state", node, 49, script, work_dir=str(work), time_limit_secs=2)
    sup = launch_supervisor(session, node, "--kill-wait", "1")
    wait_until(lambda: ticks.exists(), 5, "the job to tick")
    assert sup.call("suspend", resume=False)["delivered"]
    tracking = sup.call("status")["tracking"]
    if tracking.startswith("cgroup "):
        freeze = Path(tracking.removeprefix("cgroup "), "cgroup.freeze")
        wait_until(lambda: freeze.read_text().strip() == "1", 5, "the job's cgroup to be frozen")

    def settled() -> bool:
        before = ticks.stat().st_size
        time.sleep(0.2)
        return ticks.stat().st_size == before

    wait_until(settled, 5, "the ticks to stop")
    size, stopped_until = ticks.stat().st_size, time.monotonic() + 2.5
    while time.monotonic() < stopped_until:  # past the limit, but suspended: still running, and not ticking
        assert sup.call("status")["state"] == "running" and ticks.stat().st_size == size
        time.sleep(0.1)
    assert ("suspended (cgroup.freeze=1)" in sup.log_text()) == tracking.startswith("cgroup "), sup.log_text()
    assert sup.call("suspend", resume=True)["delivered"]
    wait_until(lambda: ticks.stat().st_size > size, 5, "the resumed job to tick")
    result = sup.wait_result(30)
    assert result["state"] == "TIMEOUT"
    assert result["end_time"] - result["start_time"] >= 2 + 2.5, result  # the limit moved on by the suspension


def test_signal_is_delivered_to_the_job(tmp_path: Path, work: Path) -> None:
    node = unique_node()
    script = "trap 'echo got USR1; exit 4' USR1\nwhile true; do sleep 0.1; done\n"
    session = new_session(tmp_path / "state", node, 48, script, work_dir=str(work))
    sup = launch_supervisor(session, node)
    time.sleep(0.3)  # let bash install its trap
    assert sup.call("signal", signal=int(signal.SIGUSR1))["delivered"]
    result = sup.wait_result(5)
    assert (result["state"], result["exit_code"]) == ("FAILED", 4)
    assert "got USR1" in (work / "slurm-48.out").read_text()


LAUNCHER = """
import json, subprocess, sys, time
argv = json.loads(sys.argv[1])
proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
print(proc.stdout.readline().decode().strip(), flush=True)
proc.wait()
time.sleep(600)
"""


def test_supervisor_survives_the_death_of_its_launcher(tmp_path: Path, work: Path) -> None:
    """kill -9 of the process that started the supervisor (spurd) leaves the job and its result intact."""
    node = unique_node()
    state = tmp_path / "state"
    session = new_session(state, node, 49, "sleep 1.5\nexit 7\n", work_dir=str(work))
    from agents import LIVE_STATE_DIRS, stepd_argv

    LIVE_STATE_DIRS.append((state, node))
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, json.dumps(stepd_argv() + ["--session", session.path])],
        stdout=subprocess.PIPE,
    )
    try:
        handshake = json.loads(launcher.stdout.readline())
        assert handshake["ok"], handshake
        pid = handshake["pid"]
        launcher.kill()
        launcher.wait(5)
        assert pid_alive(pid)
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        assert ppid != launcher.pid, "spurd must never be the supervisor's parent"
        assert os.getsid(pid) == pid, "the supervisor leads a session of its own"
        # No spurd listens, yet the job finishes and its true exit code is recorded on disk.
        wait_until(lambda: session.exists(RESULT_FILE), 10, "the result record")
        result = json.loads(session.read_bytes(RESULT_FILE))["body"]
        assert (result["state"], result["exit_code"]) == ("FAILED", 7)
        assert pid_alive(pid), "the supervisor waits for a spurd to collect the result"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_leftovers(state, node)


def test_a_steps_end_is_recorded_only_after_srun_has_every_tasks_status(tmp_path: Path, work: Path) -> None:
    """srun takes a step that ended with no EXIT frame from a task as failed (the batch script then fails too), so
    the EXIT frames go out before the result exists: here srun's port refuses connections until a second after
    the task has ended, and the supervisor, released by "spurd" as soon as its result exists, must not exit first."""
    import socket
    import threading

    from spur_hpc import stepio
    from spur_hpc.stepd.session import create_session, open_state_dir, write_step_launch

    srun = socket.socket()
    srun.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused, as while srun starts
    node, state = unique_node(), tmp_path / "state"
    state.mkdir()
    state_fd = open_state_dir(str(state))
    try:
        session = create_session(state_fd, str(state), 51, 1, "0")
    finally:
        os.close(state_fd)
    step = {
        "step_id": "0", "name": "s", "nodes": [node], "tasks": 1, "cpus_per_task": 1, "task_ids": [0],
        "node_index": 0, "argv": ["true"], "environment": {}, "work_dir": str(work),
        "io_address": f"127.0.0.1:{srun.getsockname()[1]}", "io_token": "t0k3n", "stdout_path": "",
        "stderr_path": "", "kill_on_bad_exit": False,
    }  # fmt: skip
    spec = {"name": "s", "user": "root", "time_limit_secs": 0, "environment": {}}
    write_step_launch(session, node, [node], spec, step)
    frames: list[tuple[int, int, bytes]] = []

    def listen_late() -> None:
        time.sleep(1.0)
        srun.listen(1)
        srun.settimeout(20)
        conn, _ = srun.accept()
        reader = stepio.FrameReader()
        while data := conn.recv(65536):
            frames.extend(reader.feed(data))
        conn.close()

    listener = threading.Thread(target=listen_late, daemon=True)
    listener.start()
    try:
        sup = launch_supervisor(session, node)
        assert sup.handshake["ok"], sup.handshake
        result = sup.wait_result(timeout=30)
        assert result["state"] == "COMPLETED", result
        assert sup.call("release")["ok"]
        wait_until(lambda: not pid_alive(sup.pid), 10, "the supervisor to exit after release")
        listener.join(10)
        kinds = [(kind, task) for kind, task, _payload in frames]
        assert kinds == [(stepio.HELLO, 0), (stepio.EXIT, 0)], f"srun received {frames}; log: {sup.log_text()}"
        assert json.loads(frames[1][2]) == {"exit_code": 0, "signal": 0}
    finally:
        srun.close()
        kill_leftovers(state, node)
