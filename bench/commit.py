"""Commit latency of a single submission on an idle cluster of 3 controllers (gRPC -> Raft -> reply).

One client submits one job at a time (a pause between calls, so that the cluster is idle when each call
arrives) and records each call's latency. No agent is registered: every job stays PENDING. The result
notes the load average (the machine is shared): compare runs made side by side, not across days.

  python bench/commit.py [--count 300] [--pause 0.02]           # start a cluster, measure, record
  python bench/commit.py --hold FILE                             # start a cluster, write the leader's
                                                                 # address to FILE, run until stopped
  python bench/commit.py --client ADDRESS [--count 300]          # measure against a running cluster only

--hold and --client pair two builds in one run: hold one cluster per build (the older build's daemons
first on PYTHONPATH, and another --ip-base), then time the --client runs against each in turn.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

import grpc

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
import patched
# isort: on

from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc

SPEC = slurm_pb2.JobSpec(name="commit", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")


def sequential(stub, count: int, pause: float) -> dict:
    latencies = []
    for _ in range(count):
        t0 = time.monotonic()
        stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=SPEC, idempotency_key=uuid.uuid4().hex), timeout=10)
        latencies.append(time.monotonic() - t0)
        time.sleep(pause)
    return {
        "latency_s": common.summary(latencies),
        "p50_s": common.pct(latencies, 50),
        "p99_s": common.pct(latencies, 99),
    }


def client(address: str, count: int, pause: float) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = slurm_pb2_grpc.SlurmControllerStub(channel)
        stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=SPEC, idempotency_key=uuid.uuid4().hex), timeout=10)
        one = sequential(stub, count, pause)
    print(f"{address}: p50 {one['p50_s'] * 1000:.2f} ms, p99 {one['p99_s'] * 1000:.2f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=300, help="sequential submissions")
    parser.add_argument("--pause", type=float, default=0.02, help="pause between submissions (s)")
    parser.add_argument("--ip-base", type=int, default=131, help="controllers listen on 127.0.1.N from N")
    parser.add_argument("--hold", metavar="FILE", help="start a cluster, write the leader's address to FILE, wait")
    parser.add_argument("--client", metavar="ADDRESS", help="only measure against the leader at ADDRESS")
    common.add_set_option(parser)
    patched.add_patch_option(parser)
    opts = parser.parse_args()
    if opts.client:
        client(opts.client, opts.count, opts.pause)
        return
    with tempfile.TemporaryDirectory() as tmp, patched.bench_cluster(Path(tmp), opts.ip_base, opts, "commit") as (
        cluster,
        leader,
    ):
        stub = cluster.stub(leader)
        stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=SPEC, idempotency_key="warm"), timeout=10)
        if opts.hold:
            Path(opts.hold).write_text(leader.grpc_addr + "\n")
            print(f"holding a cluster, leader {leader.grpc_addr} (pid {os.getpid()})", flush=True)
            while True:
                time.sleep(3600)
        time.sleep(1.0)
        one = sequential(stub, opts.count, opts.pause)
    print(f"single submission: p50 {one['p50_s'] * 1000:.2f} ms, p99 {one['p99_s'] * 1000:.2f} ms", flush=True)
    rows = [
        common.row(
            "commit_single",
            "commit latency of a single submission, idle cluster of 3",
            [common.check("p50", one["p50_s"] * 1000, "<=", 30, "ms")],
            detail=f"p99 {one['p99_s'] * 1000:.1f} ms, {opts.count} calls {opts.pause * 1000:.0f} ms apart",
        )
    ]
    common.finish("commit", {"single": one, "count": opts.count, "pause_s": opts.pause}, opts, rows)


if __name__ == "__main__":
    main()
