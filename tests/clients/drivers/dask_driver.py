"""dask-jobqueue 0.9's SLURMCluster, unchanged: two workers as Slurm jobs, a computation, close.

Usage: python dask_driver.py LOG_DIR. Prints `RESULT <json>` last. The scheduler and the workers listen on
127.0.0.1 only (the workers run on the agents of the loopback cluster and dial the scheduler there).
"""

from __future__ import annotations

import json
import os
import sys

from dask.distributed import Client
from dask_jobqueue import SLURMCluster

WORKERS = 2


def square(x: int) -> int:
    return x * x


def slurm_job_id() -> str:
    return os.environ.get("SLURM_JOB_ID", "")


if __name__ == "__main__":
    cluster = SLURMCluster(
        cores=1,
        memory="1GB",
        processes=1,
        walltime="00:10:00",
        scheduler_options={"host": "127.0.0.1"},
        worker_extra_args=["--host", "127.0.0.1"],
        log_directory=sys.argv[1],
        death_timeout=60,
    )
    script = cluster.job_script()
    cluster.scale(WORKERS)
    client = Client(cluster)
    client.wait_for_workers(WORKERS, timeout=180)
    total = client.submit(sum, client.map(square, range(10))).result(timeout=60)
    jobs_of_workers = sorted(client.run(slurm_job_id).values())
    job_ids = sorted(str(job.job_id) for job in cluster.workers.values())  # from sbatch's answer
    client.close()
    cluster.close()
    print(
        "RESULT "
        + json.dumps({"total": total, "worker_jobs": jobs_of_workers, "job_ids": job_ids, "job_script": script}),
        flush=True,
    )
