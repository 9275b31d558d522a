"""An unauthenticated peer floods a live leader's Raft port (issue 16, item 2).

Seen before the fix: a 4-byte frame length of 0x7fffffff followed by random bytes made pysyncobj buffer the
whole stream on its one tick thread; the majority elected another leader while the flooded one kept answering
200 on /metrics/nodes and serving stale reads, and the term climbed by 9.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import grpc
import pytest

from harness import wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

FLOOD_SECS = 12.0
FLOOD_BYTES_PER_CONNECTION = 256 * 1024 * 1024  # bounded even if the controller never closes the connection
IDLE_CONNECTIONS = 100  # more than raft_transport.MAX_PENDING_CONNECTIONS


def flood(addr: tuple[str, int], until: float, peers: list[str]) -> None:
    """Connect, declare a 0x7fffffff-byte frame, send random bytes; reconnect whenever the controller hangs up."""
    block = os.urandom(1024 * 1024)
    while time.monotonic() < until:
        try:
            with socket.create_connection(addr, timeout=2) as s:
                peers.append("{}:{}".format(*s.getsockname()))
                s.sendall(struct.pack("i", 0x7FFFFFFF))
                sent = 0
                while time.monotonic() < until and sent < FLOOD_BYTES_PER_CONNECTION:
                    s.sendall(block)
                    sent += len(block)
        except OSError:
            pass  # hung up on: what the fix does
        time.sleep(0.01)


def hold_idle(addr: tuple[str, int], until: float) -> None:
    """Open many connections that never say anything, and keep them open until the flood ends."""
    conns = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            try:
                conns.append(socket.create_connection(addr, timeout=2))
            except OSError:
                pass  # the backlog may be full for a moment: the others are enough
        while time.monotonic() < until:
            time.sleep(0.2)
    finally:
        for c in conns:
            c.close()


def test_flooding_the_leaders_raft_port_neither_elects_nor_leaves_two_leaders(cluster):
    leader = cluster.wait_leader()
    job_id = cluster.stub(leader).SubmitJob(
        slurm_pb2.SubmitJobRequest(
            spec=slurm_pb2.JobSpec(name="before-flood", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
        ),
        timeout=10,
    ).job_id
    term_before = leader.status()["term"]
    host, port = leader.raft_addr.split(":")
    addr = (host, int(port))

    until = time.monotonic() + FLOOD_SECS
    flood_peers: list[str] = []
    attackers = [threading.Thread(target=flood, args=(addr, until, flood_peers)) for _ in range(2)]
    attackers.append(threading.Thread(target=hold_idle, args=(addr, until)))
    for t in attackers:
        t.start()
    samples: list[list[int]] = []
    try:
        while time.monotonic() < until:
            samples.append([m.index for m in cluster.running() if m.probe("/metrics/nodes") == 200])
            time.sleep(0.1)
    finally:
        for t in attackers:
            t.join(timeout=FLOOD_SECS + 30)

    two_leaders = [s for s in samples if len(s) > 1]
    assert not two_leaders, f"{len(two_leaders)} of {len(samples)} samples had several leaders, e.g. {two_leaders[0]}"
    assert flood_peers, "the flood never connected"
    assert leader.proc.alive()

    after = cluster.wait_leader(timeout=20)
    for m in cluster.running():
        wait_until(
            lambda m=m: cluster.stub(m).GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5).job_id == job_id,
            20,
            f"job {job_id} readable from controller {m.index}",
        )
    term_after = after.status()["term"]
    assert term_after <= term_before + 1, f"the flood caused elections: term {term_before} -> {term_after}"
    # the drop is logged with the attacker's address
    log_text = leader.proc.log_text()
    assert any(p in log_text for p in flood_peers), "no log line names the flooding peer"
    assert "0x7fffffff" in log_text or str(0x7FFFFFFF) in log_text


def submit_as_a_client_would(stub, request, tries: int = 6) -> int:
    """A write whose outcome is unknown (UNAVAILABLE: a loaded machine may take longer than write_timeout_secs to
    commit 3 MiB) is retried with its key, as sbatch does; a transport that never replicates it still fails."""
    for n in range(tries):
        try:
            return stub.SubmitJob(request, timeout=30).job_id
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or n == tries - 1:
                raise
    raise AssertionError("unreachable")


def test_records_larger_than_a_handshake_frame_still_replicate(cluster):
    # frames of a peer that completed the handshake get the large bound: a 3 MiB script (incompressible,
    # so its AppendEntries frames are far above the 64 KiB handshake bound) reaches every controller
    import base64

    leader = cluster.wait_leader()
    script = "#!/bin/sh\n# " + base64.b64encode(os.urandom(3 * 1024 * 1024 * 3 // 4)).decode() + "\ntrue\n"
    jobs = []
    for i in range(3):  # one alone (sent in chunks) and two back to back (may share one batch)
        spec = slurm_pb2.JobSpec(name=f"big{i}", script=script, user="root", work_dir="/tmp")
        request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=f"big-{i}-{os.getpid()}")
        jobs.append(submit_as_a_client_would(cluster.stub(leader), request))
    for m in cluster.running():
        for job_id in jobs:
            wait_until(
                lambda m=m, j=job_id: cluster.stub(m).GetJob(slurm_pb2.GetJobRequest(job_id=j), timeout=10).spec.script
                == script,
                60,
                f"job {job_id} with its whole script on controller {m.index}",
            )
    assert "raft port: dropped" not in "".join(m.proc.log_text() for m in cluster.members)
