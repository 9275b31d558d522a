"""CPU of an idle cluster of 3 controllers: what a controller costs when nothing is asked of it.

No client, no agent: the leader's heartbeats (AppendEntries every append_entries_period_ms) and each
member's Raft tick are all that runs. Each controller's CPU over the window is split by thread (named from
`py-spy dump`, which lists the OS thread ids); the result notes the load average (the machine is shared).

  python bench/idle.py [--seconds 30]
  python bench/idle.py --set append_entries_period_ms=50     # an experiment (bench/results/experiments/)
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
import patched
# isort: on

PY_SPY = Path(sys.executable).parent / "py-spy"


def thread_cpu(pid: int) -> dict[str, float]:
    """OS thread id -> CPU seconds (utime + stime) of each thread of pid."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = common.cpu_seconds_of(f"/proc/{pid}/task/{tid}/stat")
        except OSError:
            continue  # the thread ended
    return out


def thread_names(pid: int) -> dict[str, str]:
    """OS thread id -> Python thread name; {} without py-spy (then the split is by thread id only)."""
    if not PY_SPY.exists():
        return {}
    dump = subprocess.run([str(PY_SPY), "dump", "-p", str(pid)], capture_output=True, text=True, check=False).stdout
    return dict(re.findall(r'Thread \(?(\d+)\)?[^"\n]*"([^"]*)"', dump))


def measure(members, leader, seconds: float) -> list[dict]:
    before = {m.index: thread_cpu(m.proc.pid) for m in members}
    time.sleep(seconds)
    after = {m.index: thread_cpu(m.proc.pid) for m in members}
    rows = []
    for m in members:
        names = thread_names(m.proc.pid)
        by_thread: collections.Counter = collections.Counter()
        for tid, cpu in after[m.index].items():
            by_thread[names.get(tid, f"thread {tid}")] += cpu - before[m.index].get(tid, 0.0)
        total = sum(by_thread.values())
        rows.append(
            {
                "member": m.index,
                "role": "leader" if m is leader else "follower",
                "cpu_pct": round(100 * total / seconds, 2),
                "by_thread_pct": {k: round(100 * v / seconds, 2) for k, v in by_thread.most_common() if v > 0},
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the measured window")
    parser.add_argument("--ip-base", type=int, default=141, help="controllers listen on 127.0.1.N from N")
    common.add_set_option(parser)
    patched.add_patch_option(parser)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, patched.bench_cluster(Path(tmp), opts.ip_base, opts, "idle") as (
        cluster,
        leader,
    ):
        time.sleep(3.0)  # past the first election's catch-up and the probes' first reads
        load_before = os.getloadavg()[0]
        members = measure(cluster.members, leader, opts.seconds)
        load_after = os.getloadavg()[0]
        if cluster.wait_leader(timeout=10) is not leader:
            sys.exit("the leader changed during the window: not an idle cluster, run again")
    lead = next(r for r in members if r["role"] == "leader")
    followers = [r["cpu_pct"] for r in members if r["role"] == "follower"]
    for r in members:
        print(f"controller {r['member']} ({r['role']}): {r['cpu_pct']:.2f} % of a core {r['by_thread_pct']}")
    rows = [
        common.row(
            "idle_cluster",
            "CPU of an idle controller (3 on loopback)",
            [
                common.check("leader", lead["cpu_pct"], None, None, "% of a core", better="lower"),
                common.check("follower", max(followers), None, None, "% of a core", better="lower"),
            ],
            detail=f"{opts.seconds:.0f} s window, load average {load_before:.1f}-{load_after:.1f}",
        )
    ]
    result = {"seconds": opts.seconds, "members": members, "load_average": [load_before, load_after]}
    common.finish("idle", result, opts, rows)


if __name__ == "__main__":
    main()
