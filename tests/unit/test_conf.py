"""spur.conf parsing and validation: every bad input is one line naming the key and the fix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spur_hpc import conf
from spur_hpc.conf import ConfigError


@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "raft.secret"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    return path


def controller_toml(secret, **over) -> str:
    values = {
        "hosts": '["127.0.1.1:6817", "127.0.1.2:6817", "127.0.1.3:6817"]',
        "raft_addr": '"127.0.1.1:6821"',
        "peers": '["127.0.1.1:6821", "127.0.1.2:6821", "127.0.1.3:6821"]',
        "state_dir": '"/tmp/x"',
        "raft_secret_file": f'"{secret}"',
    }
    values.update(over)
    body = "\n".join(f"{k} = {v}" for k, v in values.items() if v is not None)
    return f'[cluster]\nname = "c1"\n\n[controller]\n{body}\n'


def load_text(tmp_path, text, role="controller"):
    path = tmp_path / "spur.conf"
    path.write_text(text)
    return conf.load(str(path), role=role)


def test_valid_controller_config_loads_with_defaults(tmp_path, secret):
    c = load_text(tmp_path, controller_toml(secret))
    assert c.cluster.name == "c1"
    assert c.controller.peers == ("127.0.1.1:6821", "127.0.1.2:6821", "127.0.1.3:6821")
    assert c.controller.heartbeat_timeout_secs == 60
    assert c.controller.probe_addr == "127.0.0.1:6822"
    assert c.agent.partition == "default"


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"raft_addr": '"127.0.1.9:6821"'}, "[controller] peers: does not contain this controller's raft_addr"),
        ({"peers": '["127.0.1.1:6821", "127.0.1.1:6821", "127.0.1.3:6821"]'}, "is listed twice"),
        ({"peers": '["127.0.1.1:6821", "127.0.1.2:6821"]'}, "use 1, 3 or 5 controllers"),
        ({"peers": "[]"}, "[controller] peers: empty"),
        ({"raft_addr": '"0.0.0.0:6821"'}, "is a wildcard"),
        ({"raft_addr": None}, "[controller] raft_addr: missing"),
        ({"raft_addr": '"127.0.1.1:0"'}, "port '0' is not a number from 1 to 65535"),
        ({"raft_addr": '"bad host:1"'}, "is neither an IP address nor a host name"),
        ({"hosts": '["a:1", "a:1"]'}, "[controller] hosts: a:1 is listed twice"),
        ({"heartbeat_timeout_secs": '"60"'}, "heartbeat_timeout_secs: expected an integer, got str"),
        ({"heartbeat_timeout_secs": "true"}, "got boolean"),
        ({"heartbeat_timeout_secs": "-1"}, "is not positive"),
        ({"peers": "[1, 2]"}, "expected a list of strings"),
        ({"bogus_key": "1"}, "[controller] bogus_key: unknown key; remove it or use one of"),
        ({"connection_retry_ms": "900"}, "must be below election_timeout_min_ms"),
        ({"election_timeout_min_ms": "900"}, "must be positive and below election_timeout_max_ms"),
        ({"append_entries_period_ms": "200"}, "under a third of election_timeout_min_ms"),
    ],
)
def test_controller_errors_name_the_key_and_fix(tmp_path, secret, over, needle):
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, controller_toml(secret, **over))
    message = str(info.value)
    assert needle in message
    assert "\n" not in message


def test_unknown_section_and_bad_toml(tmp_path, secret):
    with pytest.raises(ConfigError, match=r"\[scheduler\]: unknown section"):
        load_text(tmp_path, controller_toml(secret) + "[scheduler]\nx = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_text(tmp_path, "[cluster\n")
    with pytest.raises(ConfigError, match="file not found"):
        conf.load(str(tmp_path / "missing.conf"), role="controller")


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


def test_agent_rules(tmp_path):
    text = '[controller]\nhosts = ["127.0.1.1"]\nheartbeat_timeout_secs = 10\n[agent]\nheartbeat_interval_secs = 5\n'
    with pytest.raises(ConfigError, match="fewer than 3 beats"):
        load_text(tmp_path, text, role="agent")
    with pytest.raises(ConfigError, match=r"\[controller\] hosts: empty"):
        load_text(tmp_path, '[agent]\nnode_name = "n1"\n', role="agent")
    ok = load_text(tmp_path, '[controller]\nhosts = ["127.0.1.1"]\n[agent]\nnode_name = "n1"\n', role="agent")
    assert conf.node_name(ok) == "n1"


def test_addresses_normalise():
    assert conf.normalize_addr("127.0.1.1", 6817) == "127.0.1.1:6817"
    assert conf.normalize_addr("http://ctl1:7000/") == "ctl1:7000"
    assert conf.normalize_addr("[::1]:6817") == "[::1]:6817"
    with pytest.raises(ValueError, match="brackets"):
        conf.normalize_addr("::1:6817")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_config_or_one_line_error(text):
    try:
        conf.parse(text)
    except ConfigError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(list(conf.SCHEMA["controller"])),
        st.one_of(
            st.integers(-10, 10**6), st.text(max_size=20), st.booleans(), st.lists(st.text(max_size=10), max_size=3)
        ),
    )
)
def test_any_controller_values_validate_or_fail_cleanly(values):
    import json

    lines = []
    for k, v in values.items():
        lines.append(f"{k} = {json.dumps(v) if not isinstance(v, bool) else str(v).lower()}")
    text = "[controller]\n" + "\n".join(lines) + "\n"
    try:
        c = conf.parse(text)
        conf.validate(c, "controller")
    except ConfigError as exc:
        assert "\n" not in str(exc)
