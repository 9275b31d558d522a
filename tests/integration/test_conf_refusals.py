"""The real daemons and commands refuse a bad spur.conf at start: a non-zero exit and one line on stderr that
names the key and the fix, never a traceback. Nothing here listens on a port: every start is refused before."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness import BIN


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # A start that is not refused would run (or wait) for ever: the timeout turns that into a failure.
    return subprocess.run(
        argv, capture_output=True, text=True, errors="replace", timeout=60, env={**os.environ, **(env or {})}
    )


def refused_with_one_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    result = run(argv, env)
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def secret(tmp_path) -> Path:
    path = tmp_path / "raft.secret"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    return path


def controller_conf(tmp_path: Path, secret: Path, controller: str = "", auth: str = "") -> Path:
    path = tmp_path / "spurctld.conf"
    path.write_text(
        f'[cluster]\nname = "t"\n[controller]\nhosts = ["127.0.1.1:6817"]\nraft_addr = "127.0.1.1:6821"\n'
        f'peers = ["127.0.1.1:6821"]\nstate_dir = "{tmp_path / "ctld"}"\nraft_secret_file = "{secret}"\n'
        f"{controller}\n[auth]\n{auth}\n"
    )
    return path


def agent_conf(tmp_path: Path, agent: str = "", auth: str = "") -> Path:
    path = tmp_path / "spurd.conf"
    path.write_text(
        f'[controller]\nhosts = ["127.0.1.1:6817"]\n[agent]\nnode_name = "n1"\n'
        f'state_dir = "{tmp_path / "agent"}"\n{agent}\n[auth]\n{auth}\n'
    )
    return path


def test_a_non_utf8_spur_conf_is_one_line_for_every_daemon_and_command(tmp_path, secret):
    path = controller_conf(tmp_path, secret, controller='listen_addr = "127.0.1.1:6817"')
    path.write_bytes(path.read_bytes() + b"# caf\xe9\n")
    for program in ("spurctld", "spurd"):
        line = refused_with_one_line([str(BIN / program), "--conf", str(path)])
        assert line.startswith(f"{program}: error: {path}: not UTF-8 text (byte 0xe9 at line 12, column 6)"), line
        assert state_dirs_untouched(tmp_path)
    line = refused_with_one_line([str(BIN / "squeue")], {"SPUR_CONF": str(path), "SPUR_CONTROLLER_ADDR": ""})
    assert line.startswith(f"squeue: error: {path}: not UTF-8 text (byte 0xe9"), line


def state_dirs_untouched(root: Path) -> bool:
    return not (root / "ctld").exists() and not (root / "agent").exists()


def test_auth_none_on_a_network_address_is_refused_without_the_opt_in(tmp_path, secret):
    path = controller_conf(tmp_path, secret, controller='listen_addr = "0.0.0.0:6817"')
    line = refused_with_one_line([str(BIN / "spurctld"), "--conf", str(path)])
    assert line.startswith("spurctld: error: [controller] listen_addr: 0.0.0.0:6817 can be reached from other hosts")
    assert '[auth] type = "munge"' in line and "[auth] allow_unauthenticated_network = true" in line
    path = agent_conf(tmp_path, agent='listen_addr = "0.0.0.0:6818"')
    line = refused_with_one_line([str(BIN / "spurd"), "--conf", str(path)])
    assert line.startswith("spurd: error: [agent] listen_addr: 0.0.0.0:6818 can be reached from other hosts")
    assert state_dirs_untouched(tmp_path)


def test_the_opt_in_is_logged_as_a_warning_at_start(tmp_path):
    # The state directory cannot be created (its parent is a file), so spurd stops before it listens.
    (tmp_path / "file").write_text("")
    path = agent_conf(tmp_path, agent='listen_addr = "0.0.0.0:6818"', auth="allow_unauthenticated_network = true")
    path.write_text(path.read_text().replace(str(tmp_path / "agent"), str(tmp_path / "file" / "agent")))
    result = run([str(BIN / "spurd"), "--conf", str(path)])
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    warnings = [line for line in result.stderr.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, result.stderr
    assert "[auth] allow_unauthenticated_network = true: listening on 0.0.0.0:6818 without authentication" in (
        warnings[0]
    )


def test_a_missing_munge_socket_is_said_at_start(tmp_path, secret):
    auth = f'type = "munge"\nmunge_socket = "{tmp_path / "munge.socket.2"}"'
    for program, path in (
        ("spurctld", controller_conf(tmp_path, secret, controller='listen_addr = "127.0.1.1:6817"', auth=auth)),
        ("spurd", agent_conf(tmp_path, agent='listen_addr = "127.0.1.11:6818"', auth=auth)),
    ):
        line = refused_with_one_line([str(BIN / program), "--conf", str(path)])
        assert line == (
            f"{program}: error: [auth] munge_socket: {tmp_path / 'munge.socket.2'} does not exist (munged is not "
            "running, or it uses another socket); start munged (systemctl start munge) or point munge_socket at "
            "its socket"
        )
    assert state_dirs_untouched(tmp_path)


@pytest.mark.parametrize(
    "setting, needle",
    [
        ("write_timeout_secs = nan", "[controller] write_timeout_secs: nan is not a number"),
        ("write_timeout_secs = inf", "[controller] write_timeout_secs: inf is not a finite number"),
        ("bootstrap_wait_secs = -1", "[controller] bootstrap_wait_secs: -1 is out of range"),
        ("min_free_disk_mb = -1", "[controller] min_free_disk_mb: -1 is out of range"),
        ('state_dir = "ctld"', "[controller] state_dir: 'ctld' is a relative path"),
        ('raft_addr = "[::1]:x"', "[controller] raft_addr: bad address '[::1]:x'"),
        # a single controller whose hosts names another controller used to wait for ever at start
        ('hosts = ["127.0.1.2:6817"]', "[controller] hosts: 127.0.1.2:6817 is not this controller (127.0.1.1:6817)"),
    ],
)
def test_spurctld_refuses_bad_values_with_one_line(tmp_path, secret, setting, needle):
    key = setting.split(" = ")[0]
    path = controller_conf(tmp_path, secret, controller='listen_addr = "127.0.1.1:6817"')
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith(f"{key} = "))
    path.write_text(text.replace("[controller]\n", f"[controller]\n{setting}\n"))
    line = refused_with_one_line([str(BIN / "spurctld"), "--conf", str(path)])
    assert line.startswith(f"spurctld: error: {needle}"), line


@pytest.mark.parametrize(
    "setting, needle",
    [
        ('node_name = ".."', "[agent] node_name: bad value '..'"),
        ("kill_wait_secs = -1", "[agent] kill_wait_secs: -1 is out of range"),
        ("launch_timeout_secs = nan", "[agent] launch_timeout_secs: nan is not a number"),
        ("heartbeat_interval_secs = -5", "[agent] heartbeat_interval_secs: -5 is out of range"),
        ('state_dir = "agent"', "[agent] state_dir: 'agent' is a relative path"),
        ('stepd_path = "/nonexistent/spurstepd"', "[agent] stepd_path: /nonexistent/spurstepd does not exist"),
    ],
)
def test_spurd_refuses_bad_values_with_one_line(tmp_path, setting, needle):
    key = setting.split(" = ")[0]
    path = agent_conf(tmp_path, agent='listen_addr = "127.0.1.11:6818"')
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith(f"{key} = "))
    path.write_text(text.replace("[agent]\n", f"[agent]\n{setting}\n"))
    line = refused_with_one_line([str(BIN / "spurd"), "--conf", str(path)])
    assert line.startswith(f"spurd: error: {needle}"), line


def test_spurctld_refuses_a_private_data_category_it_does_not_know(tmp_path, secret):
    """[auth] private_data: a controller must not show what a newer release's category would hide; spurd and the
    commands ignore the key (tests/unit/test_authz.py loads the same file as an agent and a client)."""
    auth = 'private_data = ["jobs", "accounts"]'
    path = controller_conf(tmp_path, secret, controller='listen_addr = "127.0.1.1:6817"', auth=auth)
    line = refused_with_one_line([str(BIN / "spurctld"), "--conf", str(path)])
    assert line.startswith("spurctld: error: [auth] private_data: unknown category 'accounts'; use 'jobs' or 'usage'")
