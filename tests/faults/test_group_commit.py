"""Group commit: the journal is synced once per batch of entries, never after a message that carries them.

The daemon cases break real 3-controller clusters during bursts of concurrent submissions (idempotency
keys, many threads) and then count, on every member, what each acknowledged submission became: one job
with the acknowledged id, never none and never two. The in-process case watches every message a real
pysyncobj cluster of SpurRaft members sends and checks that the sender's journal held nothing unsynced.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from harness import free_port, next_ip_base, raft_settings, wait_until
from spur_hpc.controller import raft, wal
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

ROUNDS = 20
THREADS = 12
# A controller that stopped or died under a call: the outcome is unknown, so the same key is sent again.
RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)


def spec(name: str) -> slurm_pb2.JobSpec:
    return slurm_pb2.JobSpec(name=name, script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")


class Burst:
    """THREADS clients submitting at once, each retrying its key on any running controller until it is
    acknowledged (as the CLI does). acked: key -> the job id the acknowledgement carried."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.acked: dict[str, int] = {}
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def _submit(self, key: str) -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            for m in self.cluster.running():
                try:
                    reply = self.cluster.stub(m).SubmitJob(
                        slurm_pb2.SubmitJobRequest(spec=spec(key), idempotency_key=key), timeout=3
                    )
                except grpc.RpcError as exc:
                    if exc.code() not in RETRY:
                        self.errors.append(f"{exc.code().name}: {exc.details()}")
                        return
                    continue
                with self.lock:
                    self.acked[key] = reply.job_id
                return
            if self.stopping.is_set() and not self.cluster.running():
                return  # the whole cluster was stopped: this key was never acknowledged
            time.sleep(0.05)
        self.errors.append(f"submission {key} never acknowledged")

    def _run(self) -> None:
        while not self.stopping.is_set():
            self._submit(uuid.uuid4().hex)

    def start(self) -> Burst:
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(THREADS)]
        for t in self.threads:
            t.start()
        return self

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_for(self, more: int, what: str) -> None:
        target = self.count() + more
        wait_until(lambda: self.count() >= target, 30, what)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(60)
        assert not self.errors, self.errors


def jobs_by_name(cluster, member, names: list[str] | None = None) -> dict[str, list[int]]:
    request = slurm_pb2.ListJobsRequest(include_finished=True, brief=True, names=names or [])
    reply = cluster.stub(member).ListJobs(request, timeout=30)
    by_name: dict[str, list[int]] = {}
    for job in reply.jobs:
        by_name.setdefault(job.spec.name, []).append(job.job_id)
    return by_name


def assert_every_member_holds_each_acknowledged_job_once(cluster, acked: dict[str, int], by_names=False) -> None:
    """With by_names, only the jobs of those names are listed: a round's check then costs the same in round 20 as in
    round 1, where listing every job so far took most of the late rounds' time (the full check ends the test)."""
    leader = cluster.wait_leader(timeout=30)
    commit = leader.status()["commit_index"]
    for m in cluster.members:
        wait_until(lambda m=m: m.status()["applied_index"] >= commit, 30, f"controller {m.index} to apply {commit}")
        by_name = jobs_by_name(cluster, m, sorted(acked) if by_names else None)
        lost = sorted(k for k, job_id in acked.items() if job_id not in by_name.get(k, []))
        duplicated = sorted(k for k, ids in by_name.items() if len(ids) > 1)
        assert lost == [] and duplicated == [], f"controller {m.index}: lost {lost[:5]}, duplicated {duplicated[:5]}"


def kill9_rounds(cluster, pick) -> None:
    """ROUNDS times: a burst, kill -9 of the member pick() names in its middle, more acknowledged after it,
    the member started again; then each job the round acknowledged is on every member, once. At the end every
    job acknowledged in any round is, once, on every member."""
    acked: dict[str, int] = {}
    for _ in range(ROUNDS):
        burst = Burst(cluster).start()
        try:
            burst.wait_for(15, "acknowledged submissions before the kill")
            victim = pick(cluster)
            victim.proc.kill9()
            cluster.wait_leader(timeout=20, exclude=victim)
            burst.wait_for(15, "acknowledged submissions after the kill")
            cluster.spawn(victim, write_conf=False)
            wait_until(lambda v=victim: v.probe("/livez") == 200, 20, "the killed controller to come back")
        finally:
            burst.stop()
        acked.update(burst.acked)
        assert_every_member_holds_each_acknowledged_job_once(cluster, burst.acked, by_names=True)
    assert_every_member_holds_each_acknowledged_job_once(cluster, acked)


def a_follower(cluster):
    leader = cluster.wait_leader()
    return next(m for m in cluster.members if m is not leader)


# Snapshots every 200 entries: the kills also land while members compact their journals, and a restarted
# follower is often behind the leader's snapshot (it is sent the snapshot, not the log).
COMPACT_OFTEN = "log_compaction_entries = 200\nlog_compaction_job_ratio = 0\n"


def test_kill9_of_the_leader_in_bursts_of_submissions_loses_and_duplicates_no_acknowledged_job(make_cluster):
    kill9_rounds(make_cluster(3, extra_controller=COMPACT_OFTEN), lambda c: c.wait_leader())


def test_kill9_of_a_follower_in_bursts_of_submissions_loses_and_duplicates_no_acknowledged_job(make_cluster):
    kill9_rounds(make_cluster(3, extra_controller=COMPACT_OFTEN), a_follower)


def test_a_clean_stop_during_a_burst_loses_nothing_and_a_restart_finds_every_acknowledged_job(cluster):
    acked: dict[str, int] = {}
    for _ in range(3):
        burst = Burst(cluster).start()
        try:
            burst.wait_for(30, "acknowledged submissions before the stop")
            leader = cluster.wait_leader()
            # The followers first, then the leader, while the burst goes on: the last entries each one took
            # must be in its journal when it is started again.
            for m in [m for m in cluster.members if m is not leader] + [leader]:
                m.proc.stop()
        finally:
            burst.stop()
        acked.update(burst.acked)
        cluster.start()
        assert_every_member_holds_each_acknowledged_job_once(cluster, acked)


# ------------------------------------------------------------------------------------ in process


class Watched:
    """SpurRaft members in this process whose sends are checked: a message must never leave while the
    sender's journal holds entries that were not synced."""

    def __init__(self, tmp_path, n: int = 3) -> None:
        base = next_ip_base(n)
        ips = [f"127.0.1.{base + i}" for i in range(n)]
        addrs = [f"{ip}:{free_port(ip)}" for ip in ips]
        self.unsynced: list[str] = []
        self.members: list[raft.SpurRaft] = []
        for i, addr in enumerate(addrs):
            member = raft.SpurRaft(raft_settings(tmp_path / f"m{i}", addr, addrs, password="group-commit-test-secret"))
            self._watch(member, addr)
            self.members.append(member)
        for member in self.members:
            member.start()

    def _watch(self, member: raft.SpurRaft, addr: str) -> None:
        transport = member._SyncObj__transport
        send = transport.send

        def checked_send(node, message):
            if message.get("type") in ("append_entries", "next_node_idx") and member._journal.dirty:
                self.unsynced.append(f"{addr} sent {message['type']} with unsynced entries")
            return send(node, message)

        transport.send = checked_send

    def leader(self) -> raft.SpurRaft:
        wait_until(lambda: any(m.is_leader() for m in self.members), 30, "a leader")
        return next(m for m in self.members if m.is_leader())

    def stop(self) -> None:
        for member in self.members:
            member.stop()


def test_no_message_leaves_before_the_entries_it_carries_are_synced_and_a_burst_shares_syncs(tmp_path):
    cluster = Watched(tmp_path)
    try:
        leader = cluster.leader()
        init = wal.make_record("cluster_init", name="gc", cluster_id="gc-1", members=[], wal_level=1)
        leader.propose(init, timeout=10)
        syncs_before = leader.journal_syncs()
        records = [dict(init) for _ in range(400)]  # each one applies as "already initialised"
        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(lambda r: leader.apply_record(r, sync=True, timeout=20), records))
        leader_syncs = leader.journal_syncs() - syncs_before
        applied = leader.applied_index()
        for m in cluster.members:
            wait_until(lambda m=m: m.applied_index() >= applied, 20, "every member to apply the burst")
    finally:
        cluster.stop()
    assert cluster.unsynced == [], cluster.unsynced[:5]
    # 400 entries from 32 callers at once: synced in batches, not one sync per entry.
    assert leader_syncs < len(records) / 2, leader_syncs


# ------------------------------------------------------------------------------------ compaction

COMPACTOR = """
import sys
from spur_hpc.controller import raft
journal = raft.DurableJournal(sys.argv[1])
if len(journal) == 0:
    for i in range(1, 60001):
        journal.add(b"\\0" + b"x" * 200, i, 1)
    journal.sync()
print("compacting", flush=True)
while True:
    journal.deleteEntriesTo(1)  # keeps all but the first entry: the whole tail rewritten each time
"""


def test_kill9_in_the_middle_of_a_compaction_leaves_every_entry_after_the_compaction_point(tmp_path):
    """A compaction keeps the entries after the snapshot; a crash while it writes them must leave them all
    (the old journal or the new one, whole), never a journal that ends part-way."""
    import random
    import subprocess
    import sys

    from spur_hpc.controller import storage

    path = tmp_path / "raft.journal"
    for round_ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", COMPACTOR, str(path)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "compacting"
            time.sleep(random.uniform(0.05, 0.4))
        finally:
            proc.kill()
            proc.wait(10)
        storage.journal_commands(str(path))  # raises when the structure is damaged
        journal = raft.DurableJournal(str(path))
        try:
            ids = [journal[i][1] for i in range(len(journal))]
        finally:
            journal._destroy()
        assert ids and ids[-1] == 60000, f"round {round_}: the journal ends at entry {ids[-1] if ids else None}"
        assert ids == list(range(ids[0], 60001)), f"round {round_}: entries missing in the middle"
