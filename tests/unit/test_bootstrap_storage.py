"""Safe-bootstrap verdicts and the state-directory checks."""

from __future__ import annotations

import struct

import pytest

from spur_hpc.controller import bootstrap, storage
from spur_hpc.controller.bootstrap import HAS_CLUSTER, NO_CLUSTER, UNKNOWN, PeerAnswer
from spur_hpc.proto import raft_internal_pb2

OWN = "127.0.1.1:6821"


def has(host, members, name="c", cluster_id="id1", commit=10, raft="127.0.1.2:6821"):
    reply = raft_internal_pb2.ClusterProbeReply(
        has_cluster=True, cluster_name=name, cluster_id=cluster_id, members=members, commit_index=commit, raft_addr=raft
    )
    return PeerAnswer(host, HAS_CLUSTER, reply)


@pytest.mark.parametrize(
    "answers, action, needle",
    [
        ([PeerAnswer("b", NO_CLUSTER), PeerAnswer("c", NO_CLUSTER)], "bootstrap", "bootstrapping"),
        (
            [PeerAnswer("b", NO_CLUSTER, error="peer predates ClusterProbe"), PeerAnswer("c", NO_CLUSTER)],
            "bootstrap",
            "",
        ),
        ([PeerAnswer("b", NO_CLUSTER), PeerAnswer("c", UNKNOWN)], None, ""),
        ([has("b", [OWN, "b:1", "c:1"]), PeerAnswer("c", UNKNOWN)], "join", "joining"),
        ([has("b", ["b:1"]), PeerAnswer("c", NO_CLUSTER)], "refuse", "spur admin raft add"),
        ([has("b", [OWN, "b:1"], name="other")], "refuse", "belongs to cluster 'other'"),
        ([has("b", [OWN, "b:1"], cluster_id="x"), has("c", [OWN, "c:1"], cluster_id="y")], "refuse", "split"),
    ],
)
def test_judge(answers, action, needle):
    decision = bootstrap.judge(answers, OWN, "c")
    if action is None:
        assert decision is None
        return
    assert decision.action == action
    assert needle in decision.message


def test_decide_waits_for_unreachable_peers_then_gives_up_when_limited():
    calls = []

    def probe(host):
        calls.append(host)
        return PeerAnswer(host, UNKNOWN, error="UNAVAILABLE")

    decision = bootstrap.decide(["b", "c"], OWN, "c", 0.1, stop=lambda: False, wait_limit=0.5, probe=probe)
    assert decision.action == "refuse" and "did not answer" in decision.message
    assert len(calls) >= 4


def test_join_takes_membership_from_the_most_advanced_peer():
    d = bootstrap.judge([has("b", [OWN, "b:1", "c:1"], commit=5), has("c", [OWN, "b:1", "c:1"], commit=9)], OWN, "c")
    assert d.action == "join" and d.commit_index == 9 and OWN in d.members


def _journal(records: list[bytes]) -> bytes:
    body = b""
    for i, cmd in enumerate(records):
        data = struct.pack("<QQ", i + 1, 1) + cmd
        body += struct.pack("<I", len(data)) + data + struct.pack("<I", len(data))
    header = b"PYSYNCOBJ".ljust(24, b"\0") + b"0.3.17".ljust(8, b"\0") + struct.pack("<II", 1, 40 + len(body))
    return header + body


def test_journal_checks(tmp_path):
    path = tmp_path / "raft.journal"
    assert storage.journal_records(str(path)) == 0
    path.write_bytes(_journal([b"\x01", b"\x00abc"]))
    assert storage.journal_records(str(path)) == 2
    data = _journal([b"\x01", b"\x00abc"])
    path.write_bytes(data[:-3])
    with pytest.raises(storage.StorageError, match=r"truncated.*move its state_dir aside"):
        storage.journal_records(str(path))
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    path.write_bytes(bytes(corrupt))
    with pytest.raises(storage.StorageError, match="damaged at byte"):
        storage.journal_records(str(path))
    path.write_bytes(b"garbage")
    with pytest.raises(storage.StorageError, match="no valid header"):
        storage.journal_records(str(path))


def test_corrupt_snapshot_is_refused_with_its_name(tmp_path):
    paths = storage.StatePaths(str(tmp_path))
    (tmp_path / storage.DUMP).write_bytes(b"not gzip")
    with pytest.raises(storage.StorageError, match=str(tmp_path / storage.DUMP)):
        storage.has_data(paths)


def test_identity_is_written_atomically_and_read_back(tmp_path):
    paths = storage.StatePaths(str(tmp_path))
    storage.write_identity(paths, "c", "id1", ["b", "a"])
    assert storage.read_identity(paths) == {
        "format": 1,
        "cluster_name": "c",
        "cluster_id": "id1",
        "members": ["a", "b"],
    }
    assert (tmp_path / storage.IDENTITY).stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob("*.tmp*"))
