"""Partitions as the controllers know them: spur.conf's [partitions.NAME] tables, or the agents' [agent] partition.

Every replica reads the same spur.conf; the leader decides with it (which nodes a job may get, the default
partition, the refusals at submit, why a queued job waits). Nothing here is replicated: a job's resolved
partition and time limit go into its spec at submit, and the state machine's check of a start leaves partition
membership to the leader (placement.share checks it only in the planner's free map).

How the two sources combine: a node that one or more tables name (or that a `nodes = "ALL"` table takes) is in
exactly those partitions, in the file's order. A node no table names is in the partition its agent declares
(`[agent] partition`, "default" unless set), which is then implied: it has that node, no limits, state UP. An
agent that declares a partition that is a table not naming it is in no partition (the tables rule), logged once.
The default partition is the table with `default = true`; without one, the partition named `default`, if any.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spur_hpc.model import (
    REASON_PARTITION_CONFIG,
    REASON_PARTITION_DOWN,
    REASON_PARTITION_INACTIVE,
    REASON_PARTITION_NODE_LIMIT,
    REASON_PARTITION_TIME_LIMIT,
    expand_hostlist,
    parse_time_limit,
)

log = logging.getLogger("spurctld.partitions")

DEFAULT_NAME = "default"  # the partition a job without -p goes to when no table says default = true
UP, DOWN, DRAIN, INACTIVE = "UP", "DOWN", "DRAIN", "INACTIVE"
ALL = "ALL"

# Slurm's error texts (slurm_errno.c) that sbatch prints after "Batch job submission failed: ".
SLURM_INVALID_PARTITION = "Invalid partition name specified"
SLURM_NO_DEFAULT = "No partition specified or system default partition"
SLURM_NOT_AVAILABLE = "Required partition not available (inactive or drain)"
SLURM_NODE_COUNT = "Node count specification invalid"
SLURM_TIME_LIMIT = "Requested time limit is invalid (missing or exceeds some limit)"

# Reasons a queued job waits for its partition that block the whole partition (no job of it can start).
PARTITION_WIDE = frozenset({REASON_PARTITION_DOWN, REASON_PARTITION_INACTIVE, REASON_PARTITION_CONFIG})


@dataclass(frozen=True)
class Partition:
    """One partition with its nodes resolved (node names in configured order; for ALL or an implied partition,
    the registered nodes by name)."""

    name: str
    nodes: tuple[str, ...]
    nodes_expr: str
    is_default: bool = False
    max_time_secs: int = 0  # 0: UNLIMITED
    default_time_secs: int = 0  # 0: max_time_secs
    max_nodes: int = 0  # 0: UNLIMITED
    min_nodes: int = 0
    state: str = UP
    hidden: bool = False
    priority_tier: int = 1
    priority_job_factor: int = 1
    preempt_mode: str = "off"  # off | cancel | requeue: what qos_priority preemption does to a job here
    implied: bool = False  # from the agents' [agent] partition, not a table

    @property
    def job_time_limit(self) -> int:
        """The time limit of a job sent without -t (Slurm: DefaultTime, else MaxTime; 0 = UNLIMITED)."""
        return self.default_time_secs or self.max_time_secs


@dataclass(frozen=True)
class _Table:
    config: Any  # conf.PartitionConfig
    takes_all: bool
    names: tuple[str, ...]  # expanded, configured order (empty for ALL)
    name_set: frozenset[str]


class PartitionTable:
    """The configured partitions and each node's membership (memoised per node name and declared partition)."""

    def __init__(self, configs: Iterable[Any] = ()) -> None:
        self._tables: list[_Table] = []
        for config in configs:
            takes_all = config.nodes.strip().upper() == ALL
            names = () if takes_all or not config.nodes else tuple(expand_hostlist(config.nodes))
            self._tables.append(_Table(config, takes_all, names, frozenset(names)))
        self._by_name = {t.config.name: t for t in self._tables}
        self._members: dict[tuple[str, str], tuple[str, ...]] = {}
        self._warned: set[str] = set()
        self._listed: tuple[Any, list[Partition]] = (None, [])  # (the node map's signature, its listing)

    @classmethod
    def from_conf(cls, conf: Any) -> PartitionTable:
        return cls(getattr(conf, "partitions", ()))

    @property
    def has_tables(self) -> bool:
        return bool(self._tables)

    def of_node(self, name: str, declared: str) -> tuple[str, ...]:
        """The partitions of a node whose agent declares `declared`, in configured order."""
        key = (name, declared)
        found = self._members.get(key)
        if found is None:
            found = tuple(t.config.name for t in self._tables if t.takes_all or name in t.name_set)
            if not found and declared in self._by_name:
                if name not in self._warned:
                    self._warned.add(name)
                    log.warning(
                        "node %s: its agent declares partition %s, but [partitions.%s] nodes does not name it; the "
                        "tables decide, so the node is in no partition (add it to that table's nodes)",
                        name,
                        declared,
                        declared,
                    )
            elif not found:
                if self._tables and name not in self._warned:
                    self._warned.add(name)
                    log.info("node %s is in no [partitions] table: it serves partition %s, its agent's", name, declared)
                found = (declared or DEFAULT_NAME,)
            self._members[key] = found
        return found

    def node_partitions(self, node: Mapping[str, Any]) -> tuple[str, ...]:
        return self.of_node(node["name"], node.get("partition") or DEFAULT_NAME)

    def listing(self, nodes: Mapping[str, Mapping[str, Any]]) -> list[Partition]:
        """Every partition: the tables in the file's order, then the implied ones by name. `nodes` is the
        replicated node map (s.nodes): it gives ALL its members and the implied partitions theirs. Kept until
        a node comes or goes or declares another partition (building it for 10,000 nodes takes ~25 ms; the
        check ~1 ms), since every submit and every squeue asks."""
        signature = (id(nodes), hash(tuple(nodes)), hash(tuple([n.get("partition") for n in nodes.values()])))
        if self._listed[0] != signature:
            self._listed = (signature, self._build_listing(nodes))
        return self._listed[1]

    def _build_listing(self, nodes: Mapping[str, Mapping[str, Any]]) -> list[Partition]:
        implied: dict[str, list[str]] = {}
        for name in sorted(nodes):
            for part in self.node_partitions(nodes[name]):
                if part not in self._by_name:
                    implied.setdefault(part, []).append(name)
        default = self._default_name(implied)
        out = []
        for table in self._tables:
            c = table.config
            members = tuple(sorted(nodes)) if table.takes_all else table.names
            out.append(
                Partition(
                    name=c.name,
                    nodes=members,
                    nodes_expr=ALL if table.takes_all else c.nodes,
                    is_default=c.name == default,
                    max_time_secs=parse_time_limit(c.max_time, "max_time"),
                    default_time_secs=parse_time_limit(c.default_time, "default_time") if c.default_time else 0,
                    max_nodes=c.max_nodes,
                    min_nodes=c.min_nodes,
                    state=c.state,
                    hidden=c.hidden,
                    priority_tier=c.priority_tier,
                    priority_job_factor=c.priority_job_factor,
                    preempt_mode=c.preempt_mode,
                )
            )
        for name in sorted(implied):
            out.append(Partition(name, tuple(implied[name]), ",".join(implied[name]), name == default, implied=True))
        if default == DEFAULT_NAME and not any(p.name == DEFAULT_NAME for p in out):
            out.append(Partition(DEFAULT_NAME, (), "", True, implied=True))  # as before tables: jobs wait for nodes
        return out

    def _default_name(self, implied: Mapping[str, Any]) -> str | None:
        for table in self._tables:
            if table.config.default:
                return table.config.name
        if not self._tables or DEFAULT_NAME in self._by_name or DEFAULT_NAME in implied:
            return DEFAULT_NAME
        return None

    def find(self, nodes: Mapping[str, Mapping[str, Any]], name: str) -> Partition | None:
        return next((p for p in self.listing(nodes) if p.name == name), None)

    def default(self, nodes: Mapping[str, Mapping[str, Any]]) -> Partition | None:
        return next((p for p in self.listing(nodes) if p.is_default), None)

    def tier(self, name: str) -> int:
        table = self._by_name.get(name)
        return table.config.priority_tier if table else 1

    def preempt_mode(self, name: str) -> str:
        """The partition's PreemptMode (off for a partition no table configures)."""
        table = self._by_name.get(name)
        return table.config.preempt_mode if table else "off"


def limits_reason(part: Partition, spec: Mapping[str, Any]) -> str | None:
    """Why the partition's limits keep the job from running, as Slurm's job_limits_check words it, or None:
    more nodes than the partition has, fewer than MinNodes or more than MaxNodes, a time limit over MaxTime
    (no time limit counts as UNLIMITED)."""
    count = max(1, int(spec.get("nodes") or 1))
    # An implied partition no agent has joined yet is no limit: its nodes are still to register (Resources).
    too_many = count > len(part.nodes) and not (part.implied and not part.nodes)
    if too_many or count < part.min_nodes or (part.max_nodes and count > part.max_nodes):
        return REASON_PARTITION_NODE_LIMIT
    limit = int(spec.get("time_limit_secs") or 0)
    if part.max_time_secs and (not limit or limit > part.max_time_secs):
        return REASON_PARTITION_TIME_LIMIT
    return None


def job_reason(part: Partition | None, spec: Mapping[str, Any]) -> str | None:
    """Why a queued job's partition does not run it now, or None: gone from the configuration, DOWN or INACTIVE
    (which also skip the limits, as in Slurm), then its limits."""
    if part is None:
        return REASON_PARTITION_CONFIG
    if part.state == DOWN:
        return REASON_PARTITION_DOWN
    if part.state == INACTIVE:
        return REASON_PARTITION_INACTIVE
    return limits_reason(part, spec)


def waiting_reason(table: PartitionTable, s: Any, spec: Mapping[str, Any], memo: dict) -> str | None:
    """job_reason for a job of the replicated state `s`; the listing is worked out once per `memo` (one plan or
    one squeue)."""
    found = memo.get("partitions_by_name")
    if found is None:
        found = memo["partitions_by_name"] = {p.name: p for p in table.listing(s.nodes)}
    return job_reason(found.get(spec.get("partition") or DEFAULT_NAME), spec)
