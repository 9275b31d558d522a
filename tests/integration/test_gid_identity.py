"""Identity comes from MUNGE: a user cannot run a job under a group they do not belong to (issue 16: user nobody
submitted with gid=42 and read /etc/shadow). Real munged, controllers and agent."""

from __future__ import annotations

import grp
import pwd
import uuid

import grpc
import pytest
from test_auth import credential, munge, pytestmark, run, secured, shared_dir  # noqa: F401 (fixtures, munged mark)

from harness import wait_until
from spur_hpc.proto import slurm_pb2

NOBODY = pwd.getpwnam("nobody")
SHADOW_GID = grp.getgrnam("shadow").gr_gid


def shadow_spec(work) -> slurm_pb2.JobSpec:
    return slurm_pb2.JobSpec(name="steal", script="#!/bin/sh\nid -g\ncat /etc/shadow\n", user="nobody",
                             uid=NOBODY.pw_uid, gid=SHADOW_GID, work_dir=str(work))


def test_a_user_may_not_submit_under_a_group_they_are_not_in(secured, munge):  # noqa: F811
    cluster, _agent, work, env = secured
    stub = cluster.stub(cluster.wait_leader())
    request = slurm_pb2.SubmitJobRequest(spec=shadow_spec(work), idempotency_key=uuid.uuid4().hex)
    with pytest.raises(grpc.RpcError) as info:
        stub.SubmitJob(request, timeout=10, metadata=(("spur-auth", credential(munge, as_nobody=True)),))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    assert "may not submit a job with group shadow (gid 42)" in info.value.details()
    listed = run(env, work, "squeue", "-h", "-u", "nobody").stdout
    assert listed.strip() == "", f"no job was created: {listed!r}"
    # The same user with its own group still runs, under that group.
    mine = run(env, work, "sbatch", "--parsable", "--wrap", "id -g", as_nobody=True)
    assert mine.returncode == 0, mine.stderr
    job_id = mine.stdout.strip()
    wait_until(lambda: "JobState=COMPLETED" in run(env, work, "scontrol", "show", "job", job_id).stdout, 30,
               "nobody's own job to complete")
    assert (work / f"slurm-{job_id}.out").read_text().strip() == str(NOBODY.pw_gid)


def test_the_agent_refuses_a_foreign_group_even_from_an_administrator(secured, munge):  # noqa: F811
    cluster, _agent, work, env = secured
    stub = cluster.stub(cluster.wait_leader())
    request = slurm_pb2.SubmitJobRequest(spec=shadow_spec(work), idempotency_key=uuid.uuid4().hex)
    job_id = stub.SubmitJob(request, timeout=10, metadata=(("spur-auth", credential(munge)),)).job_id

    def ended():
        shown = run(env, work, "scontrol", "show", "job", str(job_id)).stdout
        return shown if "JobState=PENDING" not in shown and "JobState=RUNNING" not in shown else None

    shown = wait_until(ended, 60, "the launch to be refused")
    assert "not a member of group shadow" in shown, shown
    out = work / f"slurm-{job_id}.out"
    assert not out.exists() or "root:" not in out.read_text(), "the job never read /etc/shadow"
