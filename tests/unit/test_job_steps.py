"""Job steps without daemons: the I/O framing between spurstepd and srun, the task layout, the step records
of the replicated state, and a step session's name."""

from __future__ import annotations

import pytest

from spur_hpc import stepio
from spur_hpc.controller import wal
from spur_hpc.controller.state import ClusterState
from spur_hpc.controller.steps import task_layout
from spur_hpc.stepd.session import parse_session_name, session_name, session_step

# ------------------------------------------------------------------ framing


def test_frames_cut_from_a_stream_arrive_whole_whatever_the_chunking() -> None:
    stream = stepio.hello("tok", "n1", [0, 1]) + stepio.frame(stepio.STDOUT, 1, b"hello\n") + stepio.exit_frame(1, 3, 0)
    for size in (1, 2, 7, len(stream)):
        reader = stepio.FrameReader()
        frames = []
        for i in range(0, len(stream), size):
            frames += reader.feed(stream[i : i + size])
        assert [(k, t) for k, t, _ in frames] == [(stepio.HELLO, 0), (stepio.STDOUT, 1), (stepio.EXIT, 1)]
        assert frames[1][2] == b"hello\n"
        assert stepio.read_json(frames[2][2], "exit") == {"exit_code": 3, "signal": 0}
        assert reader.pending == 0


def test_a_frame_over_the_bound_is_refused_before_it_is_buffered() -> None:
    header = stepio.HEADER.pack(stepio.STDOUT, 0, stepio.MAX_PAYLOAD + 1)
    with pytest.raises(stepio.FrameError, match="over the"):
        stepio.FrameReader().feed(header)
    with pytest.raises(stepio.FrameError):
        stepio.frame(stepio.STDOUT, 0, b"x" * (stepio.MAX_PAYLOAD + 1))


def test_an_unknown_frame_kind_is_refused() -> None:
    with pytest.raises(stepio.FrameError, match="unknown frame kind"):
        stepio.FrameReader().feed(stepio.HEADER.pack(99, 0, 0))


def test_large_output_is_split_into_bounded_frames() -> None:
    data = b"y" * (stepio.MAX_PAYLOAD * 2 + 5)
    frames = stepio.output_frames(stepio.STDERR, 2, data)
    assert len(frames) == 3
    reader = stepio.FrameReader()
    got = b"".join(p for f in frames for _k, _t, p in reader.feed(f))
    assert got == data


def test_label_prefixes_whole_lines_and_keeps_a_partial_line_until_its_end() -> None:
    labeler = stepio.LineLabeler(width=2)
    assert labeler.feed(stepio.STDOUT, 3, b"a\nb") == b" 3: a\n"
    assert labeler.feed(stepio.STDOUT, 3, b"c\n") == b" 3: bc\n"
    assert labeler.feed(stepio.STDOUT, 4, b"tail") == b""
    assert labeler.flush(stepio.STDOUT, 4) == b" 4: tail\n"


# ------------------------------------------------------------------ layout


def test_tasks_are_laid_out_in_blocks_the_first_nodes_taking_the_remainder() -> None:
    assert task_layout(4, ["a", "b"]) == {"a": [0, 1], "b": [2, 3]}
    assert task_layout(5, ["a", "b"]) == {"a": [0, 1, 2], "b": [3, 4]}
    assert task_layout(1, ["a", "b"]) == {"a": [0]}
    assert task_layout(3, ["a", "b", "c"], ntasks_per_node=2) == {"a": [0, 1], "b": [2]}


# ------------------------------------------------------------------ state


def rec(op, **kw):
    return wal.make_record(op, **kw)


def running_job(tasks: int = 4, **spec_fields) -> ClusterState:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=3))
    for name in ("n1", "n2"):
        s.apply(
            rec(
                "node_register", name=name, address=f"{name}:1", cpus=4, memory_mb=100, version="1", build="b",
                partition="default", running=[], time=1.0,
            )
        )  # fmt: skip
    spec = {"name": "j", "script": "#!/bin/sh\n", "user": "u", "uid": 1, "gid": 1, "work_dir": "/tmp", "nodes": 2,
            "tasks": tasks, "cpus_per_task": 1, "memory_mb": 0, "time_limit_secs": 0}  # fmt: skip
    spec.update(partition="default", **spec_fields)
    s.apply(rec("job_submit", spec=spec, key="", time=2.0))
    assert s.apply(rec("job_start", job_id=1, nodes=["n1", "n2"], attempt=1, time=3.0))["ok"]
    return s


def create(s: ClusterState, layout: dict[str, list[int]], key: str = "") -> dict:
    return s.apply(
        rec("step_create", job_id=1, attempt=1, name="sh", cpus_per_task=1, layout=layout, spec={"argv": ["sh"]},
            time=4.0, key=key)
    )  # fmt: skip


def test_a_job_starts_with_its_batch_step_and_srun_steps_are_numbered_from_zero() -> None:
    s = running_job()
    assert s.jobs[1]["steps"]["batch"]["state"] == "RUNNING"
    assert create(s, {"n1": [0, 1], "n2": [2, 3]}) == {"ok": True, "step_id": "0", "duplicate": False}
    assert create(s, {"n2": [0]})["step_id"] == "1"
    step = s.jobs[1]["steps"]["0"]
    assert (step["nodes"], step["tasks"], step["state"]) == (["n1", "n2"], 4, "RUNNING")


def test_a_step_on_a_node_outside_the_allocation_is_refused() -> None:
    s = running_job()
    result = create(s, {"elsewhere": [0]})
    assert result["code"] == "invalid" and "not all nodes of job 1" in result["message"]


def step_end(s, node, state="COMPLETED", code=0, sig=0, time=5.0):
    return s.apply(
        rec("step_end", job_id=1, attempt=1, step_id="0", node=node, state=state, exit_code=code, signal=sig,
            time=time, reason="")
    )  # fmt: skip


def test_a_step_ends_when_its_last_node_reports_with_the_largest_exit_code() -> None:
    s = running_job()
    create(s, {"n1": [0, 1], "n2": [2, 3]})
    assert step_end(s, "n1", "FAILED", code=3) == {"ok": True, "accepted": True, "state": "RUNNING"}
    assert s.jobs[1]["steps"]["0"]["state"] == "RUNNING"
    assert step_end(s, "n2", code=0, time=6.0)["state"] == "FAILED"
    step = s.jobs[1]["steps"]["0"]
    assert (step["exit_code"], step["end_time"]) == (3, 6.0)
    assert "spec" not in step, "the command, environment and token are dropped once the step is over"
    assert step_end(s, "n2")["accepted"] is False, "a repeated report changes nothing"


def test_the_batch_step_ends_with_its_job_and_a_failed_node_ends_its_running_steps() -> None:
    s = running_job(requeue=2)  # --no-requeue: a node failure ends it NODE_FAIL
    create(s, {"n1": [0], "n2": [1]})
    s.apply(rec("node_lost", name="n2", reason="Not responding", time=9.0))
    steps = s.jobs[1]["steps"]
    assert steps["batch"]["state"] == "CANCELLED"  # Slurm shows a NODE_FAIL job's batch step CANCELLED
    assert steps["0"]["state"] == "NODE_FAIL"


def test_a_requeued_job_ends_the_steps_of_its_attempt() -> None:
    s = running_job()
    create(s, {"n1": [0], "n2": [1]})
    s.apply(rec("node_lost", name="n2", reason="Not responding", time=9.0))
    assert s.jobs[1]["state"] == "PENDING"
    assert {k: v["state"] for k, v in s.jobs[1]["steps"].items()} == {"batch": "CANCELLED", "0": "CANCELLED"}


def test_step_ops_are_level_3() -> None:
    assert wal.OP_LEVELS["step_create"] == wal.OP_LEVELS["step_end"] == 3
    with pytest.raises(wal.WalLevelError):
        wal.check_level(rec("step_create"), 2)


# ------------------------------------------------------------------ sessions


def test_step_sessions_have_names_of_their_own_and_batch_names_are_unchanged() -> None:
    assert session_name(12, 1) == "12.1"
    assert session_name(12, 1, "0") == "12.1.0"
    assert parse_session_name("12.1") == (12, 1) and session_step("12.1") == ""
    assert parse_session_name("12.1.3") == (12, 1) and session_step("12.1.3") == "3"
    assert parse_session_name("12.1.x") is None


# ------------------------------------------------------------------ the commands


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["srun_main", []], "no command given"),
        (["srun_main", ["--jobid=x", "true"]], "'x' is not a job id"),
        (["srun_main", ["--jobid=5", "-n", "0", "true"]], "invalid --ntasks value '0'"),
        (["srun_main", ["--jobid=5", "--pty", "true"]], "--pty is not supported"),
        (["scontrol_main", ["show", "step", "12"]], "invalid step id '12': write JOBID.STEP"),
        (["scancel_main", ["12.x"]], "invalid step id '12.x'"),
        (["squeue_main", ["--steps=12.y"]], "invalid step id '12.y'"),
    ],
)
def test_bad_step_input_is_one_line_and_a_nonzero_exit(argv, expected, capsys, monkeypatch) -> None:
    from spur_hpc.cli import slurm

    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    name, args = argv
    assert getattr(slurm, name)(args) == 1
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err


def test_squeue_s_shows_steps_in_slurms_layout() -> None:
    from spur_hpc.cli import stepview, units
    from spur_hpc.proto import slurm_pb2 as pb

    job = pb.Job(job_id=12, spec=pb.JobSpec(user="alice", partition="debug"), state=pb.RUNNING)
    step = pb.Step(step_id="0", name="python3", state=pb.RUNNING, nodes=["n1", "n2"], tasks=4, start_time=100.0)
    lines = stepview.squeue_step_lines([(job, step)], True, 165.0)
    assert lines == [
        "         STEPID     NAME PARTITION     USER      TIME NODELIST",
        "           12.0  python3     debug    alice      1:05 n[1-2]",
    ]
    job.spec.uid, job.spec.memory_mb = 1000, 2048
    assert stepview.show_step_lines(job, step, 165.0) == [  # Slurm 22.05's step record
        f"StepId=12.0 UserId=1000 StartTime={units.format_timestamp(100.0)} TimeLimit=UNLIMITED",
        "   State=RUNNING Partition=debug NodeList=n[1-2]",
        "   Nodes=2 CPUs=4 Tasks=4 Name=python3 Network=(null)",
        "   TRES=cpu=4,mem=4G,node=2",
        "   ResvPorts=(null)",
        "   CPUFreqReq=Default Dist=Block",
        "   SrunHost:Pid=(null):0",
    ]
    batch = pb.Step(step_id="batch", name="batch", state=pb.COMPLETED, nodes=["n1"], tasks=1, exit_code=3)
    shown = stepview.show_step_lines(job, batch, 165.0)
    assert shown[2:4] == ["   Nodes=1 CPUs=0 Tasks=1 Name=batch Network=(null)", "   TRES=(null)"]
    assert shown[-1] == "   ExitCode=3:0 EndTime=Unknown"  # an ended step (Slurm no longer lists those)


def test_srun_is_refused_with_one_line_while_the_cluster_runs_wal_level_2() -> None:
    from types import SimpleNamespace

    from spur_hpc.controller import errors
    from spur_hpc.controller.steplaunch import StepLauncher

    state = SimpleNamespace(wal_level=2)
    service = SimpleNamespace(require_leader=lambda: None, read=lambda fn: fn(state))
    launcher = StepLauncher(SimpleNamespace(service=service))
    with pytest.raises(errors.Conflict, match=r"needs WAL level 3; finish the upgrade \(spur cluster wal-level 3\)"):
        launcher.create(None, SimpleNamespace(job_id=1))


def test_a_step_still_running_when_its_job_ends_is_cancelled_unless_its_nodes_then_report_its_end() -> None:
    s = running_job()
    create(s, {"n1": [0, 1], "n2": [2, 3]})
    s.apply(rec("job_end", job_id=1, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=7.0, reason=""))
    step = s.jobs[1]["steps"]["0"]
    assert (step["state"], step["end_time"]) == ("CANCELLED", 7.0), "a node that never reports leaves no RUNNING step"
    assert step_end(s, "n1", code=0, time=6.5)["state"] == "CANCELLED"
    assert step_end(s, "n2", "FAILED", code=2, time=6.8)["accepted"]
    assert (step["state"], step["exit_code"], step["end_time"]) == ("FAILED", 2, 6.8)  # what the nodes reported


def test_a_retried_create_step_answers_with_the_step_it_created_instead_of_a_second_one() -> None:
    s = running_job()
    assert create(s, {"n1": [0]}, key="k1")["step_id"] == "0"
    assert create(s, {"n1": [0]}, key="k1") == {"ok": True, "step_id": "0", "duplicate": True}
    assert create(s, {"n1": [0]}, key="k2")["step_id"] == "1"
    assert sorted(s.jobs[1]["steps"]) == ["0", "1", "batch"]


def test_a_cluster_below_wal_level_3_keeps_no_step_records() -> None:
    s = running_job()
    assert "batch" in s.jobs[1]["steps"]
    s.wal_level = 2  # as a cluster still being upgraded: its older members would not write them
    s.apply(rec("job_submit", spec=dict(s.jobs[1]["spec"]), key="", time=8.0))
    s.apply(rec("job_end", job_id=1, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=8.5, reason=""))
    assert s.apply(rec("job_start", job_id=2, nodes=["n1", "n2"], attempt=1, time=9.0))["ok"]
    assert not s.jobs[2].get("steps")
