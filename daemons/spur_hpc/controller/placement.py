"""Which nodes would take a job: the scheduler's second question, and state.py's check of a start.

Pure and deterministic over the replicated state: the planner (scheduler.py) and the state machine's
job_start (state.py) use the same fit, so a plan is refused only when the state changed in between.

What a job asks of each node (demand): CPUs (tasks x CPUs per task shared over its nodes, or every CPU of
the node with --exclusive), memory (--mem, or --mem-per-cpu times the CPUs it holds there) and counted
resources (--gres, --gpus*: name or name:type -> count, taken from the node's declared gres map minus what
its jobs hold). Which nodes may take it: its partition, not --exclude'd, matching --constraint (features),
not holding an exclusive job (and idle, for an exclusive job); every --nodelist node must be among them,
and other nodes fill up to the node count. What a started job holds is kept in job["alloc"] (per node, so
its release gives back exactly that), and each node's sums in alloc_cpus / alloc_mem / alloc_gres.
"""

from __future__ import annotations

import re
from typing import Any

from spur_hpc.controller import suspension
from spur_hpc.model import (
    MAX_FEATURES,
    MAX_GRES_COUNT,
    MAX_GRES_KINDS,
    RUNNING,
    InvalidValue,
    bounded_int,
    expand_hostlist,
    per_node_cpus,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState

# Pending reasons this module gives (squeue's NODELIST(REASON)), as Slurm words them.
REASON_RESOURCES = "Resources"  # it could fit once running jobs end
REASON_NODE_NOT_AVAIL = "ReqNodeNotAvail"  # a node it names is down, drained or not registered

GRES_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
FEATURE_NAME = re.compile(r"^[A-Za-z0-9_.:=-]{1,64}$")
GPU = "gpu"


def job_partition(spec: dict[str, Any]) -> str:
    return spec.get("partition") or "default"


def node_partitions(s: Any, node: dict[str, Any], parts: Any = None) -> tuple[str, ...]:
    """The partitions whose jobs the node takes: those of the PartitionTable `parts` (controller/partitions.py),
    else the one its agent declares. Before WAL level 4 a member's job_start check still compares the job's
    partition with the agent's, so the leader then keeps to the partitions that agree with it."""
    declared = node.get("partition") or "default"
    if parts is None:
        return (declared,)
    found = parts.node_partitions(node)
    return found if getattr(s, "wal_level", 4) >= 4 else tuple(p for p in found if p == declared)


def node_count(spec: dict[str, Any]) -> int:
    return max(1, spec.get("nodes") or 1)


# ------------------------------------------------------------------ parsing what a job asks for


def parse_gres_list(text: str, what: str = "--gres") -> dict[str, int]:
    """--gres as written (gpu:2, gpu:a100:1,nic) -> {"gpu": 2, "gpu:a100": 1, "nic": 1}; the count defaults
    to 1 and a digit-only second field is a count, as in Slurm."""
    wanted: dict[str, int] = {}
    if not text or text.lower() == "none":
        return wanted
    items = text.split(",")
    if len(items) > MAX_GRES_KINDS:
        raise InvalidValue(f"{what}={text!r} names more than {MAX_GRES_KINDS} resources")
    for item in items:
        fields = item.split(":")
        if len(fields) == 2 and fields[1].isascii() and fields[1].isdigit():
            name, kind, count_text = fields[0], "", fields[1]
        elif len(fields) in (1, 2, 3):
            name, kind, count_text = (
                fields[0],
                fields[1] if len(fields) > 1 else "",
                fields[2] if len(fields) == 3 else "1",
            )
        else:
            name, kind, count_text = "", "", ""
        count = bounded_int(count_text, MAX_GRES_COUNT)
        if not GRES_NAME.match(name) or (kind and not GRES_NAME.match(kind)) or not count:
            raise InvalidValue(
                f"{what}={text!r}: {item!r} is not NAME[:TYPE][:COUNT] (a count from 1 to {MAX_GRES_COUNT}), "
                "like gpu:2 or gpu:a100:1"
            )
        key = f"{name}:{kind}" if kind else name
        wanted[key] = wanted.get(key, 0) + count
    return wanted


def _parse_gpus(text: str, what: str) -> tuple[str, int]:
    """--gpus* as written ([type:]N) -> (the gres key, N)."""
    kind, _colon, count_text = text.rpartition(":")
    count = bounded_int(count_text, MAX_GRES_COUNT)
    if not count or (kind and not GRES_NAME.match(kind)):
        raise InvalidValue(
            f"{what}={text!r} is not [TYPE:]COUNT (a count from 1 to {MAX_GRES_COUNT}), like 2 or a100:2"
        )
    return (f"{GPU}:{kind}" if kind else GPU), count


def tasks_per_node(spec: dict[str, Any]) -> int:
    """The most tasks one of the job's nodes runs (--ntasks-per-node, else its tasks shared out)."""
    tasks, nodes = max(1, spec.get("tasks") or 1), node_count(spec)
    return spec.get("ntasks_per_node") or -(-tasks // nodes)


def gres_demand(spec: dict[str, Any]) -> dict[str, int]:
    """The counted resources the job holds on each of its nodes: --gres, plus --gpus-per-node, --gpus-per-task
    times its tasks per node, and --gpus shared out over its nodes (rounded up)."""
    wanted = parse_gres_list(spec.get("gres") or "")
    extra = []
    if spec.get("gpus_per_node"):
        extra.append(_parse_gpus(spec["gpus_per_node"], "--gpus-per-node"))
    if spec.get("gpus_per_task"):
        key, count = _parse_gpus(spec["gpus_per_task"], "--gpus-per-task")
        extra.append((key, count * tasks_per_node(spec)))
    if spec.get("gpus"):
        key, count = _parse_gpus(spec["gpus"], "--gpus")
        extra.append((key, -(-count // node_count(spec))))
    for key, count in extra:
        wanted[key] = wanted.get(key, 0) + count
    return wanted


def parse_constraint(text: str) -> list[list[str]]:
    """--constraint as written -> alternatives ('|') of features that must all be there ('&'); & binds
    tighter than |. Slurm's brackets, counts (*N) and parentheses are refused with one line."""
    text = text.strip()
    if not text:
        return []
    for char in "[]()*,":
        if char in text:
            raise InvalidValue(
                f"--constraint={text!r}: {char!r} (brackets, counts, parentheses, commas) is not supported; "
                "use features joined with & (all) or | (any), like ssd&avx2 or a|b"
            )
    alternatives = [[term.strip() for term in alternative.split("&")] for alternative in text.split("|")]
    if sum(len(a) for a in alternatives) > MAX_FEATURES:
        raise InvalidValue(f"--constraint={text!r} has more than {MAX_FEATURES} features")
    for alternative in alternatives:
        for feature in alternative:
            if not FEATURE_NAME.match(feature):
                raise InvalidValue(
                    f"--constraint={text!r}: {feature!r} is not a feature name (letters, digits, _ . : = -); "
                    "join features with & or |"
                )
    return alternatives


def features_match(node: dict[str, Any], alternatives: list[list[str]]) -> bool:
    if not alternatives:
        return True
    have = set(node.get("features") or ())
    return any(all(f in have for f in alternative) for alternative in alternatives)


def named_nodes(spec: dict[str, Any]) -> list[str]:
    return expand_hostlist(spec["nodelist"]) if spec.get("nodelist") else []


def excluded_nodes(spec: dict[str, Any]) -> set[str]:
    return set(expand_hostlist(spec["exclude"])) if spec.get("exclude") else set()


def normalize(spec: dict[str, Any]) -> str | None:
    """At submit, before the defaults: the node and task counts Slurm derives, and the options checked for
    form. --ntasks-per-node with -n and no -N gives ceil(n / per node) nodes; with -N and no -n it gives
    N x per node tasks; alone, one node running that many tasks. -w with more nodes than -N raises the node
    count to them. None when fine, else one line naming what is wrong."""
    try:
        per_node = spec.get("ntasks_per_node") or 0
        if per_node < 0 or per_node > 1_000_000:
            return f"--ntasks-per-node={per_node} is out of range; use a number from 1 to 1000000"
        if per_node:
            if not spec.get("tasks"):
                spec["tasks"] = max(1, spec.get("nodes") or 1) * per_node
            elif not spec.get("nodes"):
                spec["nodes"] = -(-spec["tasks"] // per_node)
        named = named_nodes(spec)
        if len(named) > (spec.get("nodes") or 1):
            spec["nodes"] = len(named)
        both = set(named) & excluded_nodes(spec)
        if both:
            return f"node {sorted(both)[0]} is both in --nodelist and in --exclude; name it in one of them"
        if (spec.get("mem_per_cpu_mb") or 0) < 0:
            return f"--mem-per-cpu={spec['mem_per_cpu_mb']} MB is negative"
        if spec.get("mem_per_cpu_mb") and spec.get("memory_mb"):
            return "--mem and --mem-per-cpu exclude each other; give one of them"
        gres_demand(spec)
        parse_constraint(spec.get("constraint") or "")
    except InvalidValue as exc:
        return str(exc)
    return None


def uses_level3(spec: dict[str, Any]) -> str | None:
    """The first placement option whose records a member before WAL level 3 would apply differently (it holds
    only the CPUs and memory asked for, and ignores the nodes named): None when the job uses none."""
    for field, option in (
        ("nodelist", "--nodelist"),
        ("exclude", "--exclude"),
        ("exclusive", "--exclusive"),
        ("mem_per_cpu_mb", "--mem-per-cpu"),
        ("gres", "--gres"),
        ("gpus", "--gpus"),
        ("gpus_per_node", "--gpus-per-node"),
        ("gpus_per_task", "--gpus-per-task"),
        ("constraint", "--constraint"),
    ):
        if spec.get(field):
            return option
    return None


# ------------------------------------------------------------------ what a node has and what a job takes


def node_offer_problem(gres: dict[str, int], features: list[str]) -> str | None:
    """Whether an agent's declared gres map and features are usable (one line naming what is not), or None."""
    if len(gres) > MAX_GRES_KINDS:
        return f"it declares {len(gres)} gres; the limit is {MAX_GRES_KINDS}"
    for key, count in gres.items():
        name, _colon, kind = key.partition(":")
        if not GRES_NAME.match(name) or (_colon and not GRES_NAME.match(kind)):
            return f"gres {key!r} is not NAME or NAME:TYPE (letters, digits, _ . -)"
        if not 0 <= count <= MAX_GRES_COUNT:
            return f"gres {key}={count} is out of range; use a count from 0 to {MAX_GRES_COUNT}"
    if len(features) > MAX_FEATURES:
        return f"it declares {len(features)} features; the limit is {MAX_FEATURES}"
    for feature in features:
        if not FEATURE_NAME.match(feature):
            return f"feature {feature!r} is not a feature name (letters, digits, _ . : = -, at most 64)"
    return None


def node_free(node: dict[str, Any]) -> dict[str, Any]:
    """What one node has left: CPUs, memory, gres per key, whether it runs nothing, whether an exclusive job
    holds it."""
    held = node.get("alloc_gres") or {}
    return {
        "cpus": node["cpus"] - node["alloc_cpus"],
        "mem": node["memory_mb"] - node["alloc_mem"],
        "gres": {key: count - held.get(key, 0) for key, count in (node.get("gres") or {}).items()},
        "idle": not node["jobs"],
        "exclusive": bool(node.get("exclusive_job")),
        "node": node,
    }


def free_resources(s: ClusterState, now: float | None = None, parts: Any = None) -> dict[str, dict[str, Any]]:
    """What each schedulable node has left, keyed by node name, with the partitions it serves (node_partitions).
    With `now` (the scheduler's plan), a node whose agent holds dispatch for its restart is left out; the reasons
    and estimates shown to users ignore holds."""
    return {
        n: dict(node_free(node), partitions=node_partitions(s, node, parts))
        for n, node in s.nodes.items()
        if s.schedulable(node) and (now is None or not s.dispatch_held(node, now))
    }


def _take_gres(free_gres: dict[str, int], wanted: dict[str, int]) -> dict[str, int] | None:
    """The node's gres keys the job would hold ({key: count}), or None when they are not there. An untyped
    request (gpu:2) takes from the untyped key first, then the typed ones (gpu:a100) by name order."""
    left = dict(free_gres)
    taken: dict[str, int] = {}
    for key in sorted(wanted):
        need = wanted[key]
        sources = [key] if ":" in key else [key] + sorted(k for k in left if k.startswith(key + ":"))
        for source in sources:
            use = min(need, max(0, left.get(source, 0)))
            if use:
                left[source] -= use
                taken[source] = taken.get(source, 0) + use
                need -= use
        if need:
            return None
    return taken


def demand(spec: dict[str, Any]) -> dict[str, Any]:
    """What the job asks of each node, parsed once per job (the spec was checked at submit)."""
    return {
        "partition": job_partition(spec),
        "excluded": excluded_nodes(spec),
        "constraint": parse_constraint(spec.get("constraint") or ""),
        "exclusive": bool(spec.get("exclusive")),
        "cpus": per_node_cpus(spec),
        "mem_per_cpu": int(spec.get("mem_per_cpu_mb") or 0),
        "mem": int(spec.get("memory_mb") or 0),
        "gres": gres_demand(spec),
    }


def share(node: dict[str, Any], free: dict[str, Any], want: dict[str, Any]) -> dict[str, Any] | None:
    """What the job (its demand()) would hold on this node ({"cpus", "memory_mb", "gres"}), or None when the
    node cannot take it now (partition, --exclude, features, exclusivity, CPUs, memory, gres). The partition is
    checked where `free` says which ones the node serves (the planner's free map): the state machine's check of
    a start leaves membership, a matter of the configuration, to the leader."""
    if ("partitions" in free and want["partition"] not in free["partitions"]) or node["name"] in want["excluded"]:
        return None
    if not features_match(node, want["constraint"]):
        return None
    exclusive = want["exclusive"]
    if free["exclusive"] or (exclusive and not free["idle"]):
        return None
    cpus = node["cpus"] if exclusive else want["cpus"]
    mem = want["mem_per_cpu"] * cpus or want["mem"]
    if free["cpus"] < cpus or (mem and free["mem"] < mem):
        return None
    gres = _take_gres(free["gres"], want["gres"])
    if gres is None:
        return None
    if exclusive:  # an exclusive job holds every gres of the node, as in Slurm
        gres = {key: count for key, count in free["gres"].items() if count > 0}
    return {"cpus": cpus, "memory_mb": mem, "gres": gres}


def fits(node: dict[str, Any], free: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether one node, with `free` left, can take one node's share of the job."""
    return share(node, free, demand(spec)) is not None


def choose_nodes(s: ClusterState, job: dict[str, Any], free: dict[str, dict[str, Any]]) -> list[str] | None:
    """The nodes the job would get now: every --nodelist node, then others by name order up to the node
    count; None when not enough of them fit."""
    spec = job["spec"]
    want = demand(spec)
    named = named_nodes(spec)
    if any(n not in free or share(s.nodes[n], free[n], want) is None for n in named):
        return None
    count = node_count(spec)
    chosen = list(named)
    taken = set(named)
    for n in sorted(free):
        if len(chosen) >= count:
            break
        if n not in taken and share(s.nodes[n], free[n], want) is not None:
            chosen.append(n)
    return chosen if len(chosen) >= count else None


def take(job: dict[str, Any], chosen: list[str], free: dict[str, dict[str, Any]], s: Any = None) -> None:
    """Count a planned start against `free`, so the next job of the same plan sees what is left. (`s` is not
    needed: each free entry carries its node.)"""
    want = demand(job["spec"])
    for n in chosen:
        held = share(free[n]["node"], free[n], want)
        if held is not None:
            _subtract(free[n], held, want["exclusive"])


def _subtract(free: dict[str, Any], held: dict[str, Any], exclusive: bool) -> None:
    free["cpus"] -= held["cpus"]
    free["mem"] -= held["memory_mb"]
    for key, count in held["gres"].items():
        free["gres"][key] = free["gres"].get(key, 0) - count
    free["idle"] = False
    free["exclusive"] = free["exclusive"] or exclusive


# ------------------------------------------------------------------ the state machine's start and release


def start_problem(s: ClusterState, job: dict[str, Any], names: list[str]) -> tuple[str, str] | None:
    """Why these nodes cannot take the job now, as (state.err code, one line), or None: state.py's job_start
    check ("invalid" for a record that could never be right, "conflict" when the nodes changed)."""
    spec = job["spec"]
    want = demand(spec)
    if len(names) != node_count(spec) or len(set(names)) != len(names):
        return "invalid", f"job {job['job_id']} needs {node_count(spec)} distinct nodes"
    missing = [n for n in named_nodes(spec) if n not in names]
    if missing:
        return "invalid", f"job {job['job_id']} must have node {missing[0]} (--nodelist)"
    for name in names:
        node = s.nodes.get(name)
        if node is None or not s.schedulable(node) or share(node, node_free(node), want) is None:
            return "conflict", f"node {name} cannot take job {job['job_id']} any more"
    return None


def hold(s: ClusterState, job: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Give the job its share of each node (after start_problem said None); the job's alloc record."""
    want = demand(job["spec"])
    exclusive = want["exclusive"]
    per_node = {}
    for name in names:
        node = s.nodes[name]
        held = share(node, node_free(node), want) or {"cpus": 0, "memory_mb": 0, "gres": {}}
        node["alloc_cpus"] += held["cpus"]
        node["alloc_mem"] += held["memory_mb"]
        if held["gres"]:
            alloc_gres = node.setdefault("alloc_gres", {})
            for key, count in held["gres"].items():
                alloc_gres[key] = alloc_gres.get(key, 0) + count
        if exclusive:
            node["exclusive_job"] = job["job_id"]
        if getattr(s, "wal_level", 0) >= 3:
            # Exact units, from level 3 on only (a member still at level 2 would not write these fields).
            held = dict(held, **choose_units(s, node, held))
        node["jobs"].append(job["job_id"])
        per_node[name] = held
    first = per_node[names[0]] if names else {"cpus": 0, "memory_mb": 0, "gres": {}}
    # cpus / memory_mb: what the first node holds (readers before per_node, like steplaunch, read these).
    return {"cpus": first["cpus"], "memory_mb": first["memory_mb"], "exclusive": exclusive, "per_node": per_node}


def units_in_use(s: ClusterState, node: dict[str, Any]) -> tuple[set[int], dict[str, set[int]]]:
    """The CPU indices and gres unit indices the node's running jobs hold (their job records say which)."""
    cpus: set[int] = set()
    gres: dict[str, set[int]] = {}
    for job_id in node["jobs"]:
        other = s.jobs.get(job_id)
        held = (((other or {}).get("alloc") or {}).get("per_node") or {}).get(node["name"]) or {}
        cpus.update(held.get("cpu_ids") or ())
        for key, indices in (held.get("gres_ids") or {}).items():
            gres.setdefault(key, set()).update(indices)
    return cpus, gres


def choose_units(s: ClusterState, node: dict[str, Any], held: dict[str, Any]) -> dict[str, Any]:
    """Which CPUs (indices into the node's usable CPUs) and which units of each gres key the job gets: the
    lowest free ones. Kept in the job record, so every member, a new leader and a restarted spurd agree on
    them and a unit is never handed to two jobs."""
    used_cpus, used_gres = units_in_use(s, node)
    free_cpus = [i for i in range(node["cpus"]) if i not in used_cpus]
    gres_ids = {}
    for key, count in sorted(held["gres"].items()):
        taken = used_gres.get(key, set())
        gres_ids[key] = [i for i in range(int((node.get("gres") or {}).get(key, 0))) if i not in taken][:count]
    return {"cpu_ids": free_cpus[: held["cpus"]], "gres_ids": gres_ids}


def release(s: ClusterState, job: dict[str, Any]) -> None:
    """Give back what the job holds on its nodes (an alloc written before per_node held the same on each)."""
    alloc = job.get("alloc") or {"cpus": 0, "memory_mb": 0}
    per_node = alloc.get("per_node") or {}
    for name in job["nodes"]:
        node = s.nodes.get(name)
        if node is None or job["job_id"] not in node["jobs"]:
            continue
        held = per_node.get(name) or {"cpus": alloc["cpus"], "memory_mb": alloc["memory_mb"], "gres": {}}
        node["jobs"].remove(job["job_id"])
        node["alloc_cpus"] = max(0, node["alloc_cpus"] - held["cpus"])
        node["alloc_mem"] = max(0, node["alloc_mem"] - held["memory_mb"])
        alloc_gres = node.get("alloc_gres") or {}
        for key, count in held["gres"].items():
            left = alloc_gres.get(key, 0) - count
            if left > 0:
                alloc_gres[key] = left
            else:
                alloc_gres.pop(key, None)
        if node.get("exclusive_job") == job["job_id"]:
            node["exclusive_job"] = 0
    job["alloc"] = {"cpus": 0, "memory_mb": 0}


def job_gres(job: dict[str, Any]) -> dict[str, int]:
    """The gres a running job holds, summed over its nodes (the job record's view; 0s once it ended)."""
    total: dict[str, int] = {}
    for held in ((job.get("alloc") or {}).get("per_node") or {}).values():
        for key, count in held["gres"].items():
            total[key] = total.get(key, 0) + count
    return total


# ------------------------------------------------------------------ submit checks and pending reasons


def never_fits(s: ClusterState, spec: dict[str, Any], parts: Any = None) -> str | None:
    """Why the job could never start on the nodes the cluster has (one line for the submitter), or None.
    Nothing registered in its partition yet: None (it waits, like a job for a partition that is down). More
    nodes than the partition has is no refusal: it pends (PartitionNodeLimit, partitions.limits_reason)."""
    partition = job_partition(spec)
    nodes = {name: node for name, node in s.nodes.items() if partition in node_partitions(s, node, parts)}
    try:
        named = named_nodes(spec)
        excluded = excluded_nodes(spec)
        constraint = parse_constraint(spec.get("constraint") or "")
        wanted = gres_demand(spec)
    except InvalidValue as exc:
        return str(exc)
    for name in named:
        if name not in s.nodes:
            return f"node {name} named by --nodelist does not exist; check the name with sinfo -N"
        if name not in nodes:
            return f"node {name} named by --nodelist is not in partition {partition}; check it with sinfo -N -n {name}"
    if not nodes:
        return None
    count = min(node_count(spec), len(nodes))  # past the partition's size it pends instead
    candidates = {n: node for n, node in nodes.items() if n not in excluded}
    if len(candidates) < count:
        return f"--exclude leaves {len(candidates)} node(s) of partition {partition} and the job needs {count}"
    if constraint:
        candidates = {n: node for n, node in candidates.items() if features_match(node, constraint)}
        if len(candidates) < count:
            return (
                f"--constraint={spec['constraint']!r}: {len(candidates)} node(s) of partition {partition} have "
                f"those features and the job needs {count}"
            )
    cpus = per_node_cpus(spec)
    biggest = max(node["cpus"] for node in candidates.values())
    if biggest < cpus:
        return f"the job asks for {cpus} CPUs per node but the largest node in partition {partition} has {biggest}"
    mem = int(spec.get("mem_per_cpu_mb") or 0) * cpus or int(spec.get("memory_mb") or 0)
    most = max(node["memory_mb"] for node in candidates.values())
    if mem and most < mem:
        return f"the job asks for {mem} MB per node but the largest node has {most} MB"
    for key, need in sorted(wanted.items()):
        most_gres = max(_gres_capacity(node, key) for node in candidates.values())
        if most_gres < need:
            return (
                f"the job asks for {need} {key} per node but no node of partition {partition} has more than {most_gres}"
            )
    capable = [n for n, node in candidates.items() if _could_ever_take(node, spec, cpus, mem, wanted)]
    if len(capable) < count:
        return f"the job needs {count} nodes with all it asks for, and partition {partition} has {len(capable)}"
    missing = [n for n in named if n not in capable]
    if missing:
        return f"node {missing[0]} named by --nodelist can never take this job (features, CPUs, memory or gres)"
    return None


def _gres_capacity(node: dict[str, Any], key: str) -> int:
    declared = node.get("gres") or {}
    if ":" in key:
        return declared.get(key, 0)
    return sum(count for k, count in declared.items() if k == key or k.startswith(key + ":"))


def _could_ever_take(node: dict[str, Any], spec: dict[str, Any], cpus: int, mem: int, wanted: dict[str, int]) -> bool:
    if not features_match(node, parse_constraint(spec.get("constraint") or "")):
        return False
    if node["cpus"] < cpus or (mem and node["memory_mb"] < mem):
        return False
    return all(_gres_capacity(node, key) >= need for key, need in wanted.items())


def pending_reason(s: ClusterState, job: dict[str, Any], parts: Any = None) -> str | None:
    """Why an eligible pending job has no nodes now: ReqNodeNotAvail when a node it names is down, drained
    or gone, Resources when the nodes are busy; None when it would fit now (it starts on the next plan)."""
    spec = job["spec"]
    for name in named_nodes(spec):
        node = s.nodes.get(name)
        if node is None or not s.schedulable(node):
            return REASON_NODE_NOT_AVAIL
    if choose_nodes(s, job, free_resources(s, parts=parts)) is None:
        return REASON_RESOURCES
    return None


REASON_PRIORITY = "Priority"  # an older job of its partition waits for nodes first (no backfill)


def queue_reason(s: ClusterState, job: dict[str, Any], memo: dict, parts: Any = None) -> str | None:
    """squeue's reason for an eligible pending job, as the planner would decide it: the first job of a partition
    without nodes says why (Resources, ReqNodeNotAvail), the younger ones behind it Priority; None when it would
    start now. `memo` is shared by one pass over the queue (the free resources are worked out once)."""
    free = memo.get("placement_free")
    if free is None:
        free = memo["placement_free"] = free_resources(s, parts=parts)
    blocked = memo.setdefault("placement_blocked", set())
    partition = job_partition(job["spec"])
    if partition in blocked:
        return REASON_PRIORITY
    if choose_nodes(s, job, free) is not None:
        return None
    blocked.add(partition)
    return pending_reason(s, job, parts)


def start_estimate(s: ClusterState, job: dict[str, Any], now: float, parts: Any = None) -> float:
    """--test-only's answer: now when the job fits now; else the earliest end of a running job by its time
    limit (the first moment something frees up); 0 when unknown (no running job has a limit)."""
    if choose_nodes(s, job, free_resources(s, parts=parts)) is not None:
        return now
    ends = [  # a suspended job's end is unknown until it resumes; a resumed one's moved by its time suspended
        j["start_time"] + j["spec"]["time_limit_secs"] + suspension.suspended_secs(j)
        for j in s.jobs.values()
        if j["state"] == RUNNING and j["spec"].get("time_limit_secs") and suspension.shown_state(j) == RUNNING
    ]
    return max(now, min(ends)) if ends else 0.0


def test_only(s: ClusterState, spec: dict[str, Any], now: float, parts: Any = None) -> tuple[float, list[str]]:
    """sbatch --test-only: (when the job would start, the nodes it would get now or []); nothing is written.
    A --begin later than the estimate is the estimate."""
    job = {"job_id": 0, "spec": spec}
    nodes = choose_nodes(s, job, free_resources(s, parts=parts)) or []
    estimate = start_estimate(s, job, now, parts)
    begin = float(spec.get("begin_time") or 0.0)
    if estimate and begin > estimate:
        estimate, nodes = begin, []
    return estimate, nodes
