"""Bad input: one line on stderr naming the value and the fix, a non-zero exit, no traceback, no controller call.

SPUR_CONTROLLER_ADDR points at a port nobody listens on: had a command reached for the controller, the
message would be about reaching it, not about the input.
"""

from __future__ import annotations

import pytest

from spur_hpc.cli import slurm, spur

CASES = [
    # (entry, argv, words the one line must contain)
    (slurm.squeue_main, ["--bogus"], ["unrecognized option '--bogus'", "squeue --help"]),
    (slurm.squeue_main, ["-Z"], ["invalid option '-Z'"]),
    (slurm.squeue_main, ["-j", "abc"], ["invalid job id 'abc'", "positive numbers"]),
    (slurm.squeue_main, ["-j", "5,x7"], ["invalid job id 'x7'"]),
    (slurm.squeue_main, ["-t", "SLEEPING"], ["invalid job state 'SLEEPING'", "PD (PENDING)"]),
    (slurm.squeue_main, ["-o", "%.5i %Q"], ["unknown format specifier %Q", "%.5i %Q"]),
    (slurm.squeue_main, ["-o"], ["option '-o' needs a value"]),
    (slurm.squeue_main, ["extra"], ["unexpected argument 'extra'"]),
    (slurm.sinfo_main, ["-t", "sleepy"], ["invalid node state 'sleepy'"]),
    (slurm.sinfo_main, ["-n", "node[1-"], ["bad hostlist 'node[1-'"]),
    (slurm.sinfo_main, ["-n", "node[3-1]"], ["range 3-1 runs backwards"]),
    (slurm.sbatch_main, ["--wrap", "true", "-t", "1:2:3:4"], ["invalid --time value '1:2:3:4'", "HH:MM:SS"]),
    (slurm.sbatch_main, ["--wrap", "true", "-t", "soon"], ["invalid --time value 'soon'"]),
    (slurm.sbatch_main, ["--wrap", "true", "--mem", "lots"], ["invalid --mem value 'lots'", "like 4G"]),
    (slurm.sbatch_main, ["--wrap", "true", "--mem", "4X"], ["invalid --mem value '4X'"]),
    (slurm.sbatch_main, ["--wrap", "true", "-N", "zero"], ["invalid --nodes value 'zero'"]),
    (slurm.sbatch_main, ["--wrap", "true", "-n", "0"], ["invalid --ntasks value '0'"]),
    (slurm.sbatch_main, ["--wrap", "true", "--time"], ["option '--time' needs a value"]),
    (slurm.sbatch_main, ["--wrap", "true", "--parsable=yes"], ["takes no value"]),
    (slurm.sbatch_main, ["/nonexistent/job.sh"], ["cannot read batch script /nonexistent/job.sh"]),
    (slurm.sbatch_main, ["--wrap", "true", "--p"], ["ambiguous", "--partition", "--parsable"]),
    (slurm.scancel_main, ["12a"], ["invalid job id '12a'"]),
    (slurm.scancel_main, [], ["no job identification provided"]),
    (slurm.scancel_main, ["-s", "WAKEUP", "5"], ["invalid signal 'WAKEUP'"]),
    (slurm.scontrol_main, ["update", "NodeName=", "State=DRAIN", "Reason=x"], ["NodeName= is empty"]),
    (slurm.scontrol_main, ["update", "NodeName=n1", "State=SLEEP"], ["invalid node state 'SLEEP'", "DRAIN"]),
    (
        slurm.scontrol_main,
        ["update", "NodeName=n1", "State=DRAIN"],
        ["needs a reason", 'Reason="'],
    ),
    (slurm.scontrol_main, ["update", "NodeName=n1", "State=DOWN"], ["needs a reason"]),
    (slurm.scontrol_main, ["update", "NodeName=n1", "Weight=3", "State=DRAIN"], ["updating 'weight' is not supported"]),
    (
        slurm.scontrol_main,
        ["update", "NodeName=n1", "State=DRAIN", "Reason=disk", "failed"],
        ["invalid update argument 'failed'", "quote values with spaces"],
    ),
    (slurm.scontrol_main, ["update", "State=DRAIN"], ["needs NodeName="]),
    (slurm.scontrol_main, ["show", "job", "five"], ["invalid job id 'five'"]),
    (slurm.scontrol_main, ["frobnicate"], ["unknown command 'frobnicate'"]),
    (slurm.scontrol_main, [], ["no command given"]),
    (slurm.sacct_main, ["-S", "yesterday-ish"], ["invalid --starttime value 'yesterday-ish'", "YYYY-MM-DD"]),
    (slurm.sacct_main, ["-S", "2024-05-02", "-E", "2024-05-01"], ["before --starttime"]),
    (slurm.sacct_main, ["--format", "JobID,Colour"], ["unknown field 'Colour'", "JobName"]),
    (slurm.sacct_main, ["--format", "JobName%x"], ["bad width '%x'"]),
    (slurm.sacct_main, ["-j", "1.batch"], ["invalid job id '1.batch'"]),
    (spur.main, ["frobnicate"], ["unknown command 'frobnicate'", "spur --help"]),
    (spur.main, ["node", "drain"], ["takes one node name"]),
    (spur.main, ["node", "reboot", "n1"], ["unknown node action 'reboot'"]),
    (spur.main, ["cluster", "explode"], ["unknown cluster command 'explode'"]),
    (spur.main, ["jobs", "-j", "x"], ["invalid job id 'x'"]),
    (spur.main, ["submit", "--wrap", "true", "--mem", "1Q"], ["invalid --mem value '1Q'"]),
    (spur.main, ["version", "--check"], ["no release index given", "--index"]),
    (spur.main, ["--controller"], ["--controller needs addresses"]),
]


@pytest.mark.parametrize(("entry", "argv", "words"), CASES, ids=[" ".join([c[0].__name__, *c[1]]) for c in CASES])
def test_bad_input_is_one_line_and_a_nonzero_exit(entry, argv, words, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")
    monkeypatch.delenv("SPUR_RELEASE_INDEX", raising=False)
    code = entry(argv)
    out, err = capsys.readouterr()
    assert code != 0
    lines = err.splitlines()
    error_lines = [line for line in lines if ": error: " in line]
    assert len(error_lines) == 1, err
    assert "Traceback" not in err
    assert "cannot reach" not in err and "no controller could answer" not in err
    for word in words:
        assert word in error_lines[0], error_lines[0]
    if entry is not spur.main or argv[:1] != ["version"]:
        assert out == ""


def test_a_malformed_controller_address_is_one_line(capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "ctl1:notaport")
    assert slurm.squeue_main([]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad controller address 'ctl1:notaport'" in err and "SPUR_CONTROLLER_ADDR" in err


def test_a_script_without_an_interpreter_line_is_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")
    script = tmp_path / "job.sh"
    script.write_text("echo hi\n")
    assert slurm.sbatch_main([str(script)]) == 1
    assert "first line must start with #!" in capsys.readouterr().err


def test_a_bad_sbatch_directive_names_the_script_line(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --time=forever\necho hi\n")
    assert slurm.sbatch_main([str(script)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid --time value 'forever'" in err

    script.write_text("#!/bin/sh\n#SBATCH --colour=blue\necho hi\n")
    assert slurm.sbatch_main([str(script)]) == 1
    assert f"{script} line 2: unrecognized option '--colour=blue'" in capsys.readouterr().err


def test_help_is_not_an_error(capsys) -> None:
    for entry in (
        slurm.squeue_main,
        slurm.sinfo_main,
        slurm.sbatch_main,
        slurm.scancel_main,
        slurm.scontrol_main,
        slurm.sacct_main,
        spur.main,
    ):
        assert entry(["--help"]) == 0
        out, err = capsys.readouterr()
        assert out.startswith("Usage: ") or out.startswith("spur: "), out[:80]
        assert err == ""


def test_a_script_that_is_not_utf8_is_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")
    script = tmp_path / "job.sh"
    script.write_bytes(b"#!/bin/sh\necho \xff\xfe\n")
    assert slurm.sbatch_main([str(script)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not UTF-8 text" in err
