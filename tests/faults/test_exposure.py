"""What a daemon exposes by default: its state files are for its own user only whatever the umask it was started
with (an older, too open state directory is fixed and the log says so), and idle or trickling connections to a
probe port are closed by the server instead of holding a thread each for as long as the client likes."""

from __future__ import annotations

import os
import select
import socket
import stat
from pathlib import Path

import pytest

from agents import AgentProc
from harness import http_get, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def too_open(state_dir: Path) -> list[str]:
    """Every directory not 0700 and every file readable by group or others under state_dir. A file the daemon
    renames or removes while we look (raft.journal.compact during a compaction) is skipped: it is gone."""
    found = [f"{state_dir} {mode(state_dir):04o}"] if mode(state_dir) != 0o700 else []
    for path in state_dir.rglob("*"):
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            continue
        bits = stat.S_IMODE(st.st_mode)
        if (stat.S_ISDIR(st.st_mode) and bits != 0o700) or bits & 0o077:
            found.append(f"{path} {bits:04o}")
    return found


def submit(cluster, script: str, work: Path) -> int:
    spec = slurm_pb2.JobSpec(name="x", script="#!/bin/sh\n" + script, user="root", work_dir=str(work))
    return cluster.stub(cluster.wait_leader()).SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec), timeout=10).job_id


def test_state_is_private_whatever_the_umask(make_cluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    agent_root = tmp_path / "agent"
    old_umask = os.umask(0o022)  # inherited by the daemons: the usual umask of a shell or a service manager
    try:
        cluster = make_cluster(1, extra_controller="log_compaction_entries = 5")  # auth none: the demo's setting
        agent = AgentProc(agent_root, cluster.hosts)
        agent.state_dir.mkdir(parents=True)
        agent.state_dir.chmod(0o755)  # made by hand, or by an older release
        agent.start()
        member = cluster.members[0]
        running = submit(cluster, "sleep 60\n", work)
        wait_until(lambda: running in agent.running(), 20, "the job to run")
        for _ in range(8):  # enough entries for a snapshot (raft.dump)
            submit(cluster, "exit 0\n", work)
        wait_until((member.state_dir / "raft.dump").exists, 30, "a snapshot to be written")
        assert (member.state_dir / "raft.journal").exists()
        assert too_open(member.state_dir) == [], "the controller's state is for root only"
        assert too_open(agent.state_dir) == [], "sessions hold job scripts and environments"
        assert any(agent.state_dir.iterdir()), "the running job's session is checked too"
        assert "state_dir" in agent.log_text() and "had mode 0755" in agent.log_text()
        # A state directory an older release left open is fixed at start, and the log says what was open.
        member.proc.stop()
        member.state_dir.chmod(0o755)
        (member.state_dir / "raft.journal").chmod(0o644)
        cluster.restart(0)
    finally:
        os.umask(old_umask)
    cluster.wait_leader()
    assert too_open(member.state_dir) == []
    log = member.proc.log_text()
    assert "was open to other users" in log and ". 0755" in log and "raft.journal 0644" in log, log[-2000:]
    agent.stop()


def closed_by_server(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def test_idle_probe_connections_are_closed_and_do_not_block_probes(make_cluster):
    member = make_cluster(1).members[0]
    address = (member.ip, member.probe_port)
    idle = [socket.create_connection(address, timeout=10) for _ in range(70)]  # more than the server keeps open
    trickler = socket.create_connection(address, timeout=10)
    trickler.sendall(b"GET /status HTTP/1.0\r\n")
    try:
        code, body = http_get(member.probe_url + "/status", timeout=10)
        assert code == 200 and '"role"' in body, body

        def all_closed() -> bool:
            if not closed_by_server(trickler):
                try:
                    trickler.sendall(b"X-Slow: 1\r\n")  # a header now and then keeps a per-read timeout happy
                except ConnectionError:
                    pass
            return all(closed_by_server(s) for s in idle) and closed_by_server(trickler)

        wait_until(all_closed, 60, "the server to close idle and trickling probe connections", interval=0.5)
        # Request line and headers are bounded.
        with socket.create_connection(address, timeout=10) as big:
            big.sendall(b"GET /status HTTP/1.0\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
            assert big.recv(64).startswith(b"HTTP/1.0 431"), "headers over the limit are refused"
        assert http_get(member.probe_url + "/status", timeout=10)[0] == 200
    finally:
        for s in idle + [trickler]:
            s.close()
