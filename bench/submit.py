"""Job submissions through the leader (gRPC -> Raft -> reply) on 3 controllers.

1. Throughput: C concurrent clients (asyncio gRPC, one process) submit as fast as the leader answers, for
   a warm-up and then a measured window; jobs/s over the window and the latency of every call in it.
2. Single submission on an idle cluster: one client, one call at a time, with a pause between calls.

No agent is registered, so every job stays PENDING (nothing runs). Usage:
python bench/submit.py [--clients 64] [--seconds 10] [--single 200]
"""

from __future__ import annotations

import argparse
import asyncio
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

SPEC = slurm_pb2.JobSpec(name="bench", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")


async def throughput(address: str, clients: int, warmup: float, seconds: float) -> dict:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    start = time.monotonic()
    window = (start + warmup, start + warmup + seconds)
    done_in_window = 0

    async def client(stub) -> None:
        nonlocal done_in_window
        while True:
            t0 = time.monotonic()
            if t0 >= window[1]:
                return
            try:
                await stub.SubmitJob(
                    slurm_pb2.SubmitJobRequest(spec=SPEC, idempotency_key=uuid.uuid4().hex), timeout=10
                )
            except grpc.RpcError as exc:
                errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                continue
            t1 = time.monotonic()
            if window[0] <= t0 and t1 <= window[1]:
                latencies.append(t1 - t0)
            if window[0] <= t1 <= window[1]:
                done_in_window += 1

    # a few channels, as separate client processes would have (one channel multiplexes on one connection)
    channels = [grpc.aio.insecure_channel(address) for _ in range(4)]
    try:
        stubs = [slurm_pb2_grpc.SlurmControllerStub(ch) for ch in channels]
        await asyncio.gather(*(client(stubs[i % len(stubs)]) for i in range(clients)))
    finally:
        for ch in channels:
            await ch.close()
    return {
        "jobs_per_s": done_in_window / seconds,
        "completed_in_window": done_in_window,
        "latency_s": common.summary(latencies),
        "p50_s": common.pct(latencies, 50),
        "p99_s": common.pct(latencies, 99),
        "errors": errors,
    }


def single(stub, count: int, pause: float) -> dict:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--single", type=int, default=200, help="sequential submissions on the idle cluster")
    parser.add_argument("--pause", type=float, default=0.02, help="pause between sequential submissions")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="py-spy every controller during the window (collapsed stacks, idle included; the leader also with --gil)",
    )
    common.add_set_option(parser)
    patched.add_patch_option(parser)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, patched.bench_cluster(Path(tmp), 121, opts) as (cluster, leader):
        stub = cluster.stub(leader)
        stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=SPEC, idempotency_key="warm"), timeout=10)
        time.sleep(1.0)
        one = single(stub, opts.single, opts.pause)
        print(f"single submission: p50 {one['p50_s'] * 1000:.1f} ms, p99 {one['p99_s'] * 1000:.1f} ms", flush=True)
        cpu0 = {m.index: common.cpu_seconds(m.proc.pid) for m in cluster.members}
        spies = []
        if opts.profile:
            Path(opts.profile).mkdir(parents=True, exist_ok=True)
            for m in cluster.members:
                role = "leader" if m is leader else f"follower{m.index}"
                span = opts.warmup + opts.seconds
                out = Path(opts.profile) / f"submit-{role}.raw"
                spies.append(common.py_spy_start(m.proc.pid, span, out, idle=True))
                if m is leader:
                    gil = Path(opts.profile) / "submit-leader-gil.raw"
                    spies.append(common.py_spy_start(m.proc.pid, span, gil, gil=True))
        t0 = time.monotonic()
        many = asyncio.run(throughput(leader.grpc_addr, opts.clients, opts.warmup, opts.seconds))
        wall = time.monotonic() - t0
        for spy in spies:
            if spy is not None:
                spy.wait(30)
        many["controller_cpu_share"] = {
            ("leader" if m is leader else f"follower{m.index}"): (common.cpu_seconds(m.proc.pid) - cpu0[m.index])
            / wall
            for m in cluster.members
        }
        print(
            f"{opts.clients} clients: {many['jobs_per_s']:.0f} jobs/s, p50 {many['p50_s'] * 1000:.1f} ms, "
            f"p99 {many['p99_s'] * 1000:.1f} ms, errors {many['errors']}, cpu {many['controller_cpu_share']}",
            flush=True,
        )
    rows = [
        common.row(
            "submit_throughput",
            f"job submissions through the leader, {opts.clients} concurrent clients",
            [
                common.check("throughput", many["jobs_per_s"], ">=", 1500, "jobs/s"),
                common.check("p99", many["p99_s"] * 1000, "<=", 100, "ms"),
            ],
            detail=f"p50 {many['p50_s'] * 1000:.1f} ms over a {opts.seconds:.0f} s window",
        ),
        common.row(
            "submit_single",
            "single submission, idle cluster",
            [common.check("p50", one["p50_s"] * 1000, "<=", 30, "ms")],
            detail=f"p99 {one['p99_s'] * 1000:.1f} ms, {opts.single} calls",
        ),
    ]
    result = {"throughput": many, "single": one, "clients": opts.clients, "window_s": opts.seconds}
    if opts.profile:  # where the leader's Python time went during the window (the thread holding the GIL)
        result["profile_leader_gil"] = common.profile_summary(Path(opts.profile) / "submit-leader-gil.raw")
    common.finish("submit", result, opts, rows)


if __name__ == "__main__":
    main()
