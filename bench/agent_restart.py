"""spurd restarts under load: stop -> re-registered with every job re-adopted, and jobs lost across restarts.

A 3-controller cluster and one agent with 24 CPUs run a stream of short jobs (about 20 at a time, each
with a known exit code). spurd is restarted N times (alternating SIGTERM and kill -9). Afterwards every
job must have ended with its own exit code: a job that is NODE_FAIL, missing or wrong counts as lost.
Usage: python bench/agent_restart.py [--restarts 20]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from agents import AgentProc, cleanup
from harness import ControllerCluster, cleanup_all, http_get, wait_until
# isort: on

from spur_hpc.proto import slurm_pb2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--restarts", type=int, default=20)
    opts = parser.parse_args()
    gaps: list[float] = []
    running_before: list[int] = []
    expected: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = ControllerCluster(root / "ctl", 3, ip_base=111, name="bench")
        agent = AgentProc(root / "agent", cluster.hosts, heartbeat=0.5, cpus=24)
        work = root / "work"
        work.mkdir()
        stop = threading.Event()
        try:
            cluster.start()
            agent.start()

            def stub():
                return cluster.stub(cluster.wait_leader(timeout=20))

            def feed() -> None:
                rng = random.Random(7)
                while not stop.is_set():
                    running = len([j for j in expected if j not in finished])
                    if running < 20:
                        code = rng.randint(0, 3)
                        spec = slurm_pb2.JobSpec(
                            name="load",
                            script=f"#!/bin/sh\nsleep {rng.uniform(1, 4):.1f}\nexit {code}\n",
                            user="root",
                            work_dir=str(work),
                        )
                        try:
                            job_id = stub().SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec), timeout=10).job_id
                            expected[job_id] = code
                        except Exception:
                            pass
                    time.sleep(0.05)

            finished: set[int] = set()

            def reap() -> None:
                while not stop.is_set():
                    try:
                        jobs = stub().ListJobs(slurm_pb2.ListJobsRequest(job_ids=list(expected)), timeout=10).jobs
                        finished.update(j.job_id for j in jobs if j.state not in (slurm_pb2.PENDING, slurm_pb2.RUNNING))
                    except Exception:
                        pass
                    time.sleep(0.5)

            threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=reap, daemon=True)]
            for t in threads:
                t.start()
            wait_until(lambda: len(agent.running()) >= 15, 60, "about 20 jobs running")
            for i in range(opts.restarts):
                before = set(agent.running())
                t0 = time.monotonic()
                if i % 2:
                    agent.kill9()
                else:
                    agent.stop()
                agent.start(wait_registered=False)
                wait_until(lambda: http_get(agent.probe_url + "/readyz", timeout=1)[0] == 200, 30, "re-registered")
                gap = time.monotonic() - t0
                still = set(agent.running())
                gaps.append(gap)
                running_before.append(len(before))
                print(
                    f"restart {i + 1} ({'kill -9' if i % 2 else 'SIGTERM'}): {gap * 1000:.0f} ms, "
                    f"{len(before)} running before, {len(before & still)} re-adopted, "
                    f"{len(before - still)} ended meanwhile",
                    flush=True,
                )
                time.sleep(1.0)
            stop.set()
            for t in threads:
                t.join(timeout=15)
            s = cluster.stub(cluster.wait_leader())
            wait_until(
                lambda: all(
                    j.state not in (slurm_pb2.PENDING, slurm_pb2.RUNNING)
                    for j in s.ListJobs(slurm_pb2.ListJobsRequest(job_ids=list(expected)), timeout=10).jobs
                ),
                120,
                "every job to end",
            )
            jobs = {j.job_id: j for j in s.ListJobs(slurm_pb2.ListJobsRequest(job_ids=list(expected)), timeout=10).jobs}
        finally:
            stop.set()
            agent.stop()
            cluster.stop()
            cleanup()
            cleanup_all()
    lost = []
    for job_id, code in expected.items():
        job = jobs.get(job_id)
        want = slurm_pb2.COMPLETED if code == 0 else slurm_pb2.FAILED
        if job is None or job.state != want or job.exit_code != code:
            lost.append((job_id, slurm_pb2.JobState.Name(job.state) if job else "missing", code))
    g = common.summary(gaps)
    rows = [
        common.row(
            "agent_restart",
            "spurd restart with ~20 running jobs: stop -> re-registered, jobs re-adopted",
            [
                common.check("median", g["median"], "<=", 1.0, "s"),
                common.check("jobs lost or wrong", len(lost), "<=", 0, ""),
            ],
            detail=f"p99 {g['p99'] * 1000:.0f} ms over {opts.restarts} restarts (SIGTERM and kill -9 alternating), "
            f"{common.summary(running_before).get('median', 0):.0f} jobs running at a restart (median), "
            f"{len(expected)} jobs in all",
        )
    ]
    result = {
        "restart_gap_s": g,
        "restarts": opts.restarts,
        "running_at_restart": common.summary(running_before),
        "jobs": len(expected),
        "jobs_lost_or_wrong": len(lost),
        "lost": lost[:20],
        "targets": {"restart_gap_median_s": 1.0, "jobs_lost": 0},
        "rows": rows,
    }
    path = common.record("agent_restart", result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
