"""Unit tests of the spur.cluster module spur_service_restart under a real supervisord: a restart returns once the
new process answers /livez, well before the program's startsecs, and a daemon that dies at once fails the task at
once with its name, how it ended and the end of its log.

One supervisord per test module in a temporary directory; the "daemon" is Python's http.server serving a
directory that holds a file named livez, so GET /livez answers 200 as a Spur probe does."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import xmlrpc.client
from pathlib import Path

import pytest
from ansible_collections.spur.cluster.plugins.module_utils.spur_service import supervisord_server
from ansible_collections.spur.cluster.plugins.modules import spur_service_restart
from collection_helpers import VENV_BIN, run_module

# Longer than any restart here should take: a module that waited it out would fail the timing assertion.
STARTSECS = 5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def supervisord(tmp_path_factory):
    root = tmp_path_factory.mktemp("supervisord")
    (root / "www").mkdir()
    (root / "www" / "livez").write_text("ok\n")
    port = _free_port()
    conf = root / "supervisord.conf"
    conf.write_text(
        f"""[unix_http_server]
file={root}/supervisor.sock
[supervisord]
logfile={root}/supervisord.log
pidfile={root}/supervisord.pid
childlogdir={root}
nodaemon=false
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://{root}/supervisor.sock ; a comment, as the role writes them
[program:good]
command={sys.executable} -m http.server {port} --bind 127.0.0.1 --directory {root}/www
startsecs={STARTSECS}
redirect_stderr=true
stdout_logfile={root}/good.log
[program:dies]
command=/bin/sh -c 'echo "spurd: unknown key [agent] bogus in spur.conf"; exit 2'
autostart=false
startsecs={STARTSECS}
startretries=0
redirect_stderr=true
stdout_logfile={root}/dies.log
"""
    )
    subprocess.run([str(VENV_BIN / "supervisord"), "-c", str(conf)], check=True, timeout=30)
    server = supervisord_server(str(conf))
    deadline = time.monotonic() + 30
    while True:
        try:
            if server.supervisor.getProcessInfo("good")["statename"] in ("STARTING", "RUNNING"):
                break
        except (OSError, xmlrpc.client.Fault):
            pass
        assert time.monotonic() < deadline, "supervisord did not start the test program"
        time.sleep(0.05)
    yield {"conf": str(conf), "probe": f"127.0.0.1:{port}", "server": server}
    server.supervisor.shutdown()


def test_restart_returns_when_the_probe_answers_not_after_startsecs(supervisord):
    before = supervisord["server"].supervisor.getProcessInfo("good")["pid"]
    began = time.monotonic()
    result = run_module(spur_service_restart, {"name": "good", "manager": "supervisord",
                                               "supervisord_conf": supervisord["conf"],
                                               "probe": supervisord["probe"]})
    took = time.monotonic() - began
    assert result.get("failed") is not True, result
    assert result["changed"] is True and result["pid"] not in (0, before)
    assert took < STARTSECS, f"the restart took {took:.2f} s: it waited for startsecs"
    info = supervisord["server"].supervisor.getProcessInfo("good")
    assert info["pid"] == result["pid"] and info["statename"] in ("STARTING", "RUNNING")


def test_a_daemon_that_dies_at_once_fails_the_task_with_its_name_and_reason(supervisord):
    began = time.monotonic()
    result = run_module(spur_service_restart, {"name": "dies", "manager": "supervisord",
                                               "supervisord_conf": supervisord["conf"],
                                               "probe": f"127.0.0.1:{_free_port()}", "timeout": 30})
    assert result["failed"] is True
    assert time.monotonic() - began < STARTSECS
    msg = result["msg"]
    assert msg.startswith("dies died at once after its restart"), msg
    assert "Exited too quickly" in msg and "unknown key [agent] bogus in spur.conf" in msg, msg


def test_an_unknown_program_and_a_missing_configuration_are_one_line_each(supervisord, tmp_path):
    unknown = run_module(spur_service_restart, {"name": "nosuch", "manager": "supervisord",
                                                "supervisord_conf": supervisord["conf"]})
    assert unknown["failed"] is True and "could not restart nosuch: BAD_NAME" in unknown["msg"]
    missing = run_module(spur_service_restart, {"name": "good", "manager": "supervisord",
                                                "supervisord_conf": str(tmp_path / "none.conf")})
    assert missing["failed"] is True and "cannot read the supervisord configuration" in missing["msg"]


def test_check_mode_restarts_nothing(supervisord):
    before = supervisord["server"].supervisor.getProcessInfo("good")["pid"]
    result = run_module(spur_service_restart, {"name": "good", "manager": "supervisord",
                                               "supervisord_conf": supervisord["conf"]}, check_mode=True)
    assert result["changed"] is True
    assert supervisord["server"].supervisor.getProcessInfo("good")["pid"] == before
    assert Path(supervisord["conf"]).exists()
