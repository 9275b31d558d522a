"""Fair-share usage and factors: usage charged with half-life decay, and Slurm's Fair Tree over the associations.

Pure and deterministic (the state machine charges usage with the record's time; readers decay to their own now).
Usage lives in the association store (associations.py) as store["usage"][assoc key] = [raw usage, as of]: CPU
seconds (times the QOS UsageFactor), decayed lazily: an entry is brought to a time only when it is charged (the
ended job's record time) or read, usage * 2 ** (-(t - as_of) / half_life). The half-life the state machine decays
with is replicated too (store["usage_half_life"], carried by the leader's job_priorities records from
[scheduler] priority_decay_half_life), so every member charges alike whatever its own configuration says.

Fair Tree (Slurm 22.05's default, fair_tree.c): at each level of the tree, an association's Level FS is S / U, S
its raw shares over its siblings' (NormShares), U its usage over its parent's (EffectvUsage); infinite without
usage. Siblings are ranked by Level FS (higher first, users before accounts on a tie, tied accounts' children
merged), the tree walked depth-first in that order, and the n-th user association met gets the factor
rank / user associations, rank counting down from the number of user associations (tied users share one).
"""

from __future__ import annotations

import math
from typing import Any

from spur_hpc.controller import associations

DEFAULT_HALF_LIFE_SECS = 7 * 86400  # Slurm's PriorityDecayHalfLife default, 7-0
HALF_LIFE_KEY = "usage_half_life"
CHARGED_KEY = "usage_charged"  # a running job's [attempt, run seconds charged so far]


def half_life(store: dict[str, Any]) -> float:
    """The replicated half-life the store's usage decays with (0: no decay)."""
    return float(store.get(HALF_LIFE_KEY, DEFAULT_HALF_LIFE_SECS))


def decay(usage: float, since: float, now: float, half_life_secs: float) -> float:
    """`usage` recorded at `since`, as of `now`: halved every half_life_secs (0: kept as it is)."""
    if half_life_secs <= 0 or now <= since:
        return usage
    return usage * math.pow(2.0, -(now - since) / half_life_secs)


def usage_at(store: dict[str, Any], key: str, now: float) -> float:
    entry = store["usage"].get(key)
    if not entry:
        return 0.0
    return decay(float(entry[0]), float(entry[1]), now, half_life(store))


def charge(store: dict[str, Any], key: str, amount: float, when: float) -> list[str]:
    """Add `amount` (CPU seconds) at `when` to the association `key` and every ancestor's (assoc_chain); each
    entry decays to `when` first. Returns the keys charged (none when the association no longer exists)."""
    if amount <= 0 or key not in store["assocs"]:
        return []
    chain = associations.assoc_chain(store, key)
    keys = [associations.assoc_key(r["account"], r["user"], r["partition"]) for r in chain]
    for k in keys:
        entry = store["usage"].get(k)
        before = decay(float(entry[0]), float(entry[1]), when, half_life(store)) if entry else 0.0
        # An entry never goes back in time: a charge recorded with an earlier time than the entry's adds undecayed.
        store["usage"][k] = [before + amount, max(when, float(entry[1])) if entry else when]
    return keys


def run_secs(job: dict[str, Any], at: float) -> float:
    """Seconds the job's current run has run by `at`, not counting those it spent suspended."""
    ran = at - float(job.get("start_time") or 0.0)
    if job.get("suspend_attempt") == job.get("attempt"):
        ran -= float(job.get("suspended_secs") or 0.0)
        if job.get("suspended") == job.get("attempt"):  # suspended now: not run since
            ran -= at - float(job.get("suspend_time") or 0.0)
    return max(0.0, ran)


def job_charge(job: dict[str, Any], usage_factor: float, at: float) -> float:
    """What the job's current run charges at `at`: the CPUs it holds on every node times the seconds it ran since
    what was charged already (CHARGED_KEY: the leader's periodic records charge running jobs, as slurmctld's decay
    thread does), times its QOS UsageFactor. Marks those seconds charged."""
    alloc = job.get("alloc") or {}
    per_node = alloc.get("per_node") or {}
    cpus = sum(int(held.get("cpus") or 0) for held in per_node.values()) or int(alloc.get("cpus") or 0)
    ran = run_secs(job, at)
    done = job.get(CHARGED_KEY) or [0, 0.0]
    before = float(done[1]) if done[0] == job.get("attempt") else 0.0
    job[CHARGED_KEY] = [job.get("attempt"), max(ran, before)]
    return max(0.0, ran - before) * cpus * max(0.0, usage_factor)


# ------------------------------------------------------------------ the tree


def children(store: dict[str, Any]) -> dict[str, list[str]]:
    """Account association key -> the keys of its children: its users' associations first, then its sub-accounts'
    own associations, each by name (sshare's order, and a deterministic walk)."""
    out: dict[str, list[str]] = {}
    for key in sorted(store["assocs"], key=lambda k: (not associations.split_key(k)[1], k)):
        account, user, _partition = associations.split_key(key)
        if user:
            parent = associations.assoc_key(account)
        else:
            parent_name = store["accounts"].get(account, {}).get("parent", "")
            if not parent_name:
                continue  # root
            parent = associations.assoc_key(parent_name)
        if parent in store["assocs"]:
            out.setdefault(parent, []).append(key)
    return out


def shares(store: dict[str, Any], now: float) -> dict[str, dict[str, Any]]:
    """Every association reachable from root -> its sshare row: raw_shares, norm_shares, raw_usage, norm_usage,
    effective_usage, level_fs, fairshare (users only; accounts 0), depth, parent, and `order`: sshare's order (the
    tree depth-first, children in key order). Fair Tree, as the module's docstring says."""
    root = associations.assoc_key(associations.ROOT_ACCOUNT)
    if root not in store["assocs"]:
        return {}
    kids = children(store)
    rows: dict[str, dict[str, Any]] = {}
    root_usage = usage_at(store, root, now)

    def visit(key: str, depth: int, parent: str) -> None:
        row = store["assocs"][key]
        rows[key] = {
            "account": row["account"],
            "user": row["user"],
            "partition": row["partition"],
            "raw_shares": int(row.get("shares", 1)),
            "raw_usage": usage_at(store, key, now),
            "depth": depth,
            "parent": parent,
            "order": len(rows),
            "fairshare": 0.0,
        }
        for child in kids.get(key, []):
            visit(child, depth + 1, key)

    visit(root, 0, "")
    # root has no siblings: Slurm leaves its NormShares 0 and calls its EffectvUsage 1 (all of the usage)
    rows[root].update(norm_shares=0.0, norm_usage=1.0 if root_usage else 0.0, effective_usage=1.0, level_fs=0.0)
    for key, row in rows.items():
        if key == root:
            continue
        siblings = kids[row["parent"]]
        level_shares = sum(rows[s]["raw_shares"] for s in siblings)
        parent_usage = rows[row["parent"]]["raw_usage"]
        row["norm_shares"] = row["raw_shares"] / level_shares if level_shares else 0.0
        row["norm_usage"] = row["raw_usage"] / root_usage if root_usage else 0.0
        row["effective_usage"] = row["raw_usage"] / parent_usage if parent_usage else 0.0
        s_norm, u_eff = row["norm_shares"], row["effective_usage"]
        row["level_fs"] = 0.0 if s_norm == 0 else (s_norm / u_eff if u_eff else math.inf)
    users = sum(1 for row in rows.values() if row["user"])
    state = {"rank": users, "rnt": users}

    def rank(siblings: list[str], account_tied: bool) -> None:
        ordered = sorted(siblings, key=lambda k: (-rows[k]["level_fs"], 0 if rows[k]["user"] else 1, rows[k]["order"]))
        previous: float | None = None
        i = 0
        while i < len(ordered):
            key = ordered[i]
            row = rows[key]
            tied = account_tied if i == 0 else previous == row["level_fs"]
            if row["user"]:
                if not tied:
                    state["rank"] = state["rnt"]
                row["fairshare"] = state["rank"] / users if users else 0.0
                state["rnt"] -= 1
                i += 1
            else:
                merged = [key]
                while i + len(merged) < len(ordered):  # sibling accounts tied with it: their children rank together
                    other = rows[ordered[i + len(merged)]]
                    if other["user"] or other["level_fs"] != row["level_fs"]:
                        break
                    merged.append(ordered[i + len(merged)])
                rank([c for m in merged for c in kids.get(m, [])], tied)
                i += len(merged)
            previous = row["level_fs"]

    rank(kids.get(root, []), False)
    return rows
