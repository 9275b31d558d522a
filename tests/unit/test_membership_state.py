"""member_change in the state machine (one change at a time, decided on the voters it names), the learner verdict
of safe bootstrap, and the admin CLI's refusals: no cluster, no processes (test_membership.py in integration has
those)."""

from __future__ import annotations

import pickle

import pytest

from spur_hpc.cli import admincmd
from spur_hpc.cli.runner import CliError
from spur_hpc.controller import bootstrap, wal
from spur_hpc.controller.bootstrap import HAS_CLUSTER, PeerAnswer
from spur_hpc.controller.state import ClusterState
from spur_hpc.proto import raft_internal_pb2


def rec(op, **fields):
    return wal.make_record(op, **fields)


def cluster(members=("a:1",)) -> ClusterState:
    s = ClusterState()
    assert s.apply(rec("cluster_init", name="c", cluster_id="id", members=list(members), wal_level=5))["ok"]
    return s


def change(s: ClusterState, action: str, addr: str, expect=None, **fields):
    return s.apply(
        rec(
            "member_change",
            action=action,
            raft_addr=addr,
            expect=list(s.members if expect is None else expect),
            **fields,
        )
    )


def test_learn_then_promote_adds_a_voter_and_is_in_the_snapshot():
    s = cluster()
    assert change(s, "learn", "b:1", grpc_addr="b:2")["ok"]
    assert s.members == ["a:1"] and s.learners == {"b:1": {"grpc_addr": "b:2"}}
    assert s.member_info["b:1"]["grpc_addr"] == "b:2" and s.member_info["b:1"]["max_level"] == 0
    copy = pickle.loads(pickle.dumps(s))
    assert copy.learners == s.learners and copy.fingerprint() == s.fingerprint()
    assert change(s, "promote", "b:1")["ok"]
    assert s.members == ["a:1", "b:1"] and s.learners == {}


def test_one_change_at_a_time_and_decided_on_the_current_voters():
    s = cluster(["a:1", "b:1", "c:1"])
    assert change(s, "learn", "d:1", grpc_addr="d:2")["ok"]
    refused = change(s, "learn", "e:1", grpc_addr="e:2")
    assert not refused["ok"] and "d:1 is joining" in refused["message"]
    refused = change(s, "remove", "c:1")
    assert not refused["ok"] and "in flight" in refused["message"]
    # The learner taken out again (an add that did not catch up) frees the way.
    assert change(s, "remove", "d:1")["ok"] and s.learners == {} and "d:1" not in s.member_info
    stale = change(s, "remove", "c:1", expect=["a:1", "b:1", "c:1", "x:1"])
    assert not stale["ok"] and "changed meanwhile" in stale["message"]
    assert change(s, "remove", "c:1")["ok"] and s.members == ["a:1", "b:1"]


@pytest.mark.parametrize(
    "action, addr, members, needle",
    [
        ("learn", "a:1", ["a:1"], "member already"),
        ("promote", "b:1", ["a:1"], "not joining"),
        ("remove", "b:1", ["a:1"], "not a member"),
        ("remove", "a:1", ["a:1"], "last controller"),
    ],
)
def test_refusals_say_why(action, addr, members, needle):
    s = cluster(members)
    before = s.fingerprint()
    result = change(s, action, addr, grpc_addr="g:1")
    assert not result["ok"] and needle in result["message"]
    assert s.fingerprint() == before


def test_an_empty_controller_being_added_joins_as_a_learner_and_a_stranger_is_refused():
    reply = raft_internal_pb2.ClusterProbeReply(
        has_cluster=True, cluster_name="c", cluster_id="id", members=["a:1"], learners=["b:1"], raft_addr="a:1"
    )
    joined = bootstrap.judge([PeerAnswer("a", HAS_CLUSTER, reply)], "b:1", "c")
    assert joined.action == "join" and joined.learner and joined.members == ["a:1"]
    assert "as a learner" in joined.message
    refused = bootstrap.judge([PeerAnswer("a", HAS_CLUSTER, reply)], "z:1", "c")
    assert refused.action == "refuse" and "spur admin raft add z:1" in refused.message


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["raft"], "raft status"),
        (["nodes"], "unknown admin command"),
        (["raft", "add", "b:1"], "needs --grpc"),
        (["raft", "add", "b:1", "--grpc", "b:2", "--timeout", "0"], "--timeout"),
        (["raft", "remove"], "needs one controller"),
        (["raft", "remove", "b:1", "--grpc", "x:1"], "belong to raft add"),
        (["raft", "status", "b:1"], "takes no address"),
    ],
)
def test_cli_refusals(argv, needle):
    with pytest.raises(CliError, match=needle):
        admincmd.main(argv)


def test_a_member_removed_while_away_learns_it_from_a_peer_further_along():
    def answer(members, learners=(), commit=10, cluster_id="id"):
        reply = raft_internal_pb2.ClusterProbeReply(
            has_cluster=True,
            cluster_name="c",
            cluster_id=cluster_id,
            members=members,
            learners=list(learners),
            raft_addr="a:1",
            commit_index=commit,
        )
        return PeerAnswer("a", HAS_CLUSTER, reply)

    assert bootstrap.removed_by([answer(["a:1", "b:1"])], "z:1", "id", 5).reply.members == ["a:1", "b:1"]
    assert bootstrap.removed_by([answer(["a:1", "z:1"])], "z:1", "id", 5) is None
    assert bootstrap.removed_by([answer(["a:1"], learners=["z:1"])], "z:1", "id", 5) is None
    assert bootstrap.removed_by([answer(["a:1"], commit=4)], "z:1", "id", 5) is None  # behind: may not know z yet
    assert bootstrap.removed_by([answer(["a:1"], cluster_id="other")], "z:1", "id", 5) is None
