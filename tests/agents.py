"""Real spurd / spurstepd processes for tests: agents on 127.0.1.201+, sessions written by hand, cleanup.

Every helper that starts a supervisor registers its state directory in LIVE_STATE_DIRS; cleanup() kills
whatever supervisors and jobs are left there (a leaked process breaks CI), cgroups included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import BIN, Proc, free_port, http_get, wait_until
from spur_hpc.stepd import protocol
from spur_hpc.stepd.enforce import find_v1_mounts
from spur_hpc.stepd.session import (
    SOCKET_FILE,
    SessionDir,
    create_session,
    open_session,
    open_state_dir,
    session_name,
    write_launch,
)
from spur_hpc.stepd.tracking import agent_cgroup_dir, find_cgroup2_mount

LIVE_STATE_DIRS: list[tuple[Path, str]] = []  # (state_dir, node name)
_NEXT_IP = {"n": 201}


def next_agent_ip() -> str:
    """Agents get 127.0.1.201-250, away from the controllers' block handed out by conftest."""
    n = _NEXT_IP["n"]
    _NEXT_IP["n"] = n + 1 if n < 250 else 201
    return f"127.0.1.{n}"


def unique_node(prefix: str = "t") -> str:
    """A node name no other test (or earlier run) uses, so job cgroups never collide."""
    return f"{prefix}{os.getpid()}-{time.monotonic_ns() % 10**9}"


def stepd_argv() -> list[str]:
    script = BIN / "spurstepd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "spur_hpc.stepd"]


# ------------------------------------------------------------------ supervisors without spurd


@dataclass
class StartedSupervisor:
    session: SessionDir
    handshake: dict[str, Any]
    launcher_rc: int

    @property
    def pid(self) -> int:
        return int(self.handshake.get("pid", 0))

    @property
    def socket(self) -> str:
        return self.session.fd_path(SOCKET_FILE)

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        return protocol.call(self.socket, {"op": op, **fields}, timeout=fields.get("timeout", 5) + 5)

    def wait_result(self, timeout: float = 15.0) -> dict[str, Any]:
        reply = self.call("wait", timeout=timeout)
        assert reply["state"] == "finished", f"job still running after {timeout} s: {reply}"
        return reply["result"]

    def log_text(self) -> str:
        try:
            return self.session.read_bytes("stepd.log").decode(errors="replace")
        except OSError:
            return ""


def new_session(state_dir: Path, node: str, job_id: int, script: str, attempt: int = 1, **spec: Any) -> SessionDir:
    """Write a session as spurd would before starting a supervisor."""
    state_dir.mkdir(parents=True, exist_ok=True)
    state_fd = open_state_dir(str(state_dir))
    try:
        session = create_session(state_fd, str(state_dir), job_id, attempt)
    finally:
        os.close(state_fd)
    full_spec: dict[str, Any] = {"name": f"test{job_id}", "user": "root", "time_limit_secs": 0, "environment": {}}
    full_spec.update(spec)
    write_launch(session, node, [node], full_spec, script.encode())
    return session


def reopen_session(state_dir: Path, job_id: int, attempt: int = 1) -> SessionDir:
    state_fd = open_state_dir(str(state_dir), create=False)
    try:
        return open_session(state_fd, str(state_dir), session_name(job_id, attempt))
    finally:
        os.close(state_fd)


def launch_supervisor(session: SessionDir, node: str, *args: str) -> StartedSupervisor:
    """Start spurstepd the way spurd does (it detaches; we reap the first process) and read its handshake."""
    LIVE_STATE_DIRS.append((Path(session.path).parent, node))
    log_fd = session.open_log()
    try:
        proc = subprocess.Popen(
            stepd_argv() + ["--session", session.path, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log_fd,
            start_new_session=True,
        )
    finally:
        os.close(log_fd)
    line = proc.stdout.readline()
    proc.stdout.close()
    rc = proc.wait(10)
    handshake = json.loads(line) if line else {"ok": False, "error": "no handshake"}
    return StartedSupervisor(session, handshake, rc)


# ------------------------------------------------------------------ spurd


class AgentProc:
    """One spurd with its own address, ports, state directory, conf and log."""

    def __init__(
        self,
        root: Path,
        hosts: list[str],
        name: str | None = None,
        heartbeat: float = 0.5,
        heartbeat_timeout: int = 60,
        extra: str = "",
        cpus: int = 4,
        ip: str | None = None,
    ) -> None:
        self.root = root
        self.ip = ip or next_agent_ip()  # several agents may share one address (on ports of their own)
        self.name = name or unique_node("a")
        self.grpc_port = free_port(self.ip)
        self.probe_port = free_port(self.ip)
        self.state_dir = root / "state"
        self.conf_path = root / "spur.conf"
        root.mkdir(parents=True, exist_ok=True)
        hosts_toml = "[" + ", ".join(json.dumps(h) for h in hosts) + "]"
        self.conf_path.write_text(
            f"""
[controller]
hosts = {hosts_toml}
heartbeat_timeout_secs = {heartbeat_timeout}

[agent]
node_name = "{self.name}"
listen_addr = "{self.ip}:{self.grpc_port}"
probe_addr = "{self.ip}:{self.probe_port}"
state_dir = "{self.state_dir}"
heartbeat_interval_secs = {heartbeat}
cpus = {cpus}
memory_mb = 4096
{extra}
"""
        )
        self.proc: Proc | None = None
        LIVE_STATE_DIRS.append((self.state_dir, self.name))

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.grpc_port}"

    @property
    def probe_url(self) -> str:
        return f"http://{self.ip}:{self.probe_port}"

    def start(self, wait_registered: bool = True, timeout: float = 20.0) -> AgentProc:
        self.proc = Proc(
            f"spurd-{self.name}", [str(BIN / "spurd"), "--conf", str(self.conf_path)], self.root / "spurd.log"
        ).start()
        if wait_registered:
            self.wait_registered(timeout)
        return self

    def wait_registered(self, timeout: float = 20.0) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            assert self.proc is not None
            if not self.proc.alive():
                raise AssertionError(f"spurd exited with {self.proc.popen.returncode}:\n{self.log_text()[-3000:]}")
            code, _ = http_get(self.probe_url + "/readyz", timeout=1.0)
            return self.status() if code == 200 else None

        return wait_until(ready, timeout, f"spurd {self.name} to register")

    def status(self) -> dict[str, Any]:
        code, body = http_get(self.probe_url + "/status", timeout=2.0)
        assert code == 200, body
        return json.loads(body)

    def running(self) -> dict[int, dict[str, Any]]:
        return {r["job_id"]: r for r in self.status()["running_jobs"]}

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.proc.stop(timeout) if self.proc else None

    def kill9(self) -> None:
        if self.proc:
            self.proc.kill9()

    def log_text(self) -> str:
        return self.proc.log_text() if self.proc else ""

    def stub(self):
        from spur_hpc import grpcutil
        from spur_hpc.proto import slurm_pb2_grpc

        return slurm_pb2_grpc.SlurmAgentStub(grpcutil.channel(self.address))


# ------------------------------------------------------------------ cleanup


def _pids_with_arg(fragment: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmdline:
            found.append(int(entry))
    return found


def kill_leftovers(state_dir: Path, node: str) -> list[int]:
    """Kill supervisors started on state_dir and every job process they may have left; returns the pids."""
    killed = []
    for pid in _pids_with_arg(f"--session {state_dir}/"):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    if state_dir.is_dir():
        for session in state_dir.iterdir():
            record = session / "supervisor.json"
            try:
                body = json.loads(record.read_text())["body"]
                os.killpg(int(body["job_pid"]), signal.SIGKILL)  # the job leads its own session
                killed.append(int(body["job_pid"]))
            except (OSError, ValueError, KeyError, TypeError):
                pass
    mount = find_cgroup2_mount()
    if mount:
        node_dir = Path(agent_cgroup_dir(mount, node, str(state_dir)))
        if node_dir.is_dir():
            for cg in node_dir.iterdir():
                if cg.is_dir():
                    try:
                        (cg / "cgroup.kill").write_text("1")
                    except OSError:
                        pass
                    for _ in range(100):
                        try:
                            cg.rmdir()
                            break
                        except OSError:
                            time.sleep(0.02)
            try:
                node_dir.rmdir()
            except OSError:
                pass
    # The v1 hierarchies that carry the limits ([cgroup], stepd/enforce.py): job_*/step_* directories, emptied above.
    for v1_mount in find_v1_mounts().values():
        node_dir = Path(agent_cgroup_dir(v1_mount, node, str(state_dir)))
        for cg in [*node_dir.glob("job_*/step_*"), *node_dir.glob("job_*"), node_dir] if node_dir.is_dir() else []:
            for _ in range(50):
                try:
                    cg.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
    return killed


def cleanup() -> None:
    for state_dir, node in LIVE_STATE_DIRS:
        kill_leftovers(state_dir, node)
    LIVE_STATE_DIRS.clear()


def pid_alive(pid: int) -> bool:
    """True while pid runs (a zombie has ended)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return data[data.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X")
