"""cli/jobopts.py: the option table of sbatch, srun and salloc and the parser they share."""

from __future__ import annotations

import time

import pytest

from spur_hpc.cli import jobopts, units
from spur_hpc.cli.runner import CliError


def parse(argv, environ=None, program="sbatch"):
    return jobopts.parse_job_options(program, argv, environ or {})


def test_the_table_names_each_option_once_per_command_with_a_known_disposition() -> None:
    jobopts._check_table()
    for entry in jobopts.OPTIONS:
        disposition, reason = entry.disposition_for("sbatch")
        if disposition != jobopts.HONOURED:
            assert reason, f"--{entry.long} is {disposition} without a reason"


@pytest.mark.parametrize(
    "argv",
    [
        ["--time=30", "job.sh"],
        ["--time", "30", "job.sh"],
        ["-t", "30", "job.sh"],
        ["-t30", "job.sh"],
    ],
)
def test_every_spelling_of_a_value_gives_the_same_option(argv) -> None:
    options, rest = parse(argv)
    assert options.spec_fields()["time_limit_secs"] == 1800 and rest == ["job.sh"]


def test_a_unique_prefix_of_a_long_option_is_that_option() -> None:
    assert parse(["--partit=gpu"])[0].get("partition") == "gpu"  # as getopt_long takes it
    with pytest.raises(CliError, match="ambiguous .*--time, --time-min"):
        parse(["--tim=30"])


def test_bundled_short_flags_and_a_value_after_them() -> None:
    options, rest = parse(["-HQJname", "job.sh"])
    assert options.get("hold") is True and options.get("quiet") is True and options.get("job_name") == "name"
    assert rest == ["job.sh"]


def test_parsing_stops_at_the_script_and_everything_after_it_is_its_arguments() -> None:
    options, rest = parse(["-N", "2", "job.sh", "-N", "5", "--time=1"])
    assert rest == ["job.sh", "-N", "5", "--time=1"] and options.spec_fields()["nodes"] == 2


def test_an_optional_value_is_taken_only_after_an_equals_sign() -> None:
    options, rest = parse(["--nice", "job.sh"])
    assert options.spec_fields()["nice"] == jobopts.DEFAULT_NICE and rest == ["job.sh"]
    options, _ = parse(["--nice=-5", "job.sh"])
    assert options.spec_fields()["nice"] == -5


def test_the_last_of_requeue_and_no_requeue_wins() -> None:
    assert parse(["--requeue", "--no-requeue"])[0].spec_fields()["requeue"] == 2
    assert parse(["--no-requeue", "--requeue"])[0].spec_fields()["requeue"] == 1


def test_input_variables_fill_what_the_command_line_leaves_out() -> None:
    environ = {"SBATCH_PARTITION": "gpu", "SBATCH_TIMELIMIT": "10", "SBATCH_REQUEUE": "", "SALLOC_QOS": "high"}
    options, _ = parse(["-t", "20"], environ)
    fields = options.spec_fields()
    assert fields["partition"] == "gpu" and fields["time_limit_secs"] == 1200 and fields["requeue"] == 1
    assert "qos" not in fields  # salloc's variable is not sbatch's


def test_each_command_reads_its_own_input_variables() -> None:
    environ = {"SBATCH_PARTITION": "a", "SALLOC_PARTITION": "b", "SLURM_PARTITION": "c"}
    assert [parse([], environ, p)[0].get("partition") for p in ("sbatch", "salloc", "srun")] == ["a", "b", "c"]
    assert parse([], {"SLURM_CLUSTERS": "x"}, "sbatch")[0].get("clusters") == "x"


def test_a_bad_value_in_an_input_variable_names_the_variable() -> None:
    options, _ = parse([], {"SBATCH_TIMELIMIT": "soon"})
    with pytest.raises(CliError, match="invalid SBATCH_TIMELIMIT value 'soon'"):
        options.spec_fields()


def test_a_refused_option_is_one_line_with_the_reason() -> None:
    with pytest.raises(CliError, match=r"^--reservation is not supported: Spur has no reservations$"):
        parse(["--reservation=maint", "job.sh"])
    with pytest.raises(CliError, match=r"^SBATCH_RESERVATION \(--reservation\) is not supported"):
        parse([], {"SBATCH_RESERVATION": "maint"})


def test_recorded_and_ignored_options_warn_once_each() -> None:
    options, _ = parse(["--mail-type=END", "--mail-user=me", "--cpu-freq=high", "--cpu-freq=low"])
    assert options.warnings() == [
        "sbatch: warning: --mail-type is recorded but no mail is sent",
        "sbatch: warning: --mail-user is recorded but no mail is sent",
        "sbatch: warning: --cpu-freq is ignored: Spur does not manage node power or frequencies",
    ]
    assert options.spec_fields() == {"mail_type": "END", "mail_user": "me"}


def test_the_command_line_wins_over_values_merged_under_it() -> None:
    directives, _ = parse(["-J", "from-script", "-t", "5"])
    command_line, _ = parse(["-t", "7"])
    directives.update(command_line)
    assert directives.spec_fields() == {"name": "from-script", "time_limit_secs": 420}


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("USR2@90", {"signal_number": 12, "signal_secs": 90, "signal_batch_only": False}),
        ("B:USR2@30", {"signal_number": 12, "signal_secs": 30, "signal_batch_only": True}),
        ("SIGTERM", {"signal_number": 15, "signal_secs": 60, "signal_batch_only": False}),
        ("10", {"signal_number": 10, "signal_secs": 60, "signal_batch_only": False}),
    ],
)
def test_signal_takes_names_numbers_and_the_batch_prefix(text, fields) -> None:
    assert parse([f"--signal={text}"])[0].spec_fields() == fields


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--signal=BOGUS"], "invalid --signal signal 'BOGUS'"),
        (["--signal=USR1@99999"], "from 0 to 65535"),
        (["--signal=R:USR1"], "Spur has no reservations"),
        (["-w", "n[1-"], "--nodelist: bad hostlist"),
        (["--open-mode=sometimes"], "use one of append, truncate"),
        (["--kill-on-invalid-dep=maybe"], "use yes or no"),
        (["--mail-type=WHENEVER"], "invalid --mail-type value"),
        (["--gres=gpu:two:x"], "NAME[:TYPE][:COUNT]"),
        (["--gpus=lots"], "[TYPE:]COUNT"),
        (["--array=a-b"], "--array='a-b': 'a-b' is not a task id"),
        (["--dependency=afterwards:1"], "not a dependency type"),
        (["--nice=99999999999"], "from -2147483645 to 2147483645"),
        (["--begin=someday"], "invalid --begin value 'someday'"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option(argv, message) -> None:
    options, _ = parse(argv)
    with pytest.raises(CliError) as caught:
        options.spec_fields()
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_control_character_in_a_text_option_is_refused() -> None:
    options, _ = parse(["--comment=a\x1b[2Jb"])
    with pytest.raises(CliError, match="--comment .* contains a control character"):
        options.spec_fields()


NOW = time.mktime((2026, 6, 15, 12, 0, 0, 0, 0, -1))  # a Monday at noon, local time


def local(year, month, day, hour=0, minute=0, second=0) -> float:
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("now+60", NOW + 60),
        ("now+2hours", NOW + 7200),
        ("now+1days", NOW + 86400),
        ("13:30", local(2026, 6, 15, 13, 30, 0)),
        ("11:30", local(2026, 6, 16, 11, 30, 0)),  # passed today: tomorrow
        ("4:00PM", local(2026, 6, 15, 16, 0, 0)),
        ("today", local(2026, 6, 15, 0, 0, 0)),
        ("tomorrow", local(2026, 6, 16, 0, 0, 0)),
        ("midnight", local(2026, 6, 16, 0, 0, 0)),
        ("teatime", local(2026, 6, 15, 16, 0, 0)),
        ("2026-07-01", local(2026, 7, 1, 0, 0, 0)),
        ("2026-07-01T08:15", local(2026, 7, 1, 8, 15, 0)),
        ("2026-07-01T08:15:30", local(2026, 7, 1, 8, 15, 30)),
        ("07/01", local(2026, 7, 1, 0, 0, 0)),
        ("07/01/27-10:00", local(2027, 7, 1, 10, 0, 0)),
        ("0701", local(2026, 7, 1, 0, 0, 0)),
    ],
)
def test_begin_reads_slurms_time_forms(text, expected) -> None:
    assert units.parse_begin_time(text, "--begin", now=NOW) == expected


@pytest.mark.parametrize("text", ["now-5", "25:00", "2026-13-01", "13/45", "now+5fortnights", "noonish", ""])
def test_begin_refuses_what_slurm_does_not_read(text) -> None:
    with pytest.raises(CliError, match="invalid --begin value"):
        units.parse_begin_time(text, "--begin", now=NOW)


def test_nodes_may_come_from_a_file_as_slurm_reads_them(tmp_path) -> None:
    listing = tmp_path / "nodes"
    listing.write_text("n1 n2\nn3,n1\n")
    assert parse(["-F", str(listing)])[0].spec_fields() == {"nodelist": "n1,n2,n3"}
    assert parse([f"--nodelist={listing}"])[0].spec_fields() == {"nodelist": "n1,n2,n3"}  # a '/': a file
    options, _ = parse(["-x", str(tmp_path / "missing")])
    with pytest.raises(CliError, match="cannot read the node file"):
        options.spec_fields()


def test_every_option_of_slurms_three_commands_is_in_the_table() -> None:
    """The long options of Slurm 22.05's man pages and of newer releases (a sample): none is unknown."""
    newer = ["oom-kill-step", "tres-per-task", "container-id", "extra", "segment"]
    for program, names in {
        "sbatch": ["acctg-freq", "batch", "bbf", "export-file", "ignore-pbs", "kill-on-invalid-dep", "nodefile",
                   "parsable", "test-only", "wait-all-nodes", "wrap", "stepmgr", *newer],
        "srun": ["bcast", "cpu-bind", "het-group", "jobid", "label", "multi-prog", "pty", "relative", "unbuffered",
                 "x11", "kill-on-bad-exit", "mpi", "overlap", "exact", *newer],
        "salloc": ["bell", "no-bell", "no-shell", "kill-command", "immediate", "x11", "stepmgr", *newer],
    }.items():  # fmt: skip
        known = {entry.long for entry in jobopts.entries_for(program)}
        assert not [n for n in names if n not in known], program


@pytest.mark.parametrize(
    ("program", "variable", "dest"),
    [
        ("sbatch", "SBATCH_ARRAY_INX", "array"), ("sbatch", "SBATCH_DEBUG", "verbose"),
        ("sbatch", "SBATCH_MEM_PER_NODE", "mem"), ("sbatch", "SBATCH_NO_REQUEUE", "requeue"),
        ("sbatch", "SBATCH_WAIT", "wait"), ("sbatch", "SBATCH_REQ_SWITCH", "switches"),
        ("salloc", "SALLOC_KILL_CMD", "kill_command"), ("salloc", "SALLOC_IMMEDIATE", "immediate"),
        ("srun", "SLURM_STEP_GRES", "gres"), ("srun", "SLURM_LABELIO", "label"), ("srun", "SLURM_NNODES", "nodes"),
        ("srun", "SRUN_CPUS_PER_TASK", "cpus_per_task"), ("srun", "SLURMD_DEBUG", "slurmd_debug"),
        ("srun", "SLURM_JOB_ID", "jobid"), ("srun", "SLURM_EXPORT_ENV", "export"),
    ],
)  # fmt: skip
def test_the_input_variables_of_the_man_pages_stand_for_their_options(program, variable, dest) -> None:
    names = {name: entry.dest for entry in jobopts.entries_for(program) for name in entry.env_names(program)}
    assert names.get(variable) == dest


def test_memory_per_node_and_per_cpu_exclude_each_other() -> None:
    options, _ = parse(["--mem=4G", "--mem-per-cpu=1G"])
    with pytest.raises(CliError, match="^--mem and --mem-per-cpu exclude each other"):
        options.spec_fields()


def test_the_higher_source_chooses_between_options_that_exclude_each_other() -> None:
    options, _ = parse(["--mem=2G"], {"SLURM_MEM_PER_CPU": "512"}, program="srun")  # a step inside a job
    assert options.spec_fields() == {"memory_mb": 2048}
    directives, _ = parse(["--mem=4G"])
    command_line, _ = parse(["--mem-per-cpu=1G"])
    directives.update(command_line)
    assert directives.spec_fields() == {"mem_per_cpu_mb": 1024}
    both, _ = parse([], {"SLURM_MEM_PER_NODE": "4096", "SLURM_MEM_PER_CPU": "512"}, program="srun")
    assert both.spec_fields() == {"mem_per_cpu_mb": 512}
