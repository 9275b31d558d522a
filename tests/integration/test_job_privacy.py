"""A job's script and environment are its owner's: another user reading the job (GetJob, ListJobs, scontrol show
job, squeue and sacct --json or -o json) never sees them; the owner, operators and administrators do (in Spur's own
-o json layout: Slurm's --json has neither field). With [auth] private_data = ["jobs", "usage"] a user sees only
their own jobs and associations, and an operator (sacctmgr AdminLevel) sees and acts on everyone's. Real munged,
controllers and agent; the users are this host's daemon (uid 1), bin (uid 2) and sys (uid 3, the operator)."""

from __future__ import annotations

import os
import pwd
import subprocess
import uuid

import pytest
from test_auth import auth_section, credential, munge, pytestmark, run, secured, shared_dir  # noqa: F401

from agents import AgentProc, cleanup
from harness import BIN
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


ALICE, BOB, OPS = (pwd.getpwuid(uid).pw_name for uid in (1, 2, 3))


def as_user(user: str) -> list[str]:
    entry = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]


def run_as(env, work, user: str, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([*as_user(user), str(BIN / argv[0]), *argv[1:]], cwd=work, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def metadata_as(munge, user: str):  # noqa: F811
    cred = subprocess.run([*as_user(user), "munge", "-n", "-S", munge], check=True, capture_output=True, text=True)
    return (("spur-auth", "munge:" + cred.stdout.strip()),)


@pytest.fixture
def private(make_cluster, munge, shared_dir, tmp_path):  # noqa: F811
    """One controller and one agent with [auth] private_data = ["jobs", "usage"]; sys an Operator in the store, bin a
    user of account root; a held job each of daemon (alice) and bin (bob), alice's with a secret."""
    auth = auth_section(munge) + 'private_data = ["jobs", "usage"]\n'
    cluster = make_cluster(1, extra_sections=auth)
    agent = AgentProc(tmp_path / "agent", cluster.hosts, extra="\n" + auth).start()
    work = shared_dir / "work"
    work.mkdir()
    work.chmod(0o777)
    client_conf = cluster.client_conf(shared_dir / "client.conf")
    client_conf.chmod(0o644)
    env = {**os.environ, "SPUR_CONF": str(client_conf), "SPUR_MUNGE_SOCKET": munge}
    stub = cluster.stub(cluster.wait_leader())
    for user, level in ((OPS, "operator"), (BOB, "none")):  # sacctmgr add user NAME account=root adminlevel=LEVEL
        request = slurm_pb2.ModifyAssociationsRequest(verb="add", entity="user", names=[user],
                                                      set={"account": "root", "adminlevel": level})  # fmt: skip
        assert stub.ModifyAssociations(request, timeout=10, metadata=(("spur-auth", credential(munge)),)).changed
    jobs = {}
    for user, extra in ((ALICE, [f"--export=ALL,{SECRET}=s3cr3t-value"]), (BOB, [])):
        done = run_as(env, work, user, "sbatch", "--parsable", "--hold", *extra, "--wrap", "sleep 30")
        assert done.returncode == 0, done.stderr
        jobs[user] = done.stdout.strip()
    yield stub, agent, work, env, jobs
    agent.stop()
    cleanup()


def test_private_jobs_and_usage_with_two_users_and_an_operator(private, munge):  # noqa: F811
    stub, agent, work, env, jobs = private
    alices, bobs = jobs[ALICE], jobs[BOB]

    def queue(user, *argv):
        done = run_as(env, work, user, "squeue", "-h", "-o", "%i", *argv)
        assert done.returncode == 0, done.stderr
        return sorted(done.stdout.split())

    # A user sees their own jobs only, names of others' included; an id of another's job is as one that is not.
    assert queue(ALICE) == [alices] and queue(BOB) == [bobs]
    assert queue(ALICE, "-u", BOB) == [], "squeue -u bob as alice lists nothing"
    shown = run_as(env, work, ALICE, "scontrol", "show", "job", bobs)
    assert (shown.returncode, shown.stderr) == (1, "slurm_load_jobs error: Invalid job id specified\n")
    # scancel -u bob as alice cancels nothing, and says nothing (Slurm: no job matched)
    cancel = run_as(env, work, ALICE, "scancel", "-u", BOB)
    assert cancel.returncode == 0, cancel.stderr
    # The operator sees every job, and reads alice's environment (Spur's -o json layout); bob never does.
    assert queue(OPS) == sorted([alices, bobs])
    assert SECRET in run_as(env, work, OPS, "squeue", "-o", "json", "-j", alices).stdout
    for argv in (["squeue", "-o", "json"], ["scontrol", "--json", "show", "job", alices]):
        assert SECRET not in run_as(env, work, BOB, *argv).stdout
    # A plain user may not drain a node; the operator may, and cancels bob's job.
    refused = run_as(env, work, BOB, "scontrol", "update", f"NodeName={agent.name}", "State=DRAIN", "Reason=mine")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"user {BOB} (uid 2) may not update nodes: needs AdminLevel Operator" in refused.stderr
    assert "sacctmgr modify user" in refused.stderr and "[auth] admins" in refused.stderr
    drained = run_as(env, work, OPS, "scontrol", "update", f"NodeName={agent.name}", "State=DRAIN", "Reason=ops")
    assert drained.returncode == 0, drained.stderr
    assert "DRAIN" in run_as(env, work, OPS, "sinfo", "-h", "-o", "%T").stdout.upper()
    assert run_as(env, work, ALICE, "scancel", bobs).returncode == 1, "alice may not cancel bob's job"
    assert run_as(env, work, OPS, "scancel", bobs).returncode == 0
    assert run_as(env, work, OPS, "squeue", "-h", "-t", "all", "-o", "%T", "-j", bobs).stdout.strip() == "CANCELLED"
    # "usage": bob's association listing holds his own associations only; the operator's holds everyone's.
    listing = slurm_pb2.ListAssociationsRequest()
    mine = stub.ListAssociations(listing, timeout=10, metadata=metadata_as(munge, BOB)).associations
    assert mine and {a.user for a in mine} == {BOB}
    every = stub.ListAssociations(listing, timeout=10, metadata=metadata_as(munge, OPS)).associations
    assert {a.user for a in every} >= {"", "root", OPS, BOB}
    shares = slurm_pb2.ListSharesRequest(all_users=True)  # sshare -a
    mine = stub.ListShares(shares, timeout=10, metadata=metadata_as(munge, BOB)).shares
    assert mine and {s.user for s in mine} == {BOB}, "an account's own row only to its coordinators"
    every = stub.ListShares(shares, timeout=10, metadata=metadata_as(munge, OPS)).shares
    assert {s.user for s in every} >= {"", OPS, BOB}
