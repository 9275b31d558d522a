"""spur cluster status: every controller's view, asked directly (Ping), plus the membership (GetClusterInfo).

Lag is how many committed entries a member has not applied yet, measured against the leader's commit index.
Exit status 0 when every member answers and exactly one is the leader, 1 otherwise: scripts can wait on it.
"""

from __future__ import annotations

from spur_hpc.cli import commandline
from spur_hpc.cli.options import Option, parse
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PING_TIMEOUT_SECS = 2.0
OPTIONS = [
    Option("format", "o", "output", "FORMAT", "json prints the status as JSON"),
    Option("help", "h", "help", help="show this help and exit"),
]


def collect(client: Any) -> dict[str, Any]:
    """Membership from any controller, then a Ping of each member (and each configured address)."""
    from spur_hpc.wire.grpcwire import RpcError

    info = None
    try:
        info = client.call("GetClusterInfo")
    except RpcError:
        pass  # every controller down, or none bootstrapped: the pings below tell which
    raft_of: dict[str, str] = {}
    addresses: list[str] = []
    if info is not None:
        for member in info.members:
            if member.grpc_addr:
                raft_of[member.grpc_addr] = member.raft_addr
                addresses.append(member.grpc_addr)
    addresses += [a for a in client.addresses if a not in addresses]
    client.call_timeout = PING_TIMEOUT_SECS
    members = []
    for address in addresses:
        entry: dict[str, Any] = {
            "address": address,
            "raft_addr": raft_of.get(address, ""),
            "reachable": False,
            "role": "",
            "term": None,
            "commit_index": None,
            "applied_index": None,
            "lag": None,
            "version": "",
            "build": "",
            "error": "",
        }
        try:
            reply = client.call_one(address, "Ping")
        except RpcError as exc:
            entry["error"] = exc.details.removeprefix(f"cannot reach controller {address}: ")
        else:
            entry.update(
                reachable=True,
                role=reply.role,
                term=reply.term,
                commit_index=reply.commit_index,
                applied_index=reply.applied_index,
                version=reply.version,
                build=reply.build,
                raft_addr=entry["raft_addr"] or reply.raft_addr,
            )
        members.append(entry)
    leaders = [m for m in members if m["role"] == "leader"]
    leader_commit = (
        leaders[0]["commit_index"]
        if len(leaders) == 1
        else max((m["commit_index"] for m in members if m["reachable"]), default=None)
    )
    for member in members:
        if member["reachable"] and leader_commit is not None:
            member["lag"] = max(0, leader_commit - member["applied_index"])
    return {
        "cluster_name": info.cluster_name if info else "",
        "cluster_id": info.cluster_id if info else "",
        "leader": leaders[0]["address"] if len(leaders) == 1 else "",
        "term": max((m["term"] for m in members if m["reachable"]), default=None),
        "wal_level": info.wal_level if info else None,
        "healthy": len(leaders) == 1 and all(m["reachable"] for m in members),
        "members": members,
    }


def status_lines(status: dict[str, Any]) -> list[str]:
    def text(value: Any) -> str:
        return "-" if value is None or value == "" else str(value)

    name = status["cluster_name"] or "(unknown)"
    lines = [
        f"Cluster {name} (id {text(status['cluster_id'])}), WAL level {text(status['wal_level'])}",
        f"Leader: {status['leader'] or 'none'}, term {text(status['term'])}",
        "",
    ]
    rows = [["MEMBER", "ROLE", "TERM", "COMMIT", "APPLIED", "LAG", "VERSION", "BUILD", "STATUS"]]
    for m in status["members"]:
        rows.append(
            [
                m["address"],
                m["role"] or "-",
                text(m["term"]),
                text(m["commit_index"]),
                text(m["applied_index"]),
                text(m["lag"]),
                text(m["version"]),
                text(m["build"]),
                "up" if m["reachable"] else f"down: {m['error']}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4, 5}
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def main(argv: list[str], program: str = "spur cluster") -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if values["help"]:
        from spur_hpc.cli.options import help_text

        print(help_text(program, "status [-o json]", __doc__.strip().splitlines()[0], OPTIONS))
        return 0
    if positionals != ["status"]:
        raise CliError(f"unknown cluster command '{' '.join(positionals)}': use {program} status [-o json]")

    from spur_hpc.cli.controller import ControllerClient

    status = collect(ControllerClient())
    if commandline.wants_json(values["format"]):
        commandline.print_json(status)
    else:
        commandline.print_lines(status_lines(status))
    if not any(m["reachable"] for m in status["members"]):
        raise CliError(
            "no controller answered; check that spurctld runs and SPUR_CONTROLLER_ADDR or "
            "[controller] hosts point at it"
        )
    return 0 if status["healthy"] else 1
