"""spur admin raft status|add|remove: the controllers' Raft membership, changed online (administrators only).

spur admin raft status [-o json]                 members, roles, term, each member's match/applied index, lag
spur admin raft add RAFT_ADDR --grpc GRPC_ADDR [--timeout SECS]
                                                 the new controller joins without voting, catches up, is promoted
spur admin raft remove RAFT_ADDR                 a member (the leader hands over first) or a joining controller
"""

from __future__ import annotations

from spur_hpc.cli import commandline
from spur_hpc.cli.options import Option, help_text, parse
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OPTIONS = [
    Option("grpc", "", "grpc", "ADDR", "add: where the new controller serves gRPC (host:port)"),
    Option(
        "timeout",
        "t",
        "timeout",
        "SECS",
        "add: not promoted unless caught up by then ([controller] catch_up_timeout_secs)",
    ),
    Option("format", "o", "output", "FORMAT", "json prints the answer as JSON"),
    Option("help", "h", "help", help="show this help and exit"),
]
RPC_MARGIN_SECS = 30.0  # an add waits for the catch-up on the leader; the call waits that long and then some
# The call's deadline without --timeout: the leader's catch_up_timeout_secs is not known here; a day covers its range.
DEFAULT_CALL_SECS = 86400.0


def member_dict(m: Any) -> dict[str, Any]:
    fields = ("raft_addr", "grpc_addr", "role", "voter", "match_index", "applied_index", "lag", "version", "build")
    return {f: getattr(m, f) for f in fields}


def member_lines(members: list[dict[str, Any]]) -> list[str]:
    rows = [["MEMBER", "GRPC", "ROLE", "VOTER", "MATCH", "APPLIED", "LAG", "VERSION"]]
    for m in members:
        rows.append(
            [
                m["raft_addr"],
                m["grpc_addr"] or "-",
                m["role"] or "-",
                "yes" if m["voter"] else "no",
                str(m["match_index"]),
                str(m["applied_index"]),
                str(m["lag"]),
                m["version"] or "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {4, 5, 6}
    return [
        "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)).rstrip()
        for row in rows
    ]


def _timeout(text: str | None) -> float:
    if text is None:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value > 86400:
        raise CliError(f"--timeout {text!r} is not valid: give the seconds to wait for the catch-up, 1 to 86400")
    return value


def main(argv: list[str], program: str = "spur admin") -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if values["help"]:
        print(help_text(program, "raft status|add|remove ...", __doc__.strip().splitlines()[0], OPTIONS))
        print(__doc__.strip().split("\n", 1)[1])
        return 0
    if not positionals or positionals[0] != "raft":
        raise CliError(f"unknown admin command {' '.join(positionals)!r}: use {program} raft status|add|remove")
    words = positionals[1:]
    if not words or words[0] not in ("status", "add", "remove"):
        raise CliError(f"use {program} raft status, raft add RAFT_ADDR --grpc GRPC_ADDR, or raft remove RAFT_ADDR")
    action, rest = words[0], words[1:]
    if action == "status":
        if rest:
            raise CliError(f"raft status takes no address (got {' '.join(rest)})")
    elif len(rest) != 1:
        raise CliError(f"raft {action} needs one controller's raft address (host:port), got {len(rest)}")
    if action != "add" and (values["grpc"] is not None or values["timeout"] is not None):
        raise CliError(f"--grpc and --timeout belong to raft add, not raft {action}")
    if action == "add" and not values["grpc"]:
        raise CliError(f"raft add {rest[0]} needs --grpc ADDR: where the new controller serves gRPC (host:port)")
    timeout = _timeout(values["timeout"])

    from spur_hpc.cli.controller import ControllerClient

    client = ControllerClient()
    if action == "status":
        reply = client.call("RaftStatus", write=True)  # write: the leader answers (it knows match and lag)
        members = [member_dict(m) for m in reply.members]
        status = {
            "leader": reply.leader,
            "term": reply.term,
            "commit_index": reply.commit_index,
            "change_in_flight": reply.change_in_flight,
            "members": members,
        }
        if commandline.wants_json(values["format"]):
            commandline.print_json(status)
            return 0
        lines = [
            f"Leader: {reply.leader or 'none'}, term {reply.term}, commit index {reply.commit_index}",
            f"Change in flight: {reply.change_in_flight or 'none'}",
            "",
            *member_lines(members),
        ]
        commandline.print_lines(lines)
        return 0
    client.call_timeout = (timeout or DEFAULT_CALL_SECS) + RPC_MARGIN_SECS
    request = {
        "action": action,
        "raft_addr": rest[0],
        "grpc_addr": values["grpc"] or "",
        "catch_up_timeout_secs": timeout,
    }
    reply = client.call("ChangeMembership", request, write=True)
    if commandline.wants_json(values["format"]):
        commandline.print_json({"message": reply.message, "members": [member_dict(m) for m in reply.members]})
    else:
        commandline.print_lines([reply.message, "", *member_lines([member_dict(m) for m in reply.members])])
    return 0
