"""sinfo: partitions and nodes as Slurm 22.05's sinfo prints them (default, -N, -l, -s, -R, -e, -o, -O, -S, -t)."""

from __future__ import annotations

import os
import sys

from spur_hpc import model
from spur_hpc.cli import commandline, nodeview, slurmjson
from spur_hpc.cli.options import Option, UsageError, gather, getopt_lines, parse
from spur_hpc.cli.runner import CliError
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "sinfo"
OPTIONS = [
    Option("all", "a", "all", help="every partition, hidden ones too"),
    Option("dead", "d", "dead", help="only nodes whose agent stopped responding"),
    Option("exact", "e", "exact", help="one line per distinct CPU, memory, ... configuration"),
    Option("noheader", "h", "noheader", help="print no header line"),
    Option("hide", "", "hide", help="leave hidden partitions out (the default)"),
    Option("long", "l", "long", help="more columns, and the date first"),
    Option("clusters", "M", "clusters", "NAMES", "this cluster's name or all (Spur has one cluster)"),
    Option("nodes", "n", "nodes", "NODES", "only these nodes (a hostlist, like node[1-3])", repeat=True),
    Option("noconvert", "", "noconvert", help="accepted: Spur prints sizes unconverted"),
    Option("node_oriented", "N", "Node", help="one line per node (and partition)"),
    Option("format", "o", "format", "FORMAT", 'columns as % codes, like "%P %.5a %.10l %.6D %.6t %N"'),
    Option("Format", "O", "Format", "FIELDS", "columns by name: NodeList,CPUs:6,Gres:30 (name[:[.][size][suffix]])"),
    Option("partitions", "p", "partition", "PARTITIONS", "only these partitions", repeat=True),
    Option("responding", "r", "responding", help="only nodes whose agent responds"),
    Option("reasons", "R", "list-reasons", help="down, drained and draining nodes with their reasons"),
    Option("summarize", "s", "summarize", help="one line per partition: NODES(A/I/O/T)"),
    Option("sort", "S", "sort", "FIELDS", "sort by these format letters, like '#P,-t' (- descending)"),
    Option("states", "t", "states", "STATES", "only nodes in these states (idle,mix,alloc,drain,drng,down)"),
    Option("reservation", "T", "reservation", help="list reservations (Spur has none: the header only)"),
    Option("verbose", "v", "verbose", help="accepted for compatibility"),
    Option("json", "", "json", "VERSION", help=slurmjson.JSON_OPTION_HELP, optional=True),
    Option("yaml", "", "yaml", "VERSION", help=slurmjson.YAML_OPTION_HELP, optional=True),
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-adehlNrRsv] [-t STATES] [-p PARTITIONS] [-n NODES] [-S FIELDS] [-o FORMAT] [-O FIELDS] [--json]"


def choose_columns(values: dict[str, Any], program: str = PROGRAM) -> tuple[list[nodeview.Column], nodeview.Layout]:
    """Slurm's choice of format (opts.c): -o/-O as given, else -s, -N, -R, $SINFO_FORMAT, the partition view;
    only Slurm's own default formats size the partition and node list columns to their values."""
    reasons, node_oriented, long = bool(values["reasons"]), bool(values["node_oriented"]), bool(values["long"])
    common = {
        "node_oriented": node_oriented,
        "exact": bool(values["exact"]),
        "reasons": reasons,
        "sort": values["sort"] or os.environ.get("SINFO_SORT", ""),
    }
    if values["format"] is not None or values["Format"] is not None:
        if long:
            raise CliError("Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.")
        if values["Format"] is not None:
            return nodeview.parse_fields(values["Format"], program), nodeview.Layout(**common)
        return nodeview.parse_format(values["format"], program), nodeview.Layout(**common)
    if values["summarize"]:
        return nodeview.parse_fields(nodeview.SUMMARY_FIELDS), nodeview.Layout(part_width=True, **common)
    if node_oriented:
        fields = nodeview.LONG_NODE_FIELDS if long else nodeview.NODE_FIELDS
        return nodeview.parse_fields(fields), nodeview.Layout(node_width=True, part_width=True, **common)
    if reasons:
        fields = nodeview.LONG_REASONS_FIELDS if long else nodeview.REASONS_FIELDS
        return nodeview.parse_fields(fields), nodeview.Layout(**common)
    if os.environ.get("SINFO_FORMAT"):
        return nodeview.parse_format(os.environ["SINFO_FORMAT"], program), nodeview.Layout(**common)
    fields = nodeview.LONG_FIELDS if long else nodeview.DEFAULT_FIELDS
    return nodeview.parse_fields(fields), nodeview.Layout(part_width=True, **common)


def node_filter(values: dict[str, Any]) -> Any:
    """-n, -d, -r, -t (and -R's down,fail,drain) as one test of (node, state word), refused before any call."""
    names = {name for item in values["nodes"] for name in model.expand_hostlist(item)}
    states = values["states"] or ("down,fail,drain" if values["reasons"] else "")
    filters, every = nodeview.parse_state_filters(states) if states else ([], False)

    def keep(node: Any, word: int) -> bool:
        if names and node.name not in names:
            return False
        if values["dead"] and not word & nodeview.FLAG_NO_RESPOND:
            return False
        if values["responding"] and word & nodeview.FLAG_NO_RESPOND:
            return False
        if filters:
            matched = (all if every else any)(f.matches(node, word) for f in filters)
            return matched
        return True

    return keep


def list_partitions(client: Any, nodes: list[Any]) -> list[nodeview.PartitionView]:
    """The controller's partitions; one that predates ListPartitions: the partitions its nodes name."""
    from spur_hpc.wire.grpcwire import RpcError

    try:
        reply = client.call("ListPartitions") if client.has_method("ListPartitions") else None
    except RpcError as exc:
        if exc.code != "UNIMPLEMENTED":
            raise
        reply = None
    return nodeview.partitions_of(reply, nodes)


def main(argv: list[str], program: str = PROGRAM) -> int:
    try:
        values, positionals = parse(program, OPTIONS, argv)
    except UsageError as exc:  # getopt's two lines, as Slurm's sinfo prints them
        invoked = sys.argv[0] if sys.argv and os.path.basename(sys.argv[0]) == program else program
        sys.stderr.write(getopt_lines(invoked, program, exc))
        return 1
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Show partitions and nodes.", OPTIONS):
        return 0
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; sinfo takes options only (nodes go in -n)")
    if values["all"] and values["partitions"]:
        raise CliError("Conflicting options, -a and -p, specified. Please choose one or the other.")
    wanted_parts = gather(values["partitions"])
    slurm_yaml = slurmjson.layout(values)
    as_json = slurm_yaml is not None or commandline.wants_json(values["format"])
    keep = node_filter(values)
    if not as_json:  # a bad -o, -O or -S fails before any call
        columns, layout = choose_columns(values, program)

    from spur_hpc.cli.controller import ControllerClient

    client = ControllerClient()
    if values["clusters"]:  # no CLUSTER: line: Open OnDemand splits sinfo -M NAME -aho %A/%D/%C on '/'
        commandline.resolve_cluster(client, values["clusters"])
    nodes = list(client.call("ListNodes").nodes)
    partitions = list_partitions(client, nodes)
    show_all = (values["all"] and not values["hide"]) or bool(wanted_parts)  # -p shows a hidden one it names
    partitions = [p for p in partitions if (show_all or not p.hidden) and (not wanted_parts or p.name in wanted_parts)]
    if as_json:
        in_view = {name for p in partitions for name in p.nodes}
        nodes = [n for n in nodes if n.name in in_view and keep(n, nodeview.state_word(n))]
        if slurm_yaml is not None:
            slurmjson.print_document(slurmjson.nodes_document(nodes), slurm_yaml)
        else:
            commandline.print_json({"nodes": [protocodec.to_jsonable(n, "Node") for n in nodes]})
        return 0
    header = not values["noheader"]
    if values["reservation"]:  # print.c's reservation table, which Spur's clusters never fill
        if header:
            print(f"{'RESV_NAME':<9}  {'STATE':>8}  {'START_TIME':>19}  {'END_TIME':>19}  {'DURATION':>11}  NODELIST")
        return 0
    lines = nodeview.sinfo_lines(nodes, columns, layout, header, partitions, keep)
    if header and values["long"]:
        lines.insert(0, nodeview.date_line())
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
