"""JobSpec protobuf <-> plain dict, shared by the controller (replicated records) and the agent (launch records)."""

from __future__ import annotations

from typing import Any

from spur_hpc import model
from spur_hpc.proto import slurm_pb2

JOB_SPEC_FIELDS = tuple(f for f in model.JOB_SPEC_FIELDS if f != "environment")  # all but the map
REPEATED_SPEC_FIELDS = tuple(f for f, kind in model.JOB_SPEC_FIELDS.items() if kind is list)


def spec_from_pb(spec: slurm_pb2.JobSpec) -> dict[str, Any]:
    out: dict[str, Any] = {f: getattr(spec, f) for f in JOB_SPEC_FIELDS}
    for field in REPEATED_SPEC_FIELDS:  # a plain list: records hold primitive values only
        out[field] = list(out[field])
    out["environment"] = dict(spec.environment)
    return out


# A brief spec leaves out the two fields that make up most of a job's record (a script and an environment of
# a few KB each) and that no job list shows: 10,000 jobs then cost 0.6 MB on the wire instead of 17 MB.
BRIEF_SPEC_FIELDS = tuple(f for f in JOB_SPEC_FIELDS if f != "script")


def spec_to_pb(spec: dict[str, Any], brief: bool = False) -> slurm_pb2.JobSpec:
    fields = BRIEF_SPEC_FIELDS if brief else JOB_SPEC_FIELDS
    pb_spec = slurm_pb2.JobSpec(**{f: spec[f] for f in fields if f in spec})
    if not brief:
        pb_spec.environment.update(spec.get("environment") or {})
    return pb_spec


def alloc_to_pb(job: dict[str, Any], node: str) -> slurm_pb2.NodeAllocation:
    """The job's share of one node (job["alloc"]["per_node"]), for LaunchJob / LaunchStep."""
    alloc = job.get("alloc") or {}
    held = (alloc.get("per_node") or {}).get(node) or {}
    gres_ids = held.get("gres_ids") or {}
    return slurm_pb2.NodeAllocation(
        cpus=int(held.get("cpus", alloc.get("cpus", 0))),
        memory_mb=int(held.get("memory_mb", alloc.get("memory_mb", 0))),
        cpu_ids=list(held.get("cpu_ids") or ()),
        gres=[slurm_pb2.GresUnits(key=key, indices=list(ids)) for key, ids in sorted(gres_ids.items())],
        chosen="cpu_ids" in held,
    )


def alloc_from_pb(pb: slurm_pb2.NodeAllocation) -> dict[str, Any]:
    """A NodeAllocation as the launch record keeps it (spurstepd reads it from there)."""
    return {
        "cpus": int(pb.cpus),
        "memory_mb": int(pb.memory_mb),
        "cpu_ids": [int(i) for i in pb.cpu_ids],
        "gres_ids": {unit.key: [int(i) for i in unit.indices] for unit in pb.gres},
        "chosen": bool(pb.chosen),
    }
