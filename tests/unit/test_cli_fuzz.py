"""Generated argument lists for sbatch, squeue, scontrol, sacct, scancel and sinfo, run in-process through the
commands' entry functions with the controller unreachable (a closed 127.0.0.1 port).

Whatever the arguments (real option names, values, numbers of every size, % formats, hostlists, unicode and
bytes that are not UTF-8), a command exits 0 or says what is wrong on lines of its own, and never shows
a traceback or runs away (a generous per-example deadline, not a timing assertion).
"""

from __future__ import annotations

import contextlib
import io
import signal
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spur_hpc.cli import sacct, sbatch, scancel, scontrol, sinfo, slurm, squeue

EXAMPLE_DEADLINE_SECS = 30  # far above any normal run; only a runaway expansion or read gets near it

COMMANDS = {
    "sbatch": (slurm.sbatch_main, sbatch.OPTIONS),
    "squeue": (slurm.squeue_main, squeue.OPTIONS),
    "scontrol": (slurm.scontrol_main, scontrol.OPTIONS),
    "sacct": (slurm.sacct_main, sacct.OPTIONS),
    "scancel": (slurm.scancel_main, scancel.OPTIONS),
    "sinfo": (slurm.sinfo_main, sinfo.OPTIONS),
}

numbers = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "1", "-1", "2147483648", "9223372036854775808", "1" + "0" * 40, "9" * 5000, "1-3", "2-1"]),
    st.sampled_from(["²", "٣", "1٢", "+5", " 7 ", "0x10", "1e9", "4G", "99999999999999999999T", "1:2:3:4", "now-9d"]),
)
formats = st.builds(
    lambda dot, width, letter: f"%{dot}{width}{letter}",
    st.sampled_from(["", ".", "#", ".#"]),
    st.one_of(st.just(""), st.integers(0, 2**80).map(str)),
    st.sampled_from(list("ijuUGtTMlLDCmNRrPaVSeZoQ%") + ["", "²"]),
)
field_formats = st.builds(
    lambda name, width: f"{name}%{width}" if width is not None else name,
    st.sampled_from(["JobID", "JobName", "State", "NodeList", "Elapsed", "Colour", ""]),
    st.one_of(st.none(), st.integers(-5, 2**80).map(str), st.just("-"), st.just("x")),
).map(lambda f: f) | st.lists(st.sampled_from(["JobID", "JobName%20", "State%-9"]), max_size=4).map(",".join)
hostlists = st.sampled_from(
    ["n[1-3]", "pn[1-99999999]", "a[1-40000],b[1-40000]", "n[3-1]", "n[1-", "n]", "n[01-10]x", "ALL", "n[1-2][3]"]
) | st.builds(lambda low, high: f"n[{low}-{high}]", st.integers(0, 2**70), st.integers(0, 2**70))
not_utf8 = st.binary(min_size=1, max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape"))
words = st.one_of(
    st.text(max_size=30),
    not_utf8,
    st.sampled_from(["a\nb", "x\x1b[2J", "\u202e", "\x00", "", "-", "--", "ALL", "all", "json", "/dev/zero", "/"]),
)
key_values = st.builds(
    lambda key, value: f"{key}={value}",
    st.sampled_from(["NodeName", "State", "Reason", "Weight", "nodename", ""]),
    st.one_of(hostlists, st.sampled_from(["DRAIN", "RESUME", "DOWN", "SLEEP", ""]), words),
)
subcommands = st.sampled_from(["show", "update", "hold", "release", "ping", "version", "job", "jobs", "node", "nodes"])


def tokens_for(options) -> st.SearchStrategy[str]:
    names = [f"--{o.long}" for o in options if o.long] + [f"-{o.short}" for o in options if o.short]
    names = [n for n in names if n not in ("--help", "--usage", "--version", "-V", "-h", "--helpformat", "-e")]
    value = st.one_of(numbers, formats, field_formats, hostlists, words)
    return st.one_of(
        st.sampled_from(names),
        st.builds(lambda n, v: f"{n}={v}", st.sampled_from([n for n in names if n.startswith("--")]), value),
        st.builds(lambda n, v: n + v, st.sampled_from([n for n in names if not n.startswith("--")]), value),
        value,
        key_values,
        subcommands,
        st.sampled_from(["--wrap", "--wrap=true", "--bogus", "--p", "-Z"]),
    )


class _Runaway(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Runaway(f"one command took more than {EXAMPLE_DEADLINE_SECS} s")


def run_in_process(entry, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(EXAMPLE_DEADLINE_SECS)
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO("#!/bin/sh\ntrue\n")  # sbatch without a script reads one from standard input
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = entry(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdin = saved_stdin
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def unreachable(monkeypatch, tmp_path):
    from spur_hpc.cli import controller

    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")
    # a write waits up to 15 s for a controller to come back (a failover); nobody comes back here
    monkeypatch.setattr(controller, "RETRY_PAUSE_SECS", 3600.0)
    monkeypatch.delenv("SPUR_CONF", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_generated_argument_lists_exit_cleanly(command, unreachable) -> None:
    entry, options = COMMANDS[command]

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(argv=st.lists(tokens_for(options), max_size=6))
    def check(argv: list[str]) -> None:
        code, out, err = run_in_process(entry, argv)
        assert isinstance(code, int), code
        assert "Traceback" not in err
        lines = err.splitlines()
        # squeue -t with an unknown state: Slurm's two lines (the state, then the valid ones) and its empty third
        slurm_squeue_state = (
            command == "squeue" and len(lines) == 3 and lines[1].startswith("squeue: error: Valid job states include: ")
        )
        if slurm_squeue_state:
            assert lines[2] == "" and lines[0].startswith("squeue: error: Invalid job state specified: "), err
            lines = lines[:1]
        # every line is a message of its own: "<command>: error: ..." (scancel: one per job id) or a warning
        # (and scancel -s 0: Slurm's own `Unknown job signal: 0`)
        # sinfo as Slurm's: getopt's two lines for an option it refuses (`sinfo: invalid option -- 'x'` and
        # `Try "sinfo --help" ...`), `Invalid node format specification: x` for a -o letter it does not know
        getopt = len(lines) == 2 and lines[1] == f'Try "{command} --help" for more information'
        # scontrol update with an unknown State=: Slurm's four lines (Invalid input / Request aborted / the states)
        slurm_state = ("Invalid input: ", "Request aborted", "Valid states are: ", "Not all states are valid")
        slurm_own = ("Unknown job signal: ", 'Try "', "Invalid node format specification: ", *slurm_state)
        assert all(line.startswith(f"{command}: ") or line.startswith(slurm_own) for line in lines), err
        if code != 0 and not (command == "scontrol" and " is DOWN" in out):  # ping answers on stdout, like Slurm's
            assert lines, f"exit {code} without a word on stderr"
            if command != "scancel" and not getopt and not lines[0].startswith("Invalid input: "):
                # sinfo -t with an unknown state adds Slurm's second line, the valid states
                # sinfo -O with an unknown field: Slurm's complaint, which does not stop the command
                not_fatal = (": error: valid states: ", ": error: Invalid job format specification: ")
                messages = [line for line in lines if ": error: " in line and not any(s in line for s in not_fatal)]
                assert len(messages) == 1, err
        # nothing printed can forge a line: listings and messages escape control characters
        assert "\x1b" not in out + err and "\r" not in out + err

    check()
