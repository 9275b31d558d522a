"""How nodes look: sinfo's lines and `scontrol show node`'s record, as Slurm 22.05 prints them.

sinfo follows Slurm's own model (src/sinfo): each format field has a width, a justification and a suffix; nodes
that agree on every field the format shows (and sit in the same partition, when it shows one) share a line; lines
are sorted by partition then state (-N: by node); node states are Slurm's state word (a base state and flags).
Pure functions of Node and Partition messages (decoded or generated alike), so tests can compare text.
"""

from __future__ import annotations

import re
import sys
import time

from spur_hpc import model
from spur_hpc.cli import units
from spur_hpc.cli.runner import CliError, error_line, printable
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT_PARTITION = "default"  # the partition of a node whose agent names none (and the default without [partitions])

# ------------------------------------------------------------------ Slurm's node state word (slurm.h)

BASE_UNKNOWN, BASE_DOWN, BASE_IDLE, BASE_ALLOCATED, BASE_MIXED = 0, 1, 2, 3, 5
FLAG_DRAIN = 0x200
FLAG_NO_RESPOND = 0x800
BASE_MASK = 0xF
# base state -> (node_state_string, node_state_string_compact); 4 is Slurm's unused ERROR
_BASE_NAMES = {
    0: ("UNKNOWN", "UNK"), 1: ("DOWN", "DOWN"), 2: ("IDLE", "IDLE"), 3: ("ALLOCATED", "ALLOC"), 4: ("?", "?"),
    5: ("MIXED", "MIX"), 6: ("FUTURE", "FUTR"),
}  # fmt: skip
# what sinfo -t accepts besides the base states (opts.c _node_state_id), and its list of valid states
_VALID_STATES = (
    "unknown,down,idle,allocated,?,mixed,future,drain,drained,draining,no_respond,reserved,perfctrs,cloud,"
    "completing,powering_down,powered_down,power_down,powering_up,fail,maint,reboot,reboot^,unknown"
)


def state_name(node: Any) -> str:
    return protocodec.schema().enum_name("NodeState", node.state)


def not_responding(node: Any) -> bool:
    """A node whose agent is gone (not an administrator's DOWN); sinfo marks it with '*'."""
    return not node.registered


def partition(node: Any) -> str:
    return node.partition or DEFAULT_PARTITION


def node_partitions(node: Any) -> list[str]:
    return list(node.partitions) or [partition(node)]


def draining(node: Any) -> bool:
    return node.drain or state_name(node) in ("DRAINING", "DRAINED")


def state_word(node: Any, mixed_if_draining: bool = False) -> int:
    """The node as Slurm's state word. A node with jobs is ALLOCATED, or MIXED when some CPUs are free; sinfo keeps
    a draining node ALLOCATED (the whole node is going away), scontrol shows it MIXED (mixed_if_draining)."""
    state = state_name(node)
    cpus, used = node.resources.cpus, node.allocated.cpus
    if state == "DOWN":
        base = BASE_DOWN
    elif state in ("IDLE", "DRAINED"):
        base = BASE_IDLE
    elif state == "MIXED":
        base = BASE_MIXED
    elif state == "ALLOCATED":
        base = BASE_ALLOCATED
    elif state == "DRAINING":
        base = BASE_MIXED if mixed_if_draining and 0 < used < cpus else BASE_ALLOCATED
    else:
        base = BASE_UNKNOWN
    return base | (FLAG_DRAIN if draining(node) else 0) | (FLAG_NO_RESPOND if not_responding(node) else 0)


def _busy(word: int) -> bool:
    return word & BASE_MASK in (BASE_ALLOCATED, BASE_MIXED)


def state_long(word: int) -> str:
    """Slurm's node_state_string: DRAINING, DRAINED, MIXED, DOWN* ..."""
    star = "*" if word & FLAG_NO_RESPOND else ""
    if word & FLAG_DRAIN:
        return ("DRAINING" if _busy(word) else "DRAINED") + star
    return _BASE_NAMES.get(word & BASE_MASK, ("?", "?"))[0] + star


def state_compact(word: int) -> str:
    """Slurm's node_state_string_compact: DRNG, DRAIN, MIX, DOWN* ..."""
    star = "*" if word & FLAG_NO_RESPOND else ""
    if word & FLAG_DRAIN:
        return ("DRNG" if _busy(word) else "DRAIN") + star
    return _BASE_NAMES.get(word & BASE_MASK, ("?", "?"))[1] + star


def state_complete(word: int) -> str:
    """Slurm's node_state_string_complete: the base state and each flag, ALLOCATED+DRAIN, DOWN+DRAIN+NOT_RESPONDING."""
    text = _BASE_NAMES.get(word & BASE_MASK, ("INVALID", ""))[0]
    if word & FLAG_DRAIN:
        text += "+DRAIN"
    if word & FLAG_NO_RESPOND:
        text += "+NOT_RESPONDING"
    return text


def short_state(node: Any) -> str:
    return state_compact(state_word(node)).lower()


def long_state(node: Any) -> str:
    return state_long(state_word(node)).lower()


def gres_text(resources: Any) -> str:
    """Slurm's gres notation of a resources map: gpu:2,nic:1 ((null) when none)."""
    items = sorted(dict(resources.gres).items())
    return ",".join(f"{name}:{count}" for name, count in items) or "(null)"


def features_text(node: Any) -> str:
    return ",".join(node.features) or "(null)"


def layout(node: Any) -> tuple[int, int, int]:
    """(sockets, cores per socket, threads per core); an agent that reported none: one core per socket (Slurm's
    default for a node configured with CPUs only)."""
    if node.sockets > 0:
        return node.sockets, max(node.cores_per_socket, 1), max(node.threads_per_core, 1)
    return max(node.resources.cpus, 1), 1, 1


def _port(node: Any) -> int:
    try:
        return model.split_host_port(node.address)[1] if node.address else 0
    except model.InvalidValue:
        return 0


def _address(node: Any) -> str:
    return model.address_host(node.address) if node.address else node.name


# ------------------------------------------------------------------ sinfo -t: Slurm's state names, prefixes allowed


class StateFilter:
    """One item of sinfo -t: a base state, or a flag test (drain, drained, draining, no_respond)."""

    __slots__ = ("kind", "base")

    def __init__(self, kind: str, base: int = 0) -> None:
        self.kind = kind
        self.base = base

    def matches(self, node: Any, word: int) -> bool:
        if self.kind == "all":
            return True
        if self.kind == "drain":
            return bool(word & FLAG_DRAIN)
        if self.kind == "draining":
            return bool(word & FLAG_DRAIN) and _busy(word)
        if self.kind == "drained":
            return bool(word & FLAG_DRAIN) and not _busy(word)
        if self.kind == "no_respond":
            return bool(word & FLAG_NO_RESPOND)
        if self.kind == "never":  # a state Spur's nodes never have (cloud, power saving, reboot, maintenance...)
            return False
        if self.base == BASE_ALLOCATED:  # Slurm: any node with allocated CPUs
            return node.allocated.cpus > 0
        return word & BASE_MASK == self.base


_FLAG_STATES = [
    (("planned", "plnd"), "never"), (("drain",), "drain"), (("drained",), "drained"),
    (("resv", "reserved"), "never"), (("perfctrs", "npc"), "never"), (("draining", "drng"), "draining"),
    (("completing", "comp"), "never"), (("no_respond",), "no_respond"),
    (("powering_down", "powered_down", "power_down", "powering_up", "pow_dn", "pow_up", "powring_dn",
      "powered_dn", "fail", "maint", "reboot", "boot", "cloud"), "never"),
]  # fmt: skip


def parse_state_filters(text: str) -> tuple[list[StateFilter], bool]:
    """sinfo -t idle,drain (or a&b: every one must match) -> (filters, all of them must match). Each name may be
    cut short (`mix`, `dr`), matched in Slurm's order; an unknown one prints Slurm's two lines and exits 1."""
    if text.strip().lower() == "all":
        return [StateFilter("all")], False
    filters = []
    for item in re.split(r"[,&]", text):
        if not item:
            continue
        wanted = item.lower()
        found = None
        for base in range(7):
            if any(name.lower().startswith(wanted) for name in _BASE_NAMES[base]):
                found = StateFilter("base", base)
                break
        if found is None:
            for names, kind in _FLAG_STATES:
                if any(name.startswith(wanted) for name in names):
                    found = StateFilter(kind)
                    break
        if found is None:
            error_line("sinfo", f'Bad state string: "{item}"')
            raise CliError(f"valid states: {_VALID_STATES}")
        filters.append(found)
    return filters, "&" in text


# ------------------------------------------------------------------ partitions as sinfo sees them


class PartitionView:
    """A partition as ListPartitions gives it, or as the nodes imply it (a controller without ListPartitions)."""

    __slots__ = ("name", "nodes", "is_default", "max_time_secs", "default_time_secs", "max_nodes", "min_nodes",
                 "state", "hidden", "priority_tier", "priority_job_factor", "preempt_mode")  # fmt: skip

    def __init__(self, message: Any = None, **fields: Any) -> None:
        for name in self.__slots__:
            value = fields[name] if name in fields else getattr(message, name, None)
            setattr(self, name, value)
        self.nodes = list(self.nodes or [])
        self.state = (self.state or "UP").upper()


def partitions_of(reply: Any, nodes: list[Any]) -> list[PartitionView]:
    """The cluster's partitions in configured order: ListPartitions' answer, or (reply None) the ones the nodes
    name, `default` being the default, with no limits of their own."""
    if reply is not None:
        return [PartitionView(p) for p in reply.partitions]
    members: dict[str, list[str]] = {}
    for node in sorted(nodes, key=lambda n: _natural(n.name)):
        for name in node_partitions(node):
            members.setdefault(name, []).append(node.name)
    return [
        PartitionView(
            name=name,
            nodes=names,
            is_default=name == DEFAULT_PARTITION,
            max_time_secs=0,
            default_time_secs=0,
            max_nodes=0,
            min_nodes=0,
            state="UP",
            hidden=False,
            priority_tier=1,
            priority_job_factor=1,
            preempt_mode="off",
        )  # fmt: skip
        for name, names in sorted(members.items(), key=lambda item: (item[0] != DEFAULT_PARTITION, item[0]))
    ]


def _natural(name: str) -> tuple[str, int, str]:
    stem = name.rstrip("0123456789")
    digits = name[len(stem) :]
    return stem, int(digits) if digits else -1, name


# ------------------------------------------------------------------ sinfo's lines (src/sinfo/sinfo.c, print.c)


class Entry:
    """One line of sinfo: a partition (or None) and the nodes that share it; the first node's values stand for
    the line (Slurm's sinfo_data_t), counts and CPU sums cover every node."""

    def __init__(self, part: PartitionView | None, part_index: int) -> None:
        self.part = part
        self.part_index = part_index
        self.nodes: list[Any] = []
        self.names: set[str] = set()
        self.word = 0
        self.node_list: str | None = None  # %N, once the line is complete
        self.nodes_alloc = self.nodes_idle = self.nodes_other = 0
        self.cpus_alloc = self.cpus_idle = self.cpus_other = self.cpus_total = 0

    @property
    def first(self) -> Any:
        return self.nodes[0]

    def add(self, node: Any, word: int) -> None:
        if node.name in self.names:
            return
        if not self.nodes:
            self.word = word
        self.nodes.append(node)
        self.names.add(node.name)
        total, used = node.resources.cpus, min(node.allocated.cpus, node.resources.cpus)
        unavailable = bool(word & FLAG_DRAIN) or word & BASE_MASK == BASE_DOWN
        if _busy(word):  # a draining node still running jobs counts as allocated
            self.nodes_alloc += 1
        elif unavailable:
            self.nodes_other += 1
        else:
            self.nodes_idle += 1
        self.cpus_alloc += used
        self.cpus_total += total
        if unavailable:
            self.cpus_other += total - used
        else:
            self.cpus_idle += total - used

    def spread(self, value: Callable[[Any], int]) -> str:
        """Slurm's min/max cell: `4`, or `4+` when the line's nodes differ (one number: 0 stays 0)."""
        values = [value(n) for n in self.nodes] or [0]
        low, high = min(values), max(values)
        return str(high) if low == high else f"{low}+"


def _secs(seconds: int) -> str:
    """sinfo's _print_secs: M:SS, H:MM:SS or D-HH:MM:SS."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _part_value(entry: Entry, value: Callable[[PartitionView], str]) -> str:
    return "n/a" if entry.part is None else value(entry.part)


def preempt_mode_text(part: PartitionView) -> str:
    """Slurm's PreemptMode word (OFF, CANCEL, REQUEUE); OFF from a controller that sends none."""
    return (part.preempt_mode or "off").upper()


def _size(part: PartitionView) -> str:
    low, high = part.min_nodes or 0, part.max_nodes or 0
    if low < 1:
        low = 1  # Slurm: a partition without MinNodes takes jobs of one node and up
    if not high:
        return f"{low}-infinite"
    return str(low) if low == high else f"{low}-{high}"


def _user(entry: Entry, with_uid: bool = False) -> str:
    """Who set the line's reason (%u), with the uid (%U: `root(0)`, as Slurm's getpwuid gives it)."""
    node = entry.first
    if not node.reason:
        return "Unknown"
    name = node.reason_set_by or "root"
    if not with_uid:
        return name
    import pwd

    try:
        return f"{name}({pwd.getpwnam(name).pw_uid})"
    except KeyError:
        return name  # a name this host does not know (spurctld, for a node that stopped answering)


def _hostlist(entry: Entry, value: Callable[[Any], str]) -> str:
    if len(entry.nodes) == 1:  # -N's lines: nothing to compress
        return value(entry.first)
    return model.compress_hostlist([value(n) for n in entry.nodes])


def _node_list(entry: Entry) -> str:
    """%N: computed once per line (the default formats size their column to the widest)."""
    if entry.node_list is None:
        entry.node_list = _hostlist(entry, lambda n: n.name)
    return entry.node_list


class Field:
    """A sinfo field: its -o letter, its -O name, its title, its cell, and what lines must agree on to be one."""

    __slots__ = ("letter", "name", "title", "cell", "match", "match_kind", "sort")

    def __init__(
        self,
        letter: str,
        name: str,
        title: str,
        cell: Callable[[Entry], str],
        match: Callable[[Any], Any] | None = None,
        match_kind: str = "",
        sort: Callable[[Entry], Any] | None = None,
    ) -> None:
        self.letter = letter
        self.name = name
        self.title = title
        self.cell = cell  # Entry -> text
        self.match = match  # node (or partition) -> a value two lines must share
        self.match_kind = match_kind  # "node", "part", "exact" (only with -e), "hostlist" (every value its own line)
        self.sort = sort  # Entry -> sort key (sinfo -S)


def _first(value: Callable[[Any], Any]) -> Callable[[Entry], str]:
    return lambda e: str(value(e.first)) if e.nodes else "n/a"


FIELDS = [
    Field("a", "available", "AVAIL", lambda e: _part_value(e, lambda p: p.state.lower()),
          lambda p: p.state, "part", lambda e: e.part.state if e.part else ""),
    Field("A", "nodeai", "NODES(A/I)", lambda e: f"{e.nodes_alloc}/{e.nodes_idle}", sort=lambda e: e.nodes_alloc),
    Field("b", "features_act", "ACTIVE_FEATURES", _first(features_text), features_text, "node"),
    Field("B", "maxcpuspernode", "MAX_CPUS_PER_NODE", lambda e: "UNLIMITED"),
    Field("c", "cpus", "CPUS", lambda e: e.spread(lambda n: n.resources.cpus), lambda n: n.resources.cpus, "exact",
          lambda e: min(n.resources.cpus for n in e.nodes) if e.nodes else 0),
    Field("C", "cpusstate", "CPUS(A/I/O/T)", lambda e: f"{e.cpus_alloc}/{e.cpus_idle}/{e.cpus_other}/{e.cpus_total}"),
    Field("d", "disk", "TMP_DISK", lambda e: "0", lambda n: 0, "exact"),
    Field("D", "nodes", "NODES", lambda e: str(len(e.nodes)), sort=lambda e: len(e.nodes)),
    Field("e", "freemem", "FREE_MEM", lambda e: "N/A"),
    Field("E", "reason", "REASON", _first(lambda n: n.reason or "none"), lambda n: n.reason, "node",
          lambda e: e.first.reason if e.nodes else ""),
    Field("f", "features", "AVAIL_FEATURES", _first(features_text), features_text, "node"),
    Field("F", "nodeaiot", "NODES(A/I/O/T)",
          lambda e: f"{e.nodes_alloc}/{e.nodes_idle}/{e.nodes_other}/{len(e.nodes)}", sort=lambda e: e.nodes_alloc),
    Field("g", "groups", "GROUPS", lambda e: _part_value(e, lambda p: "all")),
    Field("G", "gres", "GRES", _first(lambda n: gres_text(n.resources)), lambda n: gres_text(n.resources), "node"),
    Field("h", "oversubscribe", "OVERSUBSCRIBE", lambda e: "NO"),
    Field("H", "timestamp", "TIMESTAMP", _first(lambda n: units.format_timestamp(n.reason_time) if n.reason else
          "Unknown"), lambda n: n.reason_time if n.reason else 0, "node",
          lambda e: e.first.reason_time if e.nodes else 0),
    Field("I", "priorityjobfactor", "PRIO_JOB_FACTOR", lambda e: _part_value(e, lambda p: str(p.priority_job_factor)),
          lambda p: p.priority_job_factor, "part"),
    Field("l", "time", "TIMELIMIT", lambda e: _part_value(e, lambda p: _secs(p.max_time_secs) if p.max_time_secs
          else "infinite"), lambda p: p.max_time_secs, "part", lambda e: e.part.max_time_secs if e.part else 0),
    Field("L", "defaulttime", "DEFAULTTIME", lambda e: _part_value(e, lambda p: _secs(p.default_time_secs) if
          p.default_time_secs else "n/a"), lambda p: p.default_time_secs, "part"),
    Field("m", "memory", "MEMORY", lambda e: e.spread(lambda n: n.resources.memory_mb),
          lambda n: n.resources.memory_mb, "exact", lambda e: min(n.resources.memory_mb for n in e.nodes)
          if e.nodes else 0),
    Field("M", "preemptmode", "PREEMPT_MODE", lambda e: preempt_mode_text(e.part) if e.part else "OFF"),
    Field("n", "nodehost", "HOSTNAMES", lambda e: _hostlist(e, lambda n: n.name), lambda n: n.name, "hostlist"),
    Field("N", "nodelist", "NODELIST", _node_list,
          sort=lambda e: min(_natural(name) for name in e.names) if e.names else ("", -1, "")),
    Field("o", "nodeaddr", "NODE_ADDR", lambda e: _hostlist(e, _address), _address, "hostlist"),
    Field("O", "cpusload", "CPU_LOAD", lambda e: "N/A"),
    Field("p", "prioritytier", "PRIO_TIER", lambda e: _part_value(e, lambda p: str(p.priority_tier)),
          lambda p: p.priority_tier, "part"),
    Field("P", "partition", "PARTITION", lambda e: _part_value(e, lambda p: p.name), lambda p: p.name, "part",
          lambda e: e.part_index),
    Field("r", "root", "ROOT", lambda e: _part_value(e, lambda p: "no")),
    Field("R", "partitionname", "PARTITION", lambda e: _part_value(e, lambda p: p.name), lambda p: p.name, "part",
          lambda e: e.part_index),
    Field("s", "size", "JOB_SIZE", lambda e: _part_value(e, _size), lambda p: (p.min_nodes, p.max_nodes), "part"),
    Field("S", "allocnodes", "ALLOCNODES", lambda e: _part_value(e, lambda p: "all")),
    Field("t", "statecompact", "STATE", lambda e: state_compact(e.word).lower() if e.nodes else "n/a",
          None, "state", lambda e: e.word),
    Field("T", "statelong", "STATE", lambda e: state_long(e.word).lower() if e.nodes else "n/a",
          None, "state", lambda e: e.word),
    Field("u", "user", "USER", lambda e: _user(e) if e.nodes else "Unknown",
          lambda n: n.reason_set_by if n.reason else "", "node"),
    Field("U", "userlong", "USER", lambda e: _user(e, with_uid=True) if e.nodes else "Unknown",
          lambda n: n.reason_set_by if n.reason else "", "node"),
    Field("v", "version", "VERSION", _first(lambda n: n.version or "N/A"), lambda n: n.version, "exact"),
    Field("V", "cluster", "CLUSTER", lambda e: "N/A"),
    Field("w", "weight", "WEIGHT", lambda e: "1", lambda n: 1, "exact"),
    Field("X", "sockets", "SOCKETS", lambda e: e.spread(lambda n: layout(n)[0]), lambda n: layout(n)[0], "exact"),
    Field("Y", "cores", "CORES", lambda e: e.spread(lambda n: layout(n)[1]), lambda n: layout(n)[1], "exact"),
    Field("Z", "threads", "THREADS", lambda e: e.spread(lambda n: layout(n)[2]), lambda n: layout(n)[2], "exact"),
    Field("z", "socketcorethread", "S:C:T", lambda e: ":".join(e.spread(lambda n, i=i: layout(n)[i])
          for i in range(3)), layout, "exact"),
    Field("", "allocmem", "ALLOCMEM", _first(lambda n: n.allocated.memory_mb), lambda n: n.allocated.memory_mb, "node"),
    Field("", "gresused", "GRES_USED", _first(lambda n: gres_text(n.allocated)), lambda n: gres_text(n.allocated),
          "node"),
    Field("", "port", "PORT", _first(_port), _port, "exact"),
    Field("", "statecomplete", "STATECOMPLETE", lambda e: state_complete(e.word).lower() if e.nodes else "n/a",
          None, "complete"),
    Field("", "comment", "COMMENT", lambda e: "(null)"),
    Field("", "extra", "EXTRA", lambda e: "(null)"),
]  # fmt: skip
BY_LETTER = {f.letter: f for f in FIELDS if f.letter}
BY_NAME = {f.name: f for f in FIELDS}
_WIDE_TITLES = ("NODELIST", "NODE_ADDR", "HOSTNAMES")  # their titles are never cut (print.c)
_NODE_WIDTH_FIELDS = ("nodelist", "nodehost")  # as wide as the widest node list when the default format is used
_PART_WIDTH_FIELDS = ("partition", "partitionname")


class Column:
    """One field of a format as Slurm keeps it: width (0: as wide as the value), justification, suffix. A column
    without a field is text (a -o prefix, or what an unknown specifier leaves)."""

    __slots__ = ("field", "width", "right", "suffix")

    def __init__(self, field: Field | None, width: int, right: bool, suffix: str) -> None:
        self.field = field
        self.width = width
        self.right = right
        self.suffix = suffix


def _width(digits: str, where: str) -> int:
    from spur_hpc.cli import slurmformat

    return slurmformat.parse_width(digits, where) if digits else 0


def parse_format(text: str, program: str = "sinfo") -> list[Column]:
    """sinfo -o: text before the first % is printed as it is; each %[.][width]letter is a field and the text after
    it, up to the next %, its suffix. An unknown letter is warned about and printed as written (Slurm does)."""
    columns: list[Column] = []
    prefix, percent, rest = text.partition("%")
    if prefix:
        columns.append(Column(None, 0, False, prefix))
    every = text.lower() == "%all"
    if every:
        rest = "|".join(f"%{chr(c)}" for c in range(ord("a"), ord("z") + 1))[1:]
        rest += "".join(f"|%{chr(c)} " for c in range(ord("A"), ord("Z") + 1))
    for token in rest.split("%") if percent else []:
        if not token:
            continue  # strtok: %% is no escape, just an empty token
        match = re.match(r"(\.?)(\d*)(.?)(.*)", token, re.S)
        assert match is not None
        right, digits, letter, suffix = match.groups()
        field = BY_LETTER.get(letter)
        if field is None:
            if not every:  # Slurm's fprintf, without its error() prefix
                sys.stderr.write(f"Invalid node format specification: {letter}\n")
                columns.append(Column(None, 0, False, f"%{token}"))
            continue
        columns.append(Column(field, _width(digits, f"format '{text}'"), bool(right), suffix))
    return columns


def parse_fields(text: str, program: str = "sinfo") -> list[Column]:
    """sinfo -O: name[:[.][size][suffix]],...; without ':' a field is 20 wide and has no suffix; `:0` or `:` is
    as wide as its value. An unknown name is reported and prints nothing (Slurm does)."""
    columns: list[Column] = []
    for token in text.split(","):
        if not token:
            continue
        name, colon, spec = token.partition(":")
        right = spec.startswith(".")
        spec = spec[1:] if right else spec
        digits = spec[: len(spec) - len(spec.lstrip("0123456789"))]
        suffix = spec[len(digits) :]
        width = _width(digits, f"-O field '{token}'") if colon else 20
        if name.lower() == "all":
            columns.extend(parse_format("%all", program))
            continue
        field = BY_NAME.get(name.lower())
        if field is None:
            error_line(program, f"Invalid job format specification: {name}")
            columns.append(Column(None, 0, False, suffix))
            continue
        columns.append(Column(field, width, right, suffix))
    return columns


# the formats sinfo uses when it is given none (opts.c)
DEFAULT_FIELDS = "partition:9 ,available:.5 ,time:.10 ,nodes:.6 ,statecompact:.6 ,nodelist:0"
LONG_FIELDS = (
    "partition:9 ,available:.5 ,time:.10 ,size:.10 ,root:.4 ,oversubscribe:.8 ,groups:.10 ,nodes:.6 ,"
    "statelong:.11 ,nodelist:0"
)
NODE_FIELDS = "nodelist:0 ,nodes:.6 ,partition:.9 ,statecompact:6"
LONG_NODE_FIELDS = (
    "nodelist:0 ,nodes:.6 ,partition:.9 ,statelong:.11 ,cpus:4 ,socketcorethread:.8 ,memory:.6 ,disk:.8 ,"
    "weight:.6 ,features:.8 ,reason:20"
)
SUMMARY_FIELDS = "partition:9 ,available:.5 ,time:.10 ,nodeaiot:.16 ,nodelist:0"
REASONS_FIELDS = "reason:20 ,user:9 ,timestamp:19 ,nodelist:0"
LONG_REASONS_FIELDS = "reason:20 ,userlong:12 ,timestamp:19 ,statecompact:6 ,nodelist:0"


class Layout:
    """What shapes sinfo's lines besides the columns: -N, -e, -R, and the default formats' computed widths."""

    __slots__ = ("node_oriented", "exact", "reasons", "node_width", "part_width", "sort")

    def __init__(self, node_oriented: bool = False, exact: bool = False, reasons: bool = False,
                 node_width: bool = False, part_width: bool = False, sort: str = "") -> None:  # fmt: skip
        self.node_oriented = node_oriented
        self.exact = exact
        self.reasons = reasons
        self.node_width = node_width
        self.part_width = part_width
        self.sort = sort or ("N" if node_oriented else "#P,-t")


def _node_key(node: Any, word: int, fields: list[Field], layout_: Layout) -> tuple:
    """What Slurm's _match_node_data compares with a line's first node: two nodes share a line when their keys
    (and their partitions' keys) are equal. A host name or address shown (%n, %o) puts each one on its own line."""
    key: list[Any] = []
    for field in fields:
        kind = field.match_kind
        if kind in ("node", "hostlist") or (kind == "exact" and layout_.exact):
            key.append(field.match(node))
        elif kind == "state":
            key.append(state_long(word))
        elif kind == "complete":
            key.append(state_complete(word))
    return tuple(key)


def _part_key(part: PartitionView, fields: list[Field], layout_: Layout) -> tuple:
    """What Slurm's _match_part_data compares: the partition fields the format shows (none for -R)."""
    if layout_.reasons:
        return ()
    return tuple(f.match(part) for f in fields if f.match_kind == "part")


def build_entries(
    nodes: list[Any],
    partitions: list[PartitionView],
    columns: list[Column],
    layout_: Layout,
    keep: Callable[[Any, int], bool] = lambda node, word: True,
) -> list[Entry]:
    """sinfo's lines before sorting: partition by partition (configured order), node by node (the partition's
    order); keep(node, state word) filters nodes (-n, -t, -d, -r) without hiding an empty partition's line.
    A node joins the first line it matches (Slurm's _insert_node_ptr), found by key: linear in the nodes."""
    fields = [c.field for c in columns if c.field is not None]
    shows_partition = any(f.name in _PART_WIDTH_FIELDS for f in fields)
    by_name = {n.name: n for n in nodes}
    entries: list[Entry] = []
    empty: dict[int, Entry] = {}  # partition index -> its line while no node has joined it
    if shows_partition and not layout_.node_oriented:  # every partition is shown, even one without nodes
        entries = [Entry(part, index) for index, part in enumerate(partitions)]
        empty = dict(enumerate(entries))
    lines: dict[tuple, Entry] = {}
    for index, part in enumerate(partitions):
        members = [by_name[name] for name in part.nodes if name in by_name] if part.nodes else [
            n for n in sorted(nodes, key=lambda n: _natural(n.name)) if part.name in node_partitions(n)
        ]  # fmt: skip
        part_key = _part_key(part, fields, layout_)
        for node in members:
            word = state_word(node)
            if not keep(node, word):
                continue
            if layout_.node_oriented:  # -N: every node of every partition a line of its own
                entry = Entry(part, index)
                entry.add(node, word)
                entries.append(entry)
                continue
            key = (part_key, _node_key(node, word, fields, layout_))
            entry = lines.get(key) or empty.pop(index, None)
            if entry is None:
                entry = Entry(part, index)
                entries.append(entry)
            lines.setdefault(key, entry)
            entry.add(node, word)
    return entries


def sort_entries(entries: list[Entry], sort: str) -> list[Entry]:
    """sinfo -S (default `#P,-t`, -N `N`): stable sorts from the last key to the first, as sort.c does."""
    ordered = list(entries)
    keys = re.findall(r"([-+#]*)([A-Za-z])", sort)
    for marks, letter in reversed(keys):
        field = BY_LETTER.get(letter)
        if field is None or field.sort is None:
            continue
        if letter in "PR" and "#" not in marks:
            key: Callable[[Entry], Any] = lambda e: e.part.name if e.part else ""  # noqa: E731
        else:
            key = field.sort
        ordered.sort(key=key, reverse="-" in marks)
    return ordered


def _fit(text: str, width: int, right: bool, cut: bool = True) -> str:
    """print.c _print_str: cut to the width (a right-justified title may stay longer), pad with spaces."""
    if not width:
        return text
    if right:
        text = text.rjust(width)
        return text[:width] if cut else text
    return text[:width].ljust(width)


def _partition_cell(entry: Entry, width: int, with_star: bool) -> str:
    if entry.part is None:
        return "n/a"
    name = entry.part.name
    if with_star and entry.part.is_default:
        name = name + "*" if (len(name) < width or not width) else name[: width - 1] + "*"
    return name


def render(entries: list[Entry], columns: list[Column], layout_: Layout, header: bool) -> list[str]:
    """Each line exactly as Slurm prints it: every cell padded to its width, trailing spaces kept."""
    node_width = part_width = 0
    if layout_.node_width:
        node_width = max([9] + [len(_node_list(e)) for e in entries])
    if layout_.part_width:
        part_width = max([9] + [len(e.part.name) + bool(e.part.is_default) for e in entries if e.part])

    def width_of(column: Column) -> int:
        name = column.field.name if column.field else ""
        if layout_.node_width and name in _NODE_WIDTH_FIELDS:
            return node_width
        if layout_.part_width and name in _PART_WIDTH_FIELDS:
            return part_width
        return column.width

    lines = []
    if header:
        cells = []
        for column in columns:
            if column.field is None:
                cells.append(column.suffix)
                continue
            title = column.field.title
            cells.append(_fit(title, width_of(column), column.right, title not in _WIDE_TITLES) + column.suffix)
        lines.append("".join(cells))
    for entry in entries:
        cells = []
        for column in columns:
            if column.field is None:
                cells.append(column.suffix)
                continue
            width = width_of(column)
            if column.field.name == "partition":
                text = _partition_cell(entry, width, True)
            else:
                text = column.field.cell(entry)
            cells.append(_fit(printable(text), width, column.right) + column.suffix)
        lines.append("".join(cells))
    return lines


def sinfo_lines(
    nodes: list[Any],
    columns: list[Column],
    layout_: Layout,
    header: bool = True,
    partitions: list[PartitionView] | None = None,
    keep: Callable[[Any, int], bool] = lambda node, word: True,
) -> list[str]:
    parts = partitions if partitions is not None else partitions_of(None, nodes)
    entries = sort_entries(build_entries(nodes, parts, columns, layout_, keep), layout_.sort)
    return render(entries, columns, layout_, header)


def date_line(now: float | None = None) -> str:
    """The line -l (and -i) print first: slurm_ctime's `Tue Dec 01 11:53:59 2026`."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))


# ------------------------------------------------------------------ scontrol show node (api/node_info.c)


def show_node_text(node: Any, one_liner: bool = False, slurmd_port: int = model.AGENT_GRPC_PORT) -> str:
    """`scontrol show node` for one node, Slurm's 17 lines (or one line with -o), ending as Slurm ends a record.
    Spur measures no CPU load or free memory (N/A) and has no energy or sensor plugins (Slurm's defaults)."""
    end = " " if one_liner else "\n   "
    word = state_word(node, mixed_if_draining=True)
    sockets, cores, threads = layout(node)
    cpus, used = node.resources.cpus, node.allocated.cpus
    out = f"NodeName={node.name} "
    if node.arch:
        out += f"Arch={node.arch} "
    out += f"CoresPerSocket={cores} {end}"
    out += f"CPUAlloc={used} CPUEfctv={cpus} CPUTot={cpus} CPULoad=N/A{end}"
    out += f"AvailableFeatures={features_text(node)}{end}ActiveFeatures={features_text(node)}{end}"
    out += f"Gres={gres_text(node.resources)}{end}"
    if node.resources.gres:  # Slurm prints it for every node with gres, 0 for what no job holds
        used = dict(node.allocated.gres)
        out += f"GresUsed={','.join(f'{name}:{used.get(name, 0)}' for name in sorted(node.resources.gres))}{end}"
    out += f"NodeAddr={_address(node)} NodeHostName={node.name} "
    port = _port(node)
    if port and port != slurmd_port:
        out += f"Port={port} "
    out += f"Version={node.version or 'N/A'}{end}"
    if node.os:
        out += f"OS={node.os} {end}"
    out += f"RealMemory={node.resources.memory_mb} AllocMem={node.allocated.memory_mb} FreeMem=N/A "
    out += f"Sockets={sockets} Boards=1{end}"
    out += f"State={state_complete(word)} ThreadsPerCore={threads} TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A{end}"
    out += f"Partitions={','.join(node_partitions(node))} {end}"
    out += f"BootTime={units.format_timestamp(node.boot_time, 'None')} "
    out += f"SlurmdStartTime={units.format_timestamp(node.agent_started, 'None')}{end}"
    out += f"LastBusyTime={units.format_timestamp(node.last_busy, 'Unknown')}{end}"
    tres = f"cpu={cpus},mem={units.format_tres_memory(node.resources.memory_mb)},billing={cpus}"
    gres = ",".join(f"gres/{name}={count}" for name, count in sorted(dict(node.resources.gres).items()))
    out += f"CfgTRES={tres}{',' + gres if gres else ''}{end}"
    alloc = [f"cpu={used}"] if used else []
    if node.allocated.memory_mb:
        alloc.append(f"mem={units.format_tres_memory(node.allocated.memory_mb)}")
    alloc += [f"gres/{name}={count}" for name, count in sorted(dict(node.allocated.gres).items()) if count]
    out += f"AllocTRES={','.join(alloc)}{end}"
    out += f"CapWatts=n/a{end}CurrentWatts=0 AveWatts=0{end}"
    out += "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
    if node.reason:
        out += f"{end}Reason={node.reason}"
        if node.reason_time:
            out += f" [{node.reason_set_by or 'root'}@{units.format_timestamp(node.reason_time)}]"
    return "\n".join(printable(line) for line in out.split("\n")) + ("\n" if one_liner else "\n\n")


def show_node_lines(node: Any) -> list[str]:
    """`scontrol show node` as lines (no blank line after the record); the first line starts NodeName=<name>."""
    return show_node_text(node).rstrip("\n").split("\n")


def spur_node_lines(node: Any) -> list[str]:
    """`spur node show`: Slurm's record and what only Spur knows (the agent's build, its jobs, its heartbeats)."""
    jobs = ",".join(str(j) for j in node.job_ids) or "(null)"
    extra = [
        f"   Build={node.build or 'N/A'} Jobs={jobs}",
        f"   LastRegistered={units.format_timestamp(node.last_registered, 'None')}"
        f" LastHeartbeat={units.format_timestamp(node.last_heartbeat, 'None')}",
    ]
    return show_node_lines(node) + [printable(line) for line in extra]
