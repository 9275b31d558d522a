"""Spur side by side with Slurm, on this one machine, in the same run.

Slurm: Debian's slurmctld, slurmd, slurm-client and munge (installed with apt-get when missing; pass
--no-install to refuse), run as a one-host cluster on 127.0.0.1 from a scratch directory: munged with its
own key and socket, `slurmctld -D`, `slurmd -D -N localhost`, SLURM_CONF exported for the clients
(tools/slurm_capture/peer.py starts it; the capture tool shares it).
Spur: 3 controllers on 127.0.1.N, no agent. In both, the jobs of the submission loops stay pending (Spur:
no agent; Slurm: the partition is DOWN, so it queues but never starts jobs), and the queue for squeue is
topped up to the same total, in Slurm with `sbatch -H` (held).

Measured for both, in this order:
1. `sbatch -Q --wrap true` in a shell loop, one process per job: jobs/s;
2. the same from 8 loops at once (`xargs -P 8`): jobs/s;
3. the queue topped up to --queue jobs (200 of them owned by the user nobody), then `squeue` (all jobs,
   default format, output to a pipe) and `squeue -u nobody`: wall time per call;
4. 64 concurrent clients: Spur's API (bench/submit.py's 64 asyncio gRPC clients, a warm-up and a 10 s window)
   against the best Slurm has for that, 64 sbatch processes at once (`xargs -P 64`): jobs/s.
Ratios are Spur/Slurm (throughput: > 1 means Spur is faster; wall time: < 1 means Spur is faster).
Everything binds to loopback, every step has a deadline, and every process started here is stopped
(munged, slurmctld, slurmd, the controllers). Usage: python bench/slurm_peer.py [--loop 200] [--queue 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
import submit
from harness import BIN, ControllerCluster, cleanup_all, wait_until
# isort: on

from spur_hpc.proto import slurm_pb2

sys.path.insert(0, str(common.ROOT))  # the peer's startup is shared with the capture tool
from tools.slurm_capture.peer import SLURM_BIN, SlurmPeer, ensure_packages  # noqa: E402

PARALLEL = 8
CLIENTS = 64  # issue 20's API row: Spur's gRPC clients against as many sbatch processes


# ------------------------------------------------------------------ the measurements, same for both


def shell_rate(sbatch: str, jobs: int, env: dict, cwd: Path, parallel: int = 1) -> float:
    if parallel == 1:
        script = f"for i in $(seq {jobs}); do {sbatch} -Q --wrap true || exit 1; done"
    else:
        script = f"seq {jobs} | xargs -P {parallel} -I{{}} {sbatch} -Q --wrap true"
    t0 = time.monotonic()
    subprocess.run(["bash", "-c", script], env=env, cwd=cwd, check=True, timeout=900)
    return jobs / (time.monotonic() - t0)


def top_up_held_slurm(peer: SlurmPeer, total: int, user_jobs: int, cwd: Path) -> None:
    """Fill Slurm's queue to `total` jobs: user_jobs held jobs of nobody, the rest held jobs of root."""
    have = peer.job_count()
    env = peer.env()
    sbatch = SLURM_BIN / "sbatch"
    nobody = f"setpriv --reuid=nobody --regid=nogroup --clear-groups {sbatch} -H -Q -D /tmp --wrap true"
    subprocess.run(
        ["bash", "-c", f"seq {user_jobs} | xargs -P {PARALLEL} -I{{}} {nobody}"],
        env=env,
        cwd="/tmp",
        check=True,
        timeout=900,
    )
    rest = total - have - user_jobs
    if rest > 0:
        subprocess.run(
            ["bash", "-c", f"seq {rest} | xargs -P {PARALLEL} -I{{}} {sbatch} -H -Q --wrap true"],
            env=env,
            cwd=cwd,
            check=True,
            timeout=1800,
        )


def walls(argv: list[str], env: dict, calls: int, expect_lines: int | None = None) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, timeout=120)
        out.append(time.monotonic() - t0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} -> {proc.returncode}: {proc.stderr.decode()[-500:]}")
        lines = proc.stdout.count(b"\n")
        if expect_lines is not None and lines != expect_lines:
            raise RuntimeError(f"{' '.join(argv)}: {lines} lines, expected {expect_lines}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loop", type=int, default=200, help="jobs per shell loop")
    parser.add_argument("--queue", type=int, default=10000, help="jobs in the queue for squeue")
    parser.add_argument("--user-jobs", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20, help="squeue calls per measurement")
    parser.add_argument("--api-seconds", type=float, default=10.0, help="the window of Spur's 64 API clients")
    parser.add_argument("--slurm-api-jobs", type=int, default=2000, help="jobs Slurm's 64 sbatch processes submit")
    parser.add_argument("--no-install", action="store_true", help="never run apt-get")
    opts = parser.parse_args()
    packages = ensure_packages(not opts.no_install)
    res: dict[str, dict] = {"spur": {}, "slurm": {}}
    with tempfile.TemporaryDirectory(prefix="spur-slurm-peer-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the user nobody reads Slurm's config and reaches munged below it
        work = root / "work"
        work.mkdir()
        peer = SlurmPeer(root / "slurm")
        cluster = ControllerCluster(root / "spur", 3, ip_base=181, name="bench")
        try:
            t0 = time.monotonic()
            peer.start()
            print(f"slurm up in {time.monotonic() - t0:.1f} s (slurmctld on 127.0.0.1:{peer.ctld_port})", flush=True)
            cluster.start()
            leader = cluster.wait_leader(timeout=30)
            spur_env = common.command_env(dict(os.environ, SPUR_CONF=str(cluster.client_conf())), root)
            spur_env.pop("SPUR_CONTROLLER_ADDR", None)
            spur_env.pop("SLURM_CONF", None)
            slurm_env = peer.env()
            sides = {
                "spur": (str(BIN / "sbatch"), str(BIN / "squeue"), spur_env),
                "slurm": (str(SLURM_BIN / "sbatch"), str(SLURM_BIN / "squeue"), slurm_env),
            }
            for side, (sbatch, _squeue, env) in sides.items():
                subprocess.run([sbatch, "-Q", "--wrap", "true"], env=env, cwd=work, check=True, timeout=60)  # warm
                res[side]["loop_jobs_per_s"] = shell_rate(sbatch, opts.loop, env, work)
                res[side]["parallel_jobs_per_s"] = shell_rate(sbatch, opts.loop * 2, env, work, PARALLEL)
                print(
                    f"{side}: sbatch loop {res[side]['loop_jobs_per_s']:.1f} jobs/s, {PARALLEL} loops "
                    f"{res[side]['parallel_jobs_per_s']:.1f} jobs/s",
                    flush=True,
                )
            # the queue: the same total on both sides
            t0 = time.monotonic()
            top_up_held_slurm(peer, opts.queue, opts.user_jobs, work)
            res["slurm"]["fill_s"] = time.monotonic() - t0
            spur_have = leader.status()["jobs"]
            every = max(1, (opts.queue - spur_have) // opts.user_jobs)
            # as Spur's sbatch would send them: with an environment (Slurm's sbatch -H stores one too)
            env = common.TYPICAL_ENV
            script = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n"
            user_spec = slurm_pb2.JobSpec(
                name="wrap", script=script, user="nobody", uid=65534, gid=65534, work_dir="/tmp", environment=env
            )
            root_spec = slurm_pb2.JobSpec(name="wrap", script=script, user="root", work_dir="/tmp", environment=env)
            t0 = time.monotonic()
            common.submit_many(
                leader.grpc_addr,
                opts.queue - spur_have,
                spec_for=lambda i: user_spec if i % every == 0 and i // every < opts.user_jobs else root_spec,
            )
            res["spur"]["fill_s"] = time.monotonic() - t0
            target = leader.status()["commit_index"]
            wait_until(lambda: all(m.status()["applied_index"] >= target for m in cluster.members), 60, "all applied")
            counts = {"slurm": peer.job_count(), "spur": leader.status()["jobs"]}
            print(f"queues: {counts}", flush=True)
            time.sleep(2)
            for side, (_sbatch, squeue, env) in sides.items():
                walls([squeue, "-u", "nobody"], env, 1)  # warm-up, not counted (Spur's writes its bytecode)
                all_walls = walls([squeue], env, opts.calls, counts[side] + 1)
                user_walls = walls([squeue, "-u", "nobody"], env, opts.calls, opts.user_jobs + 1)
                res[side].update(
                    queue=counts[side],
                    squeue_all_s=common.summary(all_walls),
                    squeue_user_s=common.summary(user_walls),
                    squeue_all_p50_ms=common.pct(all_walls, 50) * 1000,
                    squeue_all_p99_ms=common.pct(all_walls, 99) * 1000,
                    squeue_user_p50_ms=common.pct(user_walls, 50) * 1000,
                )
                print(
                    f"{side}: squeue ({counts[side]} jobs) p50 {res[side]['squeue_all_p50_ms']:.0f} ms, "
                    f"-u nobody p50 {res[side]['squeue_user_p50_ms']:.0f} ms",
                    flush=True,
                )
            # last: these add thousands of jobs to the queues
            api = asyncio.run(submit.throughput(leader.grpc_addr, CLIENTS, 3.0, opts.api_seconds))
            res["spur"].update(
                api_jobs_per_s=api["jobs_per_s"], api_p99_ms=api["p99_s"] * 1000, api_errors=api["errors"]
            )
            slurm_sbatch = sides["slurm"][0]
            res["slurm"]["api_jobs_per_s"] = shell_rate(slurm_sbatch, opts.slurm_api_jobs, slurm_env, work, CLIENTS)
            print(
                f"{CLIENTS} clients: spur API {api['jobs_per_s']:.0f} jobs/s (p99 {api['p99_s'] * 1000:.0f} ms), "
                f"slurm {CLIENTS} sbatch at once {res['slurm']['api_jobs_per_s']:.0f} jobs/s",
                flush=True,
            )
        except BaseException:
            print(peer.logs(), flush=True)
            raise
        finally:
            cluster.stop()
            cleanup_all()
            peer.stop()
    sp, sl = res["spur"], res["slurm"]

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("nan")

    rows = [
        common.row(
            "slurm_sbatch_loop",
            "Spur vs Slurm: `sbatch --wrap true` shell loop (jobs/s, ratio Spur/Slurm)",
            [common.check("ratio", ratio(sp["loop_jobs_per_s"], sl["loop_jobs_per_s"]), ">=", 0.25, "x")],
            detail=f"Spur {sp['loop_jobs_per_s']:.1f} jobs/s, Slurm {sl['loop_jobs_per_s']:.1f} jobs/s",
        ),
        common.row(
            "slurm_sbatch_parallel",
            f"Spur vs Slurm: {PARALLEL} sbatch loops at once (jobs/s, ratio Spur/Slurm)",
            [
                common.check("ratio", ratio(sp["parallel_jobs_per_s"], sl["parallel_jobs_per_s"]), ">=", 0.5, "x")
            ],
            detail=f"Spur {sp['parallel_jobs_per_s']:.1f} jobs/s, Slurm {sl['parallel_jobs_per_s']:.1f} jobs/s",
        ),
        common.row(
            "slurm_api_clients",
            f"Spur vs Slurm: {CLIENTS} concurrent clients (Spur's API against {CLIENTS} sbatch at once; jobs/s, ratio)",
            [
                common.check("ratio", ratio(sp["api_jobs_per_s"], sl["api_jobs_per_s"]), ">=", 3.0, "x"),
                common.check("Spur p99", sp["api_p99_ms"], "<=", 100, "ms"),
            ],
            detail=f"Spur {sp['api_jobs_per_s']:.0f} jobs/s (errors {sp['api_errors'] or 'none'}), "
            f"Slurm {sl['api_jobs_per_s']:.0f} jobs/s",
        ),
        common.row(
            "slurm_squeue",
            f"Spur vs Slurm: `squeue` of {opts.queue:,} jobs (wall p50, ratio Spur/Slurm)",
            [common.check("ratio", ratio(sp["squeue_all_p50_ms"], sl["squeue_all_p50_ms"]), "<=", 1.0, "x")],
            detail=f"Spur {sp['squeue_all_p50_ms']:.0f} ms, Slurm {sl['squeue_all_p50_ms']:.0f} ms (p99 "
            f"{sp['squeue_all_p99_ms']:.0f} / {sl['squeue_all_p99_ms']:.0f} ms)",
        ),
        common.row(
            "slurm_squeue_user",
            f"Spur vs Slurm: `squeue -u nobody` ({opts.user_jobs} of {opts.queue:,} jobs; wall p50, ratio)",
            [
                common.check(
                    "ratio", ratio(sp["squeue_user_p50_ms"], sl["squeue_user_p50_ms"]), None, None, "x", "lower"
                )
            ],
            detail=f"Spur {sp['squeue_user_p50_ms']:.0f} ms, Slurm {sl['squeue_user_p50_ms']:.0f} ms",
        ),
    ]
    result = {"packages": packages, "spur": sp, "slurm": sl, "loop_jobs": opts.loop, "parallel": PARALLEL, "rows": rows}
    path = common.record("slurm_peer", result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
