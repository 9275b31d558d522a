# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling upgrades: the plan (who, in which order), the guard rails, and the WAL level as the last step."""

from __future__ import annotations

from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurConnection
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import (
    SpurError,
    SpurInvalid,
    SpurRefused,
    SpurUnreachable,
)
from ansible_collections.spur.cluster.plugins.module_utils.spur_probes import probe_agent, probe_url
from ansible_collections.spur.cluster.plugins.module_utils.spur_info import ClusterHealth, summarize
from ansible_collections.spur.cluster.plugins.module_utils.spur_model import AGENT_PROBE_PORT, RAFT_PORT, with_port
from ansible_collections.spur.cluster.plugins.module_utils.spur_plan import (
    highest_common_wal_level,
    plan_agents,
    plan_controllers,
    preflight_refusals,
    wal_level_blockers,
)


class UpgradePlan:
    """spur_upgrade_plan: observe every host and plan the order; never changes anything."""

    def __init__(self, params: dict) -> None:
        self.params = params
        self.connection = SpurConnection(params)
        self.warnings: list[str] = []

    def run(self) -> dict:
        params = self.params
        target = params["target_build"]
        version = params.get("target_version")
        try:
            view = self.connection.view()
            controllers = plan_controllers(
                [dict(name=c["name"], reachable=c["reachable"], is_leader=c["is_leader"], build=c.get("build"),
                      version=c.get("version"))
                 for c in view.controllers],
                target, params.get("order"), version)
            self.warnings.extend(controllers.pop("warnings"))
            observed = self.observe_agents()
        finally:
            self.connection.close()
        agents = plan_agents(observed, target, params["batch_size"], params["canary"], version)
        result = dict(
            changed=False,
            target_build=target,
            target_version=version,
            controllers=controllers,
            agents=agents,
            agent_observations=observed,
            cluster=summarize(view),
            up_to_date=not controllers["upgrade"] and not agents["upgrade"],
        )
        if self.warnings:
            result["warnings"] = self.warnings
        return result

    def observe_agents(self) -> list[dict]:
        agents = self.params.get("agents") or []
        if not agents:
            return []
        nodes = None
        try:
            nodes = {n["name"]: n for n in self.connection.list_nodes()}
        except SpurError as exc:
            self.warnings.append("the controllers' node list is not available (%s); agents are planned from "
                                 "their own probes only" % exc.message)
        observed = []
        for agent in agents:
            node_name = agent.get("node") or agent["name"]
            probe = probe_agent(probe_url(agent["probe"], AGENT_PROBE_PORT), self.connection.timeout) \
                if agent.get("probe") else None
            if probe is not None and probe["reachable"] and probe.get("node"):
                node_name = probe["node"]
            node = nodes.get(node_name) if nodes is not None else None
            record = dict(name=agent["name"], node=node_name, build=None, version=None, busy=None,
                          reachable=None, known=None if nodes is None else node is not None,
                          state=node["state"] if node else None, error=None)
            if probe is not None:
                record["reachable"] = probe["reachable"]
                record["error"] = probe["error"]
            if probe is not None and probe["reachable"]:
                record.update(build=probe["build"], version=probe["version"], busy=bool(probe["running_jobs"]))
            elif node is not None:
                record.update(build=node["build"], version=node["version"], busy=bool(node["job_ids"]))
                if probe is None:
                    record["reachable"] = node["registered"]
            observed.append(record)
        return observed


class Preflight:
    """spur_preflight: refuse what would hurt the cluster, each refusal naming the option that overrides it."""

    def __init__(self, params: dict) -> None:
        self.params = params
        self.connection = SpurConnection(params)

    def facts(self) -> dict:
        params = self.params
        view = self.connection.view()
        flags = ("upgrade", "wipe", "skip_busy_agents", "force_upgrade_busy_agents", "in_place_upgrade",
                 "target_version", "target_max_wal_level", "allow_downgrade", "require_healthy")
        facts = {k: params[k] for k in flags}
        facts["inventory_members"] = sorted(with_port(m, RAFT_PORT) for m in params.get("members") or [])
        facts["committed_members"] = view.committed_members()
        facts["running_versions"] = sorted({c["version"] for c in view.reachable if c.get("version")})
        facts["running_builds"] = sorted({c["build"] for c in view.reachable if c.get("build")})
        facts["cluster_wal_level"] = view.wal_level()
        facts["cluster_id"] = next((c["cluster_id"] for c in view.reachable if c.get("cluster_id")), None)
        # A deploy may be what repairs an unhealthy cluster; only an upgrade needs a healthy one.
        facts["health_problems"] = view.problems(max_lag=params["max_lag"]) if params["upgrade"] else []
        return facts

    def wait_healthy(self) -> dict | None:
        """health_wait: wait as spur_cluster_health does (best effort: the rules judge what follows)."""
        params = self.params
        if not params.get("health_wait") or not params["upgrade"]:
            return None
        wait = dict(params, wait_timeout=params["health_wait"], held_term=None, running={}, expected_nodes=[],
                    poll_interval=0.5)
        try:
            seen = ClusterHealth(wait).run()
        except SpurError as exc:
            seen = dict(exc.details or {}, healthy=False, unmet=(exc.details or {}).get("unmet") or [exc.message])
        return {k: seen.get(k) for k in ("healthy", "unmet", "waited", "leader", "term")}

    def run(self) -> dict:
        health = self.wait_healthy()
        facts = self.facts()
        refusals = preflight_refusals(facts)
        result = dict(changed=False, passed=not refusals, refusals=refusals, facts=facts, health=health)
        if refusals:
            lines = []
            for r in refusals:
                text = r["message"]
                if r["override"]:
                    text += " (set %s to override)" % r["override"]
                lines.append(text)
            overrides = [r["override"] for r in refusals if r["override"]]
            raise SpurRefused("preflight refused: " + "; ".join(lines),
                              override=overrides[0] if len(refusals) == 1 and overrides else None,
                              details=result)
        return result


class WalLevelRaise:
    """spur_wal_level: raise the cluster's WAL level once every member reads it; never lower it."""

    def __init__(self, params: dict, check_mode: bool = False, diff: bool = False) -> None:
        self.params = params
        self.check_mode = check_mode
        self.diff = diff
        if params.get("level") is not None and params["level"] < 1:
            raise SpurInvalid("level must be 1 or more, not %d" % params["level"], override="level")
        self.connection = SpurConnection(params)

    def run(self) -> dict:
        try:
            return self._run()
        finally:
            self.connection.close()

    def _run(self) -> dict:
        view = self.connection.view()
        if view.leader is None:
            raise SpurUnreachable("the WAL level is changed through the leader, and %s" % (
                "; ".join(view.problems()) or "no controller answers as leader"))
        members = view.committed_members() or []
        info = view.member_info()
        current = int(view.wal_level() or 0)
        asked = self.params.get("level")
        target = asked if asked is not None else highest_common_wal_level(members, info)
        result = dict(changed=False, previous_level=current, level=current, requested_level=asked,
                      members={m: (info.get(m) or {}).get("max_level") for m in members})
        if target is None:
            raise SpurRefused("cannot tell which WAL level every member reads: %s; wait until every controller "
                              "has started once, or give level" % "; ".join(wal_level_blockers(members, info, 1)),
                              override="level", details=result)
        result["target_level"] = target
        if target <= current:
            result["msg"] = "the cluster already runs WAL level %d%s" % (
                current, " (levels never go down)" if target < current else "")
            return result
        blockers = wal_level_blockers(members, info, target)
        if blockers:
            raise SpurRefused("cannot raise the WAL level from %d to %d: %s; upgrade those controllers first" % (
                current, target, "; ".join(blockers)), details=result)
        if self.check_mode:
            result.update(changed=True, level=target)
        else:
            level, changed = self.connection.set_wal_level(target)
            result.update(changed=changed, level=level)
        if self.diff:
            result["diff"] = dict(before=dict(wal_level=current), after=dict(wal_level=result["level"]))
        return result
