"""Which nodes would take a job: the scheduler's second question, and state.py's check of a start.

Pure and deterministic over the replicated state: the planner (scheduler.py) and the state machine's
job_start (state.py) use the same fit, so a plan is refused only when the state changed in between.
"""

from __future__ import annotations

from typing import Any

from spur_hpc.model import per_node_cpus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState


def job_partition(spec: dict[str, Any]) -> str:
    return spec.get("partition") or "default"


def node_count(spec: dict[str, Any]) -> int:
    return max(1, spec.get("nodes") or 1)


def demand(spec: dict[str, Any]) -> dict[str, int]:
    """What the job holds on each of its nodes."""
    return {"cpus": per_node_cpus(spec), "mem": int(spec.get("memory_mb") or 0)}


def free_resources(s: ClusterState) -> dict[str, dict[str, int]]:
    """What each schedulable node has left, keyed by node name."""
    return {
        n: {"cpus": node["cpus"] - node["alloc_cpus"], "mem": node["memory_mb"] - node["alloc_mem"]}
        for n, node in s.nodes.items()
        if s.schedulable(node)
    }


def fits(node: dict[str, Any], free: dict[str, int], spec: dict[str, Any]) -> bool:
    """Whether one node, with `free` left, can take one node's share of the job."""
    if job_partition(spec) != node["partition"]:
        return False
    need = demand(spec)
    return free["cpus"] >= need["cpus"] and not (need["mem"] and free["mem"] < need["mem"])


def choose_nodes(s: ClusterState, job: dict[str, Any], free: dict[str, dict[str, int]]) -> list[str] | None:
    """The nodes the job would get now (by name order), or None when not enough of them fit."""
    spec = job["spec"]
    fit = [n for n in sorted(free) if fits(s.nodes[n], free[n], spec)]
    count = node_count(spec)
    return fit[:count] if len(fit) >= count else None


def take(job: dict[str, Any], chosen: list[str], free: dict[str, dict[str, int]]) -> None:
    """Count a planned start against `free`, so the next job of the same plan sees what is left."""
    need = demand(job["spec"])
    for n in chosen:
        free[n]["cpus"] -= need["cpus"]
        free[n]["mem"] -= need["mem"]
