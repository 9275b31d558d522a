"""How nodes look: sinfo's grouped columns and `scontrol show node`'s Key=Value form.

Pure functions of Node messages (decoded or generated alike), so golden tests can compare text.
"""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import slurmformat, units
from spur_hpc.cli.runner import printable
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SINFO_DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
SINFO_NODE_FORMAT = "%#N %.6D %#P %6t"
SINFO_REASONS_FORMAT = "%20E %9u %19H %N"
DEFAULT_PARTITION = "default"

SHORT_STATES = {
    "IDLE": "idle",
    "MIXED": "mix",
    "ALLOCATED": "alloc",
    "DRAINING": "drng",
    "DRAINED": "drain",
    "DOWN": "down",
    "NODE_STATE_UNKNOWN": "unk",
}
LONG_STATES = {
    "IDLE": "idle",
    "MIXED": "mixed",
    "ALLOCATED": "allocated",
    "DRAINING": "draining",
    "DRAINED": "drained",
    "DOWN": "down",
    "NODE_STATE_UNKNOWN": "unknown",
}
# accepted by sinfo -t and spur's filters: Slurm's short and long names -> NodeState names
STATE_ALIASES = {
    **{v: k for k, v in SHORT_STATES.items()},
    **{v: k for k, v in LONG_STATES.items()},
    "drain": "DRAINED",
    "alloc": "ALLOCATED",
    "allocated": "ALLOCATED",
}

SINFO_TITLES = {
    "P": "PARTITION",
    "R": "PARTITION",
    "a": "AVAIL",
    "l": "TIMELIMIT",
    "D": "NODES",
    "t": "STATE",
    "T": "STATE",
    "N": "NODELIST",
    "n": "HOSTNAMES",
    "c": "CPUS",
    "m": "MEMORY",
    "C": "CPUS(A/I/O/T)",
    "E": "REASON",
    "H": "TIMESTAMP",
    "u": "USER",
    "O": "CPU_LOAD",
    "e": "FREE_MEM",
    "v": "VERSION",
    "F": "NODES(A/I/O/T)",
    "A": "NODES(A/I)",
    "f": "AVAIL_FEATURES",
    "G": "GRES",
}
# letters summed or listed over a group of nodes; every other letter splits groups
_AGGREGATE_LETTERS = frozenset("DNnCFA")
_UNAVAILABLE = ("DOWN", "DRAINED", "DRAINING")


def gres_text(resources: Any) -> str:
    """Slurm's gres notation of a resources map: gpu:2,nic:1 ((null) when none)."""
    items = sorted(dict(resources.gres).items())
    return ",".join(f"{name}:{count}" for name, count in items) or "(null)"


def features_text(node: Any) -> str:
    return ",".join(node.features) or "(null)"


def state_name(node: Any) -> str:
    return protocodec.schema().enum_name("NodeState", node.state)


def not_responding(node: Any) -> bool:
    """A node whose agent is gone (not an administrator's DOWN); sinfo marks it with '*'."""
    return not node.registered


def partition(node: Any) -> str:
    return node.partition or DEFAULT_PARTITION


def short_state(node: Any) -> str:
    state = state_name(node)
    return SHORT_STATES.get(state, state.lower()) + ("*" if not_responding(node) else "")


def long_state(node: Any) -> str:
    state = state_name(node)
    return LONG_STATES.get(state, state.lower()) + ("*" if not_responding(node) else "")


def _node_value(letter: str, node: Any) -> str:
    if letter == "P":
        name = partition(node)
        return name + "*" if name == DEFAULT_PARTITION else name
    if letter == "R":
        return partition(node)
    if letter == "a":
        return "up"
    if letter == "l":
        return "infinite"
    if letter == "t":
        return short_state(node)
    if letter == "T":
        return long_state(node)
    if letter == "c":
        return str(node.resources.cpus)
    if letter == "m":
        return str(node.resources.memory_mb)
    if letter == "E":
        return node.reason or "none"
    if letter == "H":
        return units.format_timestamp(node.reason_time) if node.reason else "Unknown"
    if letter == "u":
        return (node.reason_set_by or "root") if node.reason else "Unknown"
    if letter in ("O", "e"):
        return "N/A"
    if letter == "v":
        return node.version or "N/A"
    if letter == "f":
        return features_text(node)
    if letter == "G":
        return gres_text(node.resources)
    if letter == "gresused":
        return gres_text(node.allocated)
    if letter == "allocmem":
        return str(node.allocated.memory_mb)
    if letter == "nodeaddr":
        return model.address_host(node.address) if node.address else node.name
    raise KeyError(letter)


# sinfo -O/--Format: Slurm's field names -> (title, the -o letter or key that prints it)
FORMAT_FIELDS = {
    "allocmem": ("ALLOCMEM", "allocmem"), "available": ("AVAIL", "a"), "cpus": ("CPUS", "c"),
    "cpusload": ("CPU_LOAD", "O"), "cpusstate": ("CPUS(A/I/O/T)", "C"), "features": ("AVAIL_FEATURES", "f"),
    "features_act": ("ACTIVE_FEATURES", "f"), "freemem": ("FREE_MEM", "e"), "gres": ("GRES", "G"),
    "gresused": ("GRES_USED", "gresused"), "memory": ("MEMORY", "m"), "nodeaddr": ("NODE_ADDR", "nodeaddr"),
    "nodehost": ("HOSTNAMES", "n"), "nodelist": ("NODELIST", "N"), "nodes": ("NODES", "D"),
    "partition": ("PARTITION", "P"), "partitionname": ("PARTITION", "R"), "reason": ("REASON", "E"),
    "statecompact": ("STATE", "t"), "statelong": ("STATE", "T"), "time": ("TIMELIMIT", "l"),
    "timestamp": ("TIMESTAMP", "H"), "user": ("USER", "u"), "version": ("VERSION", "v"),
}  # fmt: skip


def _group_value(letter: str, nodes: list[Any]) -> str:
    if letter == "D":
        return str(len(nodes))
    if letter in ("N", "n"):
        return model.compress_hostlist([n.name for n in nodes])
    if letter == "C":
        allocated = sum(min(n.allocated.cpus, n.resources.cpus) for n in nodes)
        total = sum(n.resources.cpus for n in nodes)
        other = sum(
            n.resources.cpus - min(n.allocated.cpus, n.resources.cpus) for n in nodes if state_name(n) in _UNAVAILABLE
        )
        idle = total - allocated - other
        return f"{allocated}/{idle}/{other}/{total}"
    if letter == "A":  # nodes allocated (in part or whole) / idle
        busy = sum(state_name(n) in ("ALLOCATED", "MIXED") for n in nodes)
        idle = sum(state_name(n) == "IDLE" for n in nodes)
        return f"{busy}/{idle}"
    if letter == "F":  # nodes allocated (in part or whole) / idle / other (down, drained) / total
        states = [state_name(n) for n in nodes]
        other = sum(state in _UNAVAILABLE for state in states)
        busy = sum(state in ("ALLOCATED", "MIXED") for state in states)
        return f"{busy}/{len(nodes) - busy - other}/{other}/{len(nodes)}"
    return _node_value(letter, nodes[0])


def sinfo_lines(
    nodes: list[Any],
    format_text: str,
    header: bool,
    node_oriented: bool = False,
    program: str = "sinfo",
    fields_text: str = "",
) -> list[str]:
    """Nodes with equal values in every non-aggregate column share a line (partition, then first node name).
    fields_text: -O field names instead of the -o format."""
    titles = SINFO_TITLES
    if fields_text:
        columns, titles = slurmformat.parse_fields(program, fields_text, FORMAT_FIELDS)
    else:
        columns = slurmformat.parse(program, format_text, SINFO_TITLES)
    keys = [c.letter for c in columns if c.letter and c.letter not in _AGGREGATE_LETTERS]
    ordered = sorted(nodes, key=lambda n: (partition(n) != DEFAULT_PARTITION, partition(n), _natural(n.name)))
    groups: list[list[Any]] = []
    if node_oriented:
        groups = [[n] for n in ordered]
    else:
        index: dict[tuple[str, ...], list[Any]] = {}
        for node in ordered:
            key = tuple(_node_value(letter, node) for letter in keys)
            if key not in index:
                index[key] = []
                groups.append(index[key])
            index[key].append(node)
    return slurmformat.render(columns, groups, _group_value, titles, header)


def _natural(name: str) -> tuple[str, int, str]:
    stem = name.rstrip("0123456789")
    digits = name[len(stem) :]
    return stem, int(digits) if digits else -1, name


def partition_records(nodes: list[Any]) -> list[list[str]]:
    """`scontrol show partition`: one record per partition the nodes name (Spur's partitions are the nodes'
    [agent] partition; no limits of their own)."""
    by_name: dict[str, list[Any]] = {}
    for node in sorted(nodes, key=lambda n: _natural(n.name)):
        by_name.setdefault(partition(node), []).append(node)
    records = []
    for name in sorted(by_name, key=lambda p: (p != DEFAULT_PARTITION, p)):
        members = by_name[name]
        lines = [
            f"PartitionName={name}",
            "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
            f"   Default={'YES' if name == DEFAULT_PARTITION else 'NO'} Hidden=NO RootOnly=NO",
            "   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0",
            f"   Nodes={model.compress_hostlist([n.name for n in members])}",
            "   State=UP",
            f"   TotalCPUs={sum(n.resources.cpus for n in members)} TotalNodes={len(members)}",
            f"   TRES=cpu={sum(n.resources.cpus for n in members)},mem={sum(n.resources.memory_mb for n in members)}M,"
            f"node={len(members)}",
            "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        ]
        records.append([printable(line) for line in lines])
    return records


def show_node_lines(node: Any) -> list[str]:
    """`scontrol show node` for one node; the first line is exactly NodeName=<name> so scripts can match it."""
    state = state_name(node)
    lines = [
        f"NodeName={node.name}",
        f"   CPUAlloc={node.allocated.cpus} CPUTot={node.resources.cpus} CPULoad=N/A",
        f"   RealMemory={node.resources.memory_mb} AllocMem={node.allocated.memory_mb} FreeMem=N/A",
        f"   NodeAddr={node.address or '(null)'} Version={node.version or 'N/A'} Build={node.build or 'N/A'}",
        f"   State={state}{'+NOT_RESPONDING' if not_responding(node) and state != 'DOWN' else ''}"
        f" Partitions={partition(node)}",
        f"   Gres={gres_text(node.resources)} AllocGres={gres_text(node.allocated)}",
        f"   AvailableFeatures={features_text(node)} ActiveFeatures={features_text(node)}",
        f"   Jobs={','.join(str(j) for j in node.job_ids) or '(null)'}",
        f"   LastRegistered={units.format_timestamp(node.last_registered, 'None')}"
        f" LastHeartbeat={units.format_timestamp(node.last_heartbeat, 'None')}",
    ]
    if node.reason:
        who = node.reason_set_by or "root"
        lines.append(f"   Reason={node.reason} [{who}@{units.format_timestamp(node.reason_time)}]")
    return [printable(line) for line in lines]
