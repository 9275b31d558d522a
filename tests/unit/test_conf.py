"""spur.conf parsing and validation: every bad input is one line naming the key and the fix."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest

from spur_hpc import conf
from spur_hpc.conf import SCHEMA, ConfigError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "raft.secret"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    return path


def controller_toml(secret, auth: str = "", **over) -> str:
    values = {
        "hosts": '["127.0.1.1:6817", "127.0.1.2:6817", "127.0.1.3:6817"]',
        "listen_addr": '"127.0.1.1:6817"',
        "raft_addr": '"127.0.1.1:6821"',
        "peers": '["127.0.1.1:6821", "127.0.1.2:6821", "127.0.1.3:6821"]',
        "state_dir": '"/tmp/x"',
        "raft_secret_file": f'"{secret}"',
    }
    values.update(over)
    body = "\n".join(f"{k} = {v}" for k, v in values.items() if v is not None)
    return f'[cluster]\nname = "c1"\n\n[controller]\n{body}\n' + (f"[auth]\n{auth}\n" if auth else "")


def agent_toml(auth: str = "", **over) -> str:
    values = {"node_name": '"n1"', "listen_addr": '"127.0.1.11:6818"', "state_dir": '"/tmp/agent"'}
    values.update(over)
    body = "\n".join(f"{k} = {v}" for k, v in values.items() if v is not None)
    return f'[controller]\nhosts = ["127.0.1.1"]\n[agent]\n{body}\n' + (f"[auth]\n{auth}\n" if auth else "")


def load_text(tmp_path, text, role="controller"):
    path = tmp_path / "spur.conf"
    path.write_text(text)
    return conf.load(str(path), role=role)


def one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_valid_controller_config_loads_with_defaults(tmp_path, secret):
    c = load_text(tmp_path, controller_toml(secret))
    assert c.cluster.name == "c1"
    assert c.controller.peers == ("127.0.1.1:6821", "127.0.1.2:6821", "127.0.1.3:6821")
    assert c.controller.heartbeat_timeout_secs == 60
    assert c.controller.probe_addr == "127.0.0.1:6822"
    assert c.agent.partition == "default"


def test_two_peers_load_since_a_membership_change_passes_through_them(tmp_path, secret):
    # remove_controllers.yml writes them on the way from 3 to 2 to 3; forming a new cluster of two is refused at start
    c = load_text(tmp_path, controller_toml(secret, peers='["127.0.1.1:6821", "127.0.1.2:6821"]'))
    assert c.controller.peers == ("127.0.1.1:6821", "127.0.1.2:6821")


def test_every_key_of_the_table_is_an_attribute_with_its_declared_default():
    c = conf.parse("")
    for section, keys in SCHEMA.items():
        for name, key in keys.items():
            value = getattr(getattr(c, section), name)
            assert value == (tuple(key.default) if key.type is list else key.default), f"[{section}] {name}"
    assert c.controller.write_timeout_secs == 5.0 and isinstance(c.agent.kill_wait_secs, float)
    assert conf.parse("[agent]\nkill_wait_secs = 3\n").agent.kill_wait_secs == 3.0


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"raft_addr": '"127.0.1.9:6821"'}, "[controller] peers: does not contain this controller's raft_addr"),
        ({"peers": '["127.0.1.1:6821", "127.0.1.1:6821", "127.0.1.3:6821"]'}, "is listed twice"),
        ({"peers": "[]"}, "[controller] peers: empty"),
        ({"raft_addr": '"0.0.0.0:6821"'}, "is a wildcard"),
        ({"raft_addr": '"[::]:6821"'}, "is a wildcard"),
        ({"raft_addr": None}, "[controller] raft_addr: missing"),
        ({"raft_addr": '"127.0.1.1:0"'}, "port '0' is not a number from 1 to 65535"),
        ({"raft_addr": '"bad host:1"'}, "is neither an IP address nor a host name"),
        ({"raft_addr": '"[ctl1]:6821"'}, "brackets are for IPv6 addresses only"),
        ({"hosts": '["a:1", "a:1"]'}, "[controller] hosts: a:1 is listed twice"),
        ({"heartbeat_timeout_secs": '"60"'}, "heartbeat_timeout_secs: expected an integer, got str"),
        ({"heartbeat_timeout_secs": "true"}, "got boolean"),
        ({"heartbeat_timeout_secs": "-1"}, "[controller] heartbeat_timeout_secs: -1 is out of range; use an integer"),
        ({"peers": "[1, 2]"}, "expected a list of strings"),
        ({"bogus_key": "1"}, "[controller] bogus_key: unknown key; remove it or use one of"),
        ({"connection_retry_ms": "900"}, "must be below election_timeout_min_ms"),
        ({"election_timeout_min_ms": "900"}, "must be below election_timeout_max_ms"),
        ({"append_entries_period_ms": "200"}, "under a third of election_timeout_min_ms"),
        ({"leader_fallback_ms": "40"}, "leader_fallback_ms: 40 must be above append_entries_period_ms (50)"),
        # issue 16: values that were accepted and must not be
        ({"write_timeout_secs": "inf"}, "[controller] write_timeout_secs: inf is not a finite number; use a number"),
        ({"write_timeout_secs": "nan"}, "[controller] write_timeout_secs: nan is not a number"),
        ({"write_timeout_secs": "-inf"}, "[controller] write_timeout_secs: -inf is not a finite number"),
        ({"write_timeout_secs": "0"}, "[controller] write_timeout_secs: 0 is out of range; use a number above 0"),
        ({"bootstrap_probe_timeout_secs": "-1.0"}, "[controller] bootstrap_probe_timeout_secs: -1.0 is out of range"),
        ({"bootstrap_probe_timeout_secs": "nan"}, "[controller] bootstrap_probe_timeout_secs: nan is not a number"),
        ({"bootstrap_wait_secs": "-5"}, "[controller] bootstrap_wait_secs: -5 is out of range; use a number from 0"),
        ({"bootstrap_wait_secs": "nan"}, "[controller] bootstrap_wait_secs: nan is not a number"),
        ({"min_free_disk_mb": "-1"}, "[controller] min_free_disk_mb: -1 is out of range; use an integer from 0"),
        ({"grpc_workers": str(10**30)}, "[controller] grpc_workers: 1000000000000000000000000000000 is out of range"),
        ({"state_dir": '"var/lib/spur"'}, "[controller] state_dir: 'var/lib/spur' is a relative path; use an absolute"),
        ({"state_dir": '""'}, "[controller] state_dir: empty; set an absolute path"),
        ({"raft_secret_file": '"raft.secret"'}, "[controller] raft_secret_file: 'raft.secret' is a relative path"),
        ({"state_dir": '"/tmp/a\\u0000b"'}, "[controller] state_dir: '/tmp/a\\x00b' contains a NUL character"),
        # a single controller whose hosts omits itself would wait for ever at start
        (
            {"peers": '["127.0.1.1:6821"]', "hosts": '["127.0.1.2:6817"]'},
            "[controller] hosts: 127.0.1.2:6817 is not this controller (127.0.1.1:6817), and peers lists only this",
        ),
        (
            {"peers": '["127.0.1.1:6821"]', "hosts": '["127.0.1.1:6817", "127.0.1.2:6817"]'},
            "[controller] hosts: lists 2 controllers but peers lists only this one",
        ),
    ],
)
def test_controller_errors_name_the_key_and_fix(tmp_path, secret, over, needle):
    message = one_line_error(load_text, tmp_path, controller_toml(secret, **over))
    assert needle in message


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"heartbeat_interval_secs": "-1"}, "[agent] heartbeat_interval_secs: -1 is out of range; use a number above"),
        ({"heartbeat_interval_secs": "nan"}, "[agent] heartbeat_interval_secs: nan is not a number"),
        ({"launch_timeout_secs": "-2.5"}, "[agent] launch_timeout_secs: -2.5 is out of range"),
        ({"launch_timeout_secs": "nan"}, "[agent] launch_timeout_secs: nan is not a number"),
        ({"launch_timeout_secs": "inf"}, "[agent] launch_timeout_secs: inf is not a finite number"),
        ({"kill_wait_secs": "-1"}, "[agent] kill_wait_secs: -1 is out of range; use a number from 0"),
        ({"kill_wait_secs": "nan"}, "[agent] kill_wait_secs: nan is not a number"),
        ({"cpus": "-1"}, "[agent] cpus: -1 is out of range"),
        ({"state_dir": '"state"'}, "[agent] state_dir: 'state' is a relative path; use an absolute path"),
        ({"node_name": '".."'}, "[agent] node_name: bad value '..'; use letters, digits"),
        ({"node_name": '"../etc"'}, "[agent] node_name: bad value '../etc'"),
        ({"node_name": '"a/b"'}, "[agent] node_name: bad value 'a/b'"),
        ({"stepd_path": '"/nonexistent/spurstepd"'}, "[agent] stepd_path: /nonexistent/spurstepd does not exist"),
        ({"stepd_path": '"{tmp}/plain"'}, "[agent] stepd_path: {tmp}/plain is not an executable file"),
        ({"stepd_path": '"/tmp"'}, "[agent] stepd_path: /tmp is not an executable file"),
        ({"stepd_path": '"spurstepd"'}, "[agent] stepd_path: 'spurstepd' is a relative path"),
        ({"listen_addr": '"[::1]:99999"'}, "[agent] listen_addr: bad address"),
    ],
)
def test_agent_errors_name_the_key_and_fix(tmp_path, over, needle):
    (tmp_path / "plain").write_text("not a program\n")
    over = {k: v.replace("{tmp}", str(tmp_path)) for k, v in over.items()}
    message = one_line_error(load_text, tmp_path, agent_toml(**over), role="agent")
    assert needle.replace("{tmp}", str(tmp_path)) in message


def test_a_non_utf8_file_is_one_line_naming_the_byte(tmp_path, secret):
    path = tmp_path / "spur.conf"
    path.write_bytes(controller_toml(secret).encode() + b"# caf\xe9\n")
    for role in ("controller", "agent", "client", None):
        message = one_line_error(conf.load, str(path), role=role)
        assert message.startswith(f"{path}: not UTF-8 text (byte 0xe9 at line 11, column 6)")
        assert message.endswith("save the file as UTF-8")


def test_auth_none_listens_on_loopback_only_unless_opted_in(tmp_path, secret):
    for listen in ('"0.0.0.0:6817"', '"10.1.0.10:6817"', '"[::]:6817"', '"ctl1:6817"'):
        message = one_line_error(load_text, tmp_path, controller_toml(secret, listen_addr=listen))
        assert message.startswith(f"[controller] listen_addr: {listen[1:-1]} can be reached from other hosts")
        assert '[auth] type = "munge"' in message and "allow_unauthenticated_network = true" in message
    message = one_line_error(load_text, tmp_path, agent_toml(listen_addr='"0.0.0.0:6818"'), role="agent")
    assert message.startswith("[agent] listen_addr: 0.0.0.0:6818 can be reached from other hosts")
    # the whole of 127.0.0.0/8, ::1 and localhost are loopback; clients do not listen
    for listen in ('"127.0.1.1:6817"', '"127.255.0.9:6817"', '"[::1]:6817"', '"localhost:6817"'):
        c = load_text(tmp_path, controller_toml(secret, listen_addr=listen, hosts=f"[{listen}]", peers='["127.0.1.1"]'))
        assert conf.startup_warnings(c, "controller") == []
    assert load_text(tmp_path, agent_toml(listen_addr='"0.0.0.0:6818"'), role="client").agent.listen_addr


def test_the_opt_in_is_accepted_and_said_as_a_warning(tmp_path, secret):
    opt_in = "allow_unauthenticated_network = true"
    c = load_text(tmp_path, controller_toml(secret, auth=opt_in, listen_addr='"0.0.0.0:6817"'))
    (warning,) = conf.startup_warnings(c, "controller")
    assert "listening on 0.0.0.0:6817 without authentication" in warning and "\n" not in warning
    a = load_text(tmp_path, agent_toml(auth=opt_in, listen_addr='"10.0.0.5:6818"'), role="agent")
    assert len(conf.startup_warnings(a, "agent")) == 1
    with pytest.raises(ConfigError, match=r"\[auth\] allow_unauthenticated_network: expected true or false"):
        conf.parse('[auth]\nallow_unauthenticated_network = "yes"\n')


def test_munge_needs_its_socket_at_start(tmp_path, secret):
    missing = tmp_path / "munge.socket.2"
    auth = f'type = "munge"\nmunge_socket = "{missing}"'
    message = one_line_error(load_text, tmp_path, controller_toml(secret, auth=auth, listen_addr='"0.0.0.0:6817"'))
    assert message == (
        f"[auth] munge_socket: {missing} does not exist (munged is not running, or it uses another socket); "
        "start munged (systemctl start munge) or point munge_socket at its socket"
    )
    assert "[auth] munge_socket" in one_line_error(load_text, tmp_path, agent_toml(auth=auth), role="agent")
    missing.write_text("")
    assert "is not a socket" in one_line_error(load_text, tmp_path, agent_toml(auth=auth), role="agent")
    missing.unlink()
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(missing))
        c = load_text(tmp_path, controller_toml(secret, auth=auth, listen_addr='"0.0.0.0:6817"'))
        assert c.auth.type == "munge" and conf.startup_warnings(c, "controller") == []
    # commands do not check it: they only need the socket to make a credential
    assert load_text(tmp_path, agent_toml(auth=auth), role="client").auth.munge_socket == str(missing)


def test_ipv6_addresses_are_accepted_in_brackets(tmp_path, secret):
    c = load_text(
        tmp_path,
        controller_toml(
            secret, hosts='["[::1]:6817"]', listen_addr='"[::1]:6817"', raft_addr='"[::1]:6821"', peers='["[::1]"]'
        ),
    )
    assert c.controller.raft_addr == "[::1]:6821"
    assert conf.normalize_addr(c.controller.peers[0], conf.RAFT_PORT) == "[::1]:6821"


def test_unknown_section_and_bad_toml(tmp_path, secret):
    with pytest.raises(ConfigError, match=r"\[schedular\]: unknown section"):
        load_text(tmp_path, controller_toml(secret) + "[schedular]\nx = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_text(tmp_path, "[cluster\n")
    with pytest.raises(ConfigError, match="file not found"):
        conf.load(str(tmp_path / "missing.conf"), role="controller")
    with pytest.raises(ConfigError, match="is a directory"):
        conf.load(str(tmp_path), role="controller")


def test_site_sections_are_kept(tmp_path, secret):
    c = load_text(tmp_path, controller_toml(secret) + '[x-site]\nrack = "r1"\n')
    assert c.extra == {"x-site": {"rack": "r1"}}


def test_secret_file_rules(tmp_path, secret):
    secret.chmod(0o640)
    with pytest.raises(ConfigError, match=r"has mode 0640.*chmod 0600"):
        load_text(tmp_path, controller_toml(secret))
    with pytest.raises(ConfigError, match="does not exist"):
        load_text(tmp_path, controller_toml(secret, raft_secret_file='"/nonexistent/secret"'))
    empty = tmp_path / "empty"
    empty.write_text("")
    empty.chmod(0o600)
    with pytest.raises(ConfigError, match="empty"):
        conf.read_secret(str(empty))
    empty.write_bytes(b"\xff\xfe")
    assert "not UTF-8 text" in one_line_error(conf.read_secret, str(empty))


def test_agent_rules(tmp_path):
    text = '[controller]\nhosts = ["127.0.1.1"]\nheartbeat_timeout_secs = 10\n[agent]\nheartbeat_interval_secs = 5\n'
    with pytest.raises(ConfigError, match="fewer than 3 beats"):
        load_text(tmp_path, text + 'listen_addr = "127.0.0.1:6818"\n', role="agent")
    with pytest.raises(ConfigError, match=r"\[controller\] hosts: empty"):
        load_text(tmp_path, '[agent]\nnode_name = "n1"\n', role="agent")
    ok = load_text(tmp_path, agent_toml(), role="agent")
    assert conf.node_name(ok) == "n1"
    stepd = tmp_path / "spurstepd"
    stepd.write_text("#!/bin/sh\n")
    stepd.chmod(0o755)
    assert load_text(tmp_path, agent_toml(stepd_path=f'"{stepd}"'), role="agent").agent.stepd_path == str(stepd)


def test_addresses_normalise():
    assert conf.normalize_addr("127.0.1.1", 6817) == "127.0.1.1:6817"
    assert conf.normalize_addr("http://ctl1:7000/") == "ctl1:7000"
    assert conf.normalize_addr("[::1]:6817") == "[::1]:6817"
    assert conf.normalize_addr("[::1]", 6821) == "[::1]:6821"
    with pytest.raises(ValueError, match="brackets"):
        conf.normalize_addr("::1:6817")
    with pytest.raises(ValueError, match="neither an IP address nor a host name"):
        conf.normalize_addr("h\u00e9te:1")  # would fail later in the resolver's IDNA codec


def test_the_key_reference_in_the_docs_is_generated_from_the_table():
    spec = importlib.util.spec_from_file_location("gen_conf_docs", ROOT / "tools" / "gen_conf_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert gen.render(text) == text, "docs/configuration.md drifted from conf.SCHEMA: run python tools/gen_conf_docs.py"
    for section, keys in SCHEMA.items():
        for name, key in keys.items():
            assert f"| `{name}` | {key.accepts()} |" in text, f"[{section}] {name}"
