"""Every daemon's exit status says how it ended (the EXIT_* table of spur_hpc/daemon.py, docs/reliability.md):
0 after a clean stop on SIGTERM, 1 after an unexpected error, 2 when it refuses to start (with one line saying
what to fix), 70 when a fault while serving leaves it unable to go on. Real spurctld and spurd processes."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from agents import AgentProc
from harness import BIN, spawn_raft_dies, wait_until
from spur_hpc.daemon import EXIT_CRASH, EXIT_FATAL, EXIT_OK, EXIT_REFUSED


def problem_lines(text: str) -> list[str]:
    """The lines of a daemon's output that report a problem (a refusal on stderr, ERROR/CRITICAL log lines)."""
    return [line for line in text.splitlines() if ": error: " in line or " ERROR " in line or " CRITICAL " in line]


def run_spurctld(conf: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "spurctld"), "--conf", str(conf)], capture_output=True, text=True, timeout=60)


def test_spurctld_stopped_with_sigterm_exits_0(make_cluster):
    c = make_cluster(1)
    m = c.members[0]
    m.proc.signal(signal.SIGTERM)
    assert m.proc.wait_exit(30) == EXIT_OK
    log = m.proc.log_text()
    assert "SIGTERM: shutting down" in log and log.rstrip().endswith("stopped"), log[-2000:]
    assert problem_lines(log) == [], log[-2000:]


def test_spurctld_whose_raft_core_dies_exits_70_with_one_line(make_cluster, tmp_path):
    c = make_cluster(1, start=False, extra_controller="fatal_exit_grace_secs = 0")
    m = c.members[0]
    c.write_conf(m)
    trigger = tmp_path / "kill-raft"
    spawn_raft_dies(m, trigger)
    wait_until(lambda: m.probe("/readyz") == 200, 60, "the controller to become ready")
    trigger.touch()
    # Before: the process stayed up with a dead Raft core (only /livez said so) and exited 0 when stopped.
    assert m.proc.wait_exit(60) == EXIT_FATAL
    log = m.proc.log_text()
    problems = problem_lines(log)
    assert len(problems) == 1 and "the Raft core stopped" in problems[0], log[-3000:]
    assert "TickThreadDies: test: the Raft tick thread dies" in problems[0], problems[0]
    assert log.rstrip().endswith(f"stopped (exit status {EXIT_FATAL})"), log[-2000:]


def test_spurctld_that_cannot_bind_its_raft_port_exits_2_with_one_line(make_cluster):
    c = make_cluster(1, start=False)
    m = c.members[0]
    c.write_conf(m)
    with socket.socket() as taken:
        taken.bind((m.ip, m.raft_port))
        taken.listen()
        result = run_spurctld(m.conf_path)
    assert result.returncode == EXIT_REFUSED, result.stderr
    problems = problem_lines(result.stderr)
    assert len(problems) == 1 and f"raft_addr {m.raft_addr}" in problems[0], result.stderr
    assert "Traceback" not in result.stderr


def test_spurctld_whose_state_dir_is_unusable_exits_2_with_one_line(make_cluster):
    c = make_cluster(1, start=False)
    m = c.members[0]
    c.write_conf(m)
    m.state_dir.parent.mkdir(parents=True, exist_ok=True)
    m.state_dir.write_text("a file where the state directory should be\n")
    result = run_spurctld(m.conf_path)
    assert result.returncode == EXIT_REFUSED, result.stderr
    problems = problem_lines(result.stderr)
    assert len(problems) == 1 and str(m.state_dir) in problems[0], result.stderr
    assert "Traceback" not in result.stderr


def test_spurd_stopped_with_sigterm_exits_0(cluster, tmp_path):
    agent = AgentProc(tmp_path / "agent", cluster.hosts).start()
    agent.proc.signal(signal.SIGTERM)
    assert agent.proc.wait_exit(30) == EXIT_OK
    log = agent.log_text()
    assert log.rstrip().endswith("stopped") and problem_lines(log) == [], log[-2000:]


def test_spurd_that_cannot_bind_its_probe_port_exits_2_with_one_line(tmp_path):
    agent = AgentProc(tmp_path / "agent", ["127.0.0.1:9"])  # never reached: it refuses before registering
    with socket.socket() as taken:
        taken.bind((agent.ip, agent.probe_port))
        taken.listen()
        result = subprocess.run(
            [str(BIN / "spurd"), "--conf", str(agent.conf_path)], capture_output=True, text=True, timeout=60
        )
    assert result.returncode == EXIT_REFUSED, result.stderr
    problems = problem_lines(result.stderr)
    assert len(problems) == 1 and "probe_addr" in problems[0], result.stderr
    assert "Traceback" not in result.stderr


# spurctld with a bug that raises once its gRPC and probe servers serve (as any unexpected exception could).
START_RAISES = """
import sys
from spur_hpc.controller import daemon
def choose(self):
    raise RuntimeError("test: a bug while starting")
daemon.ControllerDaemon._choose_membership = choose
sys.exit(daemon.main(sys.argv[1:]))
"""


def test_spurctld_with_an_unexpected_error_while_starting_exits_1(make_cluster):
    c = make_cluster(1, start=False)
    m = c.members[0]
    c.write_conf(m)
    result = subprocess.run(
        [sys.executable, "-c", START_RAISES, "--conf", str(m.conf_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == EXIT_CRASH, result.stderr
    assert "unexpected error while starting (exit status 1)" in result.stderr, result.stderr
    assert "RuntimeError: test: a bug while starting" in result.stderr  # the traceback of a bug is kept
