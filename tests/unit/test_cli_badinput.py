"""Bad input: one line on stderr naming the value and the fix, a non-zero exit, no traceback, no controller call.

SPUR_CONTROLLER_ADDR points at a port nobody listens on: had a command reached for the controller, the
message would be about reaching it, not about the input.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import BIN
from spur_hpc.cli import slurm, spur

CASES = [
    # (entry, argv, words the one line must contain)
    (slurm.squeue_main, ["--bogus"], ["unrecognized option '--bogus'", "squeue --help"]),
    (slurm.squeue_main, ["-Z"], ["invalid option '-Z'"]),
    (slurm.squeue_main, ["-j", "abc"], ["invalid job id 'abc'", "positive numbers"]),
    (slurm.squeue_main, ["-j", "5,x7"], ["invalid job id 'x7'"]),
    (slurm.squeue_main, ["-o", "%.5i %!"], ["unknown format specifier %!", "%.5i %!"]),
    (slurm.squeue_main, ["-o"], ["option '-o' needs a value"]),
    (slurm.squeue_main, ["extra"], ["unexpected argument 'extra'"]),
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
    (slurm.sacct_main, ["-j", "1.bash"], ["invalid job reference '1.bash'", "neither batch nor a number", "N_T"]),
    (slurm.sacct_main, ["--units", "Q"], ["invalid --units value 'Q'", "K, M, G, T"]),
    (slurm.sacct_main, ["-P", "--delimiter="], ["--delimiter is empty"]),
    (spur.main, ["frobnicate"], ["unknown command 'frobnicate'", "spur --help"]),
    (spur.main, ["node", "drain"], ["takes one node name"]),
    (spur.main, ["node", "reboot", "n1"], ["unknown node action 'reboot'"]),
    (spur.main, ["cluster", "explode"], ["unknown cluster command 'explode'"]),
    (spur.main, ["jobs", "-j", "x"], ["invalid job id 'x'"]),
    (spur.main, ["submit", "--wrap", "true", "--mem", "1Q"], ["invalid --mem value '1Q'"]),
    (spur.main, ["version", "--check"], ["no release index given", "--index"]),
    (spur.main, ["--controller"], ["--controller needs addresses"]),
]


def test_an_unknown_node_state_is_slurms_four_lines_before_any_call(capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")  # nobody answers there: nothing may be asked
    assert slurm.scontrol_main(["update", "NodeName=n1", "State=SLEEP"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "Invalid input: State=SLEEP",
        "Request aborted",
        "Valid states are: DRAIN DOWN RESUME IDLE UNDRAIN",  # the states Spur takes, in Slurm's line
        "Not all states are valid given a node's prior state",
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


@pytest.mark.parametrize("ref", ["12_x", "12_[]", "12_[0-1]"])
def test_sacct_stops_on_an_array_task_that_is_no_single_id_with_slurms_fatal_line(ref, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")
    assert slurm.sacct_main(["-X", "-j", ref]) == 1
    assert capsys.readouterr() == ("", "sacct: fatal: Bad job array element specified: 12\n")


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


# ---------------------------------------------------------------- hostile input to the installed commands
# Each runs the real console script with the controller unreachable: every one of these must be refused
# before any call, in one line, within the subprocess deadline (before these bounds some ran for minutes,
# read /dev/zero until memory ran out, or wrapped a number into another one).

BIG_NUMBER = "99999999999999999999"
HOSTILE = [
    # (argv, words the one error line must contain)
    ([b"sbatch", b"--wrap=echo \xff"], ["argument '--wrap=echo \\xff' is not UTF-8 text"]),
    (["squeue", "-o", "%999999999999999999999i"], ["bad width '999999999999999999999'", "0 to 1024"]),
    (["squeue", "-o", "%.99999999j"], ["bad width '99999999'", "1024"]),
    (["sinfo", "-o", "%99999999N"], ["bad width '99999999'", "1024"]),
    (["sacct", "--format", "JobID%99999999"], ["bad width '99999999'", "field JobID", "1 to 1024"]),
    (["scontrol", "update", "NodeName=pn[1-99999999]", "State=DRAIN", "Reason=x"], ["more than 65536 nodes"]),
    (["scontrol", "update", "NodeName=a[1-40000],b[1-40000]", "State=DRAIN", "Reason=x"], ["more than 65536"]),
    (["sinfo", "-n", "pn[0-" + "9" * 5000 + "]"], ["bad hostlist", "is not a number or a range"]),
    (["sbatch", "--wrap", "true", f"--mem={BIG_NUMBER}"], [f"invalid --mem value '{BIG_NUMBER}'", str(2**63 - 1)]),
    (["sbatch", "--wrap", "true", "--mem=9007199254740993T"], ["invalid --mem value", "largest"]),
    (["sbatch", "--wrap", "true", "-N", "99999999999"], ["invalid --nodes value '99999999999'", "1 to 2147483647"]),
    (["sbatch", "--wrap", "true", "-n", "2-" + BIG_NUMBER], ["invalid --ntasks value", "2147483647"]),
    (["sbatch", "--wrap", "true", "-c", "²"], ["invalid --cpus-per-task value '²'"]),
    (["sbatch", "--wrap", "true", "-t", BIG_NUMBER + "000"], ["invalid --time value", "UNLIMITED"]),
    (["sbatch", "--wrap", "true", "-t", "9" * 5000], ["invalid --time value"]),
    (["sbatch", "--wrap", "true", "-J", "a\nb"], ["--job-name 'a\\nb' contains a control character (\\n)"]),
    (["sbatch", "--wrap", "true", "-J", "ok\x1b[2Jgone"], ["control character (\\x1b)"]),
    (["sbatch", "--wrap", "true", "-p", "debug\r"], ["--partition", "control character (\\r)"]),
    (["scancel", "9223372036854775808"], ["invalid job id '9223372036854775808'", "up to 9223372036854775807"]),
    (["scontrol", "show", "job", "9" * 5000], ["invalid job id"]),
    (["scontrol", "hold", BIG_NUMBER], [f"invalid job id '{BIG_NUMBER}'"]),
    (["squeue", "-j", "1\n2"], ["invalid job id '1\\n2'"]),
    (["sacct", "-S", f"now-{BIG_NUMBER}days"], ["invalid --starttime value", "30,000 years"]),
    (["sacct", "-S", "99999-01-01"], ["invalid --starttime value '99999-01-01'"]),
    (["scancel", "-s", "¹", "5"], ["invalid signal '¹'"]),
    (["scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=a\nb"], ["Reason 'a\\nb'", "control character"]),
    (["spur", "node", "drain", "n1", "--reason", "x\ry"], ["--reason 'x\\ry' contains a control character"]),
]


def run_command(argv: list, **kwargs) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, SPUR_CONTROLLER_ADDR="127.0.0.1:1")
    env.pop("SPUR_CONF", None)
    program = argv[0] if isinstance(argv[0], str) else argv[0].decode()
    if (BIN / program).exists():  # a command of ours, not prlimit
        argv = [str(BIN / program), *argv[1:]]
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(argv, env=env, capture_output=True, timeout=60, **kwargs)


def assert_one_error_line(result: subprocess.CompletedProcess, words: list[str]) -> str:
    err = result.stderr.decode("utf-8", "backslashreplace")
    assert result.returncode != 0, err
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    assert "cannot reach" not in err and "no controller could answer" not in err, err
    for word in words:
        assert word in err, err
    assert result.stdout == b""
    return err


@pytest.mark.parametrize(("argv", "words"), HOSTILE, ids=[repr(c[0])[:80] for c in HOSTILE])
def test_hostile_input_is_refused_in_one_line_before_any_call(argv, words) -> None:
    assert_one_error_line(run_command(argv), words)


def test_sbatch_refuses_a_device_as_its_script_and_reads_standard_input_with_a_bound() -> None:
    # 200 MB of address space: reading /dev/zero without a bound dies of MemoryError within a second
    limit = ["prlimit", "--as=200000000", "--"]
    assert_one_error_line(run_command([*limit, str(BIN / "sbatch"), "/dev/zero"]),
                          ["batch script /dev/zero is a device or socket, not a file"])  # fmt: skip
    with open("/dev/zero", "rb") as zero:
        piped = run_command([*limit, str(BIN / "sbatch")], stdin=zero)
    assert_one_error_line(piped, ["batch script standard input is larger than 4194304 bytes"])


def test_sbatch_bounds_each_environment_variable_and_the_whole_environment(tmp_path) -> None:
    script = tmp_path / "job.sh"
    # a #SBATCH line can carry a value no exec() could (the kernel caps one NAME=value at 128 KiB)
    script.write_text("#!/bin/sh\n#SBATCH --export=ALL,BIG=" + "x" * 200_000 + "\ntrue\n")
    assert_one_error_line(run_command(["sbatch", str(script)]), ["environment variable 'BIG' is 200005 bytes",
                                                                 "131072 bytes per variable", "--export"])  # fmt: skip
    import os

    many = {f"V{i}": "y" * 100_000 for i in range(12)}
    result = subprocess.run([str(BIN / "sbatch"), "--wrap", "true"], capture_output=True, timeout=60,
                            env={**os.environ, **many, "SPUR_CONTROLLER_ADDR": "127.0.0.1:1"})  # fmt: skip
    assert_one_error_line(result, ["bytes in all", "1048576", "--export=NONE"])
    # --export=NONE leaves them behind: the submission gets as far as the (unreachable) controller
    result = subprocess.run([str(BIN / "sbatch"), "--export=NONE", "--wrap", "true"], capture_output=True,
                            timeout=60, env={**os.environ, **many, "SPUR_CONTROLLER_ADDR": "127.0.0.1:1"})  # fmt: skip
    assert b"no controller could answer SubmitJob" in result.stderr


def test_a_script_file_named_with_a_newline_needs_a_job_name(tmp_path) -> None:
    script = tmp_path / "evil\nname.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    assert_one_error_line(run_command(["sbatch", str(script)]), ["control character (\\n)"])


def test_listings_escape_control_characters_in_values_and_keep_the_format_text() -> None:
    from spur_hpc.cli import acctview, jobrecord, jobview
    from spur_hpc.proto import slurm_pb2

    job = slurm_pb2.Job(job_id=7, spec=slurm_pb2.JobSpec(name="evil\nforged", user="\x1b[31mred\u202e"))
    # a \x1f between columns is the caller's own separator (Open OnDemand's): it stays as it is
    assert jobview.squeue_lines([job], "%i\x1f%j %u", False, 0.0) == ["7\x1fevil\\nforged \\x1b[31mred\\u202e"]
    fields = acctview.parse_fields("JobID,JobName")
    assert acctview.sacct_lines([job], fields, 0.0, False, "parsable2") == ["7|evil\\nforged"]
    shown = jobrecord.show_job_lines(job, 0.0)
    assert shown[0] == "JobId=7 JobName=evil\\nforged" and all("\n" not in line for line in shown)


def test_a_loop_over_many_ids_or_nodes_stops_at_the_first_unreachable_controller() -> None:
    # each write waits up to 15 s for a controller; 65,536 nodes one after the other would take 11 days.
    # The two commands wait out their 15 s side by side.
    with ThreadPoolExecutor(2) as pool:
        cancel = pool.submit(run_command, ["scancel", "11", "12", "13"])
        update = pool.submit(run_command, ["scontrol", "update", "NodeName=n[1-4]", "State=DRAIN", "Reason=x"])
    result = cancel.result()
    assert result.returncode == 1 and b"Traceback" not in result.stderr
    assert result.stderr.count(b"\n") == 1, result.stderr
    assert b"job 11: no controller could answer CancelJob" in result.stderr and b"(2 more not tried)" in result.stderr
    result = update.result()
    assert result.stderr.count(b"\n") == 1 and b"node n1: no controller" in result.stderr
    assert b"(3 more not tried)" in result.stderr


def test_names_and_values_with_digits_int_refuses_are_plain_text() -> None:
    from spur_hpc import model
    from spur_hpc.cli import playbooks

    # a node registered as n² used to raise ValueError in every listing that compresses node names
    assert model.compress_hostlist(["n²", "n1", "n2"]) == "n[1-2],n²"
    assert playbooks._extra("spur_port=²") == {"spur_port": "²"}
    assert playbooks._extra("spur_port=6817") == {"spur_port": 6817}


def test_a_number_that_does_not_fit_its_field_is_refused_not_wrapped() -> None:
    from spur_hpc.wire import protocodec

    for fields, words in (
        ({"nodes": 2**31}, "nodes 2147483648 is out of range: it must be from -2147483648 to 2147483647"),
        ({"memory_mb": 10**20}, "memory_mb 100000000000000000000 is out of range"),
    ):
        with pytest.raises(protocodec.ProtoError, match=words):
            protocodec.encode("SubmitJobRequest", {"spec": fields})
    # what fits still encodes as the protobuf runtime would
    from spur_hpc.proto import slurm_pb2

    data = protocodec.encode("SubmitJobRequest", {"spec": {"nodes": 2**31 - 1, "memory_mb": -1}})
    assert data == slurm_pb2.SubmitJobRequest(spec=slurm_pb2.JobSpec(nodes=2**31 - 1, memory_mb=-1)).SerializeToString()
