"""A job's script and environment are its owner's: another user reading the job (GetJob, ListJobs, scontrol show
job, squeue and sacct --json or -o json) never sees them; the owner and administrators do (in Spur's own -o json
layout: Slurm's --json has neither field). Real munged, controllers and agent."""

from __future__ import annotations

import uuid

from test_auth import credential, munge, pytestmark, run, secured, shared_dir  # noqa: F401 (fixtures, munged mark)

from spur_hpc.proto import slurm_pb2

SECRET = "MY_SECRET_TOKEN"


def submit_secret_job(stub, munge, work) -> int:  # noqa: F811
    spec = slurm_pb2.JobSpec(
        name="secret",
        script=f"#!/bin/sh\n# {SECRET}=in-the-script\nsleep 30\n",
        user="root",
        uid=0,
        work_dir=str(work),
        hold=True,
        environment={SECRET: "s3cr3t-value"},
    )
    request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=uuid.uuid4().hex)
    return stub.SubmitJob(request, timeout=10, metadata=(("spur-auth", credential(munge)),)).job_id


def test_another_user_never_sees_a_jobs_script_or_environment(secured, munge):  # noqa: F811
    cluster, _agent, work, env = secured
    stub = cluster.stub(cluster.wait_leader())
    job_id = submit_secret_job(stub, munge, work)

    def nobody():  # a MUNGE credential is good for one request
        return (("spur-auth", credential(munge, as_nobody=True)),)

    seen = stub.GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=10, metadata=nobody())
    assert seen.spec.name == "secret" and not seen.spec.script and not seen.spec.environment
    listed = stub.ListJobs(slurm_pb2.ListJobsRequest(job_ids=[job_id]), timeout=10, metadata=nobody()).jobs
    assert listed and all(not j.spec.script and not j.spec.environment for j in listed)
    for argv in (
        ["scontrol", "show", "job", str(job_id)],
        ["scontrol", "--json", "show", "job", str(job_id)],
        ["squeue", "--json"],
        ["squeue", "--yaml"],
        ["squeue", "-o", "json", "-j", str(job_id)],  # Spur's own layout: the whole record, as the caller may see it
        ["sacct", "--json"],
        ["scontrol", "-d", "show", "job", str(job_id)],
    ):
        shown = run(env, work, *argv, as_nobody=True)
        # (this cluster keeps no accounting: sacct says so and exits 1)
        assert shown.returncode == 0 or argv[0] == "sacct", f"{' '.join(argv)} as nobody: {shown.stderr}"
        assert SECRET not in shown.stdout + shown.stderr, f"{' '.join(argv)} as nobody showed the secret"
    # The owner (root, an administrator here) still sees both: in Spur's layout (Slurm's has neither field).
    owner = run(env, work, "squeue", "-o", "json", "-j", str(job_id))
    assert owner.returncode == 0 and SECRET in owner.stdout, owner.stderr
    assert SECRET not in run(env, work, "squeue", "--json").stdout  # Slurm's layout carries no environment at all
    mine = stub.GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=10, metadata=(("spur-auth", credential(munge)),))
    assert SECRET in mine.spec.script and mine.spec.environment[SECRET] == "s3cr3t-value"
    stub.CancelJob(slurm_pb2.CancelJobRequest(job_id=job_id), timeout=10, metadata=(("spur-auth", credential(munge)),))
