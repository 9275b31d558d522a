"""sacct's lines for array tasks and job steps, and its -j references (N, N_T, N_[T-U], N.S, N.batch)."""

from __future__ import annotations

import pytest

from spur_hpc.cli import acctview, jobhistory
from spur_hpc.cli.runner import CliError
from spur_hpc.proto import slurm_pb2 as pb

T0 = 1_760_000_000.0


def batch(state: int = pb.COMPLETED, exit_code: int = 0, nodes: tuple[str, ...] = ("node1",)) -> pb.Step:
    return pb.Step(
        step_id="batch",
        name="batch",
        state=state,
        nodes=list(nodes),
        tasks=1,
        cpus_per_task=2,
        exit_code=exit_code,
        start_time=T0 + 10,
        end_time=T0 + 70,
        attempt=1,
    )


def job(job_id: int, state: int = pb.COMPLETED, **fields) -> pb.Job:
    spec = pb.JobSpec(
        name=fields.pop("name", "work"),
        user="alice",
        uid=1000,
        tasks=2,
        cpus_per_task=1,
        account="physics",
        memory_mb=fields.pop("memory_mb", 0),
    )
    started = state != pb.PENDING
    return pb.Job(
        job_id=job_id,
        spec=spec,
        state=state,
        submit_time=T0,
        start_time=T0 + 10 if started else 0,
        end_time=T0 + 70 if state not in (pb.PENDING, pb.RUNNING) else 0,
        nodes=["node1", "node2"] if started else [],
        attempt=1 if started else 0,
        **fields,
    )


def array_jobs() -> list[pb.Job]:
    """Array 12 (--array=0-5%2): tasks 0 and 1 done as jobs 13 and 14, task 2 running as 15, 3-5 waiting."""
    return [
        job(12, pb.PENDING, array_job_id=12, array_pending="3-5", array_max_running=2),
        job(13, array_job_id=12, array_task_id=0, steps=[batch()]),
        job(14, pb.FAILED, exit_code=1, array_job_id=12, array_task_id=1, steps=[batch(pb.FAILED, 1)]),
        job(15, pb.RUNNING, array_job_id=12, array_task_id=2, steps=[batch(pb.RUNNING)]),
    ]


def steps_job() -> pb.Job:
    step0 = pb.Step(
        step_id="0",
        name="python3",
        state=pb.COMPLETED,
        nodes=["node1", "node2"],
        tasks=4,
        cpus_per_task=1,
        start_time=T0 + 20,
        end_time=T0 + 30,
        attempt=1,
    )
    step1 = pb.Step(
        step_id="1",
        name="hostname",
        state=pb.FAILED,
        nodes=["node2"],
        tasks=1,
        exit_code=2,
        start_time=T0 + 31,
        end_time=T0 + 32,
        attempt=1,
    )
    return job(20, pb.FAILED, exit_code=2, steps=[batch(pb.FAILED, 2), step0, step1])


def sacct(jobs: list[pb.Job], fields: str, *refs: str, allocations: bool = False, **options) -> list[str]:
    query = jobhistory.HistoryQuery(selectors=jobhistory.parse_job_references(list(refs)))
    jobs = sorted(jobs, key=jobhistory.listing_order)
    lines = [
        ln for ln in acctview.lines_of(jobs, allocations, options.pop("units", "")) if query.wants_line(ln.job, ln.step)
    ]
    return acctview.sacct_lines(lines, acctview.parse_fields(fields), T0 + 100, False, "parsable2", **options)


def test_array_tasks_show_as_n_t_and_the_waiting_rest_as_n_with_its_range_and_throttle() -> None:
    assert sacct(array_jobs(), "JobID,JobIDRaw,State", allocations=True) == [
        "12_0|13|COMPLETED",
        "12_1|14|FAILED",
        "12_2|15|RUNNING",
        "12_[3-5%2]|12|PENDING",
    ]


def test_steps_follow_their_job_unless_only_allocations_are_asked_for() -> None:
    assert sacct([steps_job()], "JobID,JobName,State,ExitCode,NodeList,AllocCPUS") == [
        "20|work|FAILED|2:0|node[1-2]|2",
        "20.batch|batch|FAILED|2:0|node1|2",
        "20.0|python3|COMPLETED|0:0|node[1-2]|4",
        "20.1|hostname|FAILED|2:0|node2|1",
    ]
    assert sacct([steps_job()], "JobID", allocations=True) == ["20"]
    # Array tasks' steps carry the task's name; JobIDRaw its own id.
    assert sacct(array_jobs()[1:2], "JobID,JobIDRaw") == ["12_0|13", "12_0.batch|13.batch"]


def test_a_step_line_leaves_the_jobs_own_fields_empty_as_slurm_does() -> None:
    assert sacct([steps_job()], "JobID,User,Partition,Account,Elapsed", "20.0") == ["20.0|||physics|00:00:10"]


def test_submitits_call_with_array_task_ids_lists_those_tasks_and_their_steps() -> None:
    # sacct -o JobID,State,NodeList --parsable2 -j 12_0,12_4 (task 4 still waits in the array's record)
    assert sacct(array_jobs(), "JobID,State,NodeList", "12_0,12_4") == [
        "12_0|COMPLETED|node[1-2]",
        "12_0.batch|COMPLETED|node1",
        "12_[3-5%2]|PENDING|None assigned",
    ]
    assert sacct(array_jobs(), "JobID", "12_1,12_2", allocations=True) == ["12_1", "12_2"]
    assert len(sacct(array_jobs(), "JobID", "12", allocations=True)) == 4  # the array's id: every record
    assert sacct(array_jobs(), "JobID", "15", allocations=True) == ["12_2"]  # a task by its own id


def test_a_step_reference_shows_that_step_only() -> None:
    assert sacct([steps_job()], "JobID,State", "20.1") == ["20.1|FAILED"]
    assert sacct([steps_job()], "JobID", "20.batch") == ["20.batch"]
    assert sacct(array_jobs(), "JobID", "12_1.batch") == ["12_1.batch"]


def test_delimiter_and_units() -> None:
    big = job(30, memory_mb=4096)
    assert sacct([big], "JobID,ReqMem", allocations=True, delimiter=",") == ["30,4G"]  # whole units, as Slurm
    assert sacct([big], "ReqMem", allocations=True, units=acctview.NO_CONVERT) == ["4096M"]
    assert sacct([job(32, memory_mb=1536)], "ReqMem", allocations=True) == ["1536M"]
    assert sacct([big], "JobID,ReqMem", allocations=True, units="G") == ["30|4G"]
    assert sacct([job(31, memory_mb=1000)], "ReqMem", allocations=True, units="G") == ["0.98G"]
    assert sacct([big], "ReqMem", allocations=True, units="K") == ["4194304K"]


def test_out_of_memory_and_deadline_states_are_named() -> None:
    assert sacct([job(40, pb.OUT_OF_MEMORY), job(41, pb.DEADLINE)], "JobID,State", allocations=True) == [
        "40|OUT_OF_MEMORY",
        "41|DEADLINE",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", [(7, None, None)]),
        ("12_3", [(12, {3}, None)]),
        ("12_1,12_7,14.0", [(12, {1}, None), (12, {7}, None), (14, None, "0")]),
        ("12_3.batch", [(12, {3}, "batch")]),
    ],
)
def test_job_references_are_read_as_slurm_writes_them(text: str, expected: list) -> None:
    parsed = jobhistory.parse_job_references([text])
    assert [(s.job_id, None if s.tasks is None else set(s.tasks), s.step) for s in parsed] == expected


@pytest.mark.parametrize("text", ["x", "12_", "12.extern2", "0", "12_[1-", "12_99999999999"])
def test_a_bad_job_reference_is_refused_with_the_forms_to_use(text: str) -> None:
    with pytest.raises(CliError):
        jobhistory.parse_job_references([text])


@pytest.mark.parametrize("text", ["12_[1-3]", "12_[1,3]", "12_1-3"])
def test_a_task_range_is_refused_as_slurm_22_05_refuses_it(text: str) -> None:
    with pytest.raises(jobhistory.BadArrayElement) as refused:
        jobhistory.parse_job_references([text])
    assert refused.value.job_id == 12


def test_sacct_reads_the_short_codes_of_out_of_memory_and_deadline_and_its_workflow_tools_options() -> None:
    from spur_hpc.cli import options, sacct

    values, _ = options.parse("sacct", sacct.OPTIONS, ["-a", "-s", "OOM,DL", "-j", "12_3,14.batch", "--name", "u1"])
    query = sacct.build_query(values, T0)
    assert query.states == ["OUT_OF_MEMORY", "DEADLINE"] and query.names == ["u1"] and query.job_ids == [12, 14]
    snakemake = ["-X", "--parsable2", "--clusters", "all", "--noheader", "--format=JobIdRaw,State", "--starttime",
                 "2026-12-01T00:00", "--endtime", "now", "--name", "u1"]  # fmt: skip
    values, positionals = options.parse("sacct", sacct.OPTIONS, snakemake)
    assert not positionals and values["allocations"] and values["clusters"] == "all" and values["noheader"]
    assert acctview.parse_fields(values["format"])[0].key == "jobidraw"


def test_derived_fields_and_usage_spur_does_not_measure() -> None:
    fields = "JobID,CPUTimeRAW,DerivedExitCode,AllocTRES,ReqTRES,MaxRSS,TotalCPU,Suspended"
    assert sacct([steps_job()], fields) == [
        "20|120|2:0|billing=2,cpu=2,node=2|billing=2,cpu=2,node=2|||00:00:00",
        "20.batch|120||cpu=2,node=1|cpu=2,node=1|||00:00:00",
        "20.0|40||cpu=4,node=2|cpu=4,node=2|||00:00:00",
        "20.1|1||cpu=1,node=1|cpu=1,node=1|||00:00:00",
    ]
    assert sacct([job(50, pb.PENDING, memory_mb=1000)], "AllocTRES,ReqTRES", allocations=True) == [
        "|billing=2,cpu=2,mem=1000M,node=1"
    ]


def test_without_duplicates_a_requeued_job_shows_its_latest_run_in_the_window_and_with_D_every_run() -> None:
    first, second, other = job(50, pb.REQUEUED), job(50, pb.COMPLETED), job(51)
    second.attempt = 2
    assert jobhistory.latest_records([first, second, other]) == [second, other]
    assert sacct([first, second], "JobID,State", allocations=True) == ["50|REQUEUED", "50|COMPLETED"]  # -D
    # The later run not in the window (not eligible yet): the earlier run's REQUEUED line stands for the job.
    assert jobhistory.latest_records([first, other]) == [first, other]


def test_sacct_s_takes_rq_for_a_requeued_jobs_earlier_runs() -> None:
    from spur_hpc.cli import options, sacct

    values, _ = options.parse("sacct", sacct.OPTIONS, ["-a", "-s", "rq,CD"])
    assert sacct.build_query(values, T0).states == ["COMPLETED", "REQUEUED"]


def test_helpformat_lists_the_fields_as_slurm_does_alphabetically_four_to_a_line_in_columns_of_19() -> None:
    lines = acctview.field_list()
    names = " ".join(lines).split()
    assert names == sorted(names, key=str.lower) and names[:3] == ["Account", "AllocCPUS", "AllocNodes"]
    assert all(len(line) == 4 * 19 + 3 for line in lines[:-1]) and len(lines[-1]) % 20 == 19
    assert lines[0] == "Account             AllocCPUS           AllocNodes          AllocTRES          "


def test_a_cancelled_job_names_who_cancelled_it_cut_to_the_column_and_whole_when_parsable() -> None:
    by_root = job(50, pb.CANCELLED, cancelled_by_uid=0, steps=[batch(pb.CANCELLED)])
    by_nobody = job(51, pb.CANCELLED, cancelled_by_uid=-1)  # its node failed under a cancel, say: nobody's
    assert sacct([by_root, by_nobody], "JobID,State") == ["50|CANCELLED by 0", "50.batch|CANCELLED", "51|CANCELLED"]
    lines = acctview.lines_of([by_root], True, "")
    assert acctview.sacct_lines(lines, acctview.parse_fields("State"), T0 + 100, False) == ["CANCELLED+ "]
    wide = acctview.sacct_lines(lines, acctview.parse_fields("State%20"), T0 + 100, False)
    assert wide == ["      CANCELLED by 0 "]
