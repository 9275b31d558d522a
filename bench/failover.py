"""Leader failover: kill -9 the leader of 3 controllers, time until the first committed write and until a
survivor's /metrics/nodes answers 200, and how long after the election that probe flipped.

The election is seen on the survivors' /status (role becomes "leader"); each survivor is polled by its own
thread, /status and /metrics/nodes in turn, so the flip delay is measured to within one polling round
(a few ms). Usage: python bench/failover.py [--trials 20]"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from harness import ControllerCluster, cleanup_all, wait_until
# isort: on

from spur_hpc.proto import slurm_pb2

SPEC = slurm_pb2.JobSpec(name="bench", script="true", user="bench", work_dir="/tmp")


def first_write(cluster, survivors, deadline: float) -> float:
    stubs = [cluster.stub(m) for m in survivors]
    key = uuid.uuid4().hex
    while time.monotonic() < deadline:
        for stub in stubs:
            try:
                stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=SPEC, idempotency_key=key), timeout=0.5)
                return time.monotonic()
            except grpc.RpcError:
                pass
    raise RuntimeError("no write committed within the deadline")


def watch_member(m, out: dict, done: threading.Event) -> None:
    """Poll one survivor: when its /status first says leader, and when its /metrics/nodes first answers 200."""
    deadline = time.monotonic() + 10
    elected = probe = None
    while time.monotonic() < deadline and not done.is_set():
        if elected is None:
            try:
                if m.status().get("role") == "leader":
                    elected = time.monotonic()
            except (OSError, AssertionError, ValueError):
                pass
        if probe is None and m.probe("/metrics/nodes") == 200:
            probe = time.monotonic()
        if elected is not None and probe is not None:
            break
        time.sleep(0.002)
    out[m.index] = (elected, probe)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--idle", type=float, default=2.0, help="idle seconds before each kill")
    opts = parser.parse_args()
    writes, probes, flips = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = ControllerCluster(Path(tmp), 3, ip_base=101, name="bench")
        try:
            cluster.start()
            for trial in range(opts.trials):
                leader = cluster.wait_leader(timeout=30)
                survivors = [m for m in cluster.members if m is not leader]
                for m in cluster.members:
                    wait_until(lambda m=m: m.probe("/readyz") == 200, 20, "every member ready")
                time.sleep(opts.idle)
                seen: dict = {}
                done = threading.Event()
                watchers = [threading.Thread(target=watch_member, args=(m, seen, done)) for m in survivors]
                killed_at = time.monotonic()
                leader.proc.kill9()
                for w in watchers:
                    w.start()
                written_at = first_write(cluster, survivors, killed_at + 15)
                for w in watchers:
                    w.join()
                writes.append(written_at - killed_at)
                # the new leader is the survivor whose probe turned 200 first
                turned = [(p, e) for e, p in seen.values() if p is not None]
                flip = None
                if turned:
                    probe_at, elected_at = min(turned, key=lambda pe: pe[0])
                    probes.append(probe_at - killed_at)
                    if elected_at is not None:
                        flip = probe_at - elected_at
                        flips.append(flip)
                print(
                    f"trial {trial + 1}: first committed write {writes[-1] * 1000:.0f} ms, "
                    f"probe 200 {probes[-1] * 1000 if turned else float('nan'):.0f} ms, "
                    f"{flip * 1000 if flip is not None else float('nan'):.0f} ms after the election",
                    flush=True,
                )
                cluster.restart(leader.index)
        finally:
            cluster.stop()
            cleanup_all()
    w = common.summary(writes)
    f = common.summary(flips)
    rows = [
        common.row(
            "failover",
            f"leader failover, kill -9 -> first committed write ({opts.trials} trials)",
            [
                common.check("median", w["median"], "<=", 1.0, "s"),
                common.check("p99", w["p99"], "<=", 2.0, "s"),
                common.check("probe flip after election (max)", f.get("max"), "<=", 0.050, "s"),
            ],
            detail=f"probe 200 median {common.summary(probes).get('median', 0) * 1000:.0f} ms after the kill; "
            f"flip after election median {f.get('median', 0) * 1000:.0f} ms over {f['n']} trials",
        )
    ]
    result = {
        "kill_to_first_write_s": w,
        "kill_to_probe_200_s": common.summary(probes),
        "election_to_probe_200_s": f,
        "trials": opts.trials,
        "targets": {"median_s": 1.0, "p99_s": 2.0, "probe_flip_s": 0.05},
        "rows": rows,
    }
    path = common.record("failover", result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
