"""sacctmgr: accounts, users, QOS and associations, with Slurm 22.05's syntax, messages and tables.

`sacctmgr [-i] [-n] [-p|-P] [-s] VERB ENTITY [NAMES] [where KEY=VALUE ...] [set KEY=VALUE ...] [format=...]`.
show/list read ListAssociations and print in cli/assocview; add/modify/delete go to the leader's
ModifyAssociations (controller/assocwords.py plans them). Without -i a change is first asked for as a dry run,
printed, and committed only when the user answers y to Slurm's question (30 seconds; anything but y, a closed
stdin or the timeout discards it). What sacctmgr prints about an add is worked out here, as Slurm's client does;
what a modify or delete changed is the leader's list (one line per object). tests/golden/slurm-22.05-accounts
holds real sacctmgr's output for the same commands.
"""

from __future__ import annotations

import os
import sys

from spur_hpc.cli import assocview, commandline
from spur_hpc.cli.options import Option, UsageError, getopt_lines, parse
from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection
    from typing import Any

PROGRAM = "sacctmgr"
OPTIONS = [
    Option("immediate", "i", "immediate", help="commit changes at once, without asking"),
    Option("noheader", "n", "noheader", help="print no header lines"),
    Option("parsable", "p", "parsable", help="'|'-separated, with a '|' at the end of each line"),
    Option("parsable2", "P", "parsable2", help="'|'-separated"),
    Option("associations", "s", "associations", help="show users and accounts with their associations (withassoc)"),
    Option("quiet", "Q", "quiet", help="accepted; Slurm's sacctmgr prints what it changes all the same"),
    Option("readonly", "r", "readonly", help="refuse any change"),
    Option("verbose", "v", "verbose", help="accepted; prints nothing more"),
    Option("help", "h", "help", help="show this help and exit"),
    Option("usage", "", "usage", help="show a one-line usage and exit"),
    Option("version", "V", "version", help="show the version and build and exit"),
]
SYNOPSIS = "[-i] [-n] [-p|-P] [-s] add|modify|delete|show ENTITY [NAMES] [where KEY=VALUE ...] [set KEY=VALUE ...]"
DESCRIPTION = (
    "Show and change accounts, users, QOS and their associations (Slurm's sacctmgr).\n"
    "Entities: account, user, qos (add, modify, delete, show), association and cluster (show).\n"
    "Without -i a change is printed and asked for: 'y' commits it, anything else discards it."
)
VERBS = {
    "add": "add", "create": "add", "modify": "modify", "update": "modify",
    "delete": "delete", "remove": "delete", "list": "show", "show": "show",
}  # fmt: skip
ENTITIES = (("account", 3), ("association", 3), ("cluster", 2), ("qos", 1), ("user", 1))
# Slurm's entities Spur has no store for: named, not "invalid keyword".
OTHER_ENTITIES = (
    "configuration", "event", "federation", "problem", "resource", "reservation", "runawayjobs", "stats",
    "transaction", "tres", "wckey",
)  # fmt: skip
NO_ENTITY = (
    'Input line must include "Account", "Association", "Cluster", "Configuration",\n'
    '"Event", "Federation", "Problem", "QOS", "Resource", "Reservation",\n'
    '"RunAwayJobs", "Stats", "Transaction", "TRES", "User", or "WCKey"'
)
QUESTION = "Would you like to commit changes? (You have 30 seconds to decide)"
ANSWER_SECS = 30.0
# Other spellings sacctmgr takes for a key, and the key Spur's store knows it by.
KEY_ALIASES = {
    "names": "name", "users": "user", "accounts": "account", "acct": "account", "clusters": "cluster",
    "defqos": "defaultqos", "defaultaccounts": "defaultaccount", "share": "fairshare", "parents": "parent",
    "partitions": "partition", "descr": "description", "org": "organization",
}  # fmt: skip
# What `where` selects on, per entity (show and modify/delete alike).
CONDITIONS = {
    "account": {"name", "account", "cluster", "parent", "description", "organization"},
    "user": {"name", "user", "account", "cluster", "partition", "defaultaccount", "adminlevel"},
    "association": {"user", "account", "cluster", "partition", "parent", "id", "name"},
    "qos": {"name", "id", "cluster"},
    "cluster": {"name", "cluster"},
}
WHAT_ADDED = {"account": "accounts", "user": "users", "qos": "QOS"}


class Command:
    """One sacctmgr command line, parsed: verb, entity, bare names, where and set maps, format= items, flags."""

    def __init__(self) -> None:
        self.verb = ""
        self.entity = ""
        self.names: list[str] = []
        self.where: dict[str, str] = {}
        self.set: dict[str, str] = {}
        self.format: list[str] = []
        self.withassoc = False
        self.tree = False  # show assoc tree: accounts indented by depth, 20 wide
        self.typed: dict[str, str] = {}  # set/where key -> the word as typed (Slurm's refusals quote it)


class SlurmMessage(CliError):
    """Lines sacctmgr prints as they are (its own words, a leading space), then exit 1; stdout or stderr."""

    def __init__(self, text: str, stdout: bool = False) -> None:
        super().__init__(text)
        self.text = text
        self.stdout = stdout


def key_of(word: str) -> tuple[str, str, str]:
    """KEY=VALUE, KEY+=VALUE, KEY-=VALUE -> (lower-case key as the store knows it, operator, value)."""
    key, _, value = word.partition("=")
    op = ""
    if key.endswith(("+", "-")):
        key, op = key[:-1], key[-1]
    key = key.strip().lower()
    key = KEY_ALIASES.get(key, key)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]  # sacctmgr strips one pair of quotes
    return key, op, value


def entity_of(word: str, verb: str) -> str:
    """account, association, cluster, qos or user from any prefix sacctmgr takes (a plural too)."""
    lower = word.lower()
    for candidate in (lower, lower.removesuffix("s")):
        for name, shortest in ENTITIES:
            if len(candidate) >= shortest and name.startswith(candidate):
                return name
    if lower in OTHER_ENTITIES or lower.removesuffix("s") in OTHER_ENTITIES:
        raise CliError(f"Spur keeps no {word}; sacctmgr here works on account, association, cluster, qos and user")
    listed = "list" if verb == "show" else verb
    raise SlurmMessage(f"No valid entity in {listed} command\n{NO_ENTITY}")


def parse_command(words: list[str]) -> Command:
    """VERB ENTITY [NAMES] [where ...] [set ...] [format=...] [withassoc] into a Command, or Slurm's refusal."""
    cmd = Command()
    verb = words[0].lower()
    cmd.verb = VERBS.get(verb) or next((v for k, v in VERBS.items() if len(verb) >= 3 and k.startswith(verb)), "")
    if not cmd.verb:
        raise SlurmMessage(f"invalid keyword: {printable(words[0])}")
    if len(words) < 2:
        listed = "list" if cmd.verb == "show" else cmd.verb
        raise SlurmMessage(f"No valid entity in {listed} command\n{NO_ENTITY}")
    cmd.entity = entity_of(words[1], cmd.verb)
    mode = "names"
    for word in words[2:]:
        lower = word.lower()
        if lower == "where":
            mode = "where"
            continue
        if lower == "set":
            mode = "set"
            continue
        if lower in ("withassoc", "withassocs", "withassociations"):
            cmd.withassoc = True
            continue
        if lower == "tree" and cmd.verb == "show":
            cmd.tree = True
            continue
        if "=" not in word:
            if mode == "set":
                raise SlurmMessage(f" Unknown option: {printable(word)}\n Use keyword 'where' to modify condition")
            cmd.names += [n for n in word.split(",") if n]
            continue
        key, op, value = key_of(word)
        if key == "format":
            cmd.format.append(value)
            continue
        cmd.typed[key + op] = printable(word)
        if mode == "set" or (cmd.verb == "add" and key not in ("name", "names")):
            cmd.set[key + op] = value
        elif key == "name" or (key == cmd.entity and cmd.entity in ("user", "account")):
            cmd.names += [n for n in value.split(",") if n]
        else:
            if op:
                raise SlurmMessage(f" Unknown condition: {printable(word)}\n Use keyword 'set' to modify value")
            cmd.where[key] = value
    return cmd


# ------------------------------------------------------------------ show


def matches(values: Collection[str], value: str) -> bool:
    return not values or value in values


def split(text: str | None) -> list[str]:
    return [part for part in (text or "").split(",") if part]


def show(client: Any, cmd: Command, header: bool, parsable: str) -> list[str]:
    from spur_hpc.wire import protocodec

    for key in cmd.where:
        if key not in CONDITIONS[cmd.entity]:
            raise SlurmMessage(f" Unknown condition: {cmd.typed.get(key, printable(key + '=' + cmd.where[key]))}")
    found = protocodec.to_jsonable(client.call("ListAssociations", {}), "ListAssociationsReply")
    tables = assocview.Tables(found)
    where = {k: set(split(v)) for k, v in cmd.where.items()}  # sets: a listing may name thousands
    names = set(cmd.names)
    entity = cmd.entity
    if entity == "account":
        names |= where.get("account", set())
        parents = where.get("parent", [])
        accounts = sorted(
            (a for a in found["accounts"] if matches(names, a["name"]) and matches(parents, a["parent"])),
            key=lambda a: a["name"],
        )
        if not cmd.withassoc:
            rows = [{**a, "account": a["name"]} for a in accounts]
            default = assocview.ACCOUNT_FORMAT
        else:
            rows = []
            for account in accounts:
                # the account's own association, then its users' newest first (slurmdbd's lft order)
                own = [tables.own[account["name"]]] if account["name"] in tables.own else []
                own += sorted(tables.of_account.get(account["name"], []), key=lambda x: -x["id"])
                rows += [{**assocview.assoc_row(tables, x), **account, "account": x["account"]} for x in own]
            default = assocview.ACCOUNT_ASSOC_FORMAT
    elif entity == "user":
        names |= where.get("user", set())
        users = sorted((u for u in found["users"] if matches(names, u["name"])), key=lambda u: u["name"])
        users = [u for u in users if matches(where.get("defaultaccount", []), u["default_account"])]
        if not cmd.withassoc:
            rows = [{**u, "user": u["name"]} for u in users]
            default = assocview.USER_FORMAT
        else:
            rows = []
            for user in users:
                mine = [
                    x
                    for x in tables.of_user.get(user["name"], [])
                    if matches(where.get("account", []), x["account"])
                    and matches(where.get("partition", []), x["partition"])
                ]
                rows += [assocview.assoc_row(tables, x) for x in sorted(mine, key=lambda x: x["id"])]
                if not mine and ("account" in where or "partition" in where):
                    rows.append(assocview.zeroed_row(user))
                elif not tables.of_user.get(user["name"]):  # a user with no association left: its own fields
                    rows.append({**user, "user": user["name"]})
            default = assocview.USER_ASSOC_FORMAT
    elif entity == "association":
        users = names | where.get("user", set()) | where.get("name", set())
        picked = [
            x
            for x in found["associations"]
            if matches(users, x["user"])
            and matches(where.get("account", []), x["account"])
            and matches(where.get("partition", []), x["partition"])
            and matches(where.get("parent", []), x["parent_account"] if not x["user"] else "")
            and matches(where.get("id", []), str(x["id"]))
        ]
        by_id = users and not cmd.tree
        ordered = sorted(picked, key=lambda x: x["id"]) if by_id else assocview.tree_order(tables, picked)
        rows = [assocview.assoc_row(tables, x) for x in ordered]
        if cmd.tree:
            for row in rows:
                row["account"] = " " * row["depth"] + row["account"]
        default = assocview.ASSOC_FORMAT
    elif entity == "qos":
        names |= where.get("name", set())
        rows = [
            q
            for q in sorted(found["qos"], key=lambda q: q["id"])
            if matches(names, q["name"]) and matches(where.get("id", []), str(q["id"]))
        ]
        default = assocview.QOS_FORMAT
    else:
        rows = [cluster_row(client, found)]
        if not matches(names | where.get("name", set()) | where.get("cluster", set()), rows[0]["cluster"]):
            rows = []
        default = assocview.CLUSTER_FORMAT
    columns = assocview.fields(cmd.format) or assocview.fields([default])  # format= names nothing: the default
    for column in columns:
        if cmd.tree and column.key == "account" and not column.sized:
            column.width = -20
    return assocview.lines(columns, rows, header, parsable)


def cluster_row(client: Any, found: dict[str, Any]) -> dict[str, Any]:
    """The one cluster: its leader's gRPC address as ControlHost/ControlPort, the WAL level as its RPC version
    (the protocol every member speaks), the root association's shares and QOS."""
    info = client.call("GetClusterInfo")
    host, _, port = (info.leader_grpc or client.last_answered or "").rpartition(":")
    root = next((a for a in found["associations"] if a["account"] == "root" and not a["user"]), {})
    return {
        "cluster": found["cluster"],
        "control_host": host,
        "control_port": port,
        "rpc": info.wal_level,
        "shares": root.get("shares", 1),
        "qos": root.get("qos") or ["normal"],
        "default_qos": root.get("default_qos", ""),
    }


# ------------------------------------------------------------------ add / modify / delete


def settable_keys(entity: str) -> set[str]:
    """The keys `set` (and add's bare KEY=VALUE) takes for an entity: the store's tables (assocwords)."""
    from spur_hpc import assocwords

    assoc = set(assocwords.ASSOC_KEYS)
    if entity == "qos":
        return set(assocwords.QOS_KEYS)
    if entity == "account":
        return assoc | set(assocwords.ACCOUNT_KEYS) | {"parent", "cluster"}
    return assoc | set(assocwords.USER_KEYS) | {"account", "partition", "cluster"}


def check_keys(cmd: Command) -> None:
    allowed = settable_keys(cmd.entity)
    for raw, value in cmd.set.items():
        if raw.rstrip("+-") not in allowed:
            typed = cmd.typed.get(raw, f"{raw}={value}")
            raise SlurmMessage(f" Unknown option: {typed}\n Use keyword 'where' to modify condition")
    for key, value in cmd.where.items():
        if key not in CONDITIONS[cmd.entity]:
            typed = cmd.typed.get(key, f"{key}={value}")
            raise SlurmMessage(f" Unknown condition: {typed}\n Use keyword 'set' to modify value")


# Slurm's names of the counts whose values sacctmgr checks itself (get_uint's "Invalid value for NAME (VALUE)").
COUNT_NAMES = {
    "grpjobs": "GrpJobs", "grpsubmitjobs": "GrpSubmitJobs", "grpsubmit": "GrpSubmitJobs", "maxjobs": "MaxJobs",
    "maxsubmitjobs": "MaxSubmitJobs", "maxsubmit": "MaxSubmitJobs", "priority": "Priority",
    "maxjobsperuser": "MaxJobsPerUser", "maxjobspu": "MaxJobsPerUser", "maxsubmitjobsperuser": "MaxSubmitJobsPerUser",
    "maxsubmitjobspu": "MaxSubmitJobsPerUser",
}  # fmt: skip


def check_values(cmd: Command, found: dict[str, Any]) -> None:
    """The values sacctmgr checks before it asks slurmdbd anything, refused in its words: what is wrong, then the
    option it could not use."""
    from spur_hpc import model

    for raw, value in cmd.set.items():
        key = raw.rstrip("+-")
        problem = ""
        if key in ("fairshare", "shares") and not (value.lower() == "parent" or value.lstrip("-").isdigit()):
            problem = f"sacctmgr: error: Invalid value for FairShare ({printable(value)})"
        elif key in COUNT_NAMES and not value.lstrip("-").isdigit():
            problem = f"sacctmgr: error: Invalid value for {COUNT_NAMES[key]} ({printable(value)})"
        elif key in ("qos", "qoslevel", "defaultqos", "preempt") and value not in ("", "-1"):
            known = [q["name"] for q in sorted(found["qos"], key=lambda q: q["id"])]
            bad = next((n for n in split(value.lstrip("+-")) if n not in known), None)
            if bad is not None:
                problem = f"sacctmgr: error: You gave a bad qos '{printable(bad)}'. Valid QOS's are {','.join(known)}"
        elif key in ("maxwall", "maxwalldurationperjob") and value != "-1":
            try:
                model.parse_time_limit(value, key)
            except model.InvalidValue:
                problem = f" Bad MaxWall time format: {cmd.typed.get(raw, printable(raw + '=' + value))}"
        if problem:
            typed = cmd.typed.get(raw, f"{raw}={value}")
            raise SlurmMessage(f"{problem}\n Unknown option: {typed}\n Use keyword 'where' to modify condition")


def lowered(cmd: Command) -> None:
    """sacctmgr writes an account's description and organization in lower case (strip_quotes' make_lower)."""
    if cmd.entity in ("account", "qos"):
        for key in ("description", "organization"):
            if key in cmd.set:
                cmd.set[key] = cmd.set[key].lower()


def request(cmd: Command, dry_run: bool) -> dict[str, Any]:
    return {
        "verb": cmd.verb,
        "entity": cmd.entity,
        "names": cmd.names,
        "where": cmd.where,
        "set": cmd.set,
        "dry_run": dry_run,
    }


def limit_lines(settings: dict[str, str], parent: bool) -> list[str]:
    """An association's settings as sacctmgr_print_assoc_limits prints them, in its order (-1: NONE)."""
    from spur_hpc import assocwords

    order = (
        ("fairshare", "Fairshare    "), ("shares", "Fairshare    "), ("grpjobs", "GrpJobs      "),
        ("grpsubmitjobs", "GrpSubmitJobs"), ("grpsubmit", "GrpSubmitJobs"), ("grptres", "GrpTRES      "),
        ("maxjobs", "MaxJobs      "), ("maxsubmitjobs", "MaxSubmitJobs"), ("maxsubmit", "MaxSubmitJobs"),
        ("maxtresperjob", "MaxTRES      "), ("maxtres", "MaxTRES      "), ("maxwall", "MaxWall      "),
        ("maxwalldurationperjob", "MaxWall      "), ("parent", "Parent       "), ("priority", "Priority     "),
        ("qos", "QOS          "), ("qoslevel", "QOS          "), ("defaultqos", "DefQOS       "),
    )  # fmt: skip
    out = []
    for key, label in order:
        if key not in settings or (key == "parent" and not parent):
            continue
        out.append(f"  {label} = {setting_text(key, settings[key], assocwords)}")
    return out


def setting_text(key: str, value: str, assocwords: Any) -> str:
    if value == "-1":
        return "NONE"
    if key in ("grptres", "maxtresperjob", "maxtres", "maxtresperuser", "maxtrespu"):
        return assocview.tres_text(assocwords.parse_tres(key, value, {}))
    if key in ("maxwall", "maxwalldurationperjob"):
        from spur_hpc import model

        return assocview.wall_text(model.parse_time_limit(value, key))
    if key in ("qos", "qoslevel", "preempt"):
        return assocview.qos_text(split(value.lstrip("+-")))
    if key == "preemptmode":
        return value.upper()
    if key == "usagefactor":
        return f"{float(value):.4f}"
    return value


QOS_LIMITS = (
    ("flags", "Flags                   "), ("grpjobs", "GrpJobs                 "),
    ("grpsubmitjobs", "GrpSubmitJobs           "), ("grptres", "GrpTRES                 "),
    ("maxjobsperuser", "MaxJobsPerUser"), ("maxjobspu", "MaxJobsPerUser"),
    ("maxsubmitjobsperuser", "MaxSubmitJobsPerUser    "), ("maxsubmitjobspu", "MaxSubmitJobsPerUser    "),
    ("maxtresperjob", "MaxTRESPerJob           "), ("maxtrespj", "MaxTRESPerJob           "),
    ("maxtresperuser", "MaxTRESPerUser          "), ("maxtrespu", "MaxTRESPerUser          "),
    ("maxwall", "MaxWall                 "), ("preempt", "Preempt                 "),
    ("preemptmode", "PreemptMode             "), ("priority", "Priority                "),
    ("usagefactor", "UsageFactor             "),
)  # fmt: skip


def add_lines(cmd: Command, found: dict[str, Any]) -> list[str]:
    """What sacctmgr prints about an add before it commits (or asks): the new objects, their settings, the new
    associations; Slurm's refusals for what it checks itself."""
    from spur_hpc import assocwords

    cluster = found["cluster"]
    if cmd.entity == "account":
        if not cmd.names:
            raise SlurmMessage(" Need name of account to add.")
        parent = cmd.set.get("parent", "")
        if parent and parent not in {a["name"] for a in found["accounts"]}:
            raise SlurmMessage(
                f" Parent account '{printable(parent)}' doesn't exist on cluster {cluster}\n"
                "        Contact your admin to add this account.\n No associations created."
            )
        known = {a["name"] for a in found["accounts"]}
        new = [n for n in dict.fromkeys(cmd.names) if n not in known]
        if not new:
            raise SlurmMessage(" Nothing new added.", stdout=True)
        out = [" Adding Account(s)", *(f"  {n}" for n in new), " Settings"]
        out.append(f"  Description     = {cmd.set.get('description') or 'Account Name'}")
        out.append(f"  Organization    = {cmd.set.get('organization') or 'Parent/Account Name'}")
        out.append(" Associations")
        out += [f"  {assocwords.assoc_line(cluster, {'account': n, 'user': '', 'partition': ''}, 'add')}" for n in new]
        limits = limit_lines(cmd.set, parent=True)
        return out + ([" Settings", *limits] if limits else [])
    if cmd.entity == "user":
        accounts = split(cmd.set.get("account")) or split(cmd.set.get("defaultaccount"))
        if not cmd.names:
            raise SlurmMessage(" Need name of user to add.")
        if not accounts:
            raise SlurmMessage(" Need name of account to add user to.")
        known_accounts = {x["name"] for x in found["accounts"]}
        missing = next((a for a in accounts if a not in known_accounts), None)
        if missing is not None:
            raise SlurmMessage(
                f" This account '{printable(missing)}' doesn't exist.\n"
                "        Contact your admin to add this account.\n No associations or wckeys created."
            )
        known_users = {u["name"] for u in found["users"]}
        have = {(a["account"], a["user"], a["partition"]) for a in found["associations"]}
        partitions = split(cmd.set.get("partition")) or [""]
        new_users = [n for n in dict.fromkeys(cmd.names) if n not in known_users]
        assocs = [
            {"account": a, "user": u, "partition": p}
            for u in dict.fromkeys(cmd.names)
            for a in accounts
            for p in partitions
            if (a, u, p) not in have
        ]
        if not new_users and not assocs:
            raise SlurmMessage(" Nothing new added.", stdout=True)
        out = []
        if new_users:
            out += [" Adding User(s)", *(f"  {n}" for n in new_users)]
            if "defaultaccount" in cmd.set or "adminlevel" in cmd.set:
                out += [" Settings =", f"  Default Account = {cmd.set.get('defaultaccount') or accounts[0]}"]
                if "adminlevel" in cmd.set:
                    out.append(f"  Admin Level     = {admin_word(cmd.set['adminlevel'])}")
        out += [" Associations =", *(f"  {assocwords.assoc_line(cluster, a, 'add')}" for a in assocs)]
        return out + [" Non Default Settings", *limit_lines(cmd.set, parent=False)]
    if not cmd.names:
        raise SlurmMessage(" Need name of qos to add.")
    known = {q["name"] for q in found["qos"]}
    new = [n for n in dict.fromkeys(cmd.names) if n not in known]
    if not new:
        raise SlurmMessage(" Nothing new added.", stdout=True)
    out = [" Adding QOS(s)", *(f"  {n}" for n in new), " Settings"]
    out.append(f"  Description    = {cmd.set.get('description') or new[0]}")
    for key, label in QOS_LIMITS:
        if key in cmd.set:
            out.append(f"  {label} = {setting_text(key, cmd.set[key], assocwords)}")
    return out


def admin_word(text: str) -> str:
    from spur_hpc import assocwords

    return assocwords.ADMIN_WORDS.get(text.lower(), text)


def change_lines(cmd: Command, affected: list[str]) -> list[str]:
    """A modify's or delete's list as sacctmgr prints it: objects under one title, associations under another."""
    objects = [line for line in affected if not line.startswith("C = ")]
    assocs = [line for line in affected if line.startswith("C = ")]
    if cmd.verb == "modify":
        titles = {"user": ("users", "user"), "account": ("accounts", "account"), "qos": ("qos", "qos")}
        plural, single = titles[cmd.entity]
        out = [f" Modified {plural}...", *(f"  {o}" for o in objects)] if objects else []
        return out + ([f" Modified {single} associations...", *(f"  {a}" for a in assocs)] if assocs else [])
    single = {"user": "user", "account": "account", "qos": "qos"}[cmd.entity]
    out = [f" Deleting {single} associations...", *(f"  {a}" for a in assocs)] if assocs else []
    if objects:
        # after a user's associations, the users left with none go too
        plural = {"user": "users", "account": "accounts", "qos": "QOS(s)"}[cmd.entity]
        out += [f" Deleting {plural}{' (No Associations)' if assocs else ''}...", *(f"  {o}" for o in objects)]
    return out


def emptied_users(cmd: Command, found: dict[str, Any]) -> list[str]:
    """A delete of some of users' associations (where account= or partition=) that leaves a user none: sacctmgr
    names the users that go with them (when the leader's list does not)."""
    if cmd.verb != "delete" or cmd.entity != "user" or not ({"account", "partition"} & set(cmd.where)):
        return []
    accounts, partitions = split(cmd.where.get("account")), split(cmd.where.get("partition"))
    gone = []
    for name in cmd.names:
        mine = [a for a in found["associations"] if a["user"] == name]
        hit = [a for a in mine if matches(accounts, a["account"]) and matches(partitions, a["partition"])]
        if mine and len(hit) == len(mine):
            gone.append(name)
    return [" Deleting users (No Associations)...", *(f"  {n}" for n in gone)] if gone else []


def existing(cmd: Command, found: dict[str, Any]) -> list[str]:
    """The named objects that exist (sacctmgr changes what matches and says 'Nothing ...' when nothing does)."""
    table = {"user": found["users"], "account": found["accounts"], "qos": found["qos"]}[cmd.entity]
    names = {row["name"] for row in table}
    return [n for n in cmd.names if n in names]


def ask(stdin_fd: int | None = None, patience: float = ANSWER_SECS) -> bool:
    """Slurm's commit_check: the question, then '(N/y): ' until one of y, Y, n, N or a newline is read; a closed
    stdin or 30 seconds without an answer is no (Slurm prints 'timeout' then, and loops for ever on a closed one)."""
    import select

    fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
    print(QUESTION)
    with single_keys(fd):
        char = ""
        while char not in ("y", "Y", "n", "N", "\n"):
            if char:
                print("Y or N please")
            print("(N/y): ", end="", flush=True)
            ready, _, _ = select.select([fd], [], [], patience)
            if not ready:
                print("timeout")
                return False
            data = os.read(fd, 1)
            print()
            if not data:
                return False
            char = data.decode("latin-1")
    return char in ("y", "Y")


class single_keys:  # noqa: N801 (a context manager read as a phrase: `with single_keys(fd)`)
    """On a terminal, a key answers without Enter (Slurm's _nonblock turns canonical mode off); restored after."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.saved: list | None = None

    def __enter__(self) -> None:
        if not os.isatty(self.fd):
            return
        import termios

        try:
            self.saved = termios.tcgetattr(self.fd)
            changed = termios.tcgetattr(self.fd)
            changed[3] &= ~termios.ICANON
            changed[6][termios.VMIN] = 1
            termios.tcsetattr(self.fd, termios.TCSANOW, changed)
        except termios.error:
            self.saved = None

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)


def change(client: Any, cmd: Command, immediate: bool, readonly: bool) -> int:
    from spur_hpc.wire import grpcwire, protocodec

    check_keys(cmd)
    if readonly:
        raise CliError("-r (--readonly) refuses every change; leave it out to add, modify or delete")
    if cmd.entity in ("association", "cluster"):
        raise CliError(
            f"Spur does not {cmd.verb} {cmd.entity}s with sacctmgr: an association comes with its user or account "
            "(sacctmgr add user NAME account=ACCOUNT), and the cluster is the one spurctld runs"
        )
    lowered(cmd)
    found = protocodec.to_jsonable(client.call("ListAssociations", {}), "ListAssociationsReply")
    if cmd.verb == "delete" and cmd.entity == "account" and "root" in cmd.names:
        raise SlurmMessage(" You are not allowed to remove the root account.\n Use remove cluster instead.")
    check_values(cmd, found)
    if cmd.verb == "add":
        shown = add_lines(cmd, found)
    else:
        named = bool(cmd.names)
        cmd.names = existing(cmd, found)
        if named and not cmd.names:
            raise SlurmMessage(" Nothing modified" if cmd.verb == "modify" else " Nothing deleted", stdout=True)
        shown = []
    try:
        reply = client.call("ModifyAssociations", request(cmd, dry_run=not immediate), write=True)
    except grpcwire.RpcError as exc:
        if exc.code == "PERMISSION_DENIED" and cmd.verb == "add":
            commandline.print_lines(shown)  # Slurm prints what it would add, then slurmdbd's refusal
            raise SlurmMessage(f" Problem adding {WHAT_ADDED[cmd.entity]}: Access/permission denied") from None
        if exc.code == "PERMISSION_DENIED":
            raise SlurmMessage(
                "sacctmgr: error: Your user doesn't have privilege to perform this action\n"
                " Error with request: Access/permission denied"
            ) from None
        raise
    if not reply.affected and not reply.changed:
        raise SlurmMessage(f" {reply.message or 'Nothing modified'}", stdout=True)
    if cmd.verb == "add":
        commandline.print_lines(shown)
    else:
        listed = change_lines(cmd, list(reply.affected))
        commandline.print_lines(
            listed + ([] if any("(No Associations)" in x for x in listed) else emptied_users(cmd, found))
        )
    if immediate:
        return 0
    if not ask():
        print(" Changes Discarded")
        return 0
    client.call("ModifyAssociations", request(cmd, dry_run=False), write=True)
    return 0


# ------------------------------------------------------------------ main


def main(argv: list[str], program: str = PROGRAM) -> int:
    try:
        values, words = parse(program, OPTIONS, argv)
    except UsageError as exc:  # getopt's two lines, as Slurm's sacctmgr prints them
        invoked = sys.argv[0] if sys.argv and os.path.basename(sys.argv[0]) == program else program
        sys.stderr.write(getopt_lines(invoked, program, exc))
        return 1
    if commandline.answer_info_flags(program, values, SYNOPSIS, DESCRIPTION, OPTIONS):
        return 0
    if not words:
        return commands_from_stdin(program, values)
    return execute(words, values)


def execute(words: list[str], values: dict[str, Any], client: Any = None) -> int:
    """One command (its words after the options); Slurm's own refusals printed here, other failures raised."""
    try:
        cmd = parse_command(words)
        cmd.withassoc = cmd.withassoc or bool(values["associations"])
        if client is None:
            from spur_hpc.cli.controller import ControllerClient

            client = ControllerClient()
        if cmd.verb == "show":
            parsable = "parsable2" if values["parsable2"] else "parsable" if values["parsable"] else ""
            commandline.print_lines(show(client, cmd, not values["noheader"], parsable))
            return 0
        return change(client, cmd, bool(values["immediate"]), bool(values["readonly"]))
    except assocview.UnknownField as exc:  # Slurm's words, without the program name
        print(printable(str(exc)), file=sys.stderr)
        return 1
    except SlurmMessage as exc:
        sys.stdout.flush()
        print(printable_lines(exc.text), file=sys.stdout if exc.stdout else sys.stderr)
        return 1


def read_line(fd: int) -> str | None:
    """One line from fd, a byte at a time (the commit question reads the same fd; nothing may sit in a buffer)."""
    data = b""
    while len(data) < MAX_LINE_BYTES:
        byte = os.read(fd, 1)
        if not byte:
            return data.decode(errors="replace") if data else None
        if byte == b"\n":
            break
        data += byte
    return data.decode(errors="replace")


MAX_LINE_BYTES = 64 * 1024


def commands_from_stdin(program: str, values: dict[str, Any]) -> int:
    """sacctmgr without a command reads commands from stdin until EOF, quit or exit, with Slurm's prompt (and,
    when stdin is no terminal, the command echoed after it, as Slurm's readline does). Exit 1 if any failed."""
    import shlex

    from spur_hpc.cli.runner import error_line
    from spur_hpc.wire.grpcwire import RpcError

    fd = sys.stdin.fileno()
    echo = not os.isatty(fd)
    status, client = 0, None
    while True:
        print(f"{program}: ", end="", flush=True)
        line = read_line(fd)
        if line is None:
            print()
            return status
        if echo:
            print(printable(line))
        try:
            words = shlex.split(line)
        except ValueError as exc:
            error_line(program, f"{exc} in '{line}'")
            status = 1
            continue
        if not words:
            continue
        if words[0].lower() in ("quit", "exit"):
            return status
        try:
            if client is None:
                from spur_hpc.cli.controller import ControllerClient

                client = ControllerClient()
            code = execute(words, values, client)
        except (CliError, RpcError) as exc:
            error_line(program, str(exc) if isinstance(exc, CliError) else exc.details)
            code = 1
        status = code or status


def printable_lines(text: str) -> str:
    return "\n".join(printable(line) for line in text.split("\n"))
