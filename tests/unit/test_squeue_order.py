"""squeue's order and the columns that depend on a job's end, as Slurm 22.05 prints them (the captures 055, 057,
070, 071, 075 and 182 in tests/golden/slurm-22.05 show each rule): jobs built as messages, no cluster."""

from __future__ import annotations

import pytest

from spur_hpc.cli import jobview, squeue
from spur_hpc.cli.runner import CliError
from spur_hpc.model import TOP_PRIORITY
from spur_hpc.proto import slurm_pb2 as pb

NOW = 1700000600.0


def job(job_id, state, partition="debug", priority=0, start=0.0, **kw) -> pb.Job:
    spec = pb.JobSpec(name=f"j{job_id}", user="root", partition=partition, dependency=kw.pop("dependency", ""))
    return pb.Job(job_id=job_id, spec=spec, state=state, priority=priority, start_time=start, **kw)


def ids(jobs) -> list[str]:
    return [jobview.job_id_label(j) for j in jobs]


def busy_queue() -> list[pb.Job]:
    """The capture's queue: debug holds pending jobs (one held: priority 0) and running ones; long an array."""
    p = TOP_PRIORITY
    return [
        job(1, pb.COMPLETED, priority=p - 1, start=NOW - 30, end_time=NOW - 29, nodes=["n1"]),
        job(2, pb.FAILED, priority=p - 2, start=NOW - 30, end_time=NOW - 29, nodes=["n1"], reason="NonZeroExitCode"),
        job(3, pb.RUNNING, "long", p - 3, start=NOW - 10, nodes=["n3"]),
        job(4, pb.RUNNING, priority=p - 4, start=NOW - 7, nodes=["n1"]),
        job(7, pb.PENDING, "long", p - 5, array_job_id=7, array_pending="2-5", array_max_running=2),
        job(8, pb.RUNNING, "long", p - 5, start=NOW - 4, array_job_id=7, array_task_id=0, nodes=["n3"]),
        job(9, pb.RUNNING, "long", p - 5, start=NOW - 4, array_job_id=7, array_task_id=1, nodes=["n3"]),
        job(10, pb.PENDING, priority=p - 6, reason="Resources"),
        job(12, pb.PENDING, priority=0, reason="JobHeldUser"),
        job(13, pb.PENDING, priority=p - 7, reason="Dependency"),
        job(14, pb.CANCELLED, priority=0, reason="JobHeldUser"),
    ]


def test_the_default_order_is_partition_then_state_then_priority() -> None:
    shown = squeue.sort_jobs(busy_queue(), squeue.parse_sort(squeue.DEFAULT_SORT), NOW)
    # debug: CA, CD, F, then PD by priority (the held job last), then R; long: PD, R by priority, ties as listed
    assert ids(shown) == ["14", "1", "2", "10", "13", "12", "4", "7_[2-5%2]", "3", "7_0", "7_1"]


def test_asking_for_one_array_lists_its_records_newest_first_as_slurm_does() -> None:
    records = [j for j in busy_queue() if j.array_job_id == 7]
    listed = squeue.listed_order(records, [7])
    assert ids(squeue.sort_jobs(listed, squeue.parse_sort(squeue.DEFAULT_SORT), NOW)) == ["7_[2-5%2]", "7_1", "7_0"]
    listed = squeue.listed_order(records, [7, 8])  # several ids: the controller's whole list, in id order
    assert ids(squeue.sort_jobs(listed, squeue.parse_sort(squeue.DEFAULT_SORT), NOW)) == ["7_[2-5%2]", "7_0", "7_1"]


def test_sort_keys_as_given_with_minus_for_descending() -> None:
    queue = busy_queue()
    assert ids(squeue.sort_jobs(queue, squeue.parse_sort("-i"), NOW))[:3] == ["14", "13", "12"]
    assert ids(squeue.sort_jobs(queue, squeue.parse_sort("i"), NOW))[4:8] == ["7_0", "7_1", "7_[2-5%2]", "10"]
    with pytest.raises(CliError, match="Invalid sort specification: X"):
        squeue.parse_sort("P,X")


def test_the_reason_column_of_an_ended_job_is_slurms() -> None:
    by_id = {j.job_id: j for j in busy_queue()}
    timed_out = job(3, pb.TIMEOUT, "long", nodes=["n3"], reason="TimeLimit")
    lines = jobview.squeue_lines([by_id[1], by_id[2], timed_out, by_id[14]], "%i %R", False, NOW)
    # completed: its nodes; failed or timed out: the reason; cancelled before it started: no nodes, nothing
    assert lines == ["1 n1", "2 (NonZeroExitCode)", "3 (TimeLimit)", "14 "]


def test_priority_dependency_and_group_fields() -> None:
    waiting = job(13, pb.PENDING, priority=4294901750, reason="Dependency", dependency="afterok:4:5")
    lines = jobview.squeue_lines([waiting], "%Q|%p|%E|%G", True, NOW)
    assert lines == [
        "PRIORITY|PRIORITY|DEPENDENCY|GROUP",
        "4294901750|0.99998473911546|afterok:4(unfulfilled),afterok:5(unfulfilled)|0",
    ]
    running = job(13, pb.RUNNING, priority=1, dependency="afterok:4")
    assert jobview.squeue_lines([running], "%E", False, NOW) == ["(null)"], "Slurm drops a satisfied dependency"


def test_a_cancelled_arrays_own_record_is_named_by_the_array_id() -> None:
    rest = job(7, pb.CANCELLED, "long", array_job_id=7, array_pending="2", array_max_running=2)
    assert jobview.squeue_lines([rest], "%i", False, NOW) == ["7"]


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch):
    from test_cli_support import fake_cluster

    with fake_cluster(monkeypatch) as fake:
        for record in busy_queue():
            fake.add_job(record.job_id, **{f.name: v for f, v in record.ListFields() if f.name != "job_id"})
        fake.state.jobs[4].spec.account = "physics"
        yield fake


def test_long_prints_the_date_first_and_start_lists_the_pending_jobs(queue, capsys) -> None:
    import re

    from spur_hpc.cli import slurm

    assert slurm.squeue_main(["-l", "-t", "R"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \d{4}", lines[0]), lines[0]
    assert lines[1].split() == ["JOBID", "PARTITION", "NAME", "USER", "STATE", "TIME", "TIME_LIMI", "NODES",
                                "NODELIST(REASON)"]  # fmt: skip
    assert slurm.squeue_main(["--start", "-h", "-o", "%i %S %Y"]) == 0
    # pending only, by start time (none is known: N/A), so in the order the controller lists them
    assert capsys.readouterr().out.splitlines() == ["7_[2-5%2] N/A (null)", "10 N/A (null)", "12 N/A (null)",
                                                    "13 N/A (null)"]  # fmt: skip


def test_account_selects_and_format_fields_keep_their_padding(queue, capsys) -> None:
    from spur_hpc.cli import slurm

    assert slurm.squeue_main(["-h", "-A", "physics", "-O", "JobID:6,Name"]) == 0
    assert capsys.readouterr().out == "4     " + "j4".ljust(20) + "\n"
    assert slurm.squeue_main(["-h", "-S", "-i", "-t", "PD", "-o", "%i"]) == 0
    assert capsys.readouterr().out.split() == ["13", "12", "10", "7_[2-5%2]"]
    assert slurm.squeue_main(["-S", "P,Z"]) == 1
    assert capsys.readouterr().err == "squeue: error: Invalid sort specification: Z\n"
