"""A kill -9 between a snapshot's rename and the journal's compaction loses no acknowledged job.

pysyncobj writes a snapshot in a forked child, which renames it into place; the controller then drops the
journal's entries before it. Killed in between, the controller restarts with the new snapshot and a journal
that still begins before it. pysyncobj alone replaced that journal with the snapshot's two boundary entries,
dropping every entry after them (acknowledged writes the snapshot does not hold). The test runs a real
single-controller spurctld under the harness's KILLED_BEFORE_COMPACTION hook while clients submit, restarts
it unhooked on the same state_dir and counts what each acknowledged submission became.
"""

from __future__ import annotations

import threading
import uuid

import grpc
import pytest

from harness import spawn_killed_before_compaction, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

THREADS = 8
# Snapshots often, so the first one comes within a second or two of submissions.
COMPACT_OFTEN = "log_compaction_entries = 60\n"


def test_a_kill9_after_the_snapshot_rename_and_before_the_compaction_keeps_every_acknowledged_job(make_cluster):
    cluster = make_cluster(1, start=False, extra_controller=COMPACT_OFTEN)
    member = cluster.members[0]
    cluster.write_conf(member)
    proc = spawn_killed_before_compaction(member)
    cluster.wait_leader(timeout=30)

    acked: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def submit_until_the_controller_dies() -> None:
        while proc.alive():
            key = uuid.uuid4().hex
            spec = slurm_pb2.JobSpec(name=key, script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
            try:
                reply = cluster.stub(member).SubmitJob(
                    slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=key), timeout=3
                )
            except grpc.RpcError as exc:
                if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                      grpc.StatusCode.CANCELLED):
                    errors.append(f"{exc.code().name}: {exc.details()}")
                continue  # not acknowledged: the controller died under the call
            with lock:
                acked[key] = reply.job_id

    threads = [threading.Thread(target=submit_until_the_controller_dies, daemon=True) for _ in range(THREADS)]
    for t in threads:
        t.start()
    returncode = proc.wait_exit(120)
    for t in threads:
        t.join(30)
    assert returncode == -9, f"spurctld ended with {returncode}, not killed at a compaction:\n{cluster.logs()}"
    assert not errors, errors[:5]
    assert acked, "nothing acknowledged before the kill"

    cluster.spawn(member, write_conf=False)  # the real spurctld, on the same state_dir
    wait_until(lambda: member.probe("/livez") == 200, 30, "the controller to come back")
    cluster.wait_leader(timeout=30)
    reply = cluster.stub(member).ListJobs(slurm_pb2.ListJobsRequest(include_finished=True), timeout=10)
    by_name: dict[str, list[int]] = {}
    for job in reply.jobs:
        by_name.setdefault(job.spec.name, []).append(job.job_id)
    lost = sorted(job_id for key, job_id in acked.items() if job_id not in by_name.get(key, []))
    duplicated = sorted(key for key, ids in by_name.items() if len(ids) > 1)
    assert lost == [] and duplicated == [], (
        f"{len(lost)} of {len(acked)} acknowledged jobs lost (ids {lost[:5]}...), {len(duplicated)} duplicated\n"
        f"{cluster.logs()}"
    )
    log = member.proc.log_text()
    assert "exceeds journal end" not in log, log[-3000:]
