"""submitit 1.5.4's SlurmExecutor, unchanged, driving the Slurm commands it finds on PATH.

Usage: python submitit_driver.py SCENARIO FOLDER. Prints `RESULT <json>` last; any failure is a traceback and
a non-zero exit. Run by tests/clients/test_submitit.py with the clients' venv; the functions below are
pickled by value (cloudpickle) and run inside the jobs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import submitit
from submitit.helpers import Checkpointable

WAIT_SECS = 60  # for a state to show up in sacct (the test's own deadline is the hard one)


def add(a: int, b: int) -> int:
    return a + b


def boom() -> None:
    raise ValueError("boom from the job")


def square(x: int) -> dict:
    return {
        "value": x * x,
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID"),
        "task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
    }


def sleep_long() -> str:
    time.sleep(600)
    return "not cancelled"


class ResumesAfterTimeout(Checkpointable):
    """Sleeps past its time limit on the first run; submitit's USR2 handler checkpoints it (self.runs is in
    the pickle) and calls `scontrol requeue`; the requeued run starts from the checkpoint and returns."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, marker_dir: str) -> dict:
        self.runs += 1
        restart = os.environ.get("SLURM_RESTART_COUNT", "")
        Path(marker_dir, f"run{self.runs}").write_text(f"{os.environ.get('SLURM_JOB_ID')} {restart}\n")
        if self.runs == 1:
            time.sleep(600)
        return {"runs": self.runs, "restart_count": restart, "job_id": os.environ.get("SLURM_JOB_ID")}


def wait_state(job: submitit.Job, accept) -> str:
    deadline = time.monotonic() + WAIT_SECS
    while True:
        state = job.get_info(mode="force").get("State") or "UNKNOWN"
        if accept(state) or time.monotonic() > deadline:
            return state
        time.sleep(1)


def executor(folder: str, **parameters) -> submitit.SlurmExecutor:
    ex = submitit.SlurmExecutor(folder=folder)  # refuses to start when srun is not on PATH
    ex.update_parameters(**{"time": 5, **parameters})
    return ex


def scenario_result(folder: str) -> dict:
    job = executor(folder).submit(add, 2, 3)
    return {"job_id": job.job_id, "result": job.result(), "state": wait_state(job, lambda s: s == "COMPLETED")}


def scenario_exception(folder: str) -> dict:
    job = executor(folder).submit(boom)
    error = job.exception()
    return {
        "job_id": job.job_id,
        "exception_type": type(error).__name__ if error else None,
        "exception": str(error) if error else None,
        "state": wait_state(job, lambda s: s == "FAILED"),
    }


def scenario_map_array(folder: str) -> dict:
    jobs = executor(folder).map_array(square, [1, 2, 3, 4])
    return {"job_ids": [j.job_id for j in jobs], "results": [j.result() for j in jobs]}


def scenario_cancel(folder: str) -> dict:
    job = executor(folder).submit(sleep_long)
    before = wait_state(job, lambda s: s == "RUNNING")
    job.cancel()
    after = wait_state(job, lambda s: s not in ("RUNNING", "PENDING", "UNKNOWN"))
    return {"job_id": job.job_id, "before": before, "after": after, "done": job.done(force_check=True)}


def scenario_timeout(folder: str) -> dict:
    markers = Path(folder, "markers")
    markers.mkdir(parents=True, exist_ok=True)
    # a 1-minute limit with USR2 40 s before it: the signal comes 20 s after the start
    job = executor(folder, time=1, signal_delay_s=40).submit(ResumesAfterTimeout(), str(markers))
    result = job.result()
    return {
        "job_id": job.job_id,
        "result": result,
        "markers": sorted(os.listdir(markers)),
        "log": (job.stderr() or "")[-3000:],
    }


if __name__ == "__main__":
    name, folder = sys.argv[1], sys.argv[2]
    answer = globals()[f"scenario_{name}"](folder)
    print("RESULT " + json.dumps(answer), flush=True)
