"""sacctmgr's tables: the fields `format=` names, their titles and widths, the rows of each listing, Slurm's order.

The rows come from ListAssociations as plain dicts (the store's rows: controller/associations.py). Field names are
matched as Slurm's sacctmgr matches them (common.c's _get_print_field): without case, any prefix at least as long
as the field's minimum, the first field of the table that fits wins (the table keeps Slurm's order). Values are
printed as Slurm's print_fields does: a width pads (negative: left-justified) and a longer value keeps width-1
characters and a '+'; the titles are only cut; -p/-P separate the values with '|'.
"""

from __future__ import annotations

from spur_hpc.assocwords import INHERITED
from spur_hpc.cli import slurmformat, units
from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NO_LIMIT = -1  # the store's unset count (associations.NO_LIMIT)
# Slurm's TRES ids order a TRES string: cpu, mem, energy, node, billing, fs/disk, vmem, pages, then gres/...
TRES_ORDER = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")

# (Slurm's name, shortest prefix it takes, title, width, key): key names the value (see cell()).
FIELDS: list[tuple[str, int, str, int, str]] = [
    ("Account", 3, "Account", 10, "account"),
    ("Acct", 4, "Account", 10, "account"),
    ("AdminLevel", 2, "Admin", 9, "admin"),
    ("Clusters", 2, "Cluster", 10, "cluster"),
    ("Coordinators", 3, "Coord Accounts", 20, "coordinators"),
    ("ControlHost", 8, "ControlHost", 15, "control_host"),
    ("ControlPort", 8, "ControlPort", 12, "control_port"),
    ("DefaultAccount", 8, "Def Acct", 10, "default_account"),
    ("DefaultQOS", 8, "Def QOS", 9, "default_qos"),
    ("Description", 3, "Descr", 20, "description"),
    ("Flags", 2, "Flags", 20, "flags"),
    ("GraceTime", 3, "GraceTime", 10, "grace_time"),
    ("GrpCPUs", 6, "GrpCPUs", 8, "grp_cpus"),
    ("GrpCPUMins", 7, "GrpCPUMins", 11, "none"),
    ("GrpCPURunMins", 7, "GrpCPURunMins", 13, "none"),
    ("GrpTRES", 7, "GrpTRES", 13, "grp_tres"),
    ("GrpTRESMins", 7, "GrpTRESMins", 13, "none"),
    ("GrpTRESRunMins", 7, "GrpTRESRunMins", 13, "none"),
    ("GrpJobs", 4, "GrpJobs", 7, "grp_jobs"),
    ("GrpMemory", 4, "GrpMem", 7, "grp_mem"),
    ("GrpNodes", 4, "GrpNodes", 8, "grp_nodes"),
    ("GrpSubmitJobs", 4, "GrpSubmit", 9, "grp_submit_jobs"),
    ("GrpWall", 4, "GrpWall", 11, "none"),
    ("ID", 2, "ID", 6, "id"),
    ("MaxCPUMinsPerJob", 7, "MaxCPUMins", 11, "max_cpu_mins"),
    ("MaxCPUsPerJob", 7, "MaxCPUs", 8, "max_cpus"),
    ("MaxTRES", 7, "MaxTRES", 13, "max_tres_per_job"),
    ("MaxTRESPerJob", 11, "MaxTRES", 13, "max_tres_per_job"),
    ("MaxTRESPerNode", 11, "MaxTRESPerNode", 14, "none"),
    ("MaxTRESMinsPerJob", 8, "MaxTRESMins", 13, "none"),
    ("MaxTRESPerAccount", 11, "MaxTRESPA", 13, "none"),
    ("MaxTRESPA", 9, "MaxTRESPA", 13, "none"),
    ("MaxTRESPerUser", 11, "MaxTRESPU", 13, "max_tres_per_user"),
    ("MaxTRESPU", 9, "MaxTRESPU", 13, "max_tres_per_user"),
    ("MaxJobs", 4, "MaxJobs", 7, "max_jobs"),
    ("MaxJobsPerAccount", 11, "MaxJobsPA", 9, "none"),
    ("MaxJobsPA", 9, "MaxJobsPA", 9, "none"),
    ("MaxJobsPerUser", 11, "MaxJobsPU", 9, "max_jobs_per_user"),
    ("MaxJobsPU", 9, "MaxJobsPU", 9, "max_jobs_per_user"),
    ("MaxNodesPerJob", 4, "MaxNodes", 8, "max_nodes"),
    ("MaxSubmitJobs", 4, "MaxSubmit", 9, "max_submit_jobs"),
    ("MaxSubmitJobsPerAccount", 17, "MaxSubmitPA", 11, "none"),
    ("MaxSubmitPA", 11, "MaxSubmitPA", 11, "none"),
    ("MaxSubmitJobsPerUser", 10, "MaxSubmitPU", 11, "max_submit_jobs_per_user"),
    ("MaxSubmitPU", 6, "MaxSubmitPU", 11, "max_submit_jobs_per_user"),
    ("MaxWallDurationPerJob", 4, "MaxWall", 11, "max_wall"),
    ("MinTRESPerJob", 7, "MinTRES", 13, "none"),
    ("Name", 2, "Name", 10, "name"),
    ("Organization", 1, "Org", 20, "organization"),
    ("ParentID", 7, "ParentID", 8, "parent_id"),
    ("ParentName", 7, "ParentName", 10, "parent_name"),
    ("Partition", 4, "Partition", 10, "partition"),
    ("PreemptMode", 8, "PreemptMode", 11, "preempt_mode"),
    ("Preempt", 7, "Preempt", 10, "preempt"),
    ("PreemptExemptTime", 8, "PreemptExemptTime", 19, "none"),
    ("Priority", 3, "Priority", 10, "priority"),
    ("QOSLevel", 3, "QOS", 20, "qos"),
    ("RPC", 1, "RPC", 5, "rpc"),
    ("Share", 1, "Share", 9, "shares"),
    ("FairShare", 2, "Share", 9, "shares"),
    ("UsageFactor", 6, "UsageFactor", 11, "usage_factor"),
    ("UsageThreshold", 6, "UsageThres", 10, "none"),
    ("User", 1, "User", 10, "user"),
]

# The default columns of each listing (sacctmgr 22.05's), as format= would name them.
ACCOUNT_FORMAT = "Account,Descr,Org"
ACCOUNT_ASSOC_FORMAT = (
    "Account,Descr,Org,Cluster,ParentName,User,Share,Priority,GrpJobs,GrpNodes,GrpCPUs,GrpMem,GrpSubmit,GrpWall,"
    "GrpCPUMins,MaxJobs,MaxNodes,MaxCPUs,MaxSubmit,MaxWall,MaxCPUMins,QOS,DefaultQOS"
)
USER_FORMAT = "User,DefaultAccount,AdminLevel"
USER_ASSOC_FORMAT = (
    "User,DefaultAccount,AdminLevel,Cluster,Account,Partition,Share,Priority,MaxJobs,MaxNodes,MaxCPUs,MaxSubmit,"
    "MaxWall,MaxCPUMins,QOS,DefaultQOS"
)
ASSOC_FORMAT = (
    "Cluster,Account,User,Partition,Share,Priority,GrpJobs,GrpTRES,GrpSubmit,GrpWall,GrpTRESMins,MaxJobs,MaxTRES,"
    "MaxTRESPerNode,MaxSubmit,MaxWall,MaxTRESMins,QOS,DefaultQOS,GrpTRESRunMins"
)
QOS_FORMAT = (
    "Name,Priority,GraceTime,Preempt,PreemptExemptTime,PreemptMode,Flags%40,UsageThres,UsageFactor,GrpTRES,"
    "GrpTRESMins,GrpTRESRunMins,GrpJobs,GrpSubmit,GrpWall,MaxTRES,MaxTRESPerNode,MaxTRESMins,MaxWall,MaxTRESPU,"
    "MaxJobsPU,MaxSubmitPU,MaxTRESPA,MaxJobsPA,MaxSubmitPA,MinTRES"
)
CLUSTER_FORMAT = (
    "Cluster,ControlHost,ControlPort,RPC,Share,GrpJobs,GrpTRES,GrpSubmit,MaxJobs,MaxTRES,MaxSubmit,MaxWall,QOS,"
    "DefaultQOS"
)


class Field:
    __slots__ = ("title", "width", "key", "sized")

    def __init__(self, title: str, width: int, key: str, sized: bool = False) -> None:
        self.title = title
        self.width = width
        self.key = key
        self.sized = sized  # the width came from format= (%W), not the field's default


def field(text: str) -> Field:
    """One format= item, NAME or NAME%WIDTH (a negative width left-justifies); Slurm's refusal otherwise."""
    name, _, width_text = text.partition("%")
    width = 0
    if width_text:
        digits = width_text.lstrip("-")
        if not digits.isdigit() or len(digits) > 4:
            raise CliError(f"format={text}: the width after % must be a number, like {name}%20")
        width = int(width_text)
    lower = name.strip().lower()
    for full, shortest, title, default_width, key in FIELDS:
        if len(lower) >= shortest and full.lower().startswith(lower):
            return Field(title, width or default_width, key, bool(width))
    raise UnknownField(name)


class UnknownField(CliError):
    """Slurm: `Unknown field 'NAME'` on stderr, exit 1."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown field '{name}'")
        self.name = name


def fields(texts: list[str]) -> list[Field]:
    return [field(item.strip()) for text in texts for item in text.split(",") if item.strip()]


# ------------------------------------------------------------------ values


def tres_text(tres: dict[str, int]) -> str:
    """cpu=8,mem=16G,gres/gpu=2 in Slurm's TRES order (memory whole in the largest unit, as CONVERT_NUM_UNIT_EXACT)."""
    ordered = sorted(tres, key=lambda n: (TRES_ORDER.index(n) if n in TRES_ORDER else len(TRES_ORDER), n))
    return ",".join(f"{n}={units.format_tres_memory(tres[n]) if n == 'mem' else tres[n]}" for n in ordered)


def count_text(value: int | None) -> str:
    return "" if value is None or value == NO_LIMIT else str(value)


def wall_text(secs: int | None) -> str:
    """Slurm's mins2time_str: [D-]HH:MM:SS; blank when unset."""
    if secs is None or secs == NO_LIMIT or secs <= 0:
        return ""
    return units.format_clock(secs)


def qos_text(names: list[str]) -> str:
    return ",".join(sorted(names))


def cell(key: str, row: dict[str, Any]) -> str:
    """The text of one field for one row (a row merges what the listing shows: account, user, association...)."""
    if row.get("zeroed"):
        return ZEROED.get(key, cell(key, {k: v for k, v in row.items() if k != "zeroed"}))
    value = row.get(key)
    if key in ("grp_tres", "max_tres_per_job", "max_tres_per_user"):
        return tres_text(value or {})
    if key in ("grp_cpus", "max_cpus"):
        tres = row.get("grp_tres" if key == "grp_cpus" else "max_tres_per_job") or {}
        return str(tres["cpu"]) if "cpu" in tres else ""
    if key in ("grp_nodes", "max_nodes"):
        tres = row.get("grp_tres" if key == "grp_nodes" else "max_tres_per_job") or {}
        return str(tres["node"]) if "node" in tres else ""
    if key == "grp_mem":
        tres = row.get("grp_tres") or {}
        return str(tres["mem"]) if "mem" in tres else ""
    if key == "max_wall":
        return wall_text(row.get("max_wall_secs"))
    if key in ("qos", "preempt"):
        return qos_text(value or [])
    if key == "flags":
        return ",".join(value or [])
    if key == "usage_factor":
        return "" if value is None else f"{value:.6f}"
    if key == "preempt_mode":
        return value or "cluster"
    if key == "grace_time":
        return "00:00:00"
    if key == "admin":
        return row.get("admin_level") or "None"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return count_text(value)
    if isinstance(value, list):
        return ",".join(value)
    return "" if value is None else str(value)


# ------------------------------------------------------------------ printing


def print_cell(text: str, width: int) -> str:
    """print_fields_str: padded to |width| (negative: left), a longer value cut to width-1 and a '+'."""
    return slurmformat.print_field(text, abs(width), width >= 0) + " "


def lines(columns: list[Field], rows: list[dict[str, Any]], header: bool, parsable: str) -> list[str]:
    """The listing: a title line and a dashes line (unless -n), then a line per row. parsable: "" (columns),
    "parsable" (-p: '|' after every value) or "parsable2" (-P: '|' between values)."""
    table = [[printable(cell(c.key, row)) for c in columns] for row in rows]
    out = []
    if parsable:
        end = "|" if parsable == "parsable" else ""
        if header:
            out.append("|".join(c.title for c in columns) + end)
        out += ["|".join(values) + end for values in table]
        return out
    if header:
        out.append("".join(f"{c.title[: abs(c.width)]:{'<' if c.width < 0 else '>'}{abs(c.width)}} " for c in columns))
        out.append("".join("-" * abs(c.width) + " " for c in columns))
    out += ["".join(print_cell(v, c.width) for c, v in zip(columns, values, strict=True)) for values in table]
    return out


# ------------------------------------------------------------------ rows of each listing


# What an association shows of its ancestors' settings when it has none of its own: slurmdbd copies a parent's
# Max* limits, Priority and QOS into every association below it (and again when the parent's change); Grp* limits
# and shares stay each association's own.


class Tables:
    """ListAssociations' reply (as plain dicts) indexed once: a listing of 100,000 associations looks each one's
    account, user and ancestors up by name, never by a scan."""

    def __init__(self, found: dict[str, Any]) -> None:
        self.found = found
        self.accounts = {a["name"]: a for a in found["accounts"]}
        self.users = {u["name"]: u for u in found["users"]}
        self.own = {a["account"]: a for a in found["associations"] if not a["user"]}  # each account's own
        self.shown: dict[str, dict[str, Any]] = {}  # account -> account_values()
        self.depths: dict[str, int] = {}
        self.of_user: dict[str, list[dict[str, Any]]] = {}
        self.of_account: dict[str, list[dict[str, Any]]] = {}  # users' associations in each account
        for a in found["associations"]:
            if a["user"]:
                self.of_user.setdefault(a["user"], []).append(a)
                self.of_account.setdefault(a["account"], []).append(a)

    def parent(self, account: str) -> str:
        return self.accounts.get(account, {}).get("parent", "")

    def account_values(self, account: str) -> dict[str, Any]:
        """What the account's own association shows of INHERITED (its own, else its parent's), worked out once
        per account: the walk up is iterative and remembered, so a deep tree costs each account one step."""
        if account in self.shown:
            return self.shown[account]
        pending, at, seen = [], account, set()
        while at and at not in self.shown and at not in seen:
            seen.add(at)
            pending.append(at)
            at = self.parent(at)
        above = self.shown.get(at, NOTHING_SET) if at else NOTHING_SET
        for name in reversed(pending):
            own = self.own.get(name)
            above = merged_values(own, above) if own is not None else above
            self.shown[name] = above
        return self.shown[account]

    def depth(self, account: str) -> int:
        """How many accounts are above this one (root: 0)."""
        if account not in self.depths:
            pending, at, seen = [], account, set()
            while at and at not in self.depths and at not in seen:
                seen.add(at)
                pending.append(at)
                at = self.parent(at)
            base = self.depths.get(at, -1) if at else -1
            for name in reversed(pending):
                base += 1
                self.depths[name] = base
        return self.depths[account]


NOTHING_SET: dict[str, Any] = {
    "max_jobs": NO_LIMIT, "max_submit_jobs": NO_LIMIT, "max_wall_secs": NO_LIMIT, "max_tres_per_job": {},
    "priority": NO_LIMIT, "qos": [], "default_qos": "",
}  # fmt: skip


def is_set(name: str, value: Any) -> bool:
    return value not in (None, "", [], NO_LIMIT) and not (name == "priority" and value == 0)


def merged_values(row: dict[str, Any], above: dict[str, Any]) -> dict[str, Any]:
    """INHERITED as `row` shows them: its own where set, else what is above it (TRES maps: per TRES)."""
    out = {}
    for name in INHERITED:
        value = row.get(name)
        if name == "max_tres_per_job":
            out[name] = {**above[name], **(value or {})}
        else:
            out[name] = value if is_set(name, value) else above[name]
    return out


def assoc_row(tables: Tables, assoc: dict[str, Any]) -> dict[str, Any]:
    """An association's values for the table, with what sacctmgr shows of its user and account."""
    account = tables.accounts.get(assoc["account"], {})
    user = tables.users.get(assoc["user"], {})
    if assoc["user"]:
        above = tables.account_values(assoc["account"]) if assoc["account"] in tables.accounts else NOTHING_SET
        shown, depth = merged_values(assoc, above), tables.depth(assoc["account"]) + 1
    else:
        shown, depth = tables.account_values(assoc["account"]), tables.depth(assoc["account"])
    return {
        **assoc,
        **shown,
        "parent_name": "" if assoc["user"] else assoc.get("parent_account", ""),
        "description": account.get("description", ""),
        "organization": account.get("organization", ""),
        "default_account": user.get("default_account", ""),
        "admin_level": user.get("admin_level", ""),
        "depth": depth,  # how far below root (`show assoc tree` indents by it)
    }


# A user that `show user withassoc where account=...` finds no association of still gets a line: Slurm prints an
# empty association record's zeros there (and no default account).
ZEROED = {
    "shares": "0", "max_jobs": "0", "max_nodes": "0", "max_cpus": "0", "max_submit_jobs": "0",
    "max_wall": "00:00:00", "max_cpu_mins": "0",
}  # fmt: skip


def zeroed_row(user: dict[str, Any]) -> dict[str, Any]:
    return {"user": user["name"], "admin_level": user["admin_level"], "zeroed": True}


def tree_order(tables: Tables, assocs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Slurm's hierarchical order: an account's own association, its users' (by name), then its child accounts
    (by name), each followed by what is below it."""
    wanted = {id(a) for a in assocs}
    children: dict[str, list[str]] = {}
    for name, acct in tables.accounts.items():
        children.setdefault(acct["parent"], []).append(name)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    # an account cut off from root (a broken parent link) still shows, after the tree
    starts = ["root", *sorted(tables.accounts)]
    for start in starts:
        stack = [start]  # depth first without recursion: a tree may be thousands of accounts deep
        while stack:
            account = stack.pop()
            if account in seen:
                continue
            seen.add(account)
            if account in tables.own:
                out.append(tables.own[account])
            out.extend(sorted(tables.of_account.get(account, []), key=lambda a: (a["user"], a["partition"])))
            stack.extend(sorted(children.get(account, []), reverse=True))
    return [a for a in out if id(a) in wanted]
