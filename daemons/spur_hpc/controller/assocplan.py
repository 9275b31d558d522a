"""sacctmgr's add / modify / delete against the association store, planned into one assoc_apply record.

plan_change reads the store (controller/associations.py) and one request as sacctmgr parsed it (verb, entity,
names, where, set: lower-case keys, values as the user typed them) and answers the whole rows to put, the keys to
delete, and the lines sacctmgr prints for what changed (slurmdbd's own list: a name, or for an association
`C = cluster    A = account              U = user     `). Pure: the leader plans under the state lock, the
state machine applies the record (associations.apply_change checks it again). Every refusal is
associations.PlanError with one line naming what is wrong and how to fix it. The request is hostile: every name,
value and count is bounded here.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from spur_hpc import model
from spur_hpc.assocwords import (  # noqa: F401 (re-exported: the service and the tests read them from here)
    ACCOUNT_KEYS,
    ADMIN_WORDS,
    ALIASES,
    ASSOC_KEYS,
    INHERITED,
    QOS_KEYS,
    TRES_NAMES,
    USER_KEYS,
    PlanError,
    assoc_line,
    parse_tres,
)
from spur_hpc.assocwords import shown as _show
from spur_hpc.assocwords import whole_number as _int
from spur_hpc.controller import associations as A

MAX_NAME = 64  # account, user, QOS and partition names (Slurm keeps them in tinytext columns)
MAX_TEXT = 256  # description, organization
MAX_NAMES = 1_000  # objects one request may name
MAX_VALUE = 4_096  # any one value as sent
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
PREEMPT_MODES = ("off", "cancel", "requeue")
# QOS Flags sacctmgr takes (Slurm's names); kept as written here, whatever the case the user typed.
QOS_FLAGS = (
    "DenyOnLimit",
    "EnforceUsageThreshold",
    "NoDecay",
    "NoReserve",
    "OverPartQOS",
    "PartitionMaxNodes",
    "PartitionMinNodes",
    "PartitionTimeLimit",
    "RequiresReservation",
    "UsageFactorSafe",
)
# What `where` may select on, per entity (sacctmgr's condition keys Spur keeps).
WHERE_KEYS = {
    "account": {"name", "names", "account", "accounts", "cluster", "clusters", "parent"},
    "user": {"name", "names", "user", "users", "account", "accounts", "partition", "cluster", "clusters"},
    "qos": {"name", "names", "cluster", "clusters"},
}
VERBS = {"add": "add", "create": "add", "modify": "modify", "update": "modify", "delete": "delete", "remove": "delete"}


Plan = tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]


def plan_change(
    store: dict[str, Any],
    verb: str,
    entity: str,
    names: list[str],
    where: dict[str, str],
    set_: dict[str, str],
    cluster: str,
) -> Plan:
    """(puts, deletes, affected lines) of one sacctmgr command. Nothing to do: empty puts and deletes."""
    verb_name, entity = VERBS.get(verb.lower()), entity.lower()
    if verb_name is None:
        raise PlanError(f"unknown verb {_show(verb)}; use add, modify or delete")
    if entity in ("cluster", "clusters"):
        raise PlanError(
            f"Spur runs one cluster ({store['cluster']}); it is not added, changed or removed with sacctmgr "
            "(sacctmgr show cluster lists it)"
        )
    if entity not in WHERE_KEYS:
        raise PlanError(f"unknown entity {_show(entity)}; use account, user or qos")
    if len(names) > MAX_NAMES or len(where) > 64 or len(set_) > 64:
        raise PlanError(f"the request names too much; at most {MAX_NAMES} objects and 64 keys in where and set")
    where = {k.lower(): _value(k, v) for k, v in where.items()}
    set_ = {k.lower(): _value(k, v) for k, v in set_.items()}
    clusters = where.pop("cluster", "") or where.pop("clusters", "") or set_.pop("cluster", "")
    for name in _names(clusters, "cluster", allow_empty=True):
        if name != cluster:
            raise PlanError(f"cluster {_show(name)} is not this cluster ({cluster}); leave cluster= out or name it")
    planner = _Planner(store, cluster)
    if verb_name == "add":
        # sacctmgr add takes its settings bare (add user bob account=a); a "where" is the same here
        settings = {**where, **set_}
        selected = list(names) + _names(settings.pop("name", "") or settings.pop("names", ""), "name", True)
        if not selected:
            raise PlanError(f"add {entity}: name the {entity} to add (sacctmgr add {entity} NAME ...)")
        return getattr(planner, f"add_{entity}")(_names(",".join(selected), entity), settings)
    unknown = set(where) - WHERE_KEYS[entity]
    if unknown:
        keys = ", ".join(sorted(WHERE_KEYS[entity] - {"names", "accounts", "users", "clusters"}))
        raise PlanError(f"{verb_name} {entity}: unknown condition {sorted(unknown)[0]}=; use {keys}")
    chosen = list(names) + _names(where.pop("name", "") or where.pop("names", ""), "name", True)
    if entity == "user":
        chosen += _names(where.pop("user", "") or where.pop("users", ""), "user", True)
    elif entity == "account":
        chosen += _names(where.pop("account", "") or where.pop("accounts", ""), "account", True)
    chosen = _names(",".join(chosen), entity, True)
    if verb_name == "modify":
        if not set_:
            raise PlanError(f"modify {entity}: nothing to set; add `set KEY=VALUE`")
        return getattr(planner, f"modify_{entity}")(chosen, where, set_)
    if set_:
        raise PlanError(f"delete {entity}: `set` has no meaning here; select with `where` only")
    return getattr(planner, f"delete_{entity}")(chosen, where)


# ------------------------------------------------------------------ values


def _value(key: str, value: str) -> str:
    if len(key) > 64 or not key.rstrip("+-").replace("_", "").isalnum():
        raise PlanError(f"{_show(key)} is not a sacctmgr key; keys are letters such as maxjobs or grptres")
    if len(value) > MAX_VALUE:
        raise PlanError(f"{key}= is {len(value)} characters long; the limit is {MAX_VALUE}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise PlanError(f"{key}= holds a control character; use plain text")
    return value.strip()


def check_name(name: str, what: str) -> str:
    """A name as the store keeps it: 1 to MAX_NAME characters, no '|' (the key separator), no control
    characters, no blanks, commas or '=' (sacctmgr's own separators)."""
    if not name:
        raise PlanError(f"an empty {what} name; name it")
    if len(name) > MAX_NAME:
        raise PlanError(f"{what} name {_show(name)} is {len(name)} characters long; the limit is {MAX_NAME}")
    bad = next((c for c in name if c in "|,= '\"" or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise PlanError(f"{what} name {_show(name)} holds {bad!r}; use letters, digits, '-', '_' and '.'")
    return name


def _names(text: str, what: str, allow_empty: bool = False) -> list[str]:
    """A comma list of names, each checked, duplicates dropped (first kept)."""
    parts = [p.strip() for p in text.split(",")] if text else []
    if not parts and not allow_empty:
        raise PlanError(f"no {what} named")
    if len(parts) > MAX_NAMES:
        raise PlanError(f"{len(parts)} {what} names; at most {MAX_NAMES} in one request")
    out: list[str] = []
    for part in parts:
        if part and check_name(part, what) not in out:
            out.append(part)
    return out


def _list_change(key: str, text: str, old: list[str], known: dict[str, Any], what: str) -> list[str]:
    """qos=a,b (replace), qos=+a / qos+=a (add), qos=-a / qos-=a (remove); every name must exist."""
    op = ""
    if text[:1] in ("+", "-") and text != "-1":
        op, text = text[0], text[1:]
    if text in ("-1", "") and not op:
        return []
    names = _names(text, what, allow_empty=True)
    if op and not names:
        raise PlanError(f"{key}{op}=: name the {what} to {'add' if op == '+' else 'remove'}")
    for name in names:
        if name not in known:
            raise PlanError(f"{key}=: {what} {name} does not exist (sacctmgr show {what} lists them; add it first)")
    if op == "+":
        return old + [n for n in names if n not in old]
    if op == "-":
        return [n for n in old if n not in names]
    return names


def parse_setting(store: dict[str, Any], key: str, kind: str, text: str, old: Any) -> Any:
    """One value of `set`, parsed as the row keeps it (old: the row's current value, for += and -=)."""
    if kind == "count":
        return _int(key, text, -1, INT32_MAX)
    if kind == "priority":
        value = _int(key, text, -1, INT32_MAX)
        return 0 if value == -1 else value
    if kind == "shares":
        if text.lower() == "parent":
            raise PlanError(f"{key}=parent is not supported; give a number of shares (1 is the default)")
        value = _int(key, text, -1, INT32_MAX)
        return 1 if value == -1 else value
    if kind == "wall":
        if text == "-1":
            return A.NO_LIMIT
        try:
            secs = model.parse_time_limit(text, key)  # a bare number is minutes, as sbatch -t
        except model.InvalidValue as exc:
            raise PlanError(f"{exc} (-1 clears it)") from None
        return A.NO_LIMIT if text.upper() in ("UNLIMITED", "INFINITE") else secs
    if kind == "tres":
        return parse_tres(key, text, old or {})
    if kind == "qoslist":
        return _list_change(key, text, list(old or []), store["qos"], "qos")
    if kind == "qosname":
        if text in ("-1", ""):
            return ""
        name = check_name(text, "qos")
        if name not in store["qos"]:
            raise PlanError(f"{key}=: qos {name} does not exist (sacctmgr show qos lists them; add it first)")
        return name
    if kind == "preemptmode":
        if text in ("-1", ""):
            return ""
        mode = text.lower()
        if mode not in PREEMPT_MODES:
            raise PlanError(f"{key}={_show(text)} is not a preempt mode Spur runs; use off, cancel or requeue")
        return mode
    if kind == "factor":
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not 0 <= value <= 1e6:
            raise PlanError(f"{key}={_show(text)} is not a factor; use a number from 0 to 1000000 (1 is the default)")
        return value
    if kind == "flags":
        return _flags(key, text, list(old or []))
    return _text(key, text)


def _flags(key: str, text: str, old: list[str]) -> list[str]:
    op = ""
    if text[:1] in ("+", "-") and text != "-1":
        op, text = text[0], text[1:]
    if text in ("-1", "") and not op:
        return []
    by_lower = {f.lower(): f for f in QOS_FLAGS}
    flags = []
    for word in (w.strip() for w in text.split(",")):
        if word.lower() not in by_lower:
            raise PlanError(f"{key}=: unknown QOS flag {_show(word)}; use {', '.join(QOS_FLAGS)}")
        flags.append(by_lower[word.lower()])
    if op == "+":
        return old + [f for f in flags if f not in old]
    if op == "-":
        return [f for f in old if f not in flags]
    return list(dict.fromkeys(flags))


def _text(key: str, text: str) -> str:
    if len(text) > MAX_TEXT:
        raise PlanError(f"{key}= is {len(text)} characters long; the limit is {MAX_TEXT}")
    if "|" in text:
        raise PlanError(f"{key}= holds '|' (sacctmgr -p's separator); leave it out")
    return text


def _split_op(key: str) -> tuple[str, str]:
    """qos+ / qos- as the CLI may send `qos+=x` (the key keeps the operator) -> (qos, +)."""
    if key.endswith(("+", "-")):
        return key[:-1], key[-1]
    return key, ""


# ------------------------------------------------------------------ the planner


class _Planner:
    def __init__(self, store: dict[str, Any], cluster: str) -> None:
        self.store = store
        self.cluster = cluster
        self.next_id = store["next_id"]
        self.puts: list[dict[str, Any]] = []
        self.deletes: list[dict[str, Any]] = []

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _put(self, kind: str, key: str, row: dict[str, Any]) -> None:
        self.puts.append({"kind": kind, "key": key, "row": row})

    def _delete(self, kind: str, key: str) -> None:
        self.deletes.append({"kind": kind, "key": key})

    def _done(self, affected: list[str]) -> Plan:
        return self.puts, self.deletes, affected

    def _settings(self, table: dict[str, tuple[str, str]], settings: dict[str, str], row: dict[str, Any]) -> bool:
        """Apply the keys of `table` found in settings to row (in place); True when a value changed."""
        changed = False
        for raw_key, text in settings.items():
            key, op = _split_op(raw_key)
            if key not in table:
                continue
            field, kind = table[key]
            if op:
                if kind not in ("qoslist", "flags"):
                    raise PlanError(f"{key}{op}= only works on lists (qos, preempt, flags); use {key}=")
                text = op + text
            old = row.get(field)
            if field == "qos" and not old and text[:1] in ("+", "-") and text != "-1":
                # qos+=x on an association that inherits its list: slurmdbd starts from the inherited one
                old = A.allowed_qos(self.store, A.assoc_key(row["account"], row["user"], row["partition"]))
            value = parse_setting(self.store, key, kind, text, old)
            if row.get(field) != value:
                row[field] = value
                changed = True
        return changed

    def _refuse_unknown(self, settings: dict[str, str], *tables: Any, what: str) -> None:
        known = set().union(*tables)
        for raw_key in settings:
            if _split_op(raw_key)[0] not in known:
                keys = ", ".join(sorted(k for k in known if k not in ALIASES))
                raise PlanError(f"{what}: unknown key {raw_key}=; use {keys}")

    def _check_default_qos(
        self, key: str, row: dict[str, Any], store_assocs: dict[str, Any], accounts: dict[str, Any] | None = None
    ) -> None:
        """A DefaultQOS the association may not use is refused, as sacctmgr does."""
        if not row.get("default_qos"):
            return
        trial = {**self.store, "assocs": store_assocs, "accounts": accounts or self.store["accounts"]}
        allowed = A.allowed_qos(trial, key)
        if row["default_qos"] not in allowed:
            raise PlanError(
                f"defaultqos={row['default_qos']} is not one of the QOS association {key.replace('|', ' / ')} may "
                f"use ({','.join(allowed)}); add it with qos+={row['default_qos']} first"
            )

    # ---------------------------------------------------------- accounts

    def add_account(self, names: list[str], settings: dict[str, str]) -> Plan:
        self._refuse_unknown(settings, ASSOC_KEYS, ACCOUNT_KEYS, {"parent"}, what="add account")
        parent = settings.pop("parent", "") or A.ROOT_ACCOUNT
        if parent not in self.store["accounts"]:
            raise PlanError(f"parent account {_show(parent)} does not exist; add it first or name another parent")
        new = [n for n in names if n not in self.store["accounts"]]
        if not new:
            return self._done([])
        for name in new:
            account = A.new_account(name, parent)
            account["organization"] = parent if parent != A.ROOT_ACCOUNT else name  # as sacctmgr fills it in
            for key, field in ACCOUNT_KEYS.items():
                if key in settings:
                    account[field] = _text(key, settings[key])
            assoc = A.new_assoc(self._id(), self.cluster, name, parent=parent)
            self._settings(ASSOC_KEYS, settings, assoc)
            key = A.assoc_key(name)
            self._check_default_qos(
                key, assoc, {**self.store["assocs"], key: assoc}, {**self.store["accounts"], name: account}
            )
            self._put("account", name, account)
            self._put("assoc", A.assoc_key(name), assoc)
        return self._done(new)

    def _accounts(self, chosen: list[str], where: dict[str, str]) -> list[str]:
        """The accounts selected (a name that does not exist selects nothing, as in slurmdbd: Nothing modified)."""
        accounts = self.store["accounts"]
        parents = _names(where.pop("parent", ""), "parent account", True)
        if not chosen and not parents:
            raise PlanError("no account selected; name one (where name=ACCOUNT)")
        picked = chosen or [n for n in accounts if accounts[n]["parent"] in parents]
        return [n for n in picked if n in accounts and (not parents or accounts[n]["parent"] in parents)]

    def modify_account(self, chosen: list[str], where: dict[str, str], settings: dict[str, str]) -> Plan:
        self._refuse_unknown(settings, ASSOC_KEYS, ACCOUNT_KEYS, {"parent"}, what="modify account")
        affected = []
        parent = settings.pop("parent", "")
        for name in self._accounts(chosen, where):
            account = copy.deepcopy(self.store["accounts"][name])
            key = A.assoc_key(name)
            assoc = copy.deepcopy(self.store["assocs"].get(key) or A.new_assoc(self._id(), self.cluster, name))
            account_changed = False
            for k, field in ACCOUNT_KEYS.items():
                if k in settings and account[field] != _text(k, settings[k]):
                    account[field], account_changed = settings[k], True
            changed = False
            if parent and parent != account["parent"]:
                if name == A.ROOT_ACCOUNT:
                    raise PlanError("the account root has no parent; it is the top of the tree")
                if parent not in self.store["accounts"]:
                    raise PlanError(f"parent account {_show(parent)} does not exist; add it first")
                if parent in A.account_chain(self.store, parent) and name in A.account_chain(self.store, parent):
                    raise PlanError(f"account {parent} is below {name}; an account cannot move under itself")
                account["parent"] = assoc["parent_account"] = parent
                changed = True
            changed = self._settings(ASSOC_KEYS, settings, assoc) or changed
            if account_changed or changed:
                self._put("account", name, account)
            if account_changed:
                affected.append(name)  # sacctmgr: " Modified accounts..."
            if changed:
                self._check_default_qos(key, assoc, {**self.store["assocs"], key: assoc})
                self._put("assoc", key, assoc)
                before = self.store["assocs"].get(key) or assoc
                # " Modified account associations...": the account's own, named with its parent as it was, then
                # the users' below it that take a changed limit from it (slurmdbd lists those it rewrote)
                affected.append(assoc_line(self.cluster, before))
                fields = [f for f in INHERITED if assoc.get(f) != before.get(f)]
                affected += [assoc_line(self.cluster, row) for row in self._inheriting_users(name, fields)]
        return self._done(affected)

    def _inheriting_users(self, account: str, fields: list[str]) -> list[dict[str, Any]]:
        """The user associations in the subtree of `account` that take one of `fields` from it (neither they nor
        an account between sets it), in slurmdbd's tree order: an account's users, then its child accounts'."""
        if not fields:
            return []
        assocs, accounts = self.store["assocs"], self.store["accounts"]
        users: dict[str, list[dict[str, Any]]] = {}
        for row in assocs.values():
            if row["user"]:
                users.setdefault(row["account"], []).append(row)
        children: dict[str, list[str]] = {}
        for name, row in accounts.items():
            children.setdefault(row["parent"], []).append(name)
        out: list[dict[str, Any]] = []

        def walk(name: str, open_fields: list[str]) -> None:
            for row in sorted(users.get(name, []), key=lambda r: (r["user"], r["partition"])):
                if any(_unset(row, f) for f in open_fields):
                    out.append(row)
            for child in sorted(children.get(name, [])):
                own = assocs.get(A.assoc_key(child)) or {}
                still = [f for f in open_fields if _unset(own, f)]
                if still:
                    walk(child, still)

        walk(account, fields)
        return out

    def delete_account(self, chosen: list[str], where: dict[str, str]) -> Plan:
        """The accounts, their own associations and their users' (slurmdbd removes those too); a user whose
        default account goes keeps the user row with no default (sacctmgr then shows an empty Def Acct). Child
        accounts must go first or move (Spur refuses where slurmdbd would take the subtree along)."""
        names = self._accounts(chosen, where)
        if A.ROOT_ACCOUNT in names:
            raise PlanError("You are not allowed to remove the root account.")
        going = set(names)
        for name in names:
            children = sorted(
                n for n, row in self.store["accounts"].items() if row["parent"] == name and n not in going
            )
            if children:
                raise PlanError(
                    f"account {name} has child accounts ({', '.join(children[:5])}); delete them or move them to "
                    f"another parent first (sacctmgr modify account where name=... set parent=...)"
                )
        for name in names:
            self._delete("account", name)
            for key in self.store["assocs"]:
                if key.startswith(name + "|"):
                    self._delete("assoc", key)
        for user, row in self.store["users"].items():
            if row["default_account"] in going:
                self._put("user", user, {**row, "default_account": ""})
        return self._done(names)

    # ---------------------------------------------------------- users

    def add_user(self, names: list[str], settings: dict[str, str]) -> Plan:
        self._refuse_unknown(settings, ASSOC_KEYS, USER_KEYS, {"account", "accounts", "partition"}, what="add user")
        accounts = _names(settings.pop("account", "") or settings.pop("accounts", ""), "account", True)
        default = settings.pop("defaultaccount", "")
        if default:
            check_name(default, "account")
            accounts = accounts or [default]
        for account in accounts + ([default] if default else []):
            if account not in self.store["accounts"]:
                raise PlanError(f"account {account} does not exist; add it first (sacctmgr add account {account})")
        if default and default not in accounts:
            raise PlanError(f"defaultaccount={default} is not among account={','.join(accounts)}; add it there")
        partitions = _names(settings.pop("partition", ""), "partition", True) or [""]
        level = _admin_level(settings.pop("adminlevel", "")) if "adminlevel" in settings else None
        affected: list[str] = []
        for name in names:
            user = self.store["users"].get(name)
            if user is None:
                if not accounts:
                    raise PlanError(f"user {name} is new and needs a default account; add account=ACCOUNT")
                user = A.new_user(name, default or accounts[0], admin_level=level or "None")
                self._put("user", name, user)
            elif not user["default_account"] and accounts:  # its default account was deleted: take the first
                self._put("user", name, {**user, "default_account": default or accounts[0]})
            for account in accounts:
                for partition in partitions:
                    key = A.assoc_key(account, name, partition)
                    if key in self.store["assocs"]:
                        continue
                    assoc = A.new_assoc(self._id(), self.cluster, account, name, partition, parent=account)
                    self._settings(ASSOC_KEYS, settings, assoc)
                    self._check_default_qos(key, assoc, {**self.store["assocs"], key: assoc})
                    self._put("assoc", key, assoc)
                    affected.append(assoc_line(self.cluster, assoc, "add"))
        if not affected and not any(p["kind"] == "user" for p in self.puts):
            return self._done([])
        return self._done(affected)

    def _user_assocs(self, chosen: list[str], where: dict[str, str]) -> tuple[list[str], list[str]]:
        """(users named that exist, the keys of their associations that `where` selects)."""
        if not chosen:
            raise PlanError("no user selected; name one (where name=USER)")
        chosen = [n for n in chosen if n in self.store["users"]]  # one that does not exist selects nothing
        accounts = set(_names(where.pop("account", "") or where.pop("accounts", ""), "account", True))
        partitions = set(_names(where.pop("partition", ""), "partition", True))
        keys = []
        for key in self.store["assocs"]:
            account, user, partition = A.split_key(key)
            if user in chosen and (not accounts or account in accounts) and (not partitions or partition in partitions):
                keys.append(key)
        return chosen, sorted(keys, key=lambda k: self.store["assocs"][k]["id"])

    def modify_user(self, chosen: list[str], where: dict[str, str], settings: dict[str, str]) -> Plan:
        self._refuse_unknown(settings, ASSOC_KEYS, USER_KEYS, what="modify user")
        users, keys = self._user_assocs(chosen, where)
        affected: list[str] = []
        for name in users:
            user = copy.deepcopy(self.store["users"][name])
            changed = False
            if "defaultaccount" in settings:
                default = check_name(settings["defaultaccount"], "account")
                if not any(A.split_key(k)[:2] == (default, name) for k in keys_of_user(self.store, name)):
                    raise PlanError(
                        f"user {name} has no association with account {default}; add it first "
                        f"(sacctmgr add user {name} account={default})"
                    )
                changed = changed or user["default_account"] != default
                user["default_account"] = default
            if "adminlevel" in settings:
                level = _admin_level(settings["adminlevel"])
                changed = changed or user["admin_level"] != level
                user["admin_level"] = level
            if changed:
                self._put("user", name, user)
                affected.append(name)
        assoc_settings = {k: v for k, v in settings.items() if _split_op(k)[0] in ASSOC_KEYS}
        if assoc_settings:
            trial = dict(self.store["assocs"])
            for key in keys:
                assoc = copy.deepcopy(self.store["assocs"][key])
                if self._settings(ASSOC_KEYS, assoc_settings, assoc):
                    trial[key] = assoc
                    self._put("assoc", key, assoc)
                    affected.append(assoc_line(self.cluster, assoc))
            for key in keys:
                self._check_default_qos(key, trial[key], trial)
        return self._done(affected)

    def delete_user(self, chosen: list[str], where: dict[str, str]) -> Plan:
        """The user's associations `where` selects; the user goes with its last one. sacctmgr lists the users
        deleted, or (where names an account or partition) the associations."""
        by_assoc = any(where.get(k) for k in ("account", "accounts", "partition"))
        users, keys = self._user_assocs(chosen, where)
        going = set(keys)
        affected = []
        for name in users:
            left = [k for k in keys_of_user(self.store, name) if k not in going]
            default = self.store["users"][name]["default_account"]
            if left and default and not any(A.split_key(k)[0] == default for k in left):
                raise PlanError(
                    f"account {default} is user {name}'s default account and the user keeps other associations; "
                    f"set another default first (sacctmgr modify user {name} set defaultaccount=ACCOUNT)"
                )
            if not left:
                self._delete("user", name)
        if not by_assoc:  # " Deleting users...": every user named goes, with all of its associations
            for key in keys:
                self._delete("assoc", key)
            return self._done(users)
        for key in keys:  # " Deleting user associations...", then " Deleting users (No Associations)..."
            self._delete("assoc", key)
            affected.append(assoc_line(self.cluster, self.store["assocs"][key], "delete"))
        if not keys:
            return self._done([])  # nothing selected: the users stay
        affected += [d["key"] for d in self.deletes if d["kind"] == "user"]
        return self._done(affected)

    # ---------------------------------------------------------- QOS

    def add_qos(self, names: list[str], settings: dict[str, str]) -> Plan:
        self._refuse_unknown(settings, QOS_KEYS, what="add qos")
        new = [n for n in names if n not in self.store["qos"]]
        for name in new:
            row = A.new_qos(name, self._id())
            self._settings(QOS_KEYS, settings, row)
            self._put("qos", name, row)
        return self._done(new)

    def _qos(self, chosen: list[str]) -> list[str]:
        if not chosen:
            raise PlanError("no qos selected; name one (where name=QOS)")
        return [n for n in chosen if n in self.store["qos"]]  # one that does not exist selects nothing

    def modify_qos(self, chosen: list[str], where: dict[str, str], settings: dict[str, str]) -> Plan:
        self._refuse_unknown(settings, QOS_KEYS, what="modify qos")
        affected = []
        for name in self._qos(chosen):
            row = copy.deepcopy(self.store["qos"][name])
            if self._settings(QOS_KEYS, settings, row):
                self._put("qos", name, row)
                affected.append(name)
        return self._done(affected)

    def delete_qos(self, chosen: list[str], where: dict[str, str]) -> Plan:
        names = self._qos(chosen)
        if A.DEFAULT_QOS in names:
            raise PlanError(f"QOS {A.DEFAULT_QOS} cannot be deleted; it is the default every association falls back to")
        going = set(names)
        for name in names:
            self._delete("qos", name)
        # what named a deleted QOS forgets it, as slurmdbd does
        for key, assoc in self.store["assocs"].items():
            if going & set(assoc.get("qos") or []) or assoc.get("default_qos") in going:
                row = copy.deepcopy(assoc)
                row["qos"] = [q for q in row["qos"] if q not in going]
                row["default_qos"] = "" if row["default_qos"] in going else row["default_qos"]
                self._put("assoc", key, row)
        for other, qos in self.store["qos"].items():
            if other not in going and going & set(qos.get("preempt") or []):
                row = copy.deepcopy(qos)
                row["preempt"] = [q for q in row["preempt"] if q not in going]
                self._put("qos", other, row)
        return self._done(names)


def _unset(row: dict[str, Any], field: str) -> bool:
    """The association leaves `field` to its parent (a count -1, an empty map or list, no default QOS, priority 0)."""
    value = row.get(field)
    return value in (None, A.NO_LIMIT, {}, [], "") or (field == "priority" and value == 0)


def keys_of_user(store: dict[str, Any], user: str) -> list[str]:
    return [k for k in store["assocs"] if A.split_key(k)[1] == user]


def _admin_level(text: str) -> str:
    level = ADMIN_WORDS.get(text.lower())
    if level is None:
        raise PlanError(f"adminlevel={_show(text)} is not an admin level; use None, Operator or Admin")
    return level
