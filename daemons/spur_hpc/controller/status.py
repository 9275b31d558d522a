"""What a spurctld member says about itself: the /status JSON, the Ping, ClusterInfo and ClusterProbe replies,
and the /livez, /readyz and /metrics/nodes decisions. Life cycle lives in controller/daemon.py.

MemberStatus is a mixin of ControllerDaemon: it only reads the attributes the daemon sets (raft, conf,
phase, members, identity, had_data, raft_stopped_for_stall, accounting, addresses) and changes nothing.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from spur_hpc import buildinfo
from spur_hpc.controller import errors, wal
from spur_hpc.controller.grpc_api import empty_probe_reply
from spur_hpc.controller.metrics import render
from spur_hpc.httpprobe import json_response, text_response
from spur_hpc.proto import raft_internal_pb2, slurm_pb2


class MemberStatus:
    def probe_routes(self) -> dict[str, Callable[[], Any]]:
        """The HTTP probe paths of this member (self.collector is made once the probe server exists)."""
        return {
            "/livez": self._livez,
            "/readyz": self._readyz,
            "/status": lambda: json_response(200, self.status()),
            "/metrics/nodes": self._metrics_nodes,
            "/metrics": lambda: (200, "text/plain; version=0.0.4", render(self.collector)),
        }

    def term_secs(self) -> float:
        """Seconds this member has known the current term with the same leader (0 without a leader), so a rolling
        upgrade's health gate decides "a stable term" in one look instead of watching it for stable_for seconds.
        Kept by serving_problem(), which the member's watch calls every 0.2 s, and by status()."""
        raft = self.raft
        if raft is None:
            return 0.0
        seen = (raft.term(), raft.leader_addr())
        now = time.monotonic()
        mark = getattr(self, "_term_mark", None)
        if mark is None or mark[0] != seen:
            mark = self._term_mark = (seen, now)
        return round(now - mark[1], 1) if seen[1] is not None else 0.0

    def _state_reader(self, fn):
        return self.raft.read(fn) if self.raft is not None else None

    def member_grpc(self, raft_addr: str | None) -> str | None:
        if raft_addr is None or self.raft is None:
            return None
        info = self.raft.read(lambda s: s.member_info.get(raft_addr))
        return info["grpc_addr"] if info else None

    def leader_grpc(self) -> str | None:
        return self.member_grpc(self.raft.leader_addr()) if self.raft else None

    def status(self) -> dict[str, Any]:
        base = {
            "raft_addr": self.raft_addr,
            "grpc_addr": self.grpc_addr,
            "version": buildinfo.version(),
            "build": buildinfo.build(),
            "max_wal_level": wal.MAX_WAL_LEVEL,
            "phase": self.phase,
            "accounting": self.accounting.health() if self.accounting else {"enabled": False},
        }
        raft = self.raft
        if raft is None:
            base.update(
                role="starting",
                leader=None,
                leader_grpc=None,
                term=0,
                members=[],
                commit_index=0,
                applied_index=0,
                cluster_name=self.conf.cluster.name,
                cluster_id="",
                wal_level=0,
                has_quorum=False,
                stalled=None,
            )
            return base

        def facts(s):
            return {
                "cluster_name": s.cluster_name or self.conf.cluster.name,
                "cluster_id": s.cluster_id,
                "members": list(s.members) or list(self.members),
                "learners": sorted(s.learners),  # a controller being added (spur admin raft add), not yet voting
                "member_info": {k: dict(v) for k, v in s.member_info.items()},
                "wal_level": s.wal_level,
                "stalled": dict(s.stalled) if s.stalled else None,
                "next_job_id": s.next_job_id,
                "nodes": len(s.nodes),
                "jobs": len(s.jobs),
            }

        base.update(raft.read(facts))
        leader = raft.leader_addr()
        role = "stalled" if self.raft_stopped_for_stall else raft.role()
        commit = raft.commit_index()
        base.update(
            role=role,
            leader=leader,
            leader_grpc=self.member_grpc(leader),
            term=raft.term(),
            commit_index=commit,
            applied_index=raft.applied_index(),
            has_quorum=raft.has_quorum(),
            joining=raft.holding_elections(),
            disk_free_mb=round(raft.disk.free_bytes() / 2**20, 1),
            disk_full=raft.disk.full_reason(),  # None, or why this member refuses writes and replicated entries
            connected_peers=raft.connected_peers(),
            leaving=raft.leaving(),  # removed controllers still sent the log for a few seconds
            term_secs=self.term_secs(),
        )
        if role == "leader":
            base["lag"] = {m: max(0, commit - idx) for m, idx in raft.follower_match().items()}
        return base

    def ping_reply(self) -> slurm_pb2.PingReply:
        st = self.status()
        return slurm_pb2.PingReply(
            version=st["version"],
            build=st["build"],
            role=st["role"],
            leader=st.get("leader_grpc") or "",
            cluster_name=st["cluster_name"],
            cluster_id=st["cluster_id"],
            term=st["term"],
            commit_index=st["commit_index"],
            applied_index=st["applied_index"],
            wal_level=st["wal_level"],
            max_wal_level=st["max_wal_level"],
            raft_addr=self.raft_addr,
            grpc_addr=self.grpc_addr,
            hostname=socket.gethostname(),
        )

    def cluster_info(self) -> slurm_pb2.ClusterInfo:
        st = self.status()
        return slurm_pb2.ClusterInfo(
            cluster_name=st["cluster_name"],
            cluster_id=st["cluster_id"],
            leader=st.get("leader") or "",
            leader_grpc=st.get("leader_grpc") or "",
            term=st["term"],
            wal_level=st["wal_level"],
            next_job_id=st.get("next_job_id", 0),
            members=[
                slurm_pb2.MemberInfo(
                    raft_addr=m,
                    grpc_addr=st.get("member_info", {}).get(m, {}).get("grpc_addr", ""),
                    version=st.get("member_info", {}).get(m, {}).get("version", ""),
                    build=st.get("member_info", {}).get(m, {}).get("build", ""),
                    max_wal_level=st.get("member_info", {}).get(m, {}).get("max_level", 0),
                )
                for m in st["members"]
            ],
        )

    def probe_reply(self) -> raft_internal_pb2.ClusterProbeReply:
        """The committed membership; a member that holds data but has not loaded it yet says so from its
        identity file, or answers UNAVAILABLE, never "no cluster"."""
        reply = empty_probe_reply(self.raft_addr)
        state = (
            self.raft.read(lambda s: (s.cluster_name, s.cluster_id, list(s.members), sorted(s.learners)))
            if self.raft
            else None
        )
        learners: list[str] = []
        if state and state[1]:
            name, cluster_id, members, learners = state
        elif self.had_data and self.identity:
            name, cluster_id, members = (
                self.identity["cluster_name"],
                self.identity["cluster_id"],
                self.identity["members"],
            )
        elif self.had_data:
            raise errors.Unavailable("this controller holds Raft data and is still loading it; ask again")
        else:
            return reply
        reply.has_cluster = True
        reply.cluster_name, reply.cluster_id = name, cluster_id
        reply.members.extend(members)
        reply.learners.extend(learners)  # a controller being added: it may start empty and join
        if self.raft is not None:
            reply.leader = self.raft.leader_addr() or ""
            reply.term = self.raft.term()
            reply.commit_index = self.raft.commit_index()
        return reply

    # ---------------------------------------------------------------- HTTP probes

    def raft_alive(self) -> bool:
        """False once the Raft tick thread died (not when it was stopped on purpose for a stall)."""
        raft = self.raft
        return raft is None or self.raft_stopped_for_stall or raft.core_alive()

    def serving_problem(self) -> str | None:
        """Why this member must stop serving and exit (controller/daemon.py's watch), or None. A member stopped for
        a stall is not one: it stays up on purpose, answering probes, until a release that reads the log is in."""
        raft = self.raft
        if raft is None or self.raft_stopped_for_stall:
            return None
        self.term_secs()  # the watch's look every 0.2 s keeps the term's age (status() reads it)
        if not raft.core_alive():
            return f"the Raft core stopped (its tick thread died: {raft.core_error or 'no exception recorded'})"
        bound = self.conf.controller.leaderless_exit_secs
        idle = raft.leaderless_secs()
        if bound and idle > bound:
            return (
                f"no leader for {idle:.0f} s (neither heard from one nor been one), over [controller] "
                f"leaderless_exit_secs = {bound:g}"
            )
        return None

    def _livez(self):
        alive = self.raft_alive()
        return text_response(200 if alive else 503, "alive" if alive else "raft tick thread died")

    def _readyz(self):
        raft = self.raft
        if raft is None:
            return text_response(503, f"not ready: {self.phase}")
        if self.raft_stopped_for_stall:
            return text_response(503, "not ready: stalled on a record this release cannot read")
        problem = self.serving_problem()
        if problem is not None:
            return text_response(503, f"not ready: {problem}")
        if raft.holding_elections():
            return text_response(503, "not ready: catching up with the cluster")
        if raft.leader_addr() is None:
            return text_response(503, "not ready: no leader")
        if not raft.isReady():
            return text_response(503, "not ready: replaying the log")
        return text_response(200, "ready")

    def _metrics_nodes(self):
        raft = self.raft
        if raft is None or self.raft_stopped_for_stall or not raft.is_leader() or not raft.has_quorum():
            return json_response(503, {"role": self.status()["role"], "leader": raft.leader_addr() if raft else None})
        nodes = raft.read(lambda s: {n: s.node_state(node) for n, node in s.nodes.items()})
        return json_response(200, {"role": "leader", "nodes": nodes})
