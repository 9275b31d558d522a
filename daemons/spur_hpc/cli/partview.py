"""`scontrol show partition`'s record: Slurm 22.05's 12 lines, from the controller's Partition (ListPartitions,
through nodeview.partitions_of) and the nodes' CPUs and memory.

What Spur's partitions do not have prints Slurm's value for none: no per-partition group, account or QOS lists
(ALL, N/A), no grace, over-time or job defaults, OverSubscribe=NO (jobs share a node's free CPUs, one
job per CPU), DefMemPerNode=UNLIMITED (a job without --mem may use the node's memory).
"""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import nodeview, units
from spur_hpc.cli.runner import printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _limit(value: int) -> str:
    return str(value) if value else "UNLIMITED"


def show_partition_lines(part: Any, nodes: dict[str, Any]) -> list[str]:
    """One partition (a nodeview.PartitionView); `nodes` maps node names to Node messages (CPUs, memory)."""
    members = [nodes[name] for name in part.nodes if name in nodes]
    cpus = sum(n.resources.cpus for n in members)
    memory = sum(n.resources.memory_mb for n in members)
    max_time = units.format_limit(int(part.max_time_secs or 0), clock=True)
    default_time = units.format_limit(int(part.default_time_secs or 0), "NONE", clock=True)
    lines = [
        f"PartitionName={part.name}",
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"   AllocNodes=ALL Default={'YES' if part.is_default else 'NO'} QoS=N/A",
        f"   DefaultTime={default_time} DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
        f"Hidden={'YES' if part.hidden else 'NO'}",
        f"   MaxNodes={_limit(int(part.max_nodes or 0))} MaxTime={max_time} MinNodes={int(part.min_nodes or 0)} "
        "LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"   Nodes={model.compress_hostlist(list(part.nodes)) or '(null)'}",
        f"   PriorityJobFactor={int(part.priority_job_factor or 1)} PriorityTier={int(part.priority_tier or 1)} "
        "RootOnly=NO ReqResv=NO OverSubscribe=NO",
        f"   OverTimeLimit=NONE PreemptMode={nodeview.preempt_mode_text(part)}",
        f"   State={part.state} TotalCPUs={cpus} TotalNodes={len(part.nodes)} SelectTypeParameters=NONE",
        "   JobDefaults=(null)",
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"   TRES=cpu={cpus},mem={units.format_tres_memory(memory)},node={len(part.nodes)},billing={cpus}",
    ]
    return [printable(line) for line in lines]
