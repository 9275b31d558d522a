"""spur node show|drain|resume: one node's record, or an administrator's drain and resume of nodes.

NODES may be a name, a hostlist (node[1-4],gpu01) or ALL. Drain never kills a job: a busy node is
DRAINING until its jobs end, then DRAINED.
"""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import commandline, nodeview
from spur_hpc.cli.options import Option, parse
from spur_hpc.cli.runner import CliError, error_line
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OPTIONS = [
    Option("reason", "r", "reason", "TEXT", 'why the node is drained (drain; default "drained by <user>")'),
    Option("prefix", "", "if-reason-prefix", "PREFIX", "resume only a drain whose reason starts with PREFIX"),
    Option("format", "o", "output", "FORMAT", "json prints the node records as JSON"),
    Option("help", "h", "help", help="show this help and exit"),
]
SYNOPSIS = "show NAME [-o json] | drain NODES [--reason TEXT] | resume NODES [--if-reason-prefix PREFIX]"


def _names(client: Any, expression: str) -> list[str]:
    if expression == "ALL":
        return sorted(n.name for n in client.call("ListNodes").nodes)
    return model.expand_hostlist(expression)


def main(argv: list[str], program: str = "spur node") -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if values["help"] or not positionals:
        if not values["help"]:
            raise CliError(f"usage: {program} {SYNOPSIS}")
        from spur_hpc.cli.options import help_text

        print(help_text(program, SYNOPSIS, "Show, drain or resume nodes.", OPTIONS))
        return 0
    action, targets = positionals[0], positionals[1:]
    if action not in ("show", "drain", "resume"):
        raise CliError(f"unknown node action '{action}': use show, drain or resume")
    if len(targets) != 1:
        raise CliError(f"{action} takes one node name or hostlist, like: {program} {action} node[1-2]")
    commandline.check_one_line("--reason", values["reason"] or "")

    from spur_hpc.cli.controller import ControllerClient
    from spur_hpc.wire.grpcwire import RpcError

    client = ControllerClient()
    if action == "show":
        try:
            node = client.call("GetNode", {"name": targets[0]})
        except RpcError as exc:
            if exc.code == "NOT_FOUND":
                raise CliError(f"node {targets[0]} not found") from None
            raise
        if commandline.wants_json(values["format"]):
            commandline.print_json(protocodec.to_jsonable(node, "Node"))
        else:
            commandline.print_lines(nodeview.spur_node_lines(node))
        return 0

    from spur_hpc.cli import caller

    me = caller.user_name()
    names = _names(client, targets[0])
    failed: list[str] = []
    for index, name in enumerate(names):
        try:
            if action == "drain":
                reason = values["reason"] or f"drained by {me}"
                node = client.call("DrainNode", {"name": name, "reason": reason, "set_by": me}, write=True)
                jobs = len(node.job_ids)
                if jobs:
                    print(f"Node {name} set to draining ({jobs} running job(s) will finish first)")
                else:
                    print(f"Node {name} set to drain")
                print(f"  reason: {reason}")
            else:
                client.call("ResumeNode", {"name": name, "only_if_reason_prefix": values["prefix"] or ""}, write=True)
                print(f"Node {name} resumed")
        except RpcError as exc:
            commandline.stop_if_unreachable(exc, name, len(names) - index - 1)
            failed.append(name)
            detail = f"node {name} not found" if exc.code == "NOT_FOUND" else exc.details
            error_line(program, f"{name}: {detail}")
    if failed:
        raise CliError(f"{action} failed on {len(failed)} of {len(names)} node(s): {model.compress_hostlist(failed)}")
    return 0
