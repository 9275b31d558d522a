"""The association store: clusters' accounts (a tree), users, their associations and the QOS, as Slurm's.

Replicated state (WAL level 5), kept in ClusterState.assoc and changed only by `assoc_apply` records, so the
scheduler reads it under the state lock and never waits on the accounting database (which holds a copy).
Pure and deterministic like state.py: no clocks, no I/O. Rows are plain dicts of primitive values, keyed as
below; their fields are the proto's (Qos, Account, User, Association) in snake_case.

    store = {
        "cluster": "spur",
        "qos":      {name: qos row},
        "accounts": {name: account row},
        "users":    {name: user row},
        "assocs":   {assoc_key(account, user, partition): association row},
        "usage":    {assoc key: [raw usage, as of (epoch s)]},   # decayed CPU seconds, see fairshare.py
        "next_id":  int,                                         # the next association / QOS id
    }

A user's association key has the user; an account's own association has user "". Limits follow Slurm's
inheritance: a user's association without a limit takes its account's, up the tree (effective_limit).
"""

from __future__ import annotations

from typing import Any

from spur_hpc.conf import enforce_flags

# sacctmgr's AdminLevel words, lowest first.
ADMIN_LEVELS = ("None", "Operator", "Administrator")
ROOT_ACCOUNT = "root"
DEFAULT_QOS = "normal"
NO_LIMIT = -1
# Bounds on what one store may hold (every count that reaches the leader has one).
MAX_ACCOUNTS = 10_000
MAX_USERS = 100_000
MAX_ASSOCIATIONS = 200_000
MAX_QOS = 1_000
# Slurm's error texts (slurm_errno.c) that sbatch prints after "Batch job submission failed: ".
SLURM_INVALID_ACCOUNT = "Invalid account or account/partition combination specified"
SLURM_INVALID_QOS = "Invalid qos specification"


def assoc_key(account: str, user: str = "", partition: str = "") -> str:
    """Names cannot hold '|' (the service refuses it), so the key is unambiguous."""
    return f"{account}|{user}|{partition}"


def split_key(key: str) -> tuple[str, str, str]:
    account, user, partition = key.split("|")
    return account, user, partition


def new_qos(name: str, qos_id: int, **fields: Any) -> dict[str, Any]:
    row = {
        "name": name,
        "id": qos_id,
        "description": "Normal QOS default" if name == DEFAULT_QOS else name,
        "priority": 0,
        "preempt": [],
        "preempt_mode": "",
        "grp_tres": {},
        "grp_jobs": NO_LIMIT,
        "grp_submit_jobs": NO_LIMIT,
        "max_jobs_per_user": NO_LIMIT,
        "max_submit_jobs_per_user": NO_LIMIT,
        "max_wall_secs": NO_LIMIT,
        "max_tres_per_job": {},
        "max_tres_per_user": {},
        "usage_factor": 1.0,
        "flags": [],
    }
    row.update(fields)
    return row


def new_account(name: str, parent: str, **fields: Any) -> dict[str, Any]:
    row = {"name": name, "description": name, "organization": name, "parent": parent, "coordinators": []}
    row.update(fields)
    return row


def new_user(name: str, default_account: str, **fields: Any) -> dict[str, Any]:
    row = {"name": name, "default_account": default_account, "admin_level": "None", "default_wckey": ""}
    row.update(fields)
    return row


def new_assoc(
    assoc_id: int, cluster: str, account: str, user: str = "", partition: str = "", parent: str = "", **fields: Any
) -> dict[str, Any]:
    row = {
        "id": assoc_id,
        "cluster": cluster,
        "account": account,
        "user": user,
        "partition": partition,
        "parent_account": parent,
        "shares": 1,
        "grp_tres": {},
        "grp_jobs": NO_LIMIT,
        "grp_submit_jobs": NO_LIMIT,
        "max_jobs": NO_LIMIT,
        "max_submit_jobs": NO_LIMIT,
        "max_wall_secs": NO_LIMIT,
        "max_tres_per_job": {},
        "qos": [],
        "default_qos": "",
        "priority": 0,
    }
    row.update(fields)
    return row


def default_store(cluster: str) -> dict[str, Any]:
    """What a new slurmdbd cluster holds: the account root, the user root in it (an administrator), QOS normal."""
    return {
        "cluster": cluster,
        "qos": {DEFAULT_QOS: new_qos(DEFAULT_QOS, 1)},
        "accounts": {ROOT_ACCOUNT: new_account(ROOT_ACCOUNT, "", description="default root account")},
        "users": {"root": new_user("root", ROOT_ACCOUNT, admin_level="Administrator")},
        "assocs": {
            assoc_key(ROOT_ACCOUNT): new_assoc(1, cluster, ROOT_ACCOUNT, qos=[DEFAULT_QOS]),
            assoc_key(ROOT_ACCOUNT, "root"): new_assoc(2, cluster, ROOT_ACCOUNT, "root", parent=ROOT_ACCOUNT),
        },
        "usage": {},
        "next_id": 3,
    }


# ------------------------------------------------------------------ reading the tree


def account_chain(store: dict[str, Any], account: str) -> list[str]:
    """The account and its ancestors up to root, nearest first (a broken parent link ends the walk)."""
    chain, seen = [], set()
    while account and account not in seen and account in store["accounts"]:
        seen.add(account)
        chain.append(account)
        account = store["accounts"][account]["parent"]
    return chain


def assoc_chain(store: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A user's association, then its account's own association and every ancestor account's, nearest first.
    What Grp limits count over and what the fair-share tree walks."""
    account, user, partition = split_key(key)
    rows = []
    if user and key in store["assocs"]:
        rows.append(store["assocs"][key])
    for name in account_chain(store, account):
        row = store["assocs"].get(assoc_key(name))
        if row is not None:
            rows.append(row)
    return rows


def effective(store: dict[str, Any], key: str, field: str) -> Any:
    """A limit or setting as Slurm applies it: the nearest association in the chain that sets it.
    Counts: NO_LIMIT is unset; maps: per TRES, the nearest that names it; qos / default_qos: the nearest non-empty."""
    chain = assoc_chain(store, key)
    if field in ("grp_tres", "max_tres_per_job"):
        merged: dict[str, int] = {}
        for row in reversed(chain):  # farthest first, nearer ones override
            merged.update(row.get(field) or {})
        return merged
    for row in chain:
        value = row.get(field)
        if field in ("qos", "default_qos"):
            if value:
                return value
        elif value is not None and value != NO_LIMIT:
            return value
    return [] if field == "qos" else "" if field == "default_qos" else NO_LIMIT


def user_assoc_key(store: dict[str, Any], user: str, account: str, partition: str) -> str | None:
    """The association a job of `user` in `account` (and `partition`) runs under: the partition's own first, then
    the account-wide one; None when the user has none there."""
    keys = [assoc_key(account, user, partition)] if partition else []
    keys.append(assoc_key(account, user))
    for key in keys:
        if key in store["assocs"]:
            return key
    return None


def allowed_qos(store: dict[str, Any], key: str) -> list[str]:
    qos = effective(store, key, "qos")
    return list(qos) if qos else [DEFAULT_QOS]


def default_qos(store: dict[str, Any], key: str) -> str:
    """The association's DefQOS, else the only QOS it may use, else normal when it may use it (as Slurm)."""
    named = effective(store, key, "default_qos")
    if named:
        return named
    allowed = allowed_qos(store, key)
    if len(allowed) == 1:
        return allowed[0]
    return DEFAULT_QOS if DEFAULT_QOS in allowed else allowed[0]


def admin_level(store: dict[str, Any] | None, user: str) -> str:
    if not store:
        return "None"
    row = store["users"].get(user)
    return row["admin_level"] if row else "None"


def at_least(level: str, wanted: str) -> bool:
    return ADMIN_LEVELS.index(level if level in ADMIN_LEVELS else "None") >= ADMIN_LEVELS.index(wanted)


# ------------------------------------------------------------------ a job's account and QOS at submit


class Refusal(Exception):
    """A job the store refuses: the message names what is wrong, slurm_error is Slurm's text for sbatch."""

    def __init__(self, message: str, slurm_error: str) -> None:
        super().__init__(message)
        self.slurm_error = slurm_error


def enforced(words: Any) -> frozenset[str]:
    """[accounting] enforce's words with what they imply (conf.enforce_flags)."""
    return frozenset(enforce_flags(words))


def resolve_job(
    store: dict[str, Any], user: str, account: str, partition: str, qos: str, enforce: frozenset[str]
) -> tuple[str, str]:
    """(account, qos) a job submitted by `user` runs under, as slurmctld fills them in: no -A is the user's
    default account, no --qos the association's default QOS (whether or not anything is enforced). With
    "associations" enforced a user without an association there (in the partition, or account-wide) is refused;
    with "qos" a QOS the association may not use. A QOS that does not exist is refused in every case (Slurm
    lets it through unenforced, and nothing could then say what it allows)."""
    if qos and qos not in store["qos"]:
        raise Refusal(f"QOS {qos} does not exist (sacctmgr show qos lists them)", SLURM_INVALID_QOS)
    row = store["users"].get(user)
    account = account or (row["default_account"] if row else "")
    key = user_assoc_key(store, user, account, partition) if account else None
    if key is None:
        if "associations" in enforce:
            where = f"account {account}" if account else "any account"
            raise Refusal(
                f"user {user} has no association with {where} in partition {partition} and the cluster enforces "
                f"associations; ask an administrator to add one (sacctmgr add user {user} account=ACCOUNT) or "
                f"name one of your accounts with -A",
                SLURM_INVALID_ACCOUNT,
            )
        return account, qos
    qos = qos or default_qos(store, key)
    if "qos" in enforce and qos not in allowed_qos(store, key):
        raise Refusal(
            f"QOS {qos} is not one the association of user {user} in account {account} may use "
            f"({','.join(allowed_qos(store, key))}); name one of those with --qos",
            SLURM_INVALID_QOS,
        )
    return account, qos


# ------------------------------------------------------------------ changing it (the state machine's side)


def apply_change(store: dict[str, Any], puts: list[dict[str, Any]], deletes: list[dict[str, Any]]) -> str | None:
    """Apply one assoc_apply record: `puts` are whole rows {"kind", "key", "row"} (kind: qos, account, user,
    assoc), `deletes` are {"kind", "key"}. The leader checked the change; this checks again what every member must
    agree on (references exist, bounds), and changes nothing when it fails. None on success, else why not."""
    tables = {"qos": "qos", "account": "accounts", "user": "users", "assoc": "assocs"}
    trial = {name: dict(store[name]) for name in tables.values()}
    for item in deletes:
        trial[tables[item["kind"]]].pop(item["key"], None)
    for item in puts:
        trial[tables[item["kind"]]][item["key"]] = item["row"]
    problem = check_tables(trial)
    if problem:
        return problem
    store.update(trial)
    for key in list(store["usage"]):
        if key not in store["assocs"]:
            del store["usage"][key]
    top = max([row["id"] for row in trial["assocs"].values()] + [row["id"] for row in trial["qos"].values()] + [0])
    store["next_id"] = max(store["next_id"], top + 1)
    return None


def check_tables(t: dict[str, dict[str, Any]]) -> str | None:
    """What every store must hold true; one line naming the first thing that does not."""
    limits = (("accounts", MAX_ACCOUNTS), ("users", MAX_USERS), ("assocs", MAX_ASSOCIATIONS), ("qos", MAX_QOS))
    for table, bound in limits:
        if len(t[table]) > bound:
            return f"at most {bound} {table} may exist"
    if ROOT_ACCOUNT not in t["accounts"]:
        return "the account root cannot be removed"
    for name, row in t["accounts"].items():
        if name != ROOT_ACCOUNT and row["parent"] not in t["accounts"]:
            return f"account {name}: parent account {row['parent']} does not exist"
        seen, at = set(), name
        while at and at not in seen:
            seen.add(at)
            at = t["accounts"].get(at, {}).get("parent", "")
        if at:
            return f"account {name}: its parents form a loop through {at}"
    for key, row in t["assocs"].items():
        account, user, _ = split_key(key)
        if account not in t["accounts"]:
            return f"association {key}: account {account} does not exist"
        if user and user not in t["users"]:
            return f"association {key}: user {user} does not exist"
        for name in list(row.get("qos") or []) + ([row["default_qos"]] if row.get("default_qos") else []):
            if name not in t["qos"]:
                return f"association {key}: QOS {name} does not exist"
    pairs = {split_key(key)[:2] for key in t["assocs"]}  # (account, user): a user's default needs one of them
    for name, row in t["users"].items():
        # "" once the default account was deleted (slurmdbd leaves the user without one until one is set)
        if row["default_account"] and (row["default_account"], name) not in pairs:
            return f"user {name}: default account {row['default_account']} is not one of the user's associations"
    for name, row in t["qos"].items():
        for other in row.get("preempt") or []:
            if other not in t["qos"]:
                return f"QOS {name}: preempt names QOS {other}, which does not exist"
    return None
