"""Adding a controller online (issue 23): time to go from 1 to 2 controllers with N jobs in the state.

One controller is filled with --state jobs (PENDING, no agent, released code), then restarted before anything is
timed; the timed part starts once it applied every entry. Then `spur admin
raft add` runs and the new controller starts with an empty state_dir; timed: from the command's start to its
exit (learn committed, snapshot sent, caught up, promoted), and the catch-up the command itself reports.
pysyncobj sends no snapshot while the leader writes one (a forked child; the restart before the timed part starts
one when the journal is long): the add waits for it, and the wait is part of the time.
Usage: python bench/membership.py [--state 100000] [--keep-logs DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from harness import BIN, cleanup_all
import patched
# isort: on

from catchup import fill
from spur_hpc.proto import slurm_pb2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state", type=int, default=100000, help="jobs in the state when the controller is added")
    parser.add_argument("--chunk", type=int, default=10000, help="fill in chunks of this many jobs")
    parser.add_argument("--keep-logs", metavar="DIR", help="copy the controllers' logs there at the end")
    opts = parser.parse_args()
    spec = slurm_pb2.JobSpec(name="fill", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
    # Filled with the released code: bench/patched.py's journal-sync-per-message skips DurableJournal's bookkeeping,
    # so a controller that sends nothing (the only one) never syncs, and its restart lost the last entries.
    fill_patches: list[str] = []
    rates: list[dict] = []
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        c = patched.cluster(Path(tmp), 3, ip_base=181, name="bench", patches=fill_patches)
        a, b, _d = c.members
        c.write_conf(a, peers=[a.raft_addr], hosts=[a.grpc_addr])
        try:
            c.start([0])
            fill(c, opts.state, opts.chunk, rates, 0, spec)
            a.proc.stop()  # the timed part runs the released code on the same journal and snapshot
            c.patches = []
            c.spawn(a)
            c.wait_leader(timeout=300)
            # The restart re-applies the journal; entries after the last stored commit index are committed again
            # by the new term's first entry. Timed from a quiet leader that applied them all.
            t_wait = time.monotonic() + 300
            while time.monotonic() < t_wait:
                try:
                    st = a.status()
                except OSError:  # /status waits for the state lock, which a long apply holds
                    continue
                if st["jobs"] >= opts.state and st["applied_index"] >= st["commit_index"]:
                    break
                time.sleep(0.5)
            # Nor while it writes a snapshot (the compaction a restart with a long journal starts): pysyncobj sends no
            # snapshot chunk then, and starts the transmission again once the new snapshot is in place. How long that
            # wait was is reported beside the add.
            dump, tmp_dump = a.state_dir / "raft.dump", a.state_dir / "raft.dump.tmp"
            t_quiet = time.monotonic()
            while time.monotonic() < t_wait and (
                tmp_dump.exists() or not dump.exists() or time.time() - dump.stat().st_mtime < 3
            ):
                time.sleep(0.2)
            snapshot_wait = time.monotonic() - t_quiet
            jobs = st["jobs"]
            env = dict(os.environ, SPUR_CONTROLLER_ADDR=a.grpc_addr)
            c.write_conf(b)
            t0 = time.monotonic()
            add = subprocess.Popen(
                [str(BIN / "spur"), "admin", "raft", "add", b.raft_addr, "--grpc", b.grpc_addr, "--timeout", "600"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            while (
                b.raft_addr
                not in subprocess.run(
                    [str(BIN / "spur"), "admin", "raft", "status"], env=env, capture_output=True, text=True
                ).stdout
            ):
                time.sleep(0.1)
            c.spawn(b)
            out, _ = add.communicate(timeout=900)
            took = time.monotonic() - t0
            caught = re.search(r"caught up in ([0-9.]+) s", out)
            result = {
                "jobs": jobs,
                "add_exit": add.returncode,
                "add_output": out.strip().splitlines()[:1],
                "add_s": took,
                "caught_up_s": float(caught.group(1)) if caught else None,
                "snapshot_write_waited_s": snapshot_wait,
                "dump_bytes": (a.state_dir / "raft.dump").stat().st_size if (a.state_dir / "raft.dump").exists() else 0,
            }
            print(result, flush=True)
        finally:
            c.stop()
            cleanup_all()
            if opts.keep_logs:
                import shutil

                for m in c.members:
                    if (m.root / "spurctld.log").exists():
                        Path(opts.keep_logs).mkdir(parents=True, exist_ok=True)
                        shutil.copy(m.root / "spurctld.log", Path(opts.keep_logs) / f"spurctld-{m.index}.log")
    rows = [
        common.row(
            "membership_add",
            f"spur admin raft add: 1 -> 2 controllers, {result.get('jobs', opts.state):,} jobs of state",
            # The goal of a wiped follower catching up 100,000 jobs (../shared/reference/pysyncobj-findings.md §6).
            [common.check("added", result.get("add_s") if result.get("add_exit") == 0 else None, "<=", 10.0, "s")],
            detail=f"catch-up {result.get('caught_up_s')} s as the command reports; {result.get('add_output')}",
        )
    ]
    common.print_rows(rows)
    common.record("membership", {**result, "fill_rates": rates, "fill_patches": fill_patches, "rows": rows})


if __name__ == "__main__":
    main()
