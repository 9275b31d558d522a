"""cli/slurmjson.py: squeue, sinfo, sacct and scontrol --json in Slurm 22.05's layout, against fake controllers.

Each record's keys at every level and each value's JSON type must be those of the record of the same job or
node in the captures of Debian's Slurm 22.05.8 (tests/golden/slurm-22.05-json), made by jobs in the same states.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_cli_support import fake_cluster

from spur_hpc.cli import nodeview, slurm, slurmjson
from spur_hpc.proto import slurm_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tools.slurm_capture
from tools.slurm_capture import jsonshape  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05-json"
T0 = 1_796_133_819.0


def captured(name: str) -> dict:
    capture = json.loads(next(GOLDEN.glob(f"[0-9][0-9][0-9]-{name}.json")).read_text())
    return json.loads(capture["stdout"])


def spec(name: str, partition: str = "debug", limit: int = 3600, **fields) -> pb.JobSpec:
    return pb.JobSpec(
        name=name,
        user="root",
        uid=0,
        gid=0,
        nodes=1,
        tasks=1,
        partition=partition,
        time_limit_secs=limit,
        work_dir="/work",
        **fields,
    )


def add_session_jobs(cluster) -> None:
    """The jobs of the JSON session at its squeue --json, in the same states."""
    started = {"submit_time": T0, "eligible_time": T0, "start_time": T0 + 3}
    cluster.add_job(1, spec=spec("done"), state=pb.COMPLETED, nodes=["n1"], end_time=T0 + 3, **started)
    failed_batch = [pb.Step(step_id="batch", name="batch", state=pb.FAILED, nodes=["n1"], tasks=1, exit_code=3)]
    cluster.add_job(
        2,
        steps=failed_batch,
        spec=spec("fail"),
        state=pb.FAILED,
        nodes=["n1"],
        exit_code=3,
        reason="NonZeroExitCode",
        end_time=T0 + 3,
        **started,
    )
    cluster.add_job(3, spec=spec("run1", nodelist="n1"), state=pb.RUNNING, nodes=["n1"], priority=7, **started)
    steps = [
        pb.Step(step_id="batch", name="batch", state=pb.RUNNING, nodes=["n1"], tasks=1, start_time=T0 + 3),
        pb.Step(step_id="0", name="sleep", state=pb.RUNNING, nodes=["n1"], tasks=1, start_time=T0 + 4),
    ]
    cluster.add_job(4, spec=spec("steps"), state=pb.RUNNING, nodes=["n1"], steps=steps, **started)
    cluster.add_job(
        5,
        spec=spec("arr", "long", 0, nodelist="n3", array="0-3%2"),
        state=pb.PENDING,
        array_job_id=5,
        array_pending="2-3",
        array_max_running=2,
        reason="JobArrayTaskLimit",
        submit_time=T0,
    )
    for job_id, task in ((6, 0), (7, 1)):
        cluster.add_job(
            job_id,
            spec=spec("arr", "long", 0, nodelist="n3"),
            state=pb.RUNNING,
            nodes=["n3"],
            array_job_id=5,
            array_task_id=task,
            array_max_running=2,
            **started,
        )
    cluster.add_job(8, spec=spec("held", hold=True), state=pb.PENDING, held=True, reason="JobHeldUser", submit_time=T0)
    cluster.add_job(9, spec=spec("dep", dependency="afterok:3"), state=pb.PENDING, reason="Dependency", submit_time=T0)


def add_session_nodes(cluster) -> None:
    for name, part, alloc in (("n1", "debug", 2), ("n2", "debug", 0), ("n3", "long", 2), ("n4", "long", 0)):
        cluster.add_node(
            name,
            state=pb.MIXED if alloc else pb.IDLE,
            partition=part,
            partitions=[part],
            address="127.0.0.1:6818",
            resources=pb.NodeResources(cpus=4, memory_mb=4096),
            allocated=pb.NodeResources(cpus=alloc),
            arch="x86_64",
            os="Linux",
            version="0.1.0",
            agent_started=T0,
            boot_time=T0 - 100,
        )


def run(entry, argv: list[str], capsys) -> tuple[int, str, str]:
    code = entry(argv)
    out, err = capsys.readouterr()
    return code, out, err


def job_key(record: dict):
    return record["name"], record.get("array_task_id") if "array_task_id" in record else record["array"]["task_id"]


def test_squeue_json_has_slurms_keys_and_types_for_each_kind_of_job(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch) as cluster:
        add_session_jobs(cluster)
        code, out, err = run(slurm.squeue_main, ["--json"], capsys)
    assert (code, err) == (0, "")
    ours, theirs = json.loads(out), captured("squeue-json")
    assert (
        jsonshape.differences(
            {k: v for k, v in theirs.items() if k != "jobs"}, {k: v for k, v in ours.items() if k != "jobs"}
        )
        == []
    )
    diffs, only_slurm, only_spur = jsonshape.record_differences(theirs["jobs"], ours["jobs"], job_key, "jobs")
    assert (diffs, only_slurm, only_spur) == ([], [], [])
    by_id = {j["job_id"]: j for j in ours["jobs"]}
    assert by_id[2]["exit_code"] == 768 and by_id[2]["job_state"] == "FAILED"  # the wait status: 3 << 8
    assert by_id[2]["derived_exit_code"] == 0  # the srun steps' (it has none), not the batch step's
    assert by_id[2]["state_reason"] == "NonZeroExitCode" and by_id[1]["user_name"] == "root"
    assert by_id[5]["array_task_string"] == "2-3%2" and by_id[6]["array_task_id"] == 0
    assert by_id[9]["dependency"] == "afterok:3(unfulfilled)" and by_id[8]["priority"] == 0
    assert by_id[6]["time_limit"] is None and by_id[3]["time_limit"] == 60
    assert ours["meta"]["plugin"]["type"] == "openapi/v0.0.38"
    assert '"openapi\\/v0.0.38"' in out  # written with Slurm's escaped slashes


def test_sinfo_json_has_slurms_keys_and_types(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch) as cluster:
        add_session_nodes(cluster)
        code, out, _err = run(slurm.sinfo_main, ["--json"], capsys)
    assert code == 0
    ours, theirs = json.loads(out), captured("sinfo-json-busy")
    diffs, only_slurm, only_spur = jsonshape.record_differences(
        theirs["nodes"], ours["nodes"], lambda n: n["name"], "nodes"
    )
    assert (diffs, only_slurm, only_spur) == ([], [], [])
    n1 = next(n for n in ours["nodes"] if n["name"] == "n1")
    assert (n1["state"], n1["alloc_cpus"], n1["idle_cpus"], n1["partitions"]) == ("mixed", 2, 2, ["debug"])
    assert n1["tres"] == "cpu=4,mem=4G,billing=4" and n1["port"] == 6818 and n1["address"] == "127.0.0.1"


def test_a_drained_node_is_idle_with_the_drain_flag(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch) as cluster:
        cluster.add_node("n1", state=pb.DRAINED, drain=True, reason="maint")
        cluster.add_node("n2", state=pb.DRAINING, drain=True, reason="maint", allocated=pb.NodeResources(cpus=4))
        nodes = {n["name"]: n for n in json.loads(run(slurm.sinfo_main, ["--json"], capsys)[1])["nodes"]}
    assert (nodes["n1"]["state"], nodes["n1"]["state_flags"]) == ("idle", ["DRAIN"])
    assert (nodes["n2"]["state"], nodes["n2"]["state_flags"]) == ("allocated", ["DRAIN"])
    assert nodes["n1"]["reason"] == "maint" and nodes["n1"]["reason_set_by_user"] == "root"


def test_sacct_json_records_have_slurms_keys_and_types(monkeypatch) -> None:
    with fake_cluster(monkeypatch) as cluster:
        add_session_jobs(cluster)
        jobs = [j for j in cluster.state.jobs.values() if j.start_time]
    ours = slurmjson.accounting_document(jobs, T0 + 10, "capture")
    theirs = captured("sacct-json")
    diffs, only_slurm, only_spur = jsonshape.record_differences(theirs["jobs"], ours["jobs"], job_key, "jobs")
    assert (diffs, only_slurm, only_spur) == ([], [], [])
    steps = next(j for j in ours["jobs"] if j["name"] == "steps")["steps"]
    assert [s["step"]["id"] for s in steps] == ["batch", 0]  # Slurm: the batch step by name, others by number
    failed = next(j for j in ours["jobs"] if j["name"] == "fail")
    assert failed["exit_code"] == {"status": "FAILED", "return_code": 3}
    assert failed["state"] == {"current": "FAILED", "reason": "NonZeroExitCode"}


def test_scontrol_json_show_job_is_squeues_record_and_partitions_are_slurmrestds(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch) as cluster:
        add_session_jobs(cluster)
        add_session_nodes(cluster)
        code, out, _err = run(slurm.scontrol_main, ["--json", "show", "job", "3"], capsys)
        assert code == 0
        (job,) = json.loads(out)["jobs"]
        squeue_run1 = next(j for j in captured("squeue-json")["jobs"] if j["name"] == "run1")
        assert jsonshape.differences(squeue_run1, job) == [] and job["job_state"] == "RUNNING"
        code, out, _err = run(slurm.scontrol_main, ["--json", "show", "node", "n3"], capsys)
        (node,) = json.loads(out)["nodes"]
        sinfo_n3 = next(n for n in captured("sinfo-json-busy")["nodes"] if n["name"] == "n3")
        assert code == 0 and jsonshape.differences(sinfo_n3, node) == []
        code, out, _err = run(slurm.scontrol_main, ["--json", "show", "partition"], capsys)
    parts = {p["name"]: p for p in json.loads(out)["partitions"]}
    assert code == 0 and set(parts) == {"debug", "long"}
    assert (parts["debug"]["nodes"], parts["debug"]["total_cpus"], parts["debug"]["total_nodes"]) == ("n[1-2]", 8, 2)


@pytest.mark.parametrize("command", ["squeue", "sinfo", "sacct"])
def test_json_takes_slurms_later_version_form_and_names_the_one_spur_emits(monkeypatch, capsys, command) -> None:
    entry = getattr(slurm, f"{command}_main")
    with fake_cluster(monkeypatch):
        code, _out, err = run(entry, ["--json=v0.0.40"], capsys)
        assert code == 1 and err.count("\n") == 1
        assert "v0.0.38 only" in err and "--json=v0.0.38" in err and "Traceback" not in err
        if command != "sacct":  # the fake controller keeps no accounting
            code, out, err = run(entry, ["--json=v0.0.38"], capsys)
            assert (code, err) == (0, "") and json.loads(out)["meta"]["plugin"]["type"] == "openapi/v0.0.38"
            code, out, _err = run(entry, ["--yaml"], capsys)
            assert code == 0 and "meta" in json.loads(out)  # JSON is YAML


def test_no_listing_carries_a_script_or_an_environment(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch) as cluster:
        cluster.add_job(
            1,
            spec=pb.JobSpec(name="s", user="root", script="#!/bin/sh\n# TOKEN\n", environment={"TOKEN": "secret"}),
            state=pb.PENDING,
        )
        for entry, argv in ((slurm.squeue_main, ["--json"]), (slurm.scontrol_main, ["--json", "show", "job"])):
            code, out, _err = run(entry, argv, capsys)
            assert code == 0 and "TOKEN" not in out and "secret" not in out
        assert all(not call.endswith("GetJob") for _a, call in cluster.state.calls)


def test_partitions_carry_their_limits_flags_and_their_nodes_cpus() -> None:
    nodes = [pb.Node(name=f"n{i}", resources=pb.NodeResources(cpus=4, memory_mb=4096)) for i in (1, 2, 3)]
    parts = [
        nodeview.PartitionView(pb.Partition(name="debug", nodes=["n1", "n2"], is_default=True, max_time_secs=3600)),
        nodeview.PartitionView(pb.Partition(name="long", nodes=["n3"], hidden=True, max_nodes=1, state="DRAIN")),
    ]
    debug, long = slurmjson.partition_records(nodes, parts)
    assert (debug["flags"], debug["max_time_limit"], debug["maximum_nodes_per_job"]) == (["default"], 60, -1)
    assert (debug["nodes"], debug["total_cpus"], debug["tres"]) == ("n[1-2]", 8, "cpu=8,mem=8G,node=2,billing=8")
    assert (long["flags"], long["max_time_limit"], long["maximum_nodes_per_job"], long["state"]) == (
        ["hidden"],
        -1,
        1,
        "DRAIN",
    )


def test_command_is_the_batch_scripts_path(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch) as cluster:
        cluster.add_job(1, spec=pb.JobSpec(name="a", user="root", command="/work/steps.sh"), state=pb.PENDING)
        cluster.add_job(2, spec=pb.JobSpec(name="b", user="root"), state=pb.PENDING)  # --wrap
        jobs = json.loads(run(slurm.squeue_main, ["--json"], capsys)[1])["jobs"]
    assert [j["command"] for j in jobs] == ["/work/steps.sh", ""]
