"""Golden output of the Slurm-compatible views: messages built here, text compared with tests/golden/*.txt.

Run with SPUR_UPDATE_GOLDEN=1 to rewrite the files after an intended change (then read the diff).
Times are fixed and printed in UTC, group names come from a stub, so the text is the same everywhere.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from spur_hpc.cli import acctview, jobrecord, jobview, nodeview
from spur_hpc.proto import slurm_pb2 as pb

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NOW = 1_714_560_000.0  # 2024-05-01T10:40:00Z


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def check(name: str, lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    path = GOLDEN / name
    if os.environ.get("SPUR_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run with SPUR_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"output differs from {path} (SPUR_UPDATE_GOLDEN=1 rewrites it)"


def spec(name: str, user: str = "alice", uid: int = 1000, **fields) -> pb.JobSpec:
    fields.setdefault("work_dir", f"/home/{user}")
    return pb.JobSpec(name=name, user=user, uid=uid, gid=uid, nodes=fields.pop("nodes", 1), **fields)


def sample_jobs() -> list[pb.Job]:
    return [
        pb.Job(job_id=101, spec=spec("train-resnet50", tasks=8, cpus_per_task=2, nodes=2, time_limit_secs=7200,
                                     memory_mb=16000),
               state=pb.RUNNING, reason="None", submit_time=NOW - 4000, start_time=NOW - 3725, nodes=["node1", "node2"],
               attempt=1),
        pb.Job(job_id=102, spec=spec("prep", partition="gpu"), state=pb.PENDING, reason="Resources",
               submit_time=NOW - 60),
        pb.Job(job_id=103, spec=spec("held", user="bob", uid=1001), state=pb.PENDING, reason="JobHeldAdmin",
               submit_time=NOW - 30),
        pb.Job(job_id=104, spec=spec("stopping"), state=pb.RUNNING, cancel_requested=True, submit_time=NOW - 200,
               start_time=NOW - 100, nodes=["node3"], attempt=1),
        pb.Job(job_id=105, spec=spec("lost", stdout_path="out-%j.log", stderr_path="/tmp/err-%x.log"),
               state=pb.NODE_FAIL, reason="node node4: Not responding", submit_time=NOW - 90000,
               start_time=NOW - 89000, end_time=NOW - 86000, nodes=["node4"], attempt=2),
        pb.Job(job_id=106, spec=spec("done", user="root", uid=0), state=pb.COMPLETED, exit_code=0,
               submit_time=NOW - 700, start_time=NOW - 650, end_time=NOW - 5, nodes=["node1"], attempt=1),
        pb.Job(job_id=107, spec=spec("broken"), state=pb.FAILED, exit_code=3, signal=0, submit_time=NOW - 500,
               start_time=NOW - 400, end_time=NOW - 399, nodes=["node2"], attempt=1),
        pb.Job(job_id=108, spec=spec("killed"), state=pb.CANCELLED, exit_code=0, signal=15, submit_time=NOW - 300,
               start_time=NOW - 290, end_time=NOW - 200, nodes=["node2"], attempt=1, cancelled_by_uid=1000),
    ]  # fmt: skip


def sample_nodes() -> list[pb.Node]:
    res = pb.NodeResources
    return [
        pb.Node(name="node1", state=pb.MIXED, resources=res(cpus=16, memory_mb=64000), allocated=res(cpus=8),
                job_ids=[101, 106], registered=True, partition="default", address="127.0.1.11:6818", version="0.1.0",
                build="abc123def456", last_registered=NOW - 9000, last_heartbeat=NOW - 2),
        pb.Node(name="node2", state=pb.MIXED, resources=res(cpus=16, memory_mb=64000), allocated=res(cpus=8),
                job_ids=[101], registered=True, partition="default"),
        pb.Node(name="node3", state=pb.DRAINING, resources=res(cpus=16, memory_mb=64000), allocated=res(cpus=1),
                job_ids=[104], registered=True, drain=True, reason="ansible rolling upgrade", reason_set_by="root",
                reason_time=NOW - 120, partition="default"),
        pb.Node(name="node4", state=pb.DOWN, resources=res(cpus=16, memory_mb=64000), registered=False,
                reason="Not responding", reason_set_by="spurctld", reason_time=NOW - 86000, partition="default"),
        pb.Node(name="node5", state=pb.IDLE, resources=res(cpus=16, memory_mb=64000), registered=True),
        pb.Node(name="node6", state=pb.IDLE, resources=res(cpus=16, memory_mb=64000), registered=True),
        pb.Node(name="node7", state=pb.DRAINED, resources=res(cpus=16, memory_mb=64000), registered=True, drain=True,
                reason="bad DIMM", reason_set_by="alice", reason_time=NOW - 3600),
        pb.Node(name="gpu01", state=pb.IDLE, resources=res(cpus=32, memory_mb=256000), registered=True,
                partition="gpu"),
        pb.Node(name="gpu02", state=pb.ALLOCATED, resources=res(cpus=32, memory_mb=256000),
                allocated=res(cpus=32, memory_mb=1000), registered=True, partition="gpu"),
    ]  # fmt: skip


def group_of(job: pb.Job) -> tuple[str, str]:
    return f"{job.spec.user}({job.spec.uid})", f"{job.spec.user}({job.spec.gid})"


def queued(jobs: list[pb.Job]) -> list[pb.Job]:
    return [j for j in jobs if jobview.state_name(j) in ("PENDING", "RUNNING", "COMPLETING")]


def test_squeue_default_format() -> None:
    check("squeue_default.txt", jobview.squeue_lines(queued(sample_jobs()), jobview.SQUEUE_DEFAULT_FORMAT, True, NOW))


def test_squeue_every_state_long_codes() -> None:
    fmt = "%.7i %.9P %.10j %.6u %.2t %.10T %.10M %.10l %.10L %.4D %.4C %.6m %r"
    check("squeue_all_states.txt", jobview.squeue_lines(sample_jobs(), fmt, True, NOW))


def test_squeue_noheader_bare_columns() -> None:
    check("squeue_noheader.txt", jobview.squeue_lines(queued(sample_jobs()), "%i|%t|%N|%R", False, NOW))


def sinfo(nodes: list[pb.Node], fields: str = "", format_text: str = "", **layout) -> list[str]:
    """sinfo's lines for Slurm's named field list (as its default formats are written) or a -o format."""
    columns = nodeview.parse_fields(fields) if fields else nodeview.parse_format(format_text)
    return nodeview.sinfo_lines(nodes, columns, nodeview.Layout(**layout), True)


def test_sinfo_partition_summary() -> None:
    check("sinfo_default.txt", sinfo(sample_nodes(), nodeview.DEFAULT_FIELDS, part_width=True))


def test_sinfo_node_oriented() -> None:
    lines = sinfo(sample_nodes(), nodeview.NODE_FIELDS, node_oriented=True, node_width=True, part_width=True)
    check("sinfo_nodes.txt", lines)


def test_sinfo_reasons() -> None:
    nodes = [n for n in sample_nodes() if n.reason]
    check("sinfo_reasons.txt", sinfo(nodes, nodeview.REASONS_FIELDS, reasons=True))


def test_sinfo_cpu_counts_and_versions() -> None:
    check("sinfo_cpus.txt", sinfo(sample_nodes(), format_text="%P %.14C %.6c %.8m %v %N"))


def test_scontrol_show_job() -> None:
    lines: list[str] = []
    for job in sample_jobs():
        lines += jobrecord.show_job_lines(job, NOW, group_of)
        lines.append("")
    check("scontrol_show_job.txt", lines)


def test_scontrol_show_node() -> None:
    lines: list[str] = []
    for node in sample_nodes()[:4]:
        lines += nodeview.show_node_text(node).split("\n")[:-1]
    check("scontrol_show_node.txt", lines)


def test_sacct_default_format() -> None:
    check("sacct_default.txt", acctview.sacct_lines(sample_jobs(), acctview.parse_fields(acctview.DEFAULT_FIELDS), NOW))


def test_sacct_parsable2_custom_fields() -> None:
    fields = acctview.parse_fields("JobID,JobName%8,User,State,ExitCode,Elapsed,Start,End,NodeList")
    check("sacct_parsable2.txt", acctview.sacct_lines(sample_jobs(), fields, NOW, parsable="parsable2"))


def test_sacct_widths_and_truncation() -> None:
    fields = acctview.parse_fields("JobID%-6,JobName%6,State%-12,Timelimit,ReqMem,AllocCPUS")
    check("sacct_widths.txt", acctview.sacct_lines(sample_jobs(), fields, NOW))


def test_first_show_node_line_starts_with_the_name() -> None:
    # automation matches the record as it matches Slurm's, like grep -q "^NodeName=node1 "
    assert nodeview.show_node_lines(sample_nodes()[0])[0].startswith("NodeName=node1 ")
