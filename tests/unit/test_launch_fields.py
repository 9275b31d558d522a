"""The Job fields a launch record carries besides the spec (array ids, restart count) and the filename patterns
that use them (%A %a %J %s %t %n), from LaunchJob through spurd to the file spurstepd writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_agent import launch_request, make_agent  # noqa: F401  (make_agent is a fixture)

from agents import launch_supervisor, new_session, unique_node
from spur_hpc import model
from spur_hpc.stepd.session import LAUNCH_FILE, launch_job_field


def test_the_launch_record_carries_the_array_ids_and_restart_count(make_agent, tmp_path: Path) -> None:  # noqa: F811
    agent = make_agent()
    request = launch_request(71, "echo $SLURM_JOB_ID\n", tmp_path, stdout_path="out-%A_%a-%j.txt")
    request.job.array_job_id, request.job.array_task_id, request.job.restart_count = 70, 3, 2
    agent.stub.LaunchJob(request, timeout=10)
    session = agent.table.find(71)
    launch = json.loads(session.dir.read_bytes(LAUNCH_FILE))["body"]
    assert (launch["array_job_id"], launch["array_task_id"], launch["restart_count"]) == (70, 3, 2)
    done = agent.finished()
    assert done.result["state"] == "COMPLETED"
    assert (tmp_path / "out-70_3-71.txt").read_text() == "71\n"


def test_a_launch_record_written_before_the_array_fields_still_runs(tmp_path: Path, work: Path) -> None:
    node = unique_node()
    session = new_session(tmp_path / "state", node, 72, "echo ran\n", work_dir=str(work))
    record = json.loads(session.read_bytes(LAUNCH_FILE))
    for key in ("array_job_id", "array_task_id", "restart_count"):
        del record["body"][key]
    session.write_record(LAUNCH_FILE, "launch", record["body"])
    assert launch_job_field(record["body"], "array_job_id") == 0
    sup = launch_supervisor(session, node)
    assert sup.wait_result()["state"] == "COMPLETED"
    assert (work / "slurm-72.out").read_text() == "ran\n"


@pytest.mark.parametrize(
    ("pattern", "fields", "expected"),
    [
        ("out-%A_%a.txt", {"array_job_id": 40, "array_task_id": 0}, "out-40_0.txt"),
        ("out-%A_%4a.txt", {"array_job_id": 40, "array_task_id": 7}, "out-40_0007.txt"),
        ("%b", {"array_job_id": 40, "array_task_id": 17}, "7"),
        ("out-%A_%a.txt", {}, "out-123_4294967294.txt"),
        ("", {"array_job_id": 40, "array_task_id": 5}, "slurm-40_5.out"),
        ("%J", {}, "123"),
        ("%J-%s", {"step": "2"}, "123.2-2"),
        ("%6J", {"step": "0"}, "000123.0"),
        ("%s", {"step": "batch"}, "batch"),
        ("%3s", {"step": "4"}, "004"),
        ("job%j-%2t.out", {"step": "0", "task": 1}, "job123-01.out"),
        ("%n-%N", {"node_index": 1}, "1-n07"),
    ],
)
def test_array_and_step_patterns_expand_as_slurmstepd_does(pattern: str, fields: dict, expected: str) -> None:
    assert model.output_file(pattern, "", 123, "train", "alice", "n07", **fields) == expected
