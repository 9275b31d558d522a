# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure upgrade planning and guard rails: no I/O here, so every rule is a table-driven test.

The modules gather observations (probes, node lists) and hand them to these functions.
"""

from __future__ import annotations

import re

from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurInvalid

# ---------------------------------------------------------------------------------------------- controllers


def order_controllers(names: list[str], leaders: list[str], explicit: list[str] | None = None) -> dict:
    """The order to upgrade controllers in: followers first, the leader last.

    names: every controller, in inventory order. leaders: the names that answered as leader.
    explicit: an operator's order, which must name every controller exactly once.
    Returns order, source (explicit | leader_last | single | inventory) and warnings.
    """
    if explicit:
        unknown = [n for n in explicit if n not in names]
        repeated = sorted({n for n in explicit if explicit.count(n) > 1})
        missing = [n for n in names if n not in explicit]
        problems = []
        if unknown:
            problems.append("names unknown controllers %s" % ", ".join(unknown))
        if repeated:
            problems.append("names %s more than once" % ", ".join(repeated))
        if missing:
            problems.append("leaves out %s" % ", ".join(missing))
        if problems:
            raise SpurInvalid("order %s; it must name every controller (%s) exactly once" % (
                " and ".join(problems), ", ".join(names)), override="order")
        return dict(order=list(explicit), source="explicit", warnings=[])
    if len(names) <= 1:
        return dict(order=list(names), source="single", warnings=[])
    if len(leaders) == 1:
        leader = leaders[0]
        return dict(order=[n for n in names if n != leader] + [leader], source="leader_last", warnings=[])
    if leaders:
        why = "several controllers answer as leader (%s)" % ", ".join(leaders)
    else:
        why = "no controller answers as leader"
    return dict(
        order=list(names),
        source="inventory",
        warnings=["%s: upgrading controllers in inventory order; set order to choose it yourself" % why],
    )


def at_target(host: dict, target_build: str, target_version: str | None = None) -> bool:
    """Whether a host runs the target release: its build, and its version too when one is given.

    The build is a hash of the source, so one tree released under two versions has one build; the version
    tells those releases apart.
    """
    if host.get("build") != target_build:
        return False
    return not target_version or host.get("version") == target_version


def plan_controllers(controllers: list[dict], target_build: str, explicit: list[str] | None = None,
                     target_version: str | None = None) -> dict:
    """controllers: [{name, reachable, is_leader, build, version}] in inventory order."""
    names = [c["name"] for c in controllers]
    leaders = [c["name"] for c in controllers if c.get("reachable") and c.get("is_leader")]
    ordered = order_controllers(names, leaders, explicit)
    by_name = {c["name"]: c for c in controllers}
    current = [n for n in ordered["order"]
               if by_name[n].get("reachable") and at_target(by_name[n], target_build, target_version)]
    return dict(
        order=ordered["order"],
        order_source=ordered["source"],
        leader=leaders[0] if len(leaders) == 1 else None,
        upgrade=[n for n in ordered["order"] if n not in current],
        at_target=current,
        unreachable=[n for n in ordered["order"] if not by_name[n].get("reachable")],
        warnings=ordered["warnings"],
    )


# ---------------------------------------------------------------------------------------------- agents


def plan_agents(agents: list[dict], target_build: str, batch_size: int = 1, canary: bool = False,
                target_version: str | None = None) -> dict:
    """agents: [{name, build, version, busy, reachable, known}] in inventory order -> batches of names to upgrade.

    An agent already at the target (build, and version when given) is skipped. With canary, the first batch holds one agent, so a bad
    build stops after one node. Busy and unreachable agents stay in their batch; they are listed so the
    play can apply its busy-agent mode and its unreachable policy.
    """
    if batch_size < 1:
        raise SpurInvalid("batch_size must be 1 or more, not %d" % batch_size, override="batch_size")
    names = [a["name"] for a in agents]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SpurInvalid("agents names %s more than once; list each agent once" % ", ".join(repeated),
                          override="agents")
    current = [a["name"] for a in agents if at_target(a, target_build, target_version)]
    todo = [a["name"] for a in agents if a["name"] not in current]
    batches = []
    rest = todo
    if canary and todo:
        batches.append([todo[0]])
        rest = todo[1:]
    batches.extend(rest[i:i + batch_size] for i in range(0, len(rest), batch_size))
    return dict(
        batches=batches,
        upgrade=todo,
        at_target=current,
        busy=[a["name"] for a in agents if a.get("busy") and a["name"] in todo],
        unreachable=[a["name"] for a in agents if a.get("reachable") is False],
        unknown=[a["name"] for a in agents if a.get("known") is False],
    )


# ---------------------------------------------------------------------------------------------- versions

_VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?$")
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}


def version_key(version: str) -> tuple:
    """Sort key of a release version (1.2, 1.2.3, 1.2.3rc1, 1.2.3.post1, 1.2.3.dev4), as PEP 440 orders them."""
    match = _VERSION.match(version.strip())
    if not match:
        raise SpurInvalid("version %r is not a release version (like 1.2.3 or 1.2.3rc1)" % version,
                          override="target_version")
    release, pre, pre_n, post, dev = match.groups()
    numbers = [int(p) for p in release.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    if pre:
        pre_key = (_PRE_RANK[pre], int(pre_n))
    elif dev is not None and post is None:
        pre_key = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    else:
        pre_key = (3, 0)
    post_key = int(post) if post is not None else -1
    dev_key = int(dev) if dev is not None else float("inf")
    return (tuple(numbers), pre_key, post_key, dev_key)


# ---------------------------------------------------------------------------------------------- guard rails

BUSY_MODES = ("skip_busy_agents", "force_upgrade_busy_agents", "in_place_upgrade")


def refusal(check: str, message: str, override: str | None = None) -> dict:
    return dict(check=check, message=message, override=override)


def preflight_refusals(facts: dict) -> list[dict]:
    """Every guard rail the facts break, in a fixed order; an empty list means go.

    facts keys (missing keys mean "not known", and a rule that needs them does not fire):
      upgrade, wipe, skip_busy_agents, force_upgrade_busy_agents, in_place_upgrade (bool)
      inventory_members, committed_members: raft addresses (host:port)
      running_versions: versions the controllers and agents run now; target_version
      cluster_wal_level: the cluster's enabled WAL level; target_max_wal_level: highest level the target reads
      allow_downgrade, require_healthy (bool); health_problems: lines from ClusterView.problems()
    """
    found = []
    if facts.get("upgrade") and facts.get("wipe"):
        found.append(refusal(
            "wipe_during_upgrade",
            "wipe is set during an upgrade: wiping the controllers' state resets the job ids and loses every "
            "queued and running job; an upgrade never wipes, unset it (spur_wipe_state=false)"))
    modes = [m for m in BUSY_MODES if facts.get(m)]
    if len(modes) > 1:
        found.append(refusal(
            "busy_agent_modes",
            "%s are set together; they are different answers to a busy agent, choose at most one of "
            "skip_busy_agents, force_upgrade_busy_agents and in_place_upgrade" % " and ".join(modes)))
    inventory, committed = facts.get("inventory_members"), facts.get("committed_members")
    if inventory and committed is not None and not facts.get("wipe"):
        wanted, have = sorted(set(inventory)), sorted(set(committed))
        if wanted != have:
            added = [m for m in wanted if m not in have]
            removed = [m for m in have if m not in wanted]
            change = "; ".join(part for part in (
                "adds %s" % ", ".join(added) if added else "",
                "removes %s" % ", ".join(removed) if removed else "") if part)
            online = "; ".join(part for part in (
                "add %s online with playbooks/add_controllers.yml (ansible-playbook spur.cluster.add_controllers)"
                % ", ".join(added) if added else "",
                "remove %s online with playbooks/remove_controllers.yml (ansible-playbook "
                "spur.cluster.remove_controllers)" % ", ".join(removed) if removed else "") if part)
            found.append(refusal(
                "topology_change",
                "the inventory's controllers differ from the cluster's committed membership (%s): deploy does not "
                "change the controller set; %s, one controller at a time with the cluster serving; a deploy with "
                "wipe (spur_wipe_state=true) rebuilds the cluster instead and erases its state" % (change, online),
                override="wipe"))
    level, target_max = facts.get("cluster_wal_level"), facts.get("target_max_wal_level")
    if level is not None and target_max is not None and int(target_max) < int(level):
        found.append(refusal(
            "wal_level_skew",
            "the cluster runs WAL level %d but the target release reads only up to level %d: its controllers "
            "would refuse the replicated log; roll forward to a release that reads level %d" % (
                int(level), int(target_max), int(level))))
    target, running = facts.get("target_version"), [v for v in facts.get("running_versions") or [] if v]
    if target and running and not facts.get("allow_downgrade"):
        newest = max(running, key=version_key)
        if version_key(target) < version_key(newest):
            found.append(refusal(
                "downgrade",
                "the target version %s is older than %s, which the cluster runs now; Spur rolls forward only "
                "(a controller refuses a journal written by a newer release)" % (target, newest),
                override="allow_downgrade"))
    problems = facts.get("health_problems") or []
    if problems and facts.get("require_healthy", True):
        found.append(refusal(
            "cluster_health",
            "the cluster is not healthy: %s" % "; ".join(problems),
            override="require_healthy"))
    return found


def wal_level_blockers(members: list[str], member_info: dict, level: int) -> list[str]:
    """Members that cannot read WAL level yet, each with why; empty when the level may be enabled."""
    blockers = []
    for member in sorted(members):
        info = member_info.get(member)
        if not info:
            blockers.append("%s has not announced which release it runs" % member)
        elif int(info.get("max_level") or 0) < level:
            blockers.append("%s runs %s (build %s), which reads up to level %s" % (
                member, info.get("version") or "?", info.get("build") or "?", info.get("max_level")))
    return blockers


def highest_common_wal_level(members: list[str], member_info: dict) -> int | None:
    """The highest level every member reads (None when a member has not announced its release)."""
    levels = []
    for member in members:
        info = member_info.get(member)
        if not info or not info.get("max_level"):
            return None
        levels.append(int(info["max_level"]))
    return min(levels) if levels else None


class HealthTracker:
    """Is the cluster healthy and has it kept the same leader and term for stable_for seconds?"""

    def __init__(self, stable_for: float, held_term: int | None = None) -> None:
        self.stable_for = stable_for
        # A term the leader already held before the wait began (a follower's restart): still on it, the leader
        # has held it at least that long, so it counts as stable at once.
        self.held_term = held_term
        self.identity: tuple | None = None
        self.since: float | None = None

    def observe(self, now: float, leader: str | None, term: int | None, problems: list[str],
                held_for: float | None = None) -> list[str]:
        """Unmet conditions at time now (the problems plus the stability condition); empty when healthy.
        held_for: the seconds the leader itself says it has held this term (its /status term_secs; releases
        before it say nothing): enough of them decide at the first look, instead of watching for stable_for."""
        unmet = list(problems)
        identity = (leader, term) if leader is not None and not problems else None
        if identity != self.identity:
            self.identity, self.since = identity, now
        if identity is not None and isinstance(held_for, (int, float)) and not isinstance(held_for, bool) \
                and held_for > now - self.since:
            self.since = now - held_for
        if identity is not None and now - self.since < self.stable_for and term != self.held_term:
            unmet.append("leader %s has held term %s for %.1f s of the %.1f s asked (stable_for)" % (
                leader, term, now - self.since, self.stable_for))
        return unmet
