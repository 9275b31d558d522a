"""A follower whose state_dir fills up: it refuses replicated entries instead of dying, and catches up after.

Its state_dir is a real small tmpfs, filled to the last byte: pysyncobj's mmap journal used to die of SIGBUS
there (a write into a page the filesystem could not allocate), with no log line.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from harness import wait_until
from prereqs import needs_root, require
from spur_hpc.proto import slurm_pb2

pytestmark = [pytest.mark.slow, needs_root()]

REFUSED = "this controller acknowledges no replicated entry until then"
DIVERGED = "may have diverged"


def spec(name: str) -> slurm_pb2.JobSpec:
    return slurm_pb2.JobSpec(name=name, script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")


def job_ids(cluster, member) -> set[int]:
    reply = cluster.stub(member).ListJobs(slurm_pb2.ListJobsRequest(include_finished=True), timeout=10)
    return {j.job_id for j in reply.jobs}


@pytest.fixture
def tmpfs_over(tmp_path):
    """tmpfs_over(dir, size_mb): a small tmpfs mounted on dir, keeping what dir held; unmounted after the test."""
    mounts: list[Path] = []

    def mount(path: Path, size_mb: int) -> None:
        saved = tmp_path / f"saved-{len(mounts)}"
        shutil.copytree(path, saved)
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
        require(result.returncode == 0, f"cannot mount a tmpfs on {path}: {result.stderr.strip()}",
                "run the tests as root")
        mounts.append(path)
        shutil.copytree(saved, path, dirs_exist_ok=True)

    yield mount
    for path in mounts:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_up(path: Path) -> Path:
    """A filler file that takes every free byte of the filesystem under path."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    return filler


def test_follower_with_a_full_state_dir_refuses_entries_cleanly_and_catches_up(make_cluster, tmpfs_over):
    c = make_cluster(3, extra_controller="min_free_disk_mb = 2")
    leader = c.wait_leader()
    other, victim = [m for m in c.members if m is not leader]
    stub = c.stub(leader)

    def submit(key: str) -> int:
        return stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec(key), idempotency_key=key), timeout=10).job_id

    before = {submit(f"before-{i}") for i in range(5)}
    wait_until(lambda: job_ids(c, victim) >= before, 20, "the follower to have the first jobs")

    # The follower's state_dir becomes a 16 MB tmpfs holding what it held.
    victim.proc.stop()
    tmpfs_over(victim.state_dir, 16)
    c.spawn(victim)
    wait_until(lambda: victim.status().get("applied_index", 0) >= leader.status()["commit_index"], 30,
               "the follower to rejoin from its tmpfs state_dir")

    filler = fill_up(victim.state_dir)
    # The free space it sees is at most a second old; the journal's allocated room is not used up yet.
    wait_until(lambda: victim.status()["disk_free_mb"] < 2, 10, "the follower to see its state_dir full")
    during = {submit(f"during-{i}") for i in range(40)}  # acknowledged: committed on the leader and `other`
    assert job_ids(c, leader) >= before | during
    wait_until(lambda: job_ids(c, other) >= before | during, 20, "the other follower to have every job")

    wait_until(lambda: not victim.proc.alive() or victim.status().get("disk_full"), 20,
               "the full follower's /status to show it")
    code = victim.proc.popen.poll()
    assert code is None, f"the full follower died (exit {code}; a signal is negative: -{int(signal.SIGBUS)} is SIGBUS)"
    full = victim.status()["disk_full"]
    assert str(victim.state_dir) in full and "MB free" in full
    wait_until(lambda: REFUSED in victim.proc.log_text(), 10, "the full follower's log line")
    assert victim.proc.log_text().count(REFUSED) == 1, "the condition is logged once, not per entry or retry"
    assert "Traceback" not in victim.proc.log_text()
    # It acknowledged none of what it could not write: the leader still counts it behind.
    assert leader.status()["lag"][victim.raft_addr] > 0
    assert not job_ids(c, victim) >= during

    # Restarted while still full (as a supervisor would), it comes up and waits the same way.
    assert victim.proc.stop() == 0
    c.spawn(victim)
    wait_until(lambda: not victim.proc.alive() or victim.status().get("disk_full"), 30,
               "the restarted full follower's /status to show it")
    assert victim.proc.popen.poll() is None, f"the restarted full follower exited with {victim.proc.popen.returncode}"

    filler.unlink()
    wait_until(lambda: job_ids(c, victim) >= before | during, 30, "the follower to catch up once space is back")
    wait_until(lambda: victim.status()["disk_full"] is None, 10, "/status to show the disk is no longer full")
    assert "has space again" in victim.proc.log_text()

    # Its journal stayed readable: a restart reads it back whole, and nothing is truncated or replayed twice.
    code = victim.proc.stop()
    assert code == 0, f"spurctld stopped with {code} (a signal is negative: -{int(signal.SIGBUS)} is SIGBUS)"
    c.spawn(victim)
    after = submit("after")
    wait_until(lambda: job_ids(c, victim) >= before | during | {after}, 30, "the restarted follower to catch up")
    assert DIVERGED not in victim.proc.log_text()
    assert all(DIVERGED not in m.proc.log_text() for m in c.members)
