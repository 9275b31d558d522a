"""dask-jobqueue 0.9 (SLURMCluster, unchanged) against 3 controllers and 2 agents with accounting.

dask-jobqueue submits each worker with `sbatch FILE` (`#SBATCH -J -e -o -n 1 --cpus-per-task --mem -t`),
reads the job id from sbatch's answer and stops the workers with `scancel ID`.
"""

from __future__ import annotations

import pytest

from harness import wait_until

pytestmark = pytest.mark.slow

ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT")


def test_a_slurm_cluster_scales_to_two_workers_computes_and_closes(slurm_site) -> None:
    logs = slurm_site.work / "dask-logs"
    answer = slurm_site.driver("dask_driver.py", str(logs), timeout=240, what="dask-jobqueue's SLURMCluster")
    assert answer["total"] == sum(x * x for x in range(10))
    assert len(answer["job_ids"]) == 2
    assert answer["worker_jobs"] == answer["job_ids"], "each worker runs inside the Slurm job sbatch named"
    assert [c["rc"] for c in slurm_site.calls_of("sbatch")] == [0, 0]
    # the job script's `-e LOGDIR/dask-worker-%J.err` and `-o ...%J.out`: %J is the job id
    expected = sorted(f"dask-worker-{j}.{ext}" for j in answer["job_ids"] for ext in ("err", "out"))
    assert sorted(p.name for p in logs.iterdir()) == expected
    scancels = slurm_site.calls_of("scancel")
    assert sorted(a for c in scancels for a in c["argv"][1:]) == answer["job_ids"]
    assert all(c["rc"] == 0 for c in scancels), slurm_site.refusals_text()

    def both_ended():
        states = slurm_site.job_states(answer["job_ids"])
        return all(s in ENDED for s in states.values()) and states

    wait_until(both_ended, 60, "both worker jobs to end after close()")
