"""The --json session captured from Debian's Slurm 22.05 (tests/golden/slurm-22.05-json, by `python -m
tools.slurm_capture capture-json`) replayed on a Spur cluster of the same shape (test_slurm_replay's fixture).

Compared by structure, not bytes: every command's exit code; in each JSON document the keys at every level and
each value's JSON type (tools/slurm_capture/jsonshape.py), with jobs paired by name and array task and nodes by
name; and the values that must agree whatever the cluster: job states, names, partitions, node lists and counts,
exit codes, node states, CPUs and partitions. 22.05's scontrol has no --json: Spur's `scontrol --json show`
records are compared with the same job's or node's record in Slurm's squeue and sinfo captures.
tests/golden/slurm-22.05-json/differences.toml lists the captures that still differ, with reasons; the test
fails on an unlisted difference and on a listed capture that has become the same. SPUR_REPLAY_DUMP=DIR writes
both sides of every capture there.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml
from test_slurm_replay import pg_database, pg_server, spur_side  # noqa: F401 (fixtures, bound by name)

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tools.slurm_capture
from tools.slurm_capture import json_session, jsonshape  # noqa: E402

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05-json"

# The values that must agree after normalisation (job ids differ: records are paired by name and task).
JOB_VALUES = ("job_state", "name", "partition", "nodes", "node_count", "exit_code", "array_task_id", "user_name")
ACCOUNTING_VALUES = ("name", "partition", "nodes", "state.current", "exit_code.return_code", "array.task_id")
NODE_VALUES = ("name", "state", "cpus", "partitions", "alloc_cpus", "real_memory")
# scontrol --json (none in 22.05) is checked against what Slurm's squeue/sinfo printed for the same record.
SCONTROL_PEERS = {
    "scontrol-json-show-job-running": ("squeue-json", "jobs", [("run1", None)]),
    "scontrol-json-show-job-held": ("squeue-json", "jobs", [("held", None)]),
    "scontrol-json-show-job-failed": ("squeue-json", "jobs", [("fail", None)]),
    "scontrol-json-show-job-array": ("squeue-json", "jobs", [("arr", None), ("arr", 0), ("arr", 1)]),
    "nobody-scontrol-json-show-job-running": ("nobody-squeue-json", "jobs", [("run1", None)]),
    "scontrol-json-show-node-n1-idle": ("sinfo-json-idle", "nodes", ["n1"]),
    "scontrol-json-show-node-n1-mixed": ("sinfo-json-busy", "nodes", ["n1"]),
}


def load() -> tuple[dict[str, dict], dict[str, str], dict[str, str]]:
    """The captures, [different] (capture -> reason) and [fields] (a field Spur fills differently in every
    record -> reason; its differences are left out before the captures are compared)."""
    captures = {p.stem: json.loads(p.read_text()) for p in sorted(GOLDEN.glob("[0-9][0-9][0-9]-*.json"))}
    listed = tomllib.loads((GOLDEN / "differences.toml").read_text())
    return captures, listed.get("different", {}), listed.get("fields", {})


def field_of(problem: str) -> str:
    """'jobs[('run1', None)].time.limit: ...' -> 'time.limit' (the path inside the record)."""
    path = problem.split(": ", 1)[0]
    return path.split("].", 1)[1] if "]." in path else path


def job_key(record: dict):
    if "array_task_id" in record or "job_state" in record:
        return record["name"], record.get("array_task_id")
    return record["name"], record["array"]["task_id"]


def record_key(kind: str):
    return job_key if kind == "jobs" else (lambda r: r["name"])


def value(record: dict, dotted: str):
    for part in dotted.split("."):
        record = record.get(part) if isinstance(record, dict) else None
    return record


def document(result: dict) -> dict | None:
    text = result["stdout"]
    if not text.strip() or result["rc"] != 0:
        return None
    return yaml.safe_load(text) if text.startswith("%YAML") else json.loads(text)


def compare_records(kind: str, slurm: list[dict], spur: list[dict], fields: tuple[str, ...]) -> list[str]:
    diffs, only_slurm, only_spur = jsonshape.record_differences(slurm, spur, record_key(kind), kind)
    problems = list(diffs)
    if only_slurm:
        problems.append(f"{kind}: only Slurm lists {only_slurm}")
    if only_spur:
        problems.append(f"{kind}: only Spur lists {only_spur}")
    theirs = {record_key(kind)(r): r for r in slurm}
    for record in spur:
        peer = theirs.get(record_key(kind)(record))
        for field in fields if peer is not None else ():
            if value(peer, field) != value(record, field):
                problems.append(f"{kind}[{record_key(kind)(record)}].{field}: Slurm {value(peer, field)!r}, "
                                f"Spur {value(record, field)!r}")
    return problems


def compare_documents(slurm: dict, spur: dict) -> list[str]:
    problems = []
    if set(slurm) != set(spur):
        problems.append(f"top-level keys: Slurm {sorted(slurm)}, Spur {sorted(spur)}")
    problems += jsonshape.differences(slurm.get("meta"), spur.get("meta"), "meta")
    problems += jsonshape.differences(slurm.get("errors"), spur.get("errors"), "errors")
    for kind, fields in (("jobs", JOB_VALUES), ("nodes", NODE_VALUES)):
        if kind in slurm and kind in spur:
            accounting = slurm[kind] and "state" in slurm[kind][0] and isinstance(slurm[kind][0]["state"], dict)
            problems += compare_records(kind, slurm[kind], spur[kind], ACCOUNTING_VALUES if accounting else fields)
    return problems


def compare(name: str, capture: dict, result: dict, captures_by_name: dict[str, dict]) -> list[str]:
    short = name.split("-", 1)[1]
    if short in SCONTROL_PEERS:  # Slurm refused (rc 1): Spur's records against Slurm's squeue/sinfo ones
        peer_name, kind, keys = SCONTROL_PEERS[short]
        ours = document(result)
        if ours is None:
            return [f"rc={result['rc']}: {result['stderr'].strip()}"]
        theirs = [r for r in document(captures_by_name[peer_name])[kind] if record_key(kind)(r) in keys]
        return compare_records(kind, theirs, ours[kind], JOB_VALUES if kind == "jobs" else NODE_VALUES)
    problems = []
    if capture["rc"] != result["rc"]:
        problems.append(f"rc: Slurm {capture['rc']}, Spur {result['rc']} ({result['stderr'].strip()[:200]})")
    if not json_session.is_json(capture["cmd"]) and "--yaml" not in capture["cmd"]:
        return problems
    theirs, ours = document(capture), document(result)
    if theirs is None or ours is None:
        if (theirs is None) != (ours is None):
            problems.append(f"only {'Spur' if theirs is None else 'Slurm'} printed a document")
        return problems
    return problems + compare_documents(theirs, ours)


def test_the_committed_json_captures_are_the_current_session() -> None:
    captures, listed, fields = load()
    assert list(captures) == json_session.capture_names(), (
        "tools/slurm_capture/json_session.py changed since the capture: run it again "
        "(.venv/bin/python -m tools.slurm_capture capture-json)"
    )
    for name, reason in listed.items():
        assert name in captures and reason.strip(), f"differences.toml: {name} is no capture or has no reason"
    assert all(reason.strip() for reason in fields.values()), "differences.toml: a [fields] entry has no reason"


def test_every_json_capture_of_slurm_has_slurms_structure_on_spur(spur_side) -> None:  # noqa: F811
    side, scratch = spur_side
    # the user nobody reads the client configuration too (pytest's scratch directory is root's alone)
    shared = Path(tempfile.mkdtemp(prefix="spur-json-replay-"))
    shared.chmod(0o755)
    conf = shared / "client.conf"
    shutil.copy(side.env["SPUR_CONF"], conf)
    conf.chmod(0o644)
    side.env["SPUR_CONF"] = str(conf)
    captures, listed, fields = load()
    meta = json.loads((GOLDEN / "session.json").read_text())

    def patience(step) -> float:
        took = meta["wait_secs"].get(step.what)
        return step.timeout if took is None else min(step.timeout, max(10.0, 1.5 * took + 10))

    try:
        results = {r["capture"]: r for r in json_session.run_json_session(side, patience, strict=False)}
    finally:
        shutil.rmtree(shared)
    by_short = {name.split("-", 1)[1]: capture for name, capture in captures.items()}
    dump = os.environ.get("SPUR_REPLAY_DUMP")
    for name in captures if dump else ():
        Path(dump).mkdir(parents=True, exist_ok=True)
        for side_name, result in (("slurm", captures[name]), ("spur", results[name])):
            Path(dump, f"{name}.{side_name}.txt").write_text(
                f"$ {result['resolved']}\nrc={result['rc']}\n{result['stdout']}--- stderr\n{result['stderr']}"
            )
    found = {name: compare(name, capture, results[name], by_short) for name, capture in captures.items()}
    seen_fields = {field_of(p) for problems in found.values() for p in problems} & set(fields)
    found = {name: [p for p in problems if field_of(p) not in fields] for name, problems in found.items()}
    different = {name: problems for name, problems in found.items() if problems}
    unlisted = {name: problems for name, problems in different.items() if name not in listed}
    stale = [name for name in listed if name not in different] + [f for f in fields if f not in seen_fields]
    print(f"{len(captures)} captures, {len(captures) - len(different)} the same, {len(different)} different")
    for name, problems in different.items():
        print(f"{name}: " + "; ".join(problems))
    assert not unlisted and not stale, (
        "\n".join(f"{name} differs from Slurm and is not in differences.toml: {p}" for name, p in unlisted.items())
        + "".join(f"\n{name} is now the same as Slurm's: remove it from differences.toml" for name in stale)
        + "\n"
        + "\n".join(side.log)
    )
