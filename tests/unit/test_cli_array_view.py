"""How squeue names and lists array records (the array contract), -j with task ids, and -O fields."""

from __future__ import annotations

import pytest
from test_cli_support import fake_cluster

from spur_hpc.cli import jobview, slurm
from spur_hpc.proto import slurm_pb2 as pb

NOW = 1700000600.0


def array_records() -> list[pb.Job]:
    spec = pb.JobSpec(name="sweep", user="alice", partition="debug", array="1-15%4")
    return [
        pb.Job(job_id=12, spec=spec, state=pb.PENDING, reason="JobArrayTaskLimit", array_job_id=12,
               array_pending="3-15", array_max_running=4),
        pb.Job(job_id=13, spec=spec, state=pb.RUNNING, array_job_id=12, array_task_id=1, nodes=["n1"],
               start_time=NOW - 60),
        pb.Job(job_id=14, spec=spec, state=pb.RUNNING, array_job_id=12, array_task_id=2, nodes=["n2"],
               start_time=NOW - 30),
        pb.Job(job_id=20, spec=pb.JobSpec(name="plain", user="bob"), state=pb.PENDING, reason="Priority"),
    ]  # fmt: skip


def test_the_pending_rest_and_each_task_have_slurms_ids() -> None:
    lines = jobview.squeue_lines(array_records(), "%i %A %F %K %T %R", False, NOW)
    assert lines == [
        "12_[3-15%4] 12 12 3-15%4 PENDING (JobArrayTaskLimit)",
        "12_1 13 12 1 RUNNING n1",
        "12_2 14 12 2 RUNNING n2",
        "20 20 20 N/A PENDING (Priority)",
    ]


def test_a_pending_rest_without_a_throttle_has_no_percent() -> None:
    job = pb.Job(job_id=7, state=pb.PENDING, array_job_id=7, array_pending="0-14:2")
    assert jobview.squeue_lines([job], "%i", False, NOW) == ["7_[0-14:2]"]


def test_expanding_the_pending_rest_gives_one_row_per_task() -> None:
    rows = jobview.expand_array_rows(array_records())
    assert [jobview.job_id_label(r) for r in rows][:4] == ["12_3", "12_4", "12_5", "12_6"]
    assert len(rows) == 13 + 2 + 1


def test_format_fields_take_a_suffix_and_a_width() -> None:
    lines = jobview.format_fields_lines(array_records()[:2], "JobID:\x1f,arraytaskid:\x1f,State:.9", True, NOW)
    assert lines == ["JOBID\x1fARRAY_TASK_ID\x1f    STATE", "12\x1f3-15%4\x1f  PENDING", "13\x1f1\x1f  RUNNING"]
    # Slurm's -O columns are 20 wide with no space between them, the last one padded too
    assert jobview.format_fields_lines(array_records()[3:], "name,username", False, NOW) == [
        "plain".ljust(20) + "bob".ljust(20)
    ]


def test_an_unknown_format_field_is_one_line() -> None:
    from spur_hpc.cli.runner import CliError

    with pytest.raises(CliError, match="unknown -O field 'Colour'"):
        jobview.format_fields_lines([], "JobID,Colour", True, NOW)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch):
    with fake_cluster(monkeypatch) as fake:
        for job in array_records():
            fake.add_job(job.job_id, **{f.name: v for f, v in job.ListFields() if f.name != "job_id"})
        yield fake


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # equal priorities: the latest start first (Slurm sorts by start time before its -S keys)
        (["-h", "-o", "%i"], "12_[3-15%4]\n12_2\n12_1\n20\n"),
        (["-h", "-r", "-o", "%i", "-t", "R"], "12_2\n12_1\n"),
        (["-h", "-j", "13,20", "-o", "%i"], "12_1\n20\n"),
        (["-h", "-j", "12_2", "-o", "%i %T"], "12_2 RUNNING\n"),
        (
            ["-h", "-j", "12_[2,4]", "-o", "%i %T"],
            "12_4 PENDING\n12_2 RUNNING\n",
        ),  # in job id order: the rest is job 12
        (["--noheader", "--name=plain", "--states=all", "-O", "JobID:\x1f,Reason:\x1f"], "20\x1fPriority\x1f\n"),
    ],
)
def test_squeue_selects_and_shows_array_tasks(cluster, capsys, argv, expected) -> None:
    assert slurm.squeue_main(argv) == 0
    assert capsys.readouterr().out == expected


def test_scancel_names_array_tasks_in_the_request(cluster, capsys) -> None:
    assert slurm.scancel_main(["12_2", "12_[4-6,9]", "20"]) == 0
    assert cluster.state.cancel_tasks == [(20, ""), (12, "2"), (12, "4-6,9")]


def test_scancel_refuses_a_bad_task_list_in_one_line(cluster, capsys) -> None:
    assert slurm.scancel_main(["12_[x]"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid job id '12_[x]'" in err
    assert not cluster.state.cancel_tasks


def test_clusters_takes_this_cluster_or_all_in_squeue_and_scancel(cluster, capsys) -> None:
    assert slurm.squeue_main(["-M", "all", "-h", "-j", "20", "-o", "%i"]) == 0
    assert capsys.readouterr().out == "CLUSTER: spur\n20\n"
    assert slurm.scancel_main(["--clusters=all", "20"]) == 0  # snakemake's cancel
    assert slurm.scancel_main(["-M", "other", "13"]) == 1
    assert "no such cluster; this cluster is 'spur'" in capsys.readouterr().err
    assert cluster.state.cancel_tasks == [(20, "")]
