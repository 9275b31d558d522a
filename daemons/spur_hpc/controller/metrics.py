"""Prometheus metrics of spurctld, read from the live state at scrape time (nothing to keep in sync)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from spur_hpc.controller.state import ClusterState
from spur_hpc.model import JOB_STATES, NODE_STATES


class ControllerCollector:
    def __init__(self, status_fn, state_reader) -> None:
        self.status_fn = status_fn  # () -> /status dict
        self.state_reader = state_reader  # (fn(ClusterState)) -> result, or None before Raft runs

    def collect(self):
        status: dict[str, Any] = self.status_fn()
        labels = ["cluster", "member"]
        lv = [status.get("cluster_name", ""), status.get("raft_addr", "")]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(lv, value)
            return g

        yield gauge("spur_raft_is_leader", "1 on the Raft leader", 1.0 if status.get("role") == "leader" else 0.0)
        yield gauge("spur_raft_term", "current Raft term", status.get("term", 0))
        yield gauge("spur_raft_commit_index", "Raft commit index", status.get("commit_index", 0))
        yield gauge("spur_raft_applied_index", "last applied Raft index", status.get("applied_index", 0))
        yield gauge(
            "spur_raft_has_quorum", "1 when this member sees a majority", 1.0 if status.get("has_quorum") else 0.0
        )
        yield gauge("spur_wal_level", "cluster-wide enabled WAL level", status.get("wal_level", 0))
        yield gauge(
            "spur_stalled", "1 when this member stopped applying the log", 1.0 if status.get("stalled") else 0.0
        )
        acct = status.get("accounting") or {}
        if acct.get("enabled"):
            yield gauge(
                "spur_accounting_connected",
                "1 when the accounting database answers",
                1.0 if acct.get("connected") else 0.0,
            )
            yield gauge("spur_accounting_backlog", "job records not yet written to accounting", acct.get("backlog", 0))
        if self.state_reader is None:
            return
        counts = self.state_reader(_count)
        if counts is None:
            return
        jobs, nodes = counts
        jg = GaugeMetricFamily("spur_jobs", "jobs known to the controller by state", labels=labels + ["state"])
        for state in JOB_STATES:
            jg.add_metric(lv + [state], jobs.get(state, 0))
        yield jg
        ng = GaugeMetricFamily("spur_nodes", "nodes by state", labels=labels + ["state"])
        for state in NODE_STATES:
            ng.add_metric(lv + [state], nodes.get(state, 0))
        yield ng


def _count(s: ClusterState) -> tuple[Counter, Counter]:
    return Counter(j["state"] for j in s.jobs.values()), Counter(s.node_state(n) for n in s.nodes.values())


def render(collector: ControllerCollector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
