"""Fuzz of spur.conf: whatever the file holds, loading it gives a Config or one ConfigError line, never
another exception, and a Config that loads holds only values inside the bounds of conf.SCHEMA."""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spur_hpc import conf
from spur_hpc.conf import SCHEMA, ConfigError

ROLES = ("controller", "agent", "client", None)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def files():
    with tempfile.TemporaryDirectory(prefix="spur-conf-fuzz-") as scratch:
        root = Path(scratch)
        secret = root / "raft.secret"
        secret.write_text("s3cret\n")
        secret.chmod(0o600)
        stepd = root / "spurstepd"
        stepd.write_text("#!/bin/sh\n")
        stepd.chmod(0o755)
        (root / "plain").write_text("")
        yield root


def base_values(root: Path) -> dict[str, dict[str, object]]:
    """A config every role accepts: the fuzz changes some of its keys."""
    return {
        "cluster": {"name": "fuzz"},
        "controller": {
            "hosts": ["127.0.1.1:6817"],
            "listen_addr": "127.0.1.1:6817",
            "raft_addr": "127.0.1.1:6821",
            "peers": ["127.0.1.1:6821"],
            "state_dir": str(root / "ctld"),
            "raft_secret_file": str(root / "raft.secret"),
        },
        "agent": {"node_name": "n1", "listen_addr": "127.0.1.11:6818", "state_dir": str(root / "agent")},
    }


def toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class Raw(str):
    """TOML text written as it is."""


HUGE = Raw("9" * 5000)  # an integer Python refuses to convert from text (more than 4300 digits)


def toml_value(value: object) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return {math.inf: "inf", -math.inf: "-inf"}.get(value, repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return toml_string(value)
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def render(values: dict[str, dict[str, object]]) -> str:
    return "".join(
        f"[{section}]\n" + "".join(f"{key} = {toml_value(v)}\n" for key, v in body.items())
        for section, body in values.items()
    )


def edge_values(key: conf.Key) -> list[object]:
    """Values at and around the declared bounds, and the strings that were accepted by mistake before."""
    numbers = [key.min, key.above, key.max]
    edges: list[object] = [0, -1, 1, math.inf, -math.inf, math.nan, 10**30, -(10**30), HUGE, 1e308, 0.5, -0.0]
    for n in numbers:
        if n is not None:
            edges += [n, n - 1, n + 1, float(n), n + 0.001, n - 0.001]
    return edges + [
        "",
        "..",
        ".",
        "relative/path",
        "/",
        "/nonexistent/x",
        "0.0.0.0:1",
        "[::1]:6821",
        "[::]:6817",
        "::1",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:" + "9" * 5000,
        "localhost:6817",
        "h\u00e9te:1",
        "a\x00b",
        "none",
        "munge",
        "debug",
        key.default if not isinstance(key.default, list) else "x",
    ]


def good_values(key: conf.Key) -> list[object]:
    """Values the key accepts on its own (the rules between keys may still refuse them)."""
    if key.type in (int, float):
        low = key.min if key.min is not None else key.above + 1
        values = [key.default, low, key.max, (low + key.max) // 2]
        return [float(v) for v in values] if key.type is float else values
    if key.type is bool:
        return [True, False]
    if key.choices:
        return list(key.choices)
    return [key.default]


KEYS = [(section, name) for section, keys in SCHEMA.items() for name in keys]


def any_value(key: conf.Key) -> st.SearchStrategy[object]:
    scalars = st.one_of(
        st.integers(),
        st.integers(-(10**6), 10**6),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=30),
        st.sampled_from(edge_values(key)),
    )
    return st.one_of(st.sampled_from(good_values(key)), scalars, st.lists(scalars, max_size=4))


@st.composite
def configs(draw, root: Path) -> str:
    values = base_values(root)
    for section, name in draw(st.lists(st.sampled_from(KEYS), max_size=4, unique=True)):
        values.setdefault(section, {})[name] = draw(any_value(SCHEMA[section][name]))
    return render(values)


def within_bounds(c: conf.Config) -> None:
    """What a Config that loaded holds: every value of its declared type and inside its bounds."""
    for section, keys in SCHEMA.items():
        for name, key in keys.items():
            value = getattr(getattr(c, section), name)
            where = f"[{section}] {name} = {value!r}"
            if key.type in (int, float):
                assert isinstance(value, key.type) and not isinstance(value, bool), where
                assert math.isfinite(value), where
                assert key.min is None or value >= key.min, where
                assert key.above is None or value > key.above, where
                assert key.max is None or value <= key.max, where
            elif key.type is str:
                assert isinstance(value, str) and "\x00" not in value, where
                assert not key.choices or value in key.choices, where
                assert not key.pattern or value == "" or re.fullmatch(key.pattern, value), where
                assert not key.path or value == "" or os.path.isabs(value), where
            elif key.type is list:
                assert isinstance(value, tuple) and all(isinstance(v, str) for v in value), where


def load_or_one_line(path: Path, role: str | None) -> conf.Config | None:
    try:
        c = conf.load(str(path), role=role)
    except ConfigError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message, message
        assert message.startswith(("[", str(path))), message
        return None
    within_bounds(c)
    return c


@FUZZ
@given(data=st.data())
def test_any_values_for_every_key_load_or_fail_with_one_line(files, data):
    path = files / f"values-{os.getpid()}.conf"
    path.write_text(data.draw(configs(files)), encoding="utf-8")
    load_or_one_line(path, data.draw(st.sampled_from(ROLES)))


@FUZZ
@given(raw=st.binary(max_size=300), role=st.sampled_from(ROLES))
def test_any_bytes_load_or_fail_with_one_line(files, raw, role):
    path = files / f"bytes-{os.getpid()}.conf"
    path.write_bytes(raw)
    load_or_one_line(path, role)


@FUZZ
@given(
    prefix=st.sampled_from([b"", b"[controller]\n", b'[controller]\nhosts = ["127.0.1.1"]\n# ', b'[agent]\nname = "']),
    raw=st.binary(max_size=60),
    role=st.sampled_from(ROLES),
)
def test_bytes_inside_a_plausible_file_load_or_fail_with_one_line(files, prefix, raw, role):
    path = files / f"mixed-{os.getpid()}.conf"
    path.write_bytes(prefix + raw + b"\n")
    load_or_one_line(path, role)


@FUZZ
@given(text=st.text(max_size=200))
def test_any_text_is_a_config_or_one_line_error(text):
    try:
        within_bounds(conf.parse(text))
    except ConfigError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize("section, name", KEYS)
def test_every_key_with_every_edge_value_loads_or_fails_with_one_line(files, section, name):
    key = SCHEMA[section][name]
    path = files / f"edge-{section}-{name}.conf"
    for value in edge_values(key) + good_values(key) + [[v] for v in edge_values(key)[:12]]:
        values = base_values(files)
        values.setdefault(section, {})[name] = value
        path.write_text(render(values), encoding="utf-8")
        for role in ROLES:
            load_or_one_line(path, role)


def test_the_base_config_of_the_fuzz_loads_for_every_role(files):
    path = files / "base.conf"
    path.write_text(render(base_values(files)), encoding="utf-8")
    for role in ROLES:
        assert load_or_one_line(path, role) is not None, role
