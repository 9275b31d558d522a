# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only questions: the controllers, the nodes, and a wait for a healthy cluster. Nothing here changes."""

from __future__ import annotations

import time

from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurConnection
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurError, SpurInvalid, SpurTimeout
from ansible_collections.spur.cluster.plugins.module_utils.spur_probes import probe_agent, probe_url
from ansible_collections.spur.cluster.plugins.module_utils.spur_view import ClusterView
from ansible_collections.spur.cluster.plugins.module_utils.spur_model import AGENT_PROBE_PORT
from ansible_collections.spur.cluster.plugins.module_utils.spur_plan import HealthTracker

PUBLIC_CONTROLLER_KEYS = (
    "name", "url", "reachable", "error", "role", "is_leader", "ready", "leader", "leader_grpc", "term",
    "members", "learners", "member_info", "commit_index", "applied_index", "lag", "version", "build", "wal_level",
    "max_wal_level", "cluster_id", "cluster_name", "raft_addr", "grpc_addr", "phase", "has_quorum", "stalled",
    "term_secs",
)


def summarize(view: ClusterView) -> dict:
    """The controllers as the modules return them, plus the verdicts a play branches on."""
    leader = view.leader
    return dict(
        controllers=[{k: c.get(k) for k in PUBLIC_CONTROLLER_KEYS} for c in view.controllers],
        one_leader=view.one_leader,
        leader=leader["name"] if leader else None,
        leaders=[c["name"] for c in view.leaders],
        term=view.term,
        members=view.committed_members(),
        cluster_id=(leader or {}).get("cluster_id") or next(
            (c["cluster_id"] for c in view.reachable if c.get("cluster_id")), None),
        wal_level=view.wal_level(),
        reachable_count=len(view.reachable),
        unreachable_controllers=[c["name"] for c in view.controllers if not c["reachable"]],
    )


class ControllerInfo:
    """spur_controller_info: probe every controller; a controller that is down is a result, not a failure."""

    def __init__(self, params: dict) -> None:
        self.params = params

    def run(self) -> dict:
        result = summarize(SpurConnection(self.params).view())
        result["changed"] = False
        return result


class NodeInfo:
    """spur_node_info: the controllers' node records, with the agents' own view of their running jobs."""

    def __init__(self, params: dict) -> None:
        self.params = params

    def run(self) -> dict:
        connection = SpurConnection(self.params)
        try:
            names = self.params.get("names") or []
            nodes = connection.list_nodes(names)
        finally:
            connection.close()
        found = {n["name"] for n in nodes}
        agents = [probe_agent(probe_url(u, AGENT_PROBE_PORT), connection.timeout)
                  for u in self.params.get("agent_probes") or []]
        by_node = {a["node"]: a for a in agents if a["reachable"] and a.get("node")}
        for node in nodes:
            agent = by_node.get(node["name"])
            if agent is not None:
                node["running_jobs"] = agent["running_jobs"]
                node["running_jobs_source"] = "agent"
            else:
                node["running_jobs"] = [dict(job_id=j, attempt=None, supervisor_pid=None) for j in node["job_ids"]]
                node["running_jobs_source"] = "controller"
            node["agent"] = agent
        return dict(
            changed=False,
            nodes=nodes,
            missing=[n for n in names if n not in found],
            agents_unreachable=[dict(url=a["url"], error=a["error"]) for a in agents if not a["reachable"]],
            agents_unknown=sorted(n for n in by_node if n not in found),
        )


def registration_problem(node: dict, expect: dict) -> str | None:
    """Why node (a record as NodeInfo gives it) is not yet registered at expect's version and build; None once it
    is, by the controllers' list and, when expect names the agent's probe, by the agent's own /status."""
    name = expect["node"]
    if not node:
        return "the controllers do not list node %s" % name
    if not node.get("registered"):
        return "the controllers list node %s as not registered" % name
    if (node.get("version"), node.get("build")) != (expect["version"], expect["build"]):
        return "node %s registered at %s (build %s), not at the target %s (build %s)" % (
            name, node.get("version"), node.get("build"), expect["version"], expect["build"])
    if expect.get("agent_probe"):
        agent = node.get("agent") or {}
        if not agent.get("reachable"):
            return "the agent's probe %s does not answer: %s" % (expect["agent_probe"], agent.get("error") or "?")
        if agent.get("version") != expect["version"]:
            return "the agent of node %s reports version %s on its probe, not %s" % (
                name, agent.get("version"), expect["version"])
    return None


def check_wait_registered(expect: dict) -> None:
    """Refuse a negative timeout or poll interval before anything is done."""
    for key in ("timeout", "poll_interval"):
        if expect[key] < 0:
            raise SpurInvalid("wait_registered.%s must not be negative, not %s" % (key, expect[key]),
                              override="wait_registered")


def wait_registered(params: dict, expect: dict, clock=time.monotonic, sleep=time.sleep) -> tuple[dict, str | None]:
    """Look at expect's node (as spur_node_info does) every poll_interval seconds until registration_problem finds
    none or timeout seconds have passed -> (the last record, None or why it is not registered). A controller
    that does not answer meanwhile is one more reason to look again, not a failure."""
    look = dict(params, names=[expect["node"]], agent_probes=[expect["agent_probe"]] if expect.get("agent_probe") else [])
    deadline = clock() + expect["timeout"]
    while True:
        try:
            nodes = NodeInfo(look).run()["nodes"]
            node = nodes[0] if nodes else {}
            problem = registration_problem(node, expect)
        except SpurError as exc:
            node, problem = {}, exc.message
        if problem is None or clock() >= deadline:
            return node, problem
        sleep(expect["poll_interval"])


class ClusterHealth:
    """spur_cluster_health: wait until one leader has kept its term for stable_for seconds, every member is
    within max_lag entries, and the expected nodes are registered."""

    def __init__(self, params: dict, clock=time.monotonic, sleep=time.sleep) -> None:
        self.params = params
        self.clock = clock
        self.sleep = sleep
        for key in ("wait_timeout", "stable_for", "poll_interval", "max_lag"):
            if params[key] < 0:
                raise SpurInvalid("%s must not be negative, not %s" % (key, params[key]), override=key)

    def node_problems(self, connection: SpurConnection) -> list[str]:
        expected = self.params.get("expected_nodes") or []
        if not expected:
            return []
        try:
            nodes = {n["name"]: n for n in connection.list_nodes(expected)}
        except SpurError as exc:
            return ["cannot list the expected nodes: %s" % exc.message]
        missing = [n for n in expected if n not in nodes]
        down = [n for n in expected if n in nodes and not nodes[n]["registered"]]
        found = []
        if missing:
            found.append("expected nodes %s are unknown to the controllers" % ", ".join(missing))
        if down:
            found.append("expected nodes %s are not registered" % ", ".join(down))
        return found

    def release_problems(self, view: ClusterView) -> list[str]:
        """The controllers named in `running` that are not ready on the version and build asked for."""
        wanted = self.params.get("running") or {}
        found = []
        for record in view.controllers:
            want = wanted.get(record["name"])
            if not want or not record["reachable"]:
                continue
            runs = "%s-%s" % (record.get("version"), record.get("build"))
            if runs != "%s-%s" % (want.get("version"), want.get("build")):
                found.append("controller %s runs %s, not %s-%s" % (record["name"], runs, want.get("version"),
                                                                   want.get("build")))
            elif not record.get("ready"):
                found.append("controller %s is not ready yet" % record["name"])
        return found

    def run(self) -> dict:
        params = self.params
        connection = SpurConnection(params)
        tracker = HealthTracker(params["stable_for"], params.get("held_term"))
        start = self.clock()
        deadline = start + params["wait_timeout"]
        try:
            while True:
                view = connection.view(refresh=True)
                problems = view.problems(max_lag=params["max_lag"]) + self.release_problems(view)
                if not problems:
                    problems = self.node_problems(connection)
                leader = view.leader["name"] if view.leader else None
                held_for = view.leader.get("term_secs") if view.leader else None
                unmet = tracker.observe(self.clock(), leader, view.term, problems, held_for=held_for)
                result = summarize(view)
                result.update(changed=False, healthy=not unmet, unmet=unmet, waited=round(self.clock() - start, 3))
                if not unmet:
                    return result
                if self.clock() >= deadline:
                    raise SpurTimeout(
                        "the cluster is not healthy after %.0f s: %s" % (params["wait_timeout"], "; ".join(unmet)),
                        override="wait_timeout", details=result)
                self.sleep(params["poll_interval"])
        finally:
            connection.close()
