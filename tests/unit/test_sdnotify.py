"""systemd readiness (daemons/spur_hpc/sdnotify.py): real spurctld and spurd processes tell a real unix datagram
socket, given as $NOTIFY_SOCKET as systemd gives it to a Type=notify unit, READY=1 once they serve, WATCHDOG=1
from their main loop when $WATCHDOG_USEC is set, and STOPPING=1 when asked to stop."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import AgentProc
from harness import ControllerCluster, http_get
from spur_hpc import sdnotify

DEADLINE = 60.0  # generous: the machine is shared; only what arrives is asserted, never when


class NotifySocket:
    """What systemd listens on: a bound datagram socket, by path or by abstract name ('@...')."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(sdnotify.socket_address(name))
        self.sock.settimeout(DEADLINE)

    def next_fields(self) -> dict[str, str]:
        message = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in message.splitlines())

    def wait_for(self, name: str) -> list[dict[str, str]]:
        """Every message up to and including the first one with this field."""
        seen = []
        while not seen or name not in seen[-1]:
            seen.append(self.next_fields())
        return seen


@pytest.fixture
def notify_path() -> Iterator[NotifySocket]:
    # Not under tmp_path: a unix socket path must stay under 108 bytes.
    with tempfile.TemporaryDirectory(prefix="spur-notify-", dir="/tmp") as tmp:
        notify = NotifySocket(os.path.join(tmp, "notify"))
        yield notify
        notify.sock.close()


@pytest.fixture
def notify_abstract() -> Iterator[NotifySocket]:
    notify = NotifySocket(f"@spur-test-notify-{os.getpid()}-{os.urandom(4).hex()}")
    yield notify
    notify.sock.close()


def answers(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        return True


def test_spurctld_says_ready_only_once_grpc_probes_and_raft_serve_then_stopping(make_cluster, notify_path):
    cluster: ControllerCluster = make_cluster(1, start=False)
    member = cluster.members[0]
    cluster.write_conf(member)
    os.environ["NOTIFY_SOCKET"] = notify_path.name
    try:
        cluster.spawn(member, write_conf=False)
    finally:
        del os.environ["NOTIFY_SOCKET"]
    assert notify_path.wait_for("READY")[-1]["READY"] == "1"
    # At READY=1 everything answers already: nothing here waits.
    assert answers(member.grpc_addr)
    assert http_get(member.probe_url + "/livez")[0] == 200
    assert member.status()["role"] != "starting"  # the Raft node runs
    member.proc.signal(signal.SIGTERM)
    assert notify_path.wait_for("STOPPING")[-1]["STOPPING"] == "1"
    assert member.proc.wait_exit(DEADLINE) == 0


def test_spurd_says_ready_once_its_grpc_serves_and_pings_the_watchdog_from_its_main_loop(
    make_cluster, tmp_path, notify_abstract
):
    cluster = make_cluster(1)
    agent = AgentProc(tmp_path / "agent", cluster.hosts)
    os.environ.update(NOTIFY_SOCKET=notify_abstract.name, WATCHDOG_USEC="1000000")
    try:
        agent.start(wait_registered=False)
    finally:
        del os.environ["NOTIFY_SOCKET"], os.environ["WATCHDOG_USEC"]
    assert notify_abstract.wait_for("READY")[-1]["READY"] == "1"
    assert answers(agent.address)
    assert http_get(agent.probe_url + "/livez")[0] == 200
    # Pinged again and again while it runs (twice per WatchdogSec).
    for _ in range(3):
        assert notify_abstract.wait_for("WATCHDOG")[-1]["WATCHDOG"] == "1"
    agent.wait_registered()
    agent.proc.signal(signal.SIGTERM)
    assert "STOPPING" in notify_abstract.wait_for("STOPPING")[-1]
    assert agent.proc.wait_exit(DEADLINE) == 0


def test_a_daemon_without_notify_socket_notifies_nothing_and_runs():
    notifier = sdnotify.Notifier.from_environment({})
    assert notifier.notify("READY=1") is False
    notifier.watchdog()  # no socket, no watchdog: nothing to do, no error


def test_the_variables_are_taken_out_of_the_environment_so_job_supervisors_and_jobs_do_not_inherit_them():
    environ = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid()), "PATH": "/bin"}
    notifier = sdnotify.Notifier.from_environment(environ)
    assert environ == {"PATH": "/bin"}
    assert notifier.address == "@x"
    assert notifier.watchdog_interval == 15.0


def test_a_watchdog_meant_for_another_process_is_not_pinged():
    environ = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert sdnotify.Notifier.from_environment(environ).watchdog_interval == 0


def test_a_notify_socket_that_is_neither_a_path_nor_abstract_is_ignored_with_one_warning(caplog):
    notifier = sdnotify.Notifier.from_environment({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert notifier.address is None
    assert "NOTIFY_SOCKET=vsock:2:1234: not a path nor an abstract name (@...); not notifying systemd" in caplog.text


def test_an_unreachable_socket_is_said_once_and_the_daemon_goes_on(caplog, tmp_path: Path):
    notifier = sdnotify.Notifier(str(tmp_path / "gone"))
    assert notifier.notify("READY=1") is False
    assert notifier.notify("WATCHDOG=1") is False
    assert caplog.text.count("cannot notify systemd at NOTIFY_SOCKET=") == 1

