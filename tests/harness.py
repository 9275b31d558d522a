"""Real processes for tests: controllers on 127.0.1.N, each with its own directories and log file.

Fixtures spawn the real console scripts, poll readiness with a deadline, stop with TERM then KILL, and
keep one log file per process (printed when a test fails, see conftest.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
ALL_PROCS: list[Proc] = []


_IP_BLOCK = {"next": 1}


STARTUP_LEADER_SECS = 40.0


def next_ip_base(count: int) -> int:
    """Hand every cluster of the session its own 127.0.1.N addresses (agents use 201-250)."""
    base = _IP_BLOCK["next"]
    _IP_BLOCK["next"] = base + count if base + count < 200 else 1
    return base


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the thing may not be up yet
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout:.1f} s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else "")
    )


# Test daemons get ports below the kernel's ephemeral range (32768-60999 here): a port the kernel hands
# out for bind(0) can be handed out again, to this session or to any other process, in the second
# before the daemon binds it (CI saw a controller's raft port taken that way).
TEST_PORTS = range(10000, 32768)
_HANDED_OUT: set[tuple[str, int]] = set()
_PORT_RNG = random.Random(os.getpid())  # two test lanes at once start from different ports


def free_port(ip: str) -> int:
    """A port on `ip` that nothing listens on and that this session has not handed out before."""
    for _ in range(1000):
        port = _PORT_RNG.choice(TEST_PORTS)
        if (ip, port) in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((ip, port))
            except OSError:
                continue
        _HANDED_OUT.add((ip, port))
        return port
    raise AssertionError(f"no free test port on {ip} in {TEST_PORTS.start}-{TEST_PORTS.stop - 1} after 1000 tries")


def raft_settings(directory: Path, addr: str, addrs: list[str], **settings: Any):
    """The RaftSettings of an in-process SpurRaft member on addr among addrs, its files in directory (made if new)."""
    from spur_hpc.controller.raft import RaftSettings

    directory.mkdir(exist_ok=True)
    settings = {"password": "secret", "min_free_disk_mb": 0, **settings}
    return RaftSettings(
        self_addr=addr,
        other_addrs=tuple(a for a in addrs if a != addr),
        journal_file=str(directory / "raft.journal"),
        dump_file=str(directory / "raft.dump"),
        **settings,
    )


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class Proc:
    """One real process with its own log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.popen: subprocess.Popen | None = None
        ALL_PROCS.append(self)

    def start(self) -> Proc:
        env = dict(os.environ)
        env.update(self.env or {})
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {' '.join(self.argv)} at {time.time():.3f}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return self

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else 0

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.popen.pid, sig)

    def kill9(self) -> None:
        if self.alive():
            self.popen.kill()
            self.popen.wait(5)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.terminate()  # a no-op repeat when stop_all() sent it already
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode

    def wait_exit(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@dataclass
class Member:
    index: int
    ip: str
    grpc_port: int
    raft_port: int
    probe_port: int
    root: Path
    proc: Proc | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def grpc_addr(self) -> str:
        return f"{self.ip}:{self.grpc_port}"

    @property
    def raft_addr(self) -> str:
        return f"{self.ip}:{self.raft_port}"

    @property
    def probe_url(self) -> str:
        return f"http://{self.ip}:{self.probe_port}"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def conf_path(self) -> Path:
        return self.root / "spur.conf"

    def status(self) -> dict[str, Any]:
        code, body = http_get(self.probe_url + "/status")
        assert code == 200, body
        return json.loads(body)

    def probe(self, path: str) -> int:
        try:
            return http_get(self.probe_url + path, timeout=1.0)[0]
        except OSError:
            return 0


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


class ControllerCluster:
    """n controllers on 127.0.1.<base+i>, ports picked free at construction."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        ip_base: int = 1,
        name: str = "test",
        heartbeat_timeout: int = 60,
        extra_controller: str = "",
        extra_sections: str = "",
    ) -> None:
        self.root = root
        self.name = name
        self.heartbeat_timeout = heartbeat_timeout
        self.extra_controller = extra_controller
        self.extra_sections = extra_sections  # whole TOML sections appended to every controller's spur.conf
        self.secret_file = root / "raft.secret"
        root.mkdir(parents=True, exist_ok=True)
        self.secret_file.write_text("test-secret-" + os.urandom(8).hex() + "\n")
        self.secret_file.chmod(0o600)
        self.members: list[Member] = []
        for i in range(n):
            ip = f"127.0.1.{ip_base + i}"
            self.members.append(Member(i, ip, free_port(ip), free_port(ip), free_port(ip), root / f"ctl{i}"))
        self.peers = [m.raft_addr for m in self.members]
        self.hosts = [m.grpc_addr for m in self.members]

    # ---------------------------------------------------------------- configuration

    def conf_text(self, m: Member, peers: list[str] | None = None, hosts: list[str] | None = None) -> str:
        return f"""
[cluster]
name = "{self.name}"

[controller]
hosts = {toml_list(hosts if hosts is not None else self.hosts)}
listen_addr = "{m.grpc_addr}"
raft_addr = "{m.raft_addr}"
peers = {toml_list(peers if peers is not None else self.peers)}
probe_addr = "{m.ip}:{m.probe_port}"
state_dir = "{m.state_dir}"
raft_secret_file = "{self.secret_file}"
heartbeat_timeout_secs = {self.heartbeat_timeout}
{self.extra_controller}
{self.extra_sections}
"""

    def write_conf(self, m: Member, peers: list[str] | None = None, hosts: list[str] | None = None) -> None:
        m.root.mkdir(parents=True, exist_ok=True)
        m.conf_path.write_text(self.conf_text(m, peers, hosts))

    def client_conf(self, path: Path | None = None, extra: str = "") -> Path:
        """A spur.conf for agents and clients: [controller] hosts only (plus extra sections)."""
        path = path or self.root / "client.conf"
        path.write_text(
            f'[cluster]\nname = "{self.name}"\n\n[controller]\nhosts = {toml_list(self.hosts)}\n'
            f"heartbeat_timeout_secs = {self.heartbeat_timeout}\n{extra}"
        )
        return path

    # ---------------------------------------------------------------- processes

    def spawn(self, m: Member, write_conf: bool = True) -> Proc:
        if write_conf and not m.conf_path.exists():
            self.write_conf(m)
        m.proc = Proc(
            f"spurctld-{m.index}", [str(BIN / "spurctld"), "--conf", str(m.conf_path)], m.root / "spurctld.log"
        ).start()
        return m.proc

    def start(self, indices: list[int] | None = None, wait: bool = True) -> ControllerCluster:
        for i in indices if indices is not None else range(len(self.members)):
            self.spawn(self.members[i])
        if wait:
            try:
                # A first election on 2 cores shared with the other test lane can take a while.
                self.wait_leader(timeout=STARTUP_LEADER_SECS)
            except AssertionError as exc:
                alive = ", ".join(f"{m.proc.name} {'running' if m.proc.alive() else 'exited'}"
                                  for m in self.members if m.proc is not None)
                raise AssertionError(f"{exc} ({alive})\n{self.logs()}") from None
        return self

    def stop(self) -> None:
        stop_all([m.proc for m in self.members if m.proc is not None])

    def kill9(self, i: int) -> None:
        self.members[i].proc.kill9()

    def restart(self, i: int, wait: bool = True) -> None:
        m = self.members[i]
        if m.proc is not None:
            m.proc.stop()
        self.spawn(m)
        if wait:
            wait_until(lambda: m.probe("/livez") == 200, 15, f"controller {i} to come back")

    def running(self) -> list[Member]:
        return [m for m in self.members if m.proc is not None and m.proc.alive()]

    # ---------------------------------------------------------------- observation

    def leaders(self) -> list[Member]:
        return [m for m in self.running() if m.probe("/metrics/nodes") == 200]

    def wait_leader(self, timeout: float = 20.0, exclude: Member | None = None) -> Member:
        def one_leader():
            found = [m for m in self.leaders() if m is not exclude]
            if len(found) == 1 and found[0].status().get("cluster_id"):
                return found[0]
            return None

        return wait_until(one_leader, timeout, "exactly one leader with a cluster id")

    def stub(self, m: Member):
        import grpc

        from spur_hpc.proto import slurm_pb2_grpc

        return slurm_pb2_grpc.SlurmControllerStub(grpc.insecure_channel(m.grpc_addr))

    def logs(self) -> str:
        return "\n".join(
            f"----- {m.proc.name} ({m.proc.log_path})\n{m.proc.log_text()[-6000:]}"
            for m in self.members
            if m.proc is not None
        )


# The test hook that kills a spurctld's Raft core: a wrapper run instead of the spurctld entry point, whose tick
# thread ends once the file named by argv[1] exists, with an exception the tick loop does not catch (as a bug in
# pysyncobj or in an apply listener could). It lives here, in the tests, and patches the class before main():
# nothing in an installed spurctld (no variable, no RPC) can reach it.
RAFT_DIES = """
import os, sys
from spur_hpc.controller import raft
trigger = sys.argv.pop(1)
class TickThreadDies(BaseException):
    pass
tick = raft.SpurRaft.doTick
def doTick(self, period):
    if os.path.exists(trigger):
        raise TickThreadDies("test: the Raft tick thread dies")
    return tick(self, period)
raft.SpurRaft.doTick = doTick
from spur_hpc.controller.daemon import main
sys.exit(main(sys.argv[1:]))
"""


def spawn_hooked(m: Member, hook: str, script: str, *args: object) -> Proc:
    """Start member m's spurctld under a test hook: `script` runs instead of the spurctld entry point, with args
    before --conf (each hook's wrapper reads its own)."""
    m.proc = Proc(
        f"spurctld-{m.index}-{hook}",
        [sys.executable, "-c", script, *map(str, args), "--conf", str(m.conf_path)],
        m.root / "spurctld.log",
    ).start()
    return m.proc


def spawn_raft_dies(m: Member, trigger: Path) -> Proc:
    """Start member m's spurctld under RAFT_DIES: its Raft core dies once `trigger` exists."""
    return spawn_hooked(m, "raft-dies", RAFT_DIES, trigger)


# The test hook for the crash between a snapshot's rename and the journal's compaction: a wrapper run instead of the
# spurctld entry point that kills its own process (SIGKILL, as kill -9 does) when pysyncobj, having found the
# forked writer's snapshot renamed into place, is about to drop the journal's entries before it, and the journal
# holds entries after the snapshot's last one (acknowledged writes that only the journal has). Like RAFT_DIES it
# patches the class in the tests only.
KILLED_BEFORE_COMPACTION = """
import os, signal, sys
from spur_hpc.controller import raft
compact = raft.SpurRaft._SyncObj__deleteEntriesTo
def delete_entries_to(self, to_idx):
    if self._SyncObj__raftLog[-1][1] > to_idx + 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return compact(self, to_idx)
raft.SpurRaft._SyncObj__deleteEntriesTo = delete_entries_to
from spur_hpc.controller.daemon import main
sys.exit(main(sys.argv[1:]))
"""


def spawn_killed_before_compaction(m: Member) -> Proc:
    """Start member m's spurctld under KILLED_BEFORE_COMPACTION: it kills itself at its first snapshot that
    entries follow, after the snapshot's rename and before the journal's compaction."""
    return spawn_hooked(m, "killed-before-compaction", KILLED_BEFORE_COMPACTION)


# A follower whose tick thread is held up just before pysyncobj judges its election deadline: the journal's
# once-a-second sync (DurableJournal.onOneSecondTimer, called at the start of a tick, right before that judgement)
# takes STALL_SECS every other second, as an fsync can on a busy disk, longer than the election timeout. The
# leader's appends wait unread in the socket meanwhile. Patches the class in the tests only.
STALLED_SYNC = """
import sys, time
from spur_hpc.controller import raft
STALL_SECS = float(sys.argv.pop(1))
sync = raft.DurableJournal.onOneSecondTimer
last = [0.0]
def stalled(self):
    if time.monotonic() - last[0] > 2.0:
        time.sleep(STALL_SECS)
        last[0] = time.monotonic()
    return sync(self)
raft.DurableJournal.onOneSecondTimer = stalled
from spur_hpc.controller.daemon import main
sys.exit(main(sys.argv[1:]))
"""


def spawn_stalled_sync(m: Member, stall_secs: float) -> Proc:
    """Start member m's spurctld under STALLED_SYNC: every other second its tick thread stalls for stall_secs
    right before pysyncobj decides whether the leader has gone quiet."""
    return spawn_hooked(m, "stalled-sync", STALLED_SYNC, stall_secs)


def cleanup_all() -> None:
    """Stop every process a test started: agents first, then controllers (as teardown.yml does).

    A spurd stopped after its controllers spends its whole deregister deadline retrying them.
    """
    stop_all([p for p in ALL_PROCS if not p.name.startswith("spurctld")], timeout=5)
    stop_all([p for p in ALL_PROCS if p.name.startswith("spurctld")], timeout=5)
    ALL_PROCS.clear()


def stop_all(procs: list[Proc], timeout: float = 10.0) -> None:
    """SIGTERM every process first, then wait for each: their shutdowns overlap instead of adding up."""
    for proc in procs:
        if proc.alive():
            proc.popen.terminate()
    for proc in procs:
        try:
            proc.stop(timeout)
        except Exception:
            pass


def kill_process_tree_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
