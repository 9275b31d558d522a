"""The --json (and one --yaml) session captured from Slurm and replayed on Spur: same cluster shape as session.py.

Smaller than the main session: a few jobs in the states a JSON reader meets (completed, failed, running, held,
pending on a dependency, an array, an srun step), then squeue, sinfo, sacct and scontrol show with --json, as
root and as the user nobody (a Run whose command starts with `nobody:` runs under setpriv as nobody).
"""

from __future__ import annotations

import re

from tools.slurm_capture.runner import Side, run_as_user, run_steps
from tools.slurm_capture.session import NO_COMPLETING, Run, Wait, capture_names_of, job_in

AS_NOBODY = "nobody:"
SECRET = "SPUR_JSON_SECRET"  # in one job's environment: which listings carry another user's environment

FILES = {"steps.sh": "#!/bin/sh\nsrun sleep 600\n"}

JSON_SESSION: list[Run | Wait] = [
    Run("sinfo-json-idle", "sinfo --json"),
    Run("scontrol-json-show-partition", "scontrol --json show partition"),
    Run("scontrol-json-show-node-n1-idle", "scontrol --json show node n1"),
    Run("squeue-json-empty", "squeue --json"),
    Run("squeue-json-version", "squeue --json=v0.0.38"),
    Run("sbatch-done", "sbatch -p debug -J done --wrap true", job="done"),
    Run("sbatch-fail", "sbatch -p debug -J fail --wrap 'exit 3'", job="fail"),
    job_in("done", "COMPLETED"),
    job_in("fail", "FAILED"),
    Run(
        "sbatch-run1",
        f"sbatch --parsable -p debug -w n1 -J run1 --export=ALL,{SECRET}=s3cr3t --wrap 'sleep 600'",
        job="run1",
    ),
    Run("sbatch-steps", "sbatch -p debug -w n1 -J steps steps.sh", job="steps"),
    job_in("run1", "RUNNING"),
    Wait("step 0 of steps", "squeue -h -s -j {steps} -o %i", until=r"\.0\b"),
    Run("sbatch-array", "sbatch -p long -w n3 --array=0-3%2 -J arr --wrap 'sleep 600'", job="arr"),
    job_in("arr", "RUNNING", count=2),
    Run("sbatch-held", "sbatch -p debug -H -J held --wrap true", job="held"),
    Run("sbatch-dependency", "sbatch -p debug -d afterok:{run1} -J dep --wrap true", job="dep"),
    job_in("dep", "PENDING"),
    Run("squeue-json", "squeue --json"),
    Run("squeue-json-j-arr", "squeue --json -j {arr}"),
    Run("squeue-yaml", "squeue --yaml -j {run1}"),
    Run("sinfo-json-busy", "sinfo --json"),
    Run("sacct-json", "sacct --json"),
    Run("sacct-json-j-steps", "sacct --json -j {steps}"),
    Run("scontrol-json-show-job-running", "scontrol --json show job {run1}"),
    Run("scontrol-json-show-job-held", "scontrol --json show job {held}"),
    Run("scontrol-json-show-job-failed", "scontrol --json show job {fail}"),
    Run("scontrol-json-show-job-array", "scontrol --json show job {arr}"),
    Run("scontrol-json-show-node-n1-mixed", "scontrol --json show node n1"),
    Run("nobody-squeue-json", f"{AS_NOBODY}squeue --json"),
    Run("nobody-sacct-json", f"{AS_NOBODY}sacct --json"),
    Run("nobody-scontrol-json-show-job-running", f"{AS_NOBODY}scontrol --json show job {{run1}}"),
    Run("scancel-u-root", "scancel -u root"),
    job_in("run1", "CANCELLED"),
    job_in("steps", "CANCELLED"),
    NO_COMPLETING,
    Run("squeue-json-end", "squeue --json"),
]


def capture_names() -> list[str]:
    return capture_names_of(JSON_SESSION)


def run_as(side: Side, cmd: str):
    """One command on `side`; a `nobody:` command runs as the user nobody."""
    if cmd.startswith(AS_NOBODY):
        cmd = "as:nobody:" + cmd[len(AS_NOBODY) :]
    return run_as_user(side, cmd)


def run_json_session(side: Side, wait_timeout=None, strict: bool = True) -> list[dict]:
    """Every Run of JSON_SESSION on `side`, in order (runner.run_steps; `nobody:` commands as nobody)."""
    return run_steps(side, JSON_SESSION, wait_timeout, strict, run=run_as)


def is_json(cmd: str) -> bool:
    return bool(re.search(r"--json\b", cmd))
