"""sinfo: partitions and nodes in Slurm's layout (default "%#P %.5a %.10l %.6D %.6t %N", -N per node)."""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import commandline, nodeview
from spur_hpc.cli.options import Option, gather, parse
from spur_hpc.cli.runner import CliError
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "sinfo"
LONG_FORMAT = "%#P %.5a %.10l %.6D %.11T %N"
LONG_NODE_FORMAT = "%#N %.6D %#P %.11T %.4c %.6m %20E"
OPTIONS = [
    Option("noheader", "h", "noheader", help="print no header line"),
    Option(
        "format",
        "o",
        "format",
        "FORMAT",
        help=f"columns as % codes (default \"{nodeview.SINFO_DEFAULT_FORMAT}\"); 'json' prints JSON",
    ),
    Option("node_oriented", "N", "Node", help=f'one line per node ("{nodeview.SINFO_NODE_FORMAT}")'),
    Option("nodes", "n", "nodes", "NODES", "only these nodes (hostlist, like node[1-3])", repeat=True),
    Option("partitions", "p", "partition", "PARTITIONS", "only these partitions", repeat=True),
    Option(
        "states", "t", "states", "STATES", "only nodes in these states (idle,mix,alloc,drain,drng,down)", repeat=True
    ),
    Option("reasons", "R", "list-reasons", help="list down and drained nodes with their reasons"),
    Option("dead", "d", "dead", help="only nodes whose agent stopped responding"),
    Option("long", "l", "long", help="long format"),
    Option("Format", "O", "Format", "FIELDS", "columns by name: NodeHost,CPUs,Gres:30 (type[:[.][size][suffix]])"),
    Option("all", "a", "all", help="accepted for compatibility (every partition is shown)"),
    commandline.CLUSTERS_OPTION,
    Option("json", "", "json", help="print the nodes as JSON"),
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-h] [-N] [-n NODES] [-p PARTITIONS] [-t STATES] [-R] [-o FORMAT] [-l] [--json]"


def parse_node_states(items: list[str]) -> list[str]:
    states = []
    for item in items:
        name = nodeview.STATE_ALIASES.get(item.lower().rstrip("*"), item.upper())
        if name not in nodeview.SHORT_STATES or name == "NODE_STATE_UNKNOWN":
            known = ", ".join(sorted({v for k, v in nodeview.SHORT_STATES.items() if k != "NODE_STATE_UNKNOWN"}))
            raise CliError(f"invalid node state '{item}': use one of {known}")
        states.append(name)
    return states


def choose_format(values: dict[str, Any]) -> tuple[str, bool]:
    """-> (format, node oriented)."""
    if values["format"]:
        return values["format"], bool(values["node_oriented"])
    if values["reasons"]:
        return nodeview.SINFO_REASONS_FORMAT, False
    if values["node_oriented"]:
        return (LONG_NODE_FORMAT if values["long"] else nodeview.SINFO_NODE_FORMAT), True
    return (LONG_FORMAT if values["long"] else nodeview.SINFO_DEFAULT_FORMAT), False


def main(argv: list[str], program: str = PROGRAM) -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Show partitions and nodes.", OPTIONS):
        return 0
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; sinfo takes options only (nodes go in -n)")
    names = [name for item in values["nodes"] for name in model.expand_hostlist(item)]
    states = parse_node_states(gather(values["states"]))
    partitions = gather(values["partitions"])
    as_json = commandline.wants_json(values["format"], values["json"])
    format_text, node_oriented = choose_format(values)
    fields_text = values["Format"] or ""
    if not as_json:  # a bad -o or -O fails before any call
        nodeview.sinfo_lines([], format_text, False, node_oriented, program, fields_text)

    from spur_hpc.cli.controller import ControllerClient

    client = ControllerClient()
    if values["clusters"]:  # no CLUSTER: line: Open OnDemand splits sinfo -M NAME -aho %A/%D/%C on '/'
        commandline.resolve_cluster(client, values["clusters"])
    reply = client.call("ListNodes", {"names": names, "states": states})
    nodes = [n for n in reply.nodes if not partitions or nodeview.partition(n) in partitions]
    if values["dead"]:
        nodes = [n for n in nodes if nodeview.not_responding(n)]
    if values["reasons"]:
        nodes = [n for n in nodes if n.reason]
    if as_json:
        commandline.print_json({"nodes": [protocodec.to_jsonable(n, "Node") for n in nodes]})
        return 0
    header = not values["noheader"]
    commandline.print_lines(nodeview.sinfo_lines(nodes, format_text, header, node_oriented, program, fields_text))
    return 0
