"""scontrol's job commands (update JobId=, requeue, requeuehold, show config) and show job's option lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_support import fake_cluster

from spur_hpc.cli import jobrecord, slurm, units
from spur_hpc.proto import slurm_pb2 as pb


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch):
    with fake_cluster(monkeypatch) as fake:
        fake.add_job(5, state=pb.PENDING, spec=pb.JobSpec(user="alice", tasks=4, cpus_per_task=1))
        yield fake


def run(argv, capsys):
    code = slurm.scontrol_main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_update_sends_the_named_fields_only(cluster, capsys) -> None:
    argv = ["update", "JobId=5", "TimeLimit=1:00:00", "Partition=gpu", "Dependency=afterok:3", "Nice=10", "Name=x"]
    assert run(argv, capsys) == (0, "", "")
    (request,) = cluster.state.updates
    assert list(request.fields) == ["time_limit_secs", "partition", "dependency", "nice", "name"]
    spec = request.spec
    assert (spec.time_limit_secs, spec.partition, spec.dependency, spec.nice, spec.name) == (
        3600, "gpu", "afterok:3", 10, "x"
    )  # fmt: skip


def test_numcpus_keeps_the_task_count_when_it_divides(cluster, capsys) -> None:
    assert run(["update", "jobid=5", "NumCPUs=8"], capsys)[0] == 0
    assert run(["update", "jobid=5", "NumCPUs=6"], capsys)[0] == 0
    first, second = cluster.state.updates
    assert list(first.fields) == ["cpus_per_task"] and first.spec.cpus_per_task == 2
    assert list(second.fields) == ["tasks", "cpus_per_task"] and (second.spec.tasks, second.spec.cpus_per_task) == (
        6, 1
    )  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["update", "JobId=5", "Colour=blue"], "updating 'Colour' of a job is not supported"),
        (["update", "JobId=5", "TimeLimit=soon"], "invalid TimeLimit value 'soon'"),
        (["update", "JobId=5", "Dependency=whenever:3"], "not a dependency type"),
        (["update", "JobId=5"], "changes nothing"),
        (["update", "JobId=x", "Nice=1"], "invalid JobId 'x'"),
    ],
)
def test_a_bad_update_is_one_line_and_sends_nothing(cluster, capsys, argv, message) -> None:
    code, out, err = run(argv, capsys)
    assert code == 1 and err.count("\n") == 1 and message in err
    assert not cluster.state.updates


def test_an_unknown_job_is_slurms_line(cluster, capsys) -> None:
    code, _out, err = run(["update", "JobId=99", "Nice=1"], capsys)
    assert code == 1 and err == "Invalid job id specified for job 99\n"


def test_requeue_and_requeuehold(cluster, capsys) -> None:
    assert run(["requeue", "5"], capsys)[0] == 0
    assert run(["requeuehold", "Incomplete", "5"], capsys)[0] == 0
    assert [(r.job_id, r.hold) for r in cluster.state.requeues] == [(5, False), (5, True)]


def test_show_config_prints_the_keys_clients_read(cluster, capsys) -> None:
    code, out, _err = run(["show", "config"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("Configuration data as of ")
    blank = lines.index("")  # then the controllers' ping lines, as Slurm ends show config
    keys = dict(line.split(" = ", 1) for line in lines[1:blank])
    assert keys["ClusterName".ljust(23)] == "spur"
    assert keys["MinJobAge".ljust(23)] == "300 sec" and keys["MaxArraySize".ljust(23)] == "10001"
    assert keys["SlurmdTimeout".ljust(23)] == "60 sec" and keys["AuthType".ljust(23)] == "auth/none"
    assert "SLURM_VERSION".ljust(23) in keys
    # every key is one of Slurm 22.05's, in the order Slurm printed them (the captured show config)
    golden = Path(__file__).parents[1] / "golden" / "slurm-22.05" / "027-scontrol-show-config.json"
    slurm_keys = [line.split(" ", 1)[0] for line in json.loads(golden.read_text())["stdout"].splitlines()[1:]]
    names = [line.split(" ", 1)[0] for line in lines[1:blank]]
    assert [n for n in slurm_keys if n in names] == names
    assert lines[blank + 1 :] and all(line.startswith("Slurmctld(") for line in lines[blank + 1 :])


def test_show_job_has_the_array_and_option_lines() -> None:
    spec = pb.JobSpec(name="sweep", user="alice", dependency="afterok:3", requeue=2, comment="a rule",
                      constraint="fast&big", gres="gpu:2", mail_type="END", mail_user="a@b", exclusive=True,
                      nodelist="n[1-2]", mem_per_cpu_mb=512)  # fmt: skip
    rest = pb.Job(job_id=12, spec=spec, state=pb.PENDING, array_job_id=12, array_pending="3-15", array_max_running=4,
                  reason="Dependency")  # fmt: skip
    task = pb.Job(job_id=13, spec=spec, state=pb.RUNNING, array_job_id=12, array_task_id=1, restart_count=2)
    rest_lines = jobrecord.show_job_lines(rest, 0.0, group_of=lambda job: ("alice(1)", "alice(1)"))
    task_lines = jobrecord.show_job_lines(task, 0.0, group_of=lambda job: ("alice(1)", "alice(1)"))
    assert rest_lines[0] == "JobId=12 ArrayJobId=12 ArrayTaskId=3-15%4 ArrayTaskThrottle=4 JobName=sweep"
    assert task_lines[0] == "JobId=13 ArrayJobId=12 ArrayTaskId=1 JobName=sweep"
    assert "Dependency=afterok:3(unfulfilled)" in rest_lines[3]  # the task that started has it satisfied: (null)
    assert "Dependency=(null)" in task_lines[3] and rest_lines[-1] == task_lines[-1] == "   "
    text = "\n".join(task_lines)
    for expected in ("Requeue=0 Restarts=2", "Comment=a rule", "Features=fast&big",
                     "TresPerNode=gres:gpu:2", "MailUser=a@b MailType=END", "OverSubscribe=NO",
                     "ReqNodeList=n[1-2]", "MinMemoryCPU=512M"):  # fmt: skip
        assert expected in text, expected


def test_show_job_of_an_array_shows_every_record(cluster, capsys) -> None:
    spec = pb.JobSpec(name="sweep", user="alice")
    cluster.add_job(12, state=pb.PENDING, spec=spec, array_job_id=12, array_pending="3-4")
    cluster.add_job(13, state=pb.RUNNING, spec=spec, array_job_id=12, array_task_id=1)
    cluster.add_job(14, state=pb.RUNNING, spec=spec, array_job_id=12, array_task_id=2)
    code, out, _err = run(["show", "job", "12", "-o"], capsys)
    assert code == 0
    assert [line.split(" JobName=")[0] for line in out.splitlines()] == [
        "JobId=12 ArrayJobId=12 ArrayTaskId=3-4",  # the pending rest, then the tasks newest first (Slurm)
        "JobId=14 ArrayJobId=12 ArrayTaskId=2",
        "JobId=13 ArrayJobId=12 ArrayTaskId=1",
    ]


def test_show_job_d_adds_the_derived_exit_code_and_each_nodes_cpu_ids() -> None:
    share = pb.NodeAllocation(cpus=2, memory_mb=512, cpu_ids=[1, 2], chosen=True,
                              gres=[pb.GresUnits(key="gpu", indices=[0, 1])])  # fmt: skip
    one = pb.NodeAllocation(cpus=1, cpu_ids=[0], chosen=True)
    job = pb.Job(job_id=6, state=pb.RUNNING, nodes=["n1", "n2", "n3"], start_time=100.0,
                 spec=pb.JobSpec(name="steps", user="alice", alloc_node="localhost", alloc_sid=4242),
                 steps=[pb.Step(step_id="0", exit_code=3), pb.Step(step_id="1", exit_code=0, signal=9)],
                 allocs={"n1": share, "n2": share, "n3": one})  # fmt: skip
    lines = jobrecord.show_job_lines(job, 200.0, group_of=lambda job: ("alice(1)", "alice(1)"), details=True)
    assert lines[5] == "   DerivedExitCode=3:0"  # the highest step exit code
    assert "   Partition=default AllocNode:Sid=localhost:4242" in lines
    at = lines.index("   JOB_GRES=gpu:4")
    assert lines[at + 1 : at + 3] == [
        "     Nodes=n[1-2] CPU_IDs=1-2 Mem=512 GRES=gpu:2(IDX:0-1)",
        "     Nodes=n3 CPU_IDs=0 Mem=0 GRES=",
    ]
    assert lines[at + 3].startswith("   MinCPUsNode=")
    plain = jobrecord.show_job_lines(job, 200.0, group_of=lambda job: ("alice(1)", "alice(1)"))
    assert not any("JOB_GRES" in line or "DerivedExitCode" in line for line in plain)


def test_a_waiting_job_without_mem_asks_for_a_whole_nodes_memory_in_its_tres() -> None:
    waiting = pb.Job(job_id=10, state=pb.PENDING, spec=pb.JobSpec(name="w", user="alice", cpus_per_task=4))
    running = pb.Job(job_id=11, state=pb.RUNNING, start_time=5.0, nodes=["n1"], spec=waiting.spec)
    group = lambda job: ("alice(1)", "alice(1)")  # noqa: E731
    assert "   TRES=cpu=4,mem=4G,node=1,billing=4" in jobrecord.show_job_lines(waiting, 9.0, group, node_memory_mb=4096)
    assert "   TRES=cpu=4,node=1,billing=4" in jobrecord.show_job_lines(running, 9.0, group, node_memory_mb=4096)


def test_show_job_asks_the_partitions_memory_only_for_a_waiting_job_without_mem(cluster, capsys) -> None:
    cluster.add_node("n1", resources=pb.NodeResources(cpus=4, memory_mb=2048))
    code, out, _err = run(["show", "job", "5"], capsys)  # the fixture's job 5: pending, no --mem
    assert code == 0 and "   TRES=cpu=4,mem=2G,node=1,billing=4" in out.splitlines()


def test_requeue_of_an_unknown_job_is_slurms_line(cluster, capsys) -> None:
    assert run(["requeue", "99"], capsys) == (1, "", "Invalid job id specified for job 99\n")


def test_suspend_resume_and_hold_refusals_are_slurms_two_lines(cluster, capsys) -> None:
    cluster.add_job(6, state=pb.RUNNING, nodes=["n1"])
    cluster.add_job(7, state=pb.COMPLETED)
    assert run(["suspend", "6"], capsys) == (0, "", "")
    assert cluster.state.jobs[6].state == pb.SUSPENDED
    assert run(["resume", "6"], capsys) == (0, "", "")
    assert cluster.state.jobs[6].state == pb.RUNNING
    assert run(["suspend", "99"], capsys) == (
        1, "", "Invalid job id specified for job 99\nslurm_suspend error: Invalid job id specified\n"
    )  # fmt: skip
    assert run(["hold", "7"], capsys) == (
        1, "", "Job has already finished for job 7\nslurm_suspend error: Job has already finished\n"
    )  # fmt: skip
    code, _out, err = run(["resume", "5"], capsys)  # pending, not suspended: the controller's own words
    assert code == 1 and err.splitlines() == [
        "job 5 cannot be resumed now for job 5", "slurm_suspend error: job 5 cannot be resumed now"
    ]  # fmt: skip


def test_a_job_cancelled_before_it_started_shows_slurms_values() -> None:
    job = pb.Job(job_id=14, state=pb.CANCELLED, end_time=50.0, held=True, reason="JobHeldUser",
                 spec=pb.JobSpec(name="tocancel", user="alice", tasks=1))  # fmt: skip
    lines = jobrecord.show_job_lines(job, 60.0, group_of=lambda job: ("alice(1)", "alice(1)"))
    text = "\n".join(lines)
    assert "   Priority=0 " in text and "EligibleTime=Unknown" in text and "   AccrueTime=Unknown" in text
    start = units.format_timestamp(50.0)
    assert f"   StartTime={start} EndTime={start} " in text  # Slurm sets its start to its end
    assert " NumTasks=N/A " in text and "   NodeList=" in lines and not any("BatchHost" in line for line in lines)
