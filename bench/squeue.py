"""squeue over a large queue: 10,000 pending jobs (no agent, so nothing starts) on 3 controllers, 200 of
them owned by one user (nobody). Each job carries the environment sbatch would send (bench/common.py
TYPICAL_ENV: 35 variables, 1.4 KB; --env none submits jobs without one).

Measured: the ListJobs RPC that squeue sends (all jobs; one user's jobs) on the leader and on a follower,
one call at a time; and the `squeue` command itself (wall time of the process, output to a pipe). The
targets apply to the controller's answer (the RPC); the command's wall time adds the interpreter start
and the formatting of 10,000 lines, and is what bench/slurm_peer.py compares with Slurm's squeue.
Usage: python bench/squeue.py [--jobs 10000] [--user-jobs 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import grpc

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from harness import BIN, cleanup_all
import patched
# isort: on

from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc

SCRIPT = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n"


def specs(env: dict[str, str]) -> tuple[slurm_pb2.JobSpec, slurm_pb2.JobSpec]:
    root = slurm_pb2.JobSpec(name="wrap", script=SCRIPT, user="root", work_dir="/tmp", environment=env)
    user = slurm_pb2.JobSpec(
        name="wrap", script=SCRIPT, user="nobody", uid=65534, gid=65534, work_dir="/tmp", environment=env
    )
    return root, user


def rpc_latencies(address: str, request, calls: int, expect: int) -> list[float]:
    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 1 << 30)])
    stub = slurm_pb2_grpc.SlurmControllerStub(channel)
    out = []
    try:
        for _ in range(calls):
            t0 = time.monotonic()
            reply = stub.ListJobs(request, timeout=30)
            out.append(time.monotonic() - t0)
            if len(reply.jobs) != expect:
                raise RuntimeError(f"ListJobs answered {len(reply.jobs)} jobs, expected {expect}")
    finally:
        channel.close()
    return out


def command_walls(argv: list[str], env: dict, calls: int, expect_lines: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, timeout=60)
        out.append(time.monotonic() - t0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} -> {proc.returncode}: {proc.stderr.decode()[-500:]}")
        lines = proc.stdout.count(b"\n")
        if lines != expect_lines:
            raise RuntimeError(f"{' '.join(argv)} printed {lines} lines, expected {expect_lines}")
    return out


def ms(values: list[float], p: float) -> float:
    return common.pct(values, p) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--user-jobs", type=int, default=200)
    parser.add_argument("--calls", type=int, default=100, help="RPC calls per measurement")
    parser.add_argument("--command-calls", type=int, default=10, help="squeue processes per measurement")
    parser.add_argument("--profile", metavar="FILE", help="py-spy --gil the leader while ListJobs (all) is timed")
    parser.add_argument("--env", choices=["typical", "none"], default="typical", help="environment of each job")
    common.add_set_option(parser)
    patched.add_patch_option(parser)
    opts = parser.parse_args()
    every = max(1, opts.jobs // opts.user_jobs)
    root_spec, user_spec = specs(common.TYPICAL_ENV if opts.env == "typical" else {})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = patched.cluster(
            root / "ctl",
            3,
            ip_base=151,
            name="bench",
            extra_controller=common.controller_extra(opts),
            patches=opts.patch,
        )
        try:
            cluster.start()
            leader = cluster.wait_leader(timeout=30)
            follower = next(m for m in cluster.members if m is not leader)
            rate = common.submit_many(
                leader.grpc_addr,
                opts.jobs,
                spec_for=lambda i: user_spec if i % every == 0 and i // every < opts.user_jobs else root_spec,
                progress_every=5000,
            )
            print(f"filled {opts.jobs} jobs at {rate:.0f} jobs/s", flush=True)
            # every member must have applied everything before reads are timed
            target = leader.status()["commit_index"]
            for m in cluster.members:
                deadline = time.monotonic() + 60
                while m.status()["applied_index"] < target and time.monotonic() < deadline:
                    time.sleep(0.1)
            time.sleep(2.0)
            # what an idle cluster holding this queue costs: CPU of each controller over 5 s
            cpu0 = {m.index: common.cpu_seconds(m.proc.pid) for m in cluster.members}
            time.sleep(5.0)
            idle_cpu = {
                ("leader" if m is leader else f"follower{m.index}"): (common.cpu_seconds(m.proc.pid) - cpu0[m.index])
                / 5.0
                for m in cluster.members
            }
            print(f"idle CPU with {opts.jobs} jobs queued: {idle_cpu}", flush=True)
            all_req = slurm_pb2.ListJobsRequest(brief=True)  # as squeue asks
            user_req = slurm_pb2.ListJobsRequest(users=["nobody"], brief=True)
            probe = slurm_pb2_grpc.SlurmControllerStub(
                grpc.insecure_channel(leader.grpc_addr, options=[("grpc.max_receive_message_length", 1 << 30)])
            )
            reply_bytes = probe.ListJobs(all_req, timeout=60).ByteSize()
            spy = None
            if opts.profile:
                spy = common.py_spy_start(leader.proc.pid, 10, Path(opts.profile), gil=True)
                time.sleep(0.5)
            rpc_all = rpc_latencies(leader.grpc_addr, all_req, opts.calls, opts.jobs)
            if spy is not None:
                spy.wait(60)
            rpc_user = rpc_latencies(leader.grpc_addr, user_req, opts.calls * 2, opts.user_jobs)
            rpc_all_f = rpc_latencies(follower.grpc_addr, all_req, opts.calls // 2, opts.jobs)
            rpc_user_f = rpc_latencies(follower.grpc_addr, user_req, opts.calls, opts.user_jobs)
            env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()), SPUR_CONTROLLER_ADDR=leader.grpc_addr)
            env = common.command_env(env, root)
            command_walls([str(BIN / "squeue"), "-u", "nobody"], env, 1, opts.user_jobs + 1)  # writes the bytecode
            cmd_all = command_walls([str(BIN / "squeue")], env, opts.command_calls, opts.jobs + 1)
            cmd_user = command_walls([str(BIN / "squeue"), "-u", "nobody"], env, opts.command_calls, opts.user_jobs + 1)
            print(
                f"ListJobs all: p50 {ms(rpc_all, 50):.1f} ms p99 {ms(rpc_all, 99):.1f} ms; one user: "
                f"p50 {ms(rpc_user, 50):.1f} ms; squeue command: p50 {ms(cmd_all, 50):.0f} ms, "
                f"-u: p50 {ms(cmd_user, 50):.0f} ms",
                flush=True,
            )
        finally:
            cluster.stop()
            cleanup_all()
    rows = [
        common.row(
            "squeue_10k",
            f"squeue of {opts.jobs:,} jobs (ListJobs RPC on the leader)",
            [
                common.check("p50", ms(rpc_all, 50), "<=", 50, "ms"),
                common.check("p99", ms(rpc_all, 99), "<=", 150, "ms"),
            ],
            detail=f"on a follower p50 {ms(rpc_all_f, 50):.0f} ms, p99 {ms(rpc_all_f, 99):.0f} ms; reply "
            f"{reply_bytes / 1e6:.1f} MB; jobs with {'a 1.4 KB' if opts.env == 'typical' else 'no'} environment",
        ),
        common.row(
            "squeue_user",
            f"squeue of one user's {opts.user_jobs} jobs among {opts.jobs:,} (ListJobs RPC on the leader)",
            [common.check("p50", ms(rpc_user, 50), "<=", 10, "ms")],
            detail=f"p99 {ms(rpc_user, 99):.1f} ms; on a follower p50 {ms(rpc_user_f, 50):.1f} ms",
        ),
        common.row(
            "squeue_10k_command",
            f"`squeue` command, {opts.jobs:,} jobs (process wall time, output to a pipe)",
            [
                common.check("p50", ms(cmd_all, 50), None, None, "ms", better="lower"),
                common.check("p99", ms(cmd_all, 99), None, None, "ms", better="lower"),
            ],
            detail=f"`squeue -u nobody` ({opts.user_jobs} jobs): p50 {ms(cmd_user, 50):.0f} ms",
        ),
    ]
    result = {
        "jobs": opts.jobs,
        "user_jobs": opts.user_jobs,
        "fill_jobs_per_s": rate,
        "job_environment": opts.env,
        "idle_cpu_cores": idle_cpu,
        "reply_bytes_all": reply_bytes,
        "rpc_all_leader_s": common.summary(rpc_all),
        "rpc_user_leader_s": common.summary(rpc_user),
        "rpc_all_follower_s": common.summary(rpc_all_f),
        "rpc_user_follower_s": common.summary(rpc_user_f),
        "command_all_s": common.summary(cmd_all),
        "command_user_s": common.summary(cmd_user),
        "controller_settings": opts.set,
        "controller_patches": opts.patch,
        "rows": rows,
    }
    if opts.profile:  # where the leader's Python time went while ListJobs (all) was timed
        result["profile_leader_gil"] = common.profile_summary(Path(opts.profile))
    path = common.record("squeue", result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
