"""sshare: the association tree's shares, usage and fair-share factors, as Slurm 22.05's sshare prints them.

The controller (ListShares) sends the rows in the tree's order with Fair Tree's numbers (controller/fairshare.py).
Columns are Slurm's print_fields: a negative width left-justifies, a value longer than the width is cut with a
`+`; -p/-P print `|`-separated values. Each row's account is indented by its depth below the first row shown
(tests/golden/slurm-22.05-priority holds real sshare's output).
"""

from __future__ import annotations

import math
import os
import sys

from spur_hpc.cli import commandline, slurmformat
from spur_hpc.cli.options import Option, UsageError, gather, getopt_lines, parse
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "sshare"
OPTIONS = [
    Option("all", "a", "all", help="every user's association, not only yours"),
    Option("accounts", "A", "accounts", "ACCOUNTS", "these accounts and what is below them", repeat=True),
    Option("users", "u", "users", "USERS", "these users' associations (all: every user)", repeat=True),
    Option("long", "l", "long", help="add NormUsage, LevelFS, GrpTRESMins and TRESRunMins"),
    Option("format", "o", "format", "FIELDS", "comma-separated fields, each NAME or NAME%WIDTH", repeat=True),
    Option("noheader", "n", "noheader", help="print no header lines"),
    Option("parsable", "p", "parsable", help="'|'-separated, with a '|' at the end of each line"),
    Option("parsable2", "P", "parsable2", help="'|'-separated"),
    Option("partition", "m", "partition", help="add the Partition column"),
    Option("users_only", "U", "Users", help="only users' associations, not the accounts'"),
    Option("helpformat", "e", "helpformat", help="list the fields -o takes"),
    commandline.CLUSTERS_OPTION,
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-a] [-A ACCOUNTS] [-u USERS] [-U] [-l] [-m] [-n] [-p|-P] [-o FIELDS] [-e]"
# name -> default width (negative: left-justified), as sshare's print fields
FIELDS = {
    "Account": -20, "Cluster": 10, "EffectvUsage": 13, "FairShare": 10, "LevelFS": 10, "GrpTRESMins": 30,
    "GrpTRESRaw": 30, "ID": 6, "NormShares": 11, "NormUsage": 11, "Partition": 12, "RawShares": 10, "RawUsage": 11,
    "TRESRunMins": 30, "User": 10,
}  # fmt: skip
DEFAULT = "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare"
LONG = "Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS,GrpTRESMins,TRESRunMins"
# The TRES a TRESRunMins value names, in Slurm's order (only cpu, mem and node are counted by Spur).
RUN_TRES = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")


def parse_fields(texts: list[str]) -> list[tuple[str, int]]:
    """-o Account,User%5 -> [(name, width)]; names are matched without case, as Slurm's."""
    by_lower = {name.lower(): name for name in FIELDS}
    out = []
    for item in gather(texts):
        name, _, width = item.partition("%")
        found = by_lower.get(name.strip().lower())
        if found is None:
            raise CliError(f'Invalid field requested: "{name}"; sshare --helpformat lists the fields')
        if width and not width.lstrip("-").isdigit():
            raise CliError(f"-o {item}: the width after % must be a number, like {found}%20")
        out.append((found, int(width) if width else FIELDS[found]))
    return out


def fixed(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.6f}"


def row_values(row: Any, indent: int, run_mins: dict[str, dict[str, float]], cluster: str = "") -> dict[str, str]:
    """One association's fields as sshare prints them: the root row has no shares, no NormUsage or LevelFS;
    an account's row has no FairShare."""
    root = not row.parent and not row.user
    account = " " * indent + row.account
    tres = run_mins.get(f"{row.account}|{row.user}|{row.partition}", {})
    return {
        "Account": account,
        "User": row.user,
        "RawShares": "" if root else str(row.raw_shares),
        "NormShares": f"{row.norm_shares:.6f}",
        "RawUsage": f"{int(row.raw_usage)}",
        "NormUsage": "" if root else f"{row.norm_usage:.6f}",
        "EffectvUsage": f"{row.effective_usage:.6f}",
        "FairShare": f"{row.fairshare:.6f}" if row.user else "",
        "LevelFS": "" if root else fixed(row.norm_shares / row.effective_usage if row.effective_usage else math.inf),
        "GrpTRESMins": ",".join(f"{k}={v}" for k, v in sorted(row.grp_tres_mins.items())),
        "GrpTRESRaw": ",".join(f"{k}={int(v)}" for k, v in sorted(row.tres_usage_raw.items())),
        "TRESRunMins": ",".join(f"{name}={int(tres.get(name, 0))}" for name in RUN_TRES),
        "Partition": row.partition,
        "Cluster": cluster,
        "ID": "",  # the association's id is sacctmgr's (ListShares does not carry it)
    }


def cut(text: str, width: int) -> str:
    """print_fields: padded to |width| (negative: left), a longer value cut to width-1 and a `+`."""
    return slurmformat.print_field(text, abs(width), width >= 0)


def run_minutes(client: Any, rows: list[Any], now: float) -> dict[str, dict[str, float]]:
    """TRESRunMins: what the running jobs of each association (and of every one below it) still hold, in TRES
    minutes up to their time limits (a job without a limit counts nothing, as Slurm's shows)."""
    keys = {f"{r.account}|{r.user}|{r.partition}": r for r in rows}
    out: dict[str, dict[str, float]] = {}
    for job in client.call("ListJobs", {"states": ["RUNNING"]}).jobs:
        spec = job.spec
        if not spec.time_limit_secs:
            continue
        left = max(0.0, job.start_time + spec.time_limit_secs + job.suspended_secs - now) / 60
        cpus = max(1, spec.tasks) * max(1, spec.cpus_per_task)
        held = {"cpu": cpus * left, "mem": (spec.memory_mb or 0) * left, "node": max(1, spec.nodes) * left}
        own = f"{spec.account}|{spec.user}|{spec.partition}"
        at = own if own in keys else f"{spec.account}|{spec.user}|"
        while at in keys:  # up the shown rows: the user's, its account's, ... (the tree ends at root)
            for name, amount in held.items():
                out.setdefault(at, {}).setdefault(name, 0.0)
                out[at][name] += amount
            row = keys[at]
            at = f"{row.parent}||" if row.parent else ""
    return out


def main(argv: list[str], program: str = PROGRAM) -> int:
    try:
        values, positionals = parse(program, OPTIONS, argv)
    except UsageError as exc:  # getopt's two lines, as Slurm's sshare prints them
        invoked = sys.argv[0] if sys.argv and os.path.basename(sys.argv[0]) == program else program
        sys.stderr.write(getopt_lines(invoked, program, exc))
        return 1
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Show associations' shares and usage.", OPTIONS):
        return 0
    if values["helpformat"]:  # Slurm's layout: four to a line in columns of 17
        names = sorted(FIELDS)
        commandline.print_lines([" ".join(f"{n:<17}" for n in names[i : i + 4]) for i in range(0, len(names), 4)])
        return 0
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; sshare takes options only (users go in -u)")
    fields = parse_fields(values["format"] or [LONG if values["long"] else DEFAULT])
    if values["partition"] and not values["format"]:
        fields.insert(2, ("Partition", FIELDS["Partition"]))
    users = gather(values["users"])
    all_users = bool(values["all"]) or "all" in users
    users = [u for u in users if u != "all"]

    from spur_hpc.cli.controller import ControllerClient

    client = ControllerClient()
    if values["clusters"]:
        commandline.resolve_cluster(client, values["clusters"])
    request = {"users": users, "accounts": gather(values["accounts"]), "all_users": all_users}
    rows = list(client.call("ListShares", request).shares)
    if values["users_only"]:
        rows = [r for r in rows if r.user]
    top = min((r.depth for r in rows), default=0)
    run_mins = {}
    if "TRESRunMins" in {name for name, _ in fields} and rows:
        import time

        run_mins = run_minutes(client, rows, time.time())
    wanted = {name for name, _ in fields}
    cluster = client.call("GetClusterInfo").cluster_name if "Cluster" in wanted and rows else ""
    table = [row_values(r, r.depth - top, run_mins, cluster) for r in rows]
    parsable = values["parsable"] or values["parsable2"]
    end = "|" if values["parsable"] else ""
    lines = []
    if parsable:
        if not values["noheader"]:
            lines.append("|".join(name for name, _ in fields) + end)
        lines += ["|".join(t[name] for name, _ in fields) + end for t in table]
    else:
        if not values["noheader"]:
            lines.append("".join(cut(name, width) + " " for name, width in fields))
            lines.append("".join("-" * abs(width) + " " for _name, width in fields))
        lines += ["".join(cut(t[name], width) + " " for name, width in fields) for t in table]
    commandline.print_lines(lines)
    return 0
