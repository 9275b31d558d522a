"""The CLI as scripts use it: one process per command, on 3 controllers.

1. `sbatch --wrap true` in a bash loop (`for i in $(seq N); do sbatch -Q --wrap true; done`): jobs/s
   sequential, from the loop's wall time; then the same command timed one by one for its distribution.
2. `squeue -h -j ID` wall time, one process per call.

No agent is registered: the jobs stay PENDING. The installed commands of the venv are used (.venv/bin
first on PATH; Debian's slurm-client may also be installed). Usage: python bench/cli.py [--jobs 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from harness import BIN, cleanup_all
import patched
# isort: on


def timed(argv: list[str], env: dict, cwd: Path) -> tuple[float, str]:
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> {proc.returncode}: {proc.stderr.strip()}")
    return wall, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200, help="sbatch calls in the shell loop")
    parser.add_argument("--calls", type=int, default=100, help="individually timed calls of each command")
    common.add_set_option(parser)
    patched.add_patch_option(parser)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = patched.cluster(
            root / "ctl",
            3,
            ip_base=131,
            name="bench",
            extra_controller=common.controller_extra(opts),
            patches=opts.patch,
        )
        work = root / "work"
        work.mkdir()
        try:
            cluster.start()
            leader = cluster.wait_leader(timeout=30)
            env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()), PATH=f"{BIN}:{os.environ['PATH']}")
            env = common.command_env(env, root)
            env.pop("SPUR_CONTROLLER_ADDR", None)
            timed([str(BIN / "sbatch"), "-Q", "--wrap", "true"], env, work)  # warm the page cache
            loop = f"for i in $(seq {opts.jobs}); do sbatch -Q --wrap true || exit 1; done"
            t0 = time.monotonic()
            subprocess.run(["bash", "-c", loop], env=env, cwd=work, check=True, timeout=600)
            loop_wall = time.monotonic() - t0
            rate = opts.jobs / loop_wall
            print(f"sbatch shell loop: {opts.jobs} jobs in {loop_wall:.2f} s = {rate:.1f} jobs/s", flush=True)
            sbatch_walls, ids = [], []
            for _ in range(opts.calls):
                wall, out = timed([str(BIN / "sbatch"), "--parsable", "--wrap", "true"], env, work)
                sbatch_walls.append(wall)
                ids.append(out.strip())
            squeue_walls = []
            for job_id in ids:
                wall, out = timed([str(BIN / "squeue"), "-h", "-j", job_id], env, work)
                if job_id not in out:
                    raise RuntimeError(f"squeue -h -j {job_id} did not show the job: {out!r}")
                squeue_walls.append(wall)
            # where an sbatch's time goes: the interpreter alone, and sbatch sent straight to the leader
            # (SPUR_CONTROLLER_ADDR) instead of the first host of spur.conf (which may be a follower)
            env_leader = dict(env, SPUR_CONTROLLER_ADDR=leader.grpc_addr)
            leader_walls = [timed([str(BIN / "squeue"), "-h", "-j", j], env_leader, work)[0] for j in ids[:30]]
            python_walls = [timed([str(BIN / "python"), "-c", "pass"], env, work)[0] for _ in range(30)]
            sbatch_leader_walls = [
                timed([str(BIN / "sbatch"), "-Q", "--wrap", "true"], env_leader, work)[0] for _ in range(30)
            ]
            first_is_leader = cluster.hosts[0] == leader.grpc_addr
            print(
                f"sbatch one by one: p50 {common.pct(sbatch_walls, 50) * 1000:.1f} ms; "
                f"squeue -h -j ID: p50 {common.pct(squeue_walls, 50) * 1000:.1f} ms, "
                f"p99 {common.pct(squeue_walls, 99) * 1000:.1f} ms",
                flush=True,
            )
        finally:
            cluster.stop()
            cleanup_all()
    rows = [
        common.row(
            "cli_sbatch_loop",
            "`sbatch --wrap true` from a shell loop (one process per job)",
            [common.check("sequential", rate, ">=", 40, "jobs/s")],
            detail=f"{opts.jobs} jobs in {loop_wall:.2f} s; one call p50 {common.pct(sbatch_walls, 50) * 1000:.0f} ms "
            f"(first host of spur.conf {'is' if first_is_leader else 'is not'} the leader), sent straight to the "
            f"leader {common.pct(sbatch_leader_walls, 50) * 1000:.0f} ms, `python -c pass` "
            f"{common.pct(python_walls, 50) * 1000:.0f} ms",
        ),
        common.row(
            "cli_squeue_job",
            "`squeue -h -j ID` wall time",
            [common.check("p50", common.pct(squeue_walls, 50) * 1000, "<=", 40, "ms")],
            detail=f"p99 {common.pct(squeue_walls, 99) * 1000:.1f} ms, {len(squeue_walls)} calls",
        ),
    ]
    result = {
        "sbatch_loop": {"jobs": opts.jobs, "wall_s": loop_wall, "jobs_per_s": rate},
        "sbatch_one_s": common.summary(sbatch_walls),
        "squeue_job_s": common.summary(squeue_walls),
        "squeue_job_leader_first_s": common.summary(leader_walls),
        "python_c_pass_s": common.summary(python_walls),
        "sbatch_to_leader_s": common.summary(sbatch_leader_walls),
        "first_host_is_leader": first_is_leader,
        "controller_settings": opts.set,
        "controller_patches": opts.patch,
        "rows": rows,
    }
    path = common.record("cli", result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
