"""Leader failover: kill -9 the leader of 3 controllers, time until the first committed write and until a
survivor's /metrics/nodes answers 200. Usage: python bench/failover.py [--trials 20]"""

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


def watch_probe(survivors, out: dict) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "probe" not in out:
        for m in survivors:
            if m.probe("/metrics/nodes") == 200:
                out["probe"] = time.monotonic()
                return
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--idle", type=float, default=2.0, help="idle seconds before each kill")
    opts = parser.parse_args()
    writes, probes = [], []
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
                watcher = threading.Thread(target=watch_probe, args=(survivors, seen))
                killed_at = time.monotonic()
                leader.proc.kill9()
                watcher.start()
                written_at = first_write(cluster, survivors, killed_at + 15)
                watcher.join()
                writes.append(written_at - killed_at)
                if "probe" in seen:
                    probes.append(seen["probe"] - killed_at)
                print(
                    f"trial {trial + 1}: first committed write {writes[-1] * 1000:.0f} ms, "
                    f"probe 200 {probes[-1] * 1000 if probes else float('nan'):.0f} ms",
                    flush=True,
                )
                cluster.restart(leader.index)
        finally:
            cluster.stop()
            cleanup_all()
    result = {
        "kill_to_first_write_s": common.summary(writes),
        "kill_to_probe_200_s": common.summary(probes),
        "trials": opts.trials,
        "targets": {"median_s": 1.0, "p99_s": 2.0},
    }
    path = common.record("failover", result)
    w = result["kill_to_first_write_s"]
    print(
        f"failover over {opts.trials} trials: median {w['median']:.3f} s, p99 {w['p99']:.3f} s, "
        f"max {w['max']:.3f} s -> {path}"
    )


if __name__ == "__main__":
    main()
