"""Safe bootstrap: a controller with an empty Raft store asks its peers before it starts.

Verdicts for each peer's ClusterProbe answer:
- it belongs to a cluster whose committed membership lists us: we lost our volume -> join and catch up;
- it belongs to a cluster that is adding us (`spur admin raft add`: we are its learner) -> join, catch up without
  voting, and vote once the leader promotes us;
- it belongs to a cluster that does not list us, or to another cluster (name or id): refuse to start;
- it has no cluster, or predates the RPC (UNIMPLEMENTED): no cluster there;
- no answer (UNAVAILABLE, timeout): unknown -> wait and ask again. We bootstrap a new cluster only when
  every peer has answered "no cluster", so wiped members can never form a second cluster while the
  member holding the data is down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from spur_hpc import grpcutil
from spur_hpc.auth import AuthError
from spur_hpc.proto import raft_internal_pb2, raft_internal_pb2_grpc

log = logging.getLogger("spurctld.bootstrap")

NO_CLUSTER, HAS_CLUSTER, UNKNOWN = "no-cluster", "has-cluster", "unknown"
Metadata = tuple[tuple[str, str], ...]


@dataclass
class PeerAnswer:
    host: str
    kind: str
    reply: raft_internal_pb2.ClusterProbeReply | None = None
    error: str = ""


@dataclass
class Decision:
    action: str  # "bootstrap" | "join" | "refuse"
    learner: bool = False  # joining as the controller being added, not as a member that lost its state
    members: list[str] = field(default_factory=list)
    cluster_id: str = ""
    commit_index: int = 0
    message: str = ""


def probe_peer(
    host: str, own_raft: str, cluster_name: str, timeout: float, credential: Callable[[], Metadata] = tuple
) -> PeerAnswer:
    """credential() gives the metadata of one call (a MUNGE credential is good for one request only)."""
    try:
        metadata = credential()
    except AuthError as exc:
        return PeerAnswer(host, UNKNOWN, error=str(exc))
    try:
        with grpcutil.channel(host) as ch:
            stub = raft_internal_pb2_grpc.RaftInternalStub(ch)
            reply = stub.ClusterProbe(
                raft_internal_pb2.ClusterProbeRequest(from_raft_addr=own_raft, cluster_name=cluster_name),
                timeout=timeout,
                metadata=metadata,
            )
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            return PeerAnswer(host, NO_CLUSTER, error="peer predates ClusterProbe")
        return PeerAnswer(host, UNKNOWN, error=f"{exc.code().name}: {exc.details()}")
    return PeerAnswer(host, HAS_CLUSTER if reply.has_cluster else NO_CLUSTER, reply=reply)


def judge(answers: list[PeerAnswer], own_raft: str, cluster_name: str) -> Decision | None:
    """A decision from the answers so far, or None to wait for the peers that did not answer."""
    for a in answers:
        if a.kind != HAS_CLUSTER:
            continue
        r = a.reply
        members = list(r.members)
        if r.cluster_name != cluster_name:
            return Decision(
                "refuse",
                message=(
                    f"peer {a.host} ({r.raft_addr}) belongs to cluster {r.cluster_name!r} (id {r.cluster_id}), "
                    f"not {cluster_name!r}; check [cluster] name and [controller] hosts/peers"
                ),
            )
        if own_raft not in members and own_raft not in r.learners:
            return Decision(
                "refuse",
                message=(
                    f"peer {a.host} ({r.raft_addr}) already runs cluster {r.cluster_name!r} (id {r.cluster_id}) "
                    f"with members {', '.join(members)}, which do not include this controller ({own_raft}); "
                    "starting would create a second cluster. Add it first from a member: spur admin raft add "
                    f'{own_raft} --grpc ADDR (docs/controller.md, "Membership"), then start it empty'
                ),
            )
    joins = [a for a in answers if a.kind == HAS_CLUSTER]
    if joins:
        ids = {a.reply.cluster_id for a in joins}
        if len(ids) > 1:
            return Decision(
                "refuse",
                message=f"peers report different cluster ids ({', '.join(sorted(ids))}); "
                "the controllers are split into several clusters and need an administrator",
            )
        best = max(joins, key=lambda a: a.reply.commit_index)
        learner = own_raft not in best.reply.members
        return Decision(
            "join",
            members=list(best.reply.members),
            cluster_id=best.reply.cluster_id,
            commit_index=best.reply.commit_index,
            learner=learner,
            message=f"peer {best.host} holds cluster {best.reply.cluster_id} that "
            + ("is adding this controller: joining it as a learner" if learner else "lists this controller: joining it")
            + " with an empty store and catching up",
        )
    if all(a.kind == NO_CLUSTER for a in answers):
        return Decision("bootstrap", message="every peer answered that it holds no cluster: bootstrapping")
    return None


def decide(
    hosts: list[str],
    own_raft: str,
    cluster_name: str,
    timeout: float,
    stop: Callable[[], bool],
    wait_limit: float = 0.0,
    probe: Callable[[str], PeerAnswer] | None = None,
    credential: Callable[[], Metadata] = tuple,
) -> Decision:
    """Ask every peer until a decision is possible. wait_limit > 0 gives up (refuses) after that many seconds."""
    probe = probe or (lambda host: probe_peer(host, own_raft, cluster_name, timeout, credential))
    started = time.monotonic()
    last_report = 0.0
    pause = 0.2
    while True:
        answers = [probe(h) for h in hosts]
        # A host that answers with our own raft address is ourselves.
        answers = [a for a in answers if not (a.reply is not None and a.reply.raft_addr == own_raft)]
        decision = judge(answers, own_raft, cluster_name)
        if decision is not None:
            return decision
        waiting = [f"{a.host} ({a.error})" for a in answers if a.kind == UNKNOWN]
        now = time.monotonic()
        if now - last_report >= 5.0:
            log.warning(
                "empty Raft store: waiting for peers %s to answer ClusterProbe before bootstrapping "
                "(a peer may hold this cluster's data)",
                ", ".join(waiting),
            )
            last_report = now
        if wait_limit and now - started > wait_limit:
            return Decision(
                "refuse",
                message=f"peers {', '.join(waiting)} did not answer ClusterProbe in {wait_limit:.0f} s; "
                "refusing to bootstrap a new cluster while they may hold its data. Start them, or remove them "
                "from [controller] peers and hosts if they are gone for good",
            )
        if stop():
            return Decision("refuse", message="stopped while waiting for peers to answer ClusterProbe")
        time.sleep(pause)
        pause = min(pause * 1.5, 2.0)


def removed_by(answers: list[PeerAnswer], own_raft: str, cluster_id: str, own_commit: int) -> PeerAnswer | None:
    """The peer that shows a member hearing from no leader was removed from its cluster while it was away, or None:
    one of the same cluster, at least as far along the log, whose committed membership lists it neither as a voter
    nor as joining (the voters stop talking to a removed member, so it cannot learn this from the log; a peer
    further behind may not know yet that this member was added)."""
    for a in answers:
        r = a.reply
        if (
            a.kind != HAS_CLUSTER
            or r.cluster_id != cluster_id
            or r.raft_addr == own_raft
            or r.commit_index < own_commit
        ):
            continue
        if own_raft not in r.members and own_raft not in r.learners:
            return a
    return None
