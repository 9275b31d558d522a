"""sacctmgr's words, shared by the command (cli/sacctmgr.py) and the leader that plans it (controller/assocplan.py):
the keys add and modify take per entity and the row fields they set, the admin levels, a TRES list as Slurm writes
it, the fields an association takes from its parents, and the line that names an association after a change.
One definition: the CLI refuses an unknown key in Slurm's words and prints what an add will set; the leader
checks the same request again (it never trusts a client).
"""

from __future__ import annotations

import re
from typing import Any

from spur_hpc import model

ADMIN_WORDS = {"none": "None", "operator": "Operator", "admin": "Administrator", "administrator": "Administrator"}
TRES_NAMES = ("cpu", "mem", "node", "billing")  # and gres/NAME
_MEMORY_SHIFTS = {"K": -10, "M": 0, "G": 10, "T": 20}  # as cli/units.parse_memory_mb

# sacctmgr's keys (and the spellings it also takes) -> the row field; kinds say how the value parses.
ASSOC_KEYS = {
    "fairshare": ("shares", "shares"),
    "shares": ("shares", "shares"),
    "grptres": ("grp_tres", "tres"),
    "grpjobs": ("grp_jobs", "count"),
    "grpsubmitjobs": ("grp_submit_jobs", "count"),
    "grpsubmit": ("grp_submit_jobs", "count"),
    "maxjobs": ("max_jobs", "count"),
    "maxsubmitjobs": ("max_submit_jobs", "count"),
    "maxsubmit": ("max_submit_jobs", "count"),
    "maxwall": ("max_wall_secs", "wall"),
    "maxwalldurationperjob": ("max_wall_secs", "wall"),
    "maxtresperjob": ("max_tres_per_job", "tres"),
    "maxtres": ("max_tres_per_job", "tres"),
    "qos": ("qos", "qoslist"),
    "qoslevel": ("qos", "qoslist"),
    "defaultqos": ("default_qos", "qosname"),
    "priority": ("priority", "priority"),
}
QOS_KEYS = {
    "description": ("description", "text"),
    "priority": ("priority", "priority"),
    "preempt": ("preempt", "qoslist"),
    "preemptmode": ("preempt_mode", "preemptmode"),
    "grptres": ("grp_tres", "tres"),
    "grpjobs": ("grp_jobs", "count"),
    "grpsubmitjobs": ("grp_submit_jobs", "count"),
    "grpsubmit": ("grp_submit_jobs", "count"),
    "maxjobsperuser": ("max_jobs_per_user", "count"),
    "maxjobspu": ("max_jobs_per_user", "count"),
    "maxsubmitjobsperuser": ("max_submit_jobs_per_user", "count"),
    "maxsubmitjobspu": ("max_submit_jobs_per_user", "count"),
    "maxwall": ("max_wall_secs", "wall"),
    "maxwalldurationperjob": ("max_wall_secs", "wall"),
    "maxtresperjob": ("max_tres_per_job", "tres"),
    "maxtrespj": ("max_tres_per_job", "tres"),
    "maxtresperuser": ("max_tres_per_user", "tres"),
    "maxtrespu": ("max_tres_per_user", "tres"),
    "usagefactor": ("usage_factor", "factor"),
    "flags": ("flags", "flags"),
}
ACCOUNT_KEYS = {"description": "description", "organization": "organization"}
USER_KEYS = {"defaultaccount": "default_account", "adminlevel": "admin_level"}
# The association fields a child takes from its parent when it sets none itself (Slurm's Max*, Priority, QOS and
# DefQOS; Grp limits count the jobs below them instead, and Fairshare is each association's own).
INHERITED = ("max_jobs", "max_submit_jobs", "max_wall_secs", "max_tres_per_job", "qos", "default_qos", "priority")
# The other spellings sacctmgr takes, left out of the lists a refusal names.
ALIASES = frozenset(
    {"shares", "names", "accounts", "users", "clusters", "grpsubmit", "maxsubmit", "maxwalldurationperjob", "maxtres"}
    | {"qoslevel", "maxjobspu", "maxsubmitjobspu", "maxtrespj", "maxtrespu"}
)


class PlanError(ValueError):
    """One line: what in the request is wrong, and how to fix it."""


def shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def whole_number(key: str, text: str, low: int, high: int) -> int:
    if not re.fullmatch(r"-?[0-9]{1,19}", text):
        raise PlanError(f"{key}={shown(text)} is not a whole number; use {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise PlanError(f"{key}={text} is out of range; use {low} to {high} (-1 clears it)")
    return value


def parse_tres(key: str, text: str, old: dict[str, int]) -> dict[str, int]:
    """`cpu=4,mem=8G,gres/gpu=2` over the old map: mem in MB (K/M/G/T suffixes), -1 removes that TRES, a bare
    -1 clears every one."""
    if text in ("-1", ""):
        return {}
    out = dict(old)
    for item in text.split(","):
        name, sep, amount = item.strip().partition("=")
        name = name.strip().lower()
        if not sep or not amount:
            raise PlanError(
                f"{key}={shown(text)}: {shown(item)} is not TRES=COUNT; write it like cpu=4,mem=8G,gres/gpu=2"
            )
        gres = name.startswith("gres/") and re.fullmatch(r"gres/[a-z0-9_.-]{1,60}(:[a-z0-9_.-]{1,60})?", name)
        if name not in TRES_NAMES and not gres:
            raise PlanError(f"{key}=: unknown TRES {shown(name)}; use cpu, mem, node, billing or gres/NAME")
        amount = amount.strip().upper()
        if amount == "-1":
            out.pop(name, None)
            continue
        shift = 0
        if name == "mem":
            amount = amount[:-1] if amount.endswith("B") and len(amount) > 1 else amount
            if amount and amount[-1] in _MEMORY_SHIFTS:
                shift, amount = _MEMORY_SHIFTS[amount[-1]], amount[:-1]
        count = whole_number(f"{key}={name}", amount, 0, model.INT64_MAX >> 20)
        out[name] = count << shift if shift >= 0 else -(-count >> -shift)
    if len(out) > 64:
        raise PlanError(f"{key}= names {len(out)} TRES; at most 64")
    return out


def assoc_line(cluster: str, row: dict[str, Any], style: str = "modify") -> str:
    """An association as Slurm lists it after a change: "add" as sacctmgr prints what it adds, "modify" and
    "delete" as slurmdbd names what it changed or removed (an account's own association: `A = acct of parent`)."""
    account, user, partition = row["account"], row["user"], row["partition"]
    if style == "add":
        if not user:
            return f"A = {account[:10]:<10} C = {cluster[:10]:<10}"
        line = f"U = {user[:9]:<9} A = {account[:10]:<10} C = {cluster[:10]:<10}"
        return line + (f" P = {partition[:10]:<10}" if partition else "")
    if not user:
        parent = row.get("parent_account") or ""
        return f"C = {cluster:<10} A = {account} of {parent}" if parent else f"C = {cluster:<10} A = {account}"
    width = 20 if style == "modify" else 10
    line = f"C = {cluster:<10} A = {account:<{width}} U = {user:<9}"
    return line + (f" P = {partition}" if partition else "")
