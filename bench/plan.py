"""What one submission costs the leader's scheduler, with 10 and with 100,000 jobs pending.

In one process, over the real state machine: one node whose CPUs a running job holds, then N pending
jobs behind it (the oldest does not fit, so its partition is blocked). Each measured step applies one more
job_submit record and plans, as the leader does on the wake-up the submission causes: with the
incremental index (scheduler.JobIndex, what the leader runs) and with the full scan of the queue (what it
ran before), and the scan of every job for running ones that the leader's follow-up did on each wake-up.

  python bench/plan.py [--pending 10,100000] [--steps 200]
"""

from __future__ import annotations

import argparse
import time

import common  # puts tests/ on sys.path; the results file
from spur_hpc.controller import wal
from spur_hpc.controller.scheduler import JobIndex, plan_starts
from spur_hpc.controller.state import ClusterState
from spur_hpc.model import RUNNING


def spec(cpus: int) -> dict:
    return {
        "name": "p",
        "script": "true",
        "user": "u",
        "uid": 1,
        "gid": 1,
        "work_dir": "/tmp",
        "nodes": 1,
        "tasks": 1,
        "cpus_per_task": cpus,
        "memory_mb": 0,
        "time_limit_secs": 0,
        "partition": "default",
    }


def queue(pending: int):
    s, index = ClusterState(), JobIndex()

    def apply(op, **kw):
        record = wal.make_record(op, **kw)
        result = s.apply(record)
        index.note(s, record, result)
        return result

    apply("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=3)
    apply(
        "node_register",
        name="n1",
        address="n1:1",
        cpus=4,
        memory_mb=1000,
        version="1",
        build="b",
        partition="default",
        running=[],
        time=1.0,
    )
    first = apply("job_submit", spec=spec(4), key="", time=1.0)["job_id"]
    apply("job_start", job_id=first, nodes=["n1"], attempt=1, time=2.0)
    for _ in range(pending):
        apply("job_submit", spec=spec(1), key="", time=3.0)
    index.sync(s)
    return s, index, apply


def measure(pending: int, steps: int) -> dict:
    s, index, apply = queue(pending)
    costs = {"incremental": [], "full_scan": [], "running_scan": []}
    for _ in range(steps):
        apply("job_submit", spec=spec(1), key="", time=4.0)
        t0 = time.perf_counter()
        assert plan_starts(s, 10.0, index) == []
        t1 = time.perf_counter()
        assert plan_starts(s, 10.0) == []
        t2 = time.perf_counter()
        [j for j in s.jobs.values() if j["state"] == RUNNING]
        t3 = time.perf_counter()
        costs["incremental"].append(t1 - t0)
        costs["full_scan"].append(t2 - t1)
        costs["running_scan"].append(t3 - t2)
    return {k: common.summary(v) for k, v in costs.items()} | {"rebuilds": index.rebuilds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", default="10,100000", help="queue sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=200, help="submissions measured per queue size")
    opts = parser.parse_args()
    sizes = [int(x) for x in opts.pending.split(",")]
    results = {}
    for n in sizes:
        results[str(n)] = r = measure(n, opts.steps)
        print(
            f"{n} pending: plan per submission median {r['incremental']['median'] * 1e6:.0f} us incremental, "
            f"{r['full_scan']['median'] * 1e6:.0f} us full scan (+{r['running_scan']['median'] * 1e6:.0f} us "
            f"running-jobs scan); index rebuilds {r['rebuilds']}",
            flush=True,
        )
    small, large = results[str(min(sizes))], results[str(max(sizes))]
    rows = [
        common.row(
            "plan_per_submission",
            f"scheduler work per submission with {max(sizes):,} jobs pending",
            # a commit costs about 6 ms (bench/commit.py): 1 ms of planning keeps the two queue sizes alike
            [common.check("incremental", large["incremental"]["median"] * 1000, "<=", 1.0, "ms")],
            detail=(
                f"{min(sizes)} pending: {small['incremental']['median'] * 1e6:.0f} us; the full scan it replaces: "
                f"{large['full_scan']['median'] * 1000:.1f} ms plus "
                f"{large['running_scan']['median'] * 1000:.1f} ms for the running-jobs scan"
            ),
        )
    ]
    path = common.record("plan", {"sizes": results, "steps": opts.steps, "rows": rows})
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
