"""sbatch's option surface through jobopts, against a fake controller: what it sends and what it prints."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from test_cli_support import fake_cluster

from spur_hpc.cli import slurm


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch):
    for name in [n for n in os.environ if n.startswith(("SBATCH_", "SLURM_"))]:
        monkeypatch.delenv(name)
    with fake_cluster(monkeypatch) as fake:
        yield fake


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = slurm.sbatch_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def script(tmp_path: Path, *directives: str, body: str = "echo hi") -> str:
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body + "\n")
    return str(path)


def test_script_arguments_reach_the_spec(cluster, capsys, tmp_path) -> None:
    code, out, err = run([script(tmp_path), "one", "--two", "-3"], capsys)
    assert (code, err) == (0, "")
    assert list(cluster.state.jobs[1].spec.argv) == ["one", "--two", "-3"]


def test_script_arguments_are_refused_with_wrap(cluster, capsys) -> None:
    code, out, err = run(["--wrap", "true", "extra"], capsys)
    assert code == 1 and err.count("\n") == 1 and "script arguments are not allowed with --wrap" in err
    assert not cluster.state.jobs


def test_any_option_may_be_a_directive(cluster, capsys, tmp_path) -> None:
    path = script(
        tmp_path, "-H", "--array=0-15:2%4", "--dependency=afterok:7", "--signal=B:USR2@90",
        "--open-mode=append", "--exclusive", "-w n[1-2]", "--requeue", "--nice=5", "--comment='a rule'",
        "--begin=now+60",
    )  # fmt: skip
    before = time.time()
    assert run([path], capsys)[0] == 0
    spec = cluster.state.jobs[1].spec
    assert spec.hold and spec.array == "0-15:2%4" and spec.dependency == "afterok:7"
    assert (spec.signal_number, spec.signal_secs, spec.signal_batch_only) == (12, 90, True)
    assert spec.open_mode == "append" and spec.exclusive and spec.nodelist == "n[1-2]"
    assert spec.requeue == 1 and spec.nice == 5 and spec.comment == "a rule"
    assert before + 60 <= spec.begin_time <= time.time() + 60


def test_input_variables_win_over_directives_and_the_command_line_over_both(
    cluster, capsys, tmp_path, monkeypatch
) -> None:
    path = script(tmp_path, "-p directive", "-t 5", "-J directive")
    monkeypatch.setenv("SBATCH_PARTITION", "variable")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "6")
    assert run(["-t", "7", path], capsys)[0] == 0
    spec = cluster.state.jobs[1].spec
    assert (spec.partition, spec.time_limit_secs, spec.name) == ("variable", 420, "directive")


def test_a_refused_directive_names_its_line(cluster, capsys, tmp_path) -> None:
    path = script(tmp_path, "--uid=0")
    code, out, err = run([path], capsys)
    assert code == 1
    reason = "jobs run as the user MUNGE names; submit as that user"
    assert err == f"sbatch: error: {path} line 2: --uid is not supported: {reason}\n"


def test_a_recorded_option_warns_once_and_quiet_silences_it(cluster, capsys, tmp_path) -> None:
    path = script(tmp_path, "--mail-type=END")
    code, out, err = run(["--mail-type=FAIL", path], capsys)
    assert code == 0 and out == "Submitted batch job 1\n"
    assert err == "sbatch: warning: --mail-type is recorded but no mail is sent\n"
    assert cluster.state.jobs[1].spec.mail_type == "FAIL"
    assert run(["-Q", "--mail-type=FAIL", path], capsys) == (0, "", "")


def test_submit_host_is_the_callers_host_name(cluster, capsys) -> None:
    assert run(["--wrap", "true"], capsys)[0] == 0
    assert cluster.state.jobs[1].spec.submit_host == socket.gethostname()


def test_clusters_takes_this_clusters_name_or_all_and_parsable_then_names_it(cluster, capsys) -> None:
    assert run(["--parsable", "-M", "spur", "--wrap", "true"], capsys)[:2] == (0, "1;spur\n")
    assert cluster.state.jobs[1].spec.cluster_name == "spur"
    assert run(["--parsable", "--clusters=all", "--wrap", "true"], capsys)[:2] == (0, "2;spur\n")
    assert run(["--wrap", "true", "-M", "spur"], capsys)[1] == "Submitted batch job 3 on cluster spur\n"


def test_another_clusters_name_is_one_line_and_exit_1(cluster, capsys) -> None:
    code, out, err = run(["-M", "elsewhere", "--wrap", "true"], capsys)
    assert (code, out) == (1, "")
    assert err == "sbatch: error: --clusters elsewhere: no such cluster; this cluster is 'spur' (or use all)\n"
    assert not cluster.state.jobs


def test_test_only_prints_slurms_line_and_submits_nothing(cluster, capsys) -> None:
    code, out, err = run(["--test-only", "-n", "2", "-c", "2", "-p", "debug", "--wrap", "true"], capsys)
    assert (code, out) == (0, "")
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(1700000100))
    assert err == f"sbatch: Job 0 to start at {when} using 4 processors on nodes n1 in partition debug\n"
    assert not cluster.state.jobs


def test_help_lists_what_is_honoured_and_counts_the_rest(capsys) -> None:
    assert slurm.sbatch_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--hold" in out and "--mail-type" in out and "--cpu-freq" not in out and "--uid" not in out
    assert out.rstrip().endswith("(docs/cli.md lists them all).")
