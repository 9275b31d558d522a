# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller probes say together: the leader, the term, the committed members and each one's lag."""

from __future__ import annotations

from ansible_collections.spur.cluster.plugins.module_utils.spur_probes import controller_endpoints, probe_controller


class ClusterView:
    """What the controller probes say together: the leader, the term, each member's lag."""

    def __init__(self, controllers: list[dict]) -> None:
        self.controllers = controllers
        self.reachable = [c for c in controllers if c["reachable"]]
        self.leaders = [c for c in self.reachable if c["is_leader"]]
        self._fill_lag()

    @property
    def one_leader(self) -> bool:
        return len(self.leaders) == 1

    @property
    def leader(self) -> dict | None:
        return self.leaders[0] if self.one_leader else None

    @property
    def term(self) -> int | None:
        return self.leader["term"] if self.leader else None

    def committed_members(self) -> list[str] | None:
        """The committed membership (raft addresses), from the leader, else from any member that knows it."""
        for record in ([self.leader] if self.leader else []) + self.reachable:
            if record.get("cluster_id") and record.get("members"):
                return sorted(record["members"])
        return None

    def member_info(self) -> dict:
        source = self.leader or next((c for c in self.reachable if c.get("member_info")), None)
        return dict(source.get("member_info") or {}) if source else {}

    def wal_level(self) -> int | None:
        source = self.leader or next((c for c in self.reachable if c.get("cluster_id")), None)
        return source.get("wal_level") if source else None

    def _fill_lag(self) -> None:
        leader = self.leader
        if leader is None:
            return
        lag_map = leader.get("lag_map") or {}
        for record in self.reachable:
            if record is leader:
                record["lag"] = 0
            elif record.get("applied_index") is not None and leader.get("commit_index") is not None:
                record["lag"] = max(0, int(leader["commit_index"]) - int(record["applied_index"]))
            elif record.get("raft_addr") in lag_map:
                record["lag"] = int(lag_map[record["raft_addr"]])

    def member_lags(self) -> dict:
        """raft address -> lag for every committed member (None when the member did not answer)."""
        members = self.committed_members() or []
        by_raft = {c.get("raft_addr"): c for c in self.reachable}
        lags = {}
        leader_map = (self.leader or {}).get("lag_map") or {}
        for member in members:
            record = by_raft.get(member)
            if record is not None and record.get("lag") is not None:
                lags[member] = record["lag"]
            elif member in leader_map:
                lags[member] = int(leader_map[member])
            else:
                lags[member] = None
        return lags

    def problems(self, max_lag: int | None = None, require_all_members: bool = True) -> list[str]:
        """Why this cluster is not healthy, one line each; empty when it is."""
        found = []
        for record in self.controllers:
            if not record["reachable"]:
                found.append("controller %s does not answer (%s)" % (record["name"], record["error"]))
            elif record.get("stalled"):
                found.append("controller %s stopped applying the log: %s" % (
                    record["name"], (record["stalled"] or {}).get("reason")))
        if not self.leaders:
            found.append("no controller answers as leader")
        elif len(self.leaders) > 1:
            found.append("several controllers answer as leader: %s" % ", ".join(c["name"] for c in self.leaders))
        else:
            terms = {c["term"] for c in self.reachable if c.get("term") is not None}
            if len(terms) > 1:
                found.append("controllers disagree on the term (%s)" % ", ".join(str(t) for t in sorted(terms)))
            lags = self.member_lags()
            for member, lag in sorted(lags.items()):
                if lag is None:
                    if require_all_members:
                        found.append("member %s reports no replication progress" % member)
                elif max_lag is not None and lag > max_lag:
                    found.append("member %s lags %d entries behind the leader (max_lag %d)" % (member, lag, max_lag))
        return found


def probe_controllers(params: dict) -> ClusterView:
    timeout = params["timeout"]
    return ClusterView([probe_controller(name, url, timeout) for name, url in controller_endpoints(params)])
