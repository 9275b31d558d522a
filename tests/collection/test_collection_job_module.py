"""Unit tests of the spur.cluster module spur_job.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py).
"""

from __future__ import annotations

import threading
import time

from ansible_collections.spur.cluster.plugins.modules import (
    spur_job,
)
from collection_fakes import conn, job_args
from collection_helpers import run_module

# ------------------------------------------------------------------ spur_job


def test_job_submitted_with_a_key_is_submitted_once(fake_cluster, controller):
    args = job_args(fake_cluster, state="submitted", idempotency_key="k1")
    runs = [run_module(spur_job, args, check_mode=c) for c in (True, False, True, False)]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[0]["job_id"] is None
    assert runs[1]["job_id"] == runs[2]["job_id"] == runs[3]["job_id"]
    assert runs[3]["duplicate"] is True and runs[1]["state"] == "PENDING"
    assert len(controller.service.list_jobs(include_finished=True)) == 1
    spec = controller.service.get_job(runs[1]["job_id"])["spec"]
    assert spec["script"] == "#!/bin/sh\necho hi\n" and spec["work_dir"] == "/tmp"


def test_job_without_a_key_submits_every_time(fake_cluster, controller):
    args = job_args(fake_cluster, state="submitted")
    assert run_module(spur_job, args)["changed"] and run_module(spur_job, args)["changed"]
    assert len(controller.service.list_jobs()) == 2


def test_job_finished_waits_and_reads_the_output(fake_cluster, controller, tmp_path):
    controller.add_node("n1")

    def run_it():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            jobs = controller.service.list_jobs()
            if jobs:
                job_id = jobs[0]["job_id"]
                controller.service.write("job_start", job_id=job_id, nodes=["n1"], attempt=1, time=time.time())
                (tmp_path / f"out-{job_id}.txt").write_text("hello from the job\n")
                controller.end_job(job_id)
                return
            time.sleep(0.05)

    runner = threading.Thread(target=run_it)
    runner.start()
    result = run_module(spur_job, job_args(fake_cluster, work_dir=str(tmp_path), output="out-%j.txt", wait_timeout=20))
    runner.join()
    assert "failed" not in result, result.get("msg")
    assert result["changed"] is True and result["state"] == "COMPLETED" and result["exit_code"] == 0
    assert result["output"] == "hello from the job\n" and result["nodes"] == ["n1"]
    assert result["output_path"] == str(tmp_path / f"out-{result['job_id']}.txt")


def test_job_that_fails_fails_the_task_unless_told(fake_cluster, controller):
    controller.add_node("n1")
    job = controller.start_job("n1", name="verify")
    controller.end_job(job, "FAILED", 3)
    result = run_module(spur_job, conn(fake_cluster, job_id=job))
    assert result["failed"] and "ended FAILED with exit code 3" in result["msg"] and "expect_success" in result["msg"]
    result = run_module(spur_job, conn(fake_cluster, job_id=job, expect_success=False))
    assert "failed" not in result and result["exit_code"] == 3 and result["changed"] is False


def test_job_wait_timeout(fake_cluster, controller):
    result = run_module(spur_job, job_args(fake_cluster, wait_timeout=0.3))
    assert result["failed"] and "still PENDING" in result["msg"] and "wait_timeout" in result["msg"]


def test_job_cancel_by_name(fake_cluster, controller):
    controller.add_node("n1")
    running = controller.start_job("n1", name="verify")
    args = conn(fake_cluster, state="cancelled", name="verify")
    runs = [run_module(spur_job, args, check_mode=c) for c in (True, False, True, False)]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[1]["cancelled"] == [running]
    assert controller.service.get_job(running)["state"] == "CANCELLED"


def test_job_argument_rules(fake_cluster, controller):
    both = run_module(spur_job, conn(fake_cluster, wrap="x", script="#!/bin/sh\n"))
    assert both["failed"] and "mutually exclusive" in both["msg"]
    neither = run_module(spur_job, conn(fake_cluster))
    assert neither["failed"] and "script" in neither["msg"]
    relative = run_module(spur_job, job_args(fake_cluster, work_dir="rel"))
    assert relative["failed"] and "work_dir" in relative["msg"]
