"""submitit 1.5.4 (SlurmExecutor, unchanged) against 3 controllers and 2 agents with accounting.

submitit writes `#SBATCH --open-mode=append --signal=USR2@90 --wckey=submitit` (and `--array=0-N%P` for
map_array), runs the function under `srun --unbuffered --output ... --error ...`, polls
`sacct -o JobID,State,NodeList --parsable2 -j ID`, cancels with `scancel ID` and requeues a timed-out
Checkpointable job with `scontrol requeue ID` from its USR2 handler. Each test runs one scenario of
drivers/submitit_driver.py with a hard deadline; a failure prints the calls Spur refused.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

DRIVER = "submitit_driver.py"


def run(site, scenario: str, timeout: float) -> dict:
    folder = site.work / f"submitit-{scenario}" / "%j"
    return site.driver(DRIVER, scenario, str(folder), timeout=timeout, what=f"submitit's {scenario} scenario")


def test_a_submitted_function_returns_its_result(slurm_site) -> None:
    answer = run(slurm_site, "result", 150)
    assert answer["result"] == 5
    assert answer["state"] == "COMPLETED"
    sbatch = slurm_site.calls_of("sbatch")
    assert len(sbatch) == 1 and sbatch[0]["rc"] == 0
    assert [c["rc"] for c in slurm_site.calls_of("srun")] == [0], "the function ran under srun inside the job"


def test_an_exception_raised_in_the_job_comes_back_as_the_exception(slurm_site) -> None:
    answer = run(slurm_site, "exception", 150)
    assert answer["exception_type"] == "FailedJobError"
    assert "ValueError: boom from the job" in answer["exception"]
    assert answer["state"] == "FAILED"


def test_map_array_submits_one_array_and_returns_every_result(slurm_site) -> None:
    answer = run(slurm_site, "map_array", 180)
    assert [r["value"] for r in answer["results"]] == [1, 4, 9, 16]
    array_id = answer["job_ids"][0].split("_")[0]
    assert answer["job_ids"] == [f"{array_id}_{t}" for t in range(4)]
    assert [r["task_id"] for r in answer["results"]] == ["0", "1", "2", "3"]
    assert {r["array_job_id"] for r in answer["results"]} == {array_id}
    assert len({r["job_id"] for r in answer["results"]}) == 4, "each task has a job id of its own"
    assert len(slurm_site.calls_of("sbatch")) == 1, "map_array is one sbatch of an array"


def test_a_cancelled_job_ends_cancelled(slurm_site) -> None:
    answer = run(slurm_site, "cancel", 150)
    assert answer["before"] == "RUNNING"
    assert answer["after"].startswith("CANCELLED"), answer
    assert answer["done"]
    assert [c["argv"] for c in slurm_site.calls_of("scancel")] == [["scancel", answer["job_id"]]]


def test_a_timed_out_checkpointable_job_is_requeued_and_resumes_from_its_checkpoint(slurm_site) -> None:
    answer = run(slurm_site, "timeout", 300)
    assert answer["result"]["runs"] == 2, answer  # the second run started from the checkpointed state
    assert answer["result"]["restart_count"] == "1", answer
    assert answer["result"]["job_id"] == answer["job_id"], "a requeued job keeps its id"
    assert answer["markers"] == ["run1", "run2"]
    requeues = slurm_site.calls_of("scontrol")
    assert [(c["argv"], c["rc"]) for c in requeues if "requeue" in c["argv"]] == [
        (["scontrol", "requeue", answer["job_id"]], 0)
    ]
