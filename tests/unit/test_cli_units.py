"""Slurm's notations (times, memory) and the option parser (hostlists: test_model.py)."""

from __future__ import annotations

import time

import pytest

from spur_hpc.cli import options, units
from spur_hpc.cli.runner import CliError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("0", 0), ("UNLIMITED", 0), ("10:30", 630), ("1:00:00", 3600), ("2-0", 172800),
     ("2-3:04", 183840), ("1-02:03:04", 93784), ("90", 5400)],
)  # fmt: skip
def test_time_limits(text: str, seconds: int) -> None:
    assert units.parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["1:2:3:4", "x", "1-", "-5", "1:99", "1-2:3:4:5", "1:60:00", ""])
def test_bad_time_limits(text: str) -> None:
    with pytest.raises(CliError, match="invalid --time value"):
        units.parse_time_limit(text)


@pytest.mark.parametrize(
    ("text", "mb"), [("100", 100), ("4G", 4096), ("4gb", 4096), ("512K", 1), ("1T", 1048576), ("2M", 2)]
)
def test_memory(text: str, mb: int) -> None:
    assert units.parse_memory_mb(text) == mb


@pytest.mark.parametrize("text", ["x", "4X", "-1", "", "1.5G"])
def test_bad_memory(text: str) -> None:
    with pytest.raises(CliError, match="invalid --mem value"):
        units.parse_memory_mb(text)


def test_durations_like_squeue_and_scontrol() -> None:
    assert [units.format_duration(s) for s in (0, 65, 3700, 90000)] == ["0:00", "1:05", "1:01:40", "1-01:00:00"]
    assert [units.format_clock(s) for s in (5, 3700, 90000)] == ["00:00:05", "01:01:40", "1-01:00:00"]
    assert units.format_limit(0) == "UNLIMITED"


def test_time_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        now = 1_714_560_000.0  # 2024-05-01T10:40:00Z
        assert units.parse_time_point("now", "-S", now) == now
        assert units.parse_time_point("now-2hours", "-S", now) == now - 7200
        assert units.parse_time_point("today", "-S", now) == 1_714_521_600.0
        assert units.parse_time_point("2024-05-01T10:00", "-S", now) == 1_714_557_600.0
        assert units.parse_time_point("05/01", "-S", now) == 1_714_521_600.0
        assert units.parse_time_point("10:00", "-S", now) == 1_714_557_600.0
        with pytest.raises(CliError, match="invalid -S value 'tomorrowish'"):
            units.parse_time_point("tomorrowish", "-S", now)
    finally:
        monkeypatch.undo()
        time.tzset()


PARSER_OPTIONS = [
    options.Option("noheader", "h", "noheader"),
    options.Option("format", "o", "format", "FORMAT"),
    options.Option("users", "u", "user", "USERS", repeat=True),
    options.Option("parsable", "", "parsable"),
    options.Option("partition", "p", "partition", "NAME"),
]


def test_option_forms() -> None:
    values, rest = options.parse(
        "x", PARSER_OPTIONS, ["-ho%i", "-u", "a,b", "--user=c", "--form", "%j", "pos", "--", "-h"]
    )
    assert values == {"noheader": True, "format": "%j", "users": ["a,b", "c"], "parsable": None, "partition": None}
    assert rest == ["pos", "-h"]
    assert options.gather(values["users"]) == ["a", "b", "c"]


def test_stop_at_first_positional_keeps_script_arguments() -> None:
    values, rest = options.parse("x", PARSER_OPTIONS, ["-p", "gpu", "job.sh", "-h", "--x"], stop_at_positional=True)
    assert values["partition"] == "gpu" and rest == ["job.sh", "-h", "--x"]


def test_ambiguous_prefix_lists_the_candidates() -> None:
    with pytest.raises(CliError, match="'--pa' is ambiguous .*--parsable, --partition"):
        options.parse("x", PARSER_OPTIONS, ["--pa"])
