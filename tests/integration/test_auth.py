"""Who is asking: MUNGE credentials on every request; administrators alone drain, resume and update nodes,
and a user may not cancel another user's job. Runs a real munged with a test key."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import grpc
import pytest

from agents import AgentProc, cleanup
from harness import BIN, wait_until
from prereqs import needs
from spur_hpc.proto import raft_internal_pb2, raft_internal_pb2_grpc, slurm_pb2, slurm_pb2_grpc

pytestmark = needs(shutil.which("munged") is not None, "munged is not installed", "apt-get install munge")


@pytest.fixture
def shared_dir():
    """Outside pytest's 0700 tmp tree: the user nobody must reach the socket, the config and the work dir."""
    path = Path(tempfile.mkdtemp(prefix="spur-auth-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def munge(shared_dir):
    home = shared_dir / "munge"
    home.mkdir()
    home.chmod(0o755)
    key = home / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    sock = home / "munge.socket"
    proc = subprocess.Popen(["munged", "-F", f"--key-file={key}", f"--socket={sock}", f"--pid-file={home}/pid",
                             f"--seed-file={home}/seed", "--num-threads=4"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(sock.exists, 10, "munged to create its socket")
    yield str(sock)
    proc.terminate()
    proc.wait(10)


def auth_section(sock: str) -> str:
    return f'[auth]\ntype = "munge"\nmunge_socket = "{sock}"\nadmins = ["root"]\n'


@pytest.fixture
def secured(make_cluster, munge, shared_dir, tmp_path):
    cluster = make_cluster(3, extra_sections=auth_section(munge))
    agent = AgentProc(tmp_path / "agent", cluster.hosts, extra="\n" + auth_section(munge)).start()
    work = shared_dir / "work"
    work.mkdir()
    work.chmod(0o777)
    client_conf = cluster.client_conf(shared_dir / "client.conf")
    client_conf.chmod(0o644)
    env = dict(os.environ, SPUR_CONF=str(client_conf), SPUR_MUNGE_SOCKET=munge)
    yield cluster, agent, work, env
    agent.stop()
    cleanup()


def run(env, work, *argv, as_nobody=False):
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if as_nobody else []
    return subprocess.run(prefix + [str(BIN / argv[0]), *argv[1:]], cwd=work, env=env, capture_output=True, text=True,
                          timeout=60)


def credential(sock: str, as_nobody: bool = False) -> str:
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if as_nobody else []
    return "munge:" + subprocess.run(prefix + ["munge", "-n", "-S", sock], check=True, capture_output=True,
                                     text=True).stdout.strip()


def test_users_and_administrators(secured):
    cluster, agent, work, env = secured
    root_job = run(env, work, "sbatch", "--parsable", "--wrap", "sleep 30")
    assert root_job.returncode == 0, root_job.stderr
    mine = run(env, work, "sbatch", "--parsable", "--wrap", "id -un", as_nobody=True)
    assert mine.returncode == 0, mine.stderr
    job_id = mine.stdout.strip()
    wait_until(lambda: "JobState=COMPLETED" in run(env, work, "scontrol", "show", "job", job_id).stdout, 30,
               "nobody's job to complete")
    assert (work / f"slurm-{job_id}.out").read_text().strip() == "nobody", "the job ran as its submitter"
    # A user may not drain a node or cancel someone else's job; nothing changes.
    drain = run(env, work, "scontrol", "update", f"NodeName={agent.name}", "State=DRAIN", "Reason=mine",
                as_nobody=True)
    assert drain.returncode != 0 and "may not update nodes" in drain.stderr, drain.stderr
    assert drain.stderr.count("\n") == 1
    cancel = run(env, work, "scancel", root_job.stdout.strip(), as_nobody=True)
    assert cancel.returncode == 1 and "may not cancel job" in cancel.stderr, cancel.stderr
    assert "JobState=RUNNING" in run(env, work, "scontrol", "show", "job", root_job.stdout.strip()).stdout
    # scontrol suspend is for operators and administrators only, as in Slurm (Slurm's two lines).
    suspend = run(env, work, "scontrol", "suspend", root_job.stdout.strip(), as_nobody=True)
    denied = "Access/permission denied"
    expected = f"{denied} for job {root_job.stdout.strip()}\nslurm_suspend error: {denied}\n"
    assert (suspend.returncode, suspend.stderr) == (1, expected)
    assert "JobState=RUNNING" in run(env, work, "scontrol", "show", "job", root_job.stdout.strip()).stdout
    shown = run(env, work, "scontrol", "show", "node", agent.name).stdout
    assert "State=MIXED" in shown or "State=ALLOCATED" in shown
    # root is an administrator.
    assert run(env, work, "scontrol", "update", f"NodeName={agent.name}", "State=DRAIN", "Reason=ops").returncode == 0
    assert run(env, work, "scancel", root_job.stdout.strip()).returncode == 0


def test_requests_without_a_valid_credential_are_refused(secured, munge):
    cluster, agent, _work, _env = secured
    stub = cluster.stub(cluster.wait_leader())
    spec = slurm_pb2.JobSpec(name="x", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
    request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=uuid.uuid4().hex)
    for metadata in ((), (("spur-auth", "none:0:0"),), (("spur-auth", "munge:forged"),)):
        with pytest.raises(grpc.RpcError) as info:
            stub.SubmitJob(request, timeout=5, metadata=metadata)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value.details()
    # A credential is good once: a replay is refused.
    cred = credential(munge)
    stub.Ping(slurm_pb2.PingRequest(), timeout=5, metadata=(("spur-auth", cred),))
    with pytest.raises(grpc.RpcError) as info:
        stub.Ping(slurm_pb2.PingRequest(), timeout=5, metadata=(("spur-auth", cred),))
    assert "Replayed" in info.value.details()
    # nobody may not submit as root, nor launch jobs on an agent directly.
    with pytest.raises(grpc.RpcError) as info:
        stub.SubmitJob(request, timeout=5, metadata=(("spur-auth", credential(munge, as_nobody=True)),))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "submit as yourself" in info.value.details()
    agent_stub = slurm_pb2_grpc.SlurmAgentStub(grpc.insecure_channel(agent.address))
    job = slurm_pb2.Job(job_id=999, attempt=1, spec=spec)
    with pytest.raises(grpc.RpcError) as info:
        agent_stub.LaunchJob(slurm_pb2.LaunchJobRequest(job=job), timeout=5,
                             metadata=(("spur-auth", credential(munge, as_nobody=True)),))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not Path(agent.state_dir / "999.1").exists()


def test_agent_ping_and_cluster_probe_need_a_credential(secured, munge):
    """The cluster above bootstrapped (3 controllers asking each other with credentials) and the agent registered;
    what runs where (jobs, supervisor pids) and the membership are told only to administrators."""
    cluster, agent, work, env = secured
    job = run(env, work, "sbatch", "--parsable", "--wrap", "sleep 60")
    assert job.returncode == 0, job.stderr
    job_id = int(job.stdout.strip())
    wait_until(lambda: job_id in agent.running(), 30, "the job to run on the agent")
    agent_stub = agent.stub()
    probe_stub = raft_internal_pb2_grpc.RaftInternalStub(grpc.insecure_channel(cluster.wait_leader().grpc_addr))
    probe_request = raft_internal_pb2.ClusterProbeRequest(cluster_name=cluster.name)
    for metadata in ((), (("spur-auth", "none:0:0"),)):
        for call in (lambda m: agent_stub.Ping(slurm_pb2.PingRequest(), timeout=5, metadata=m),
                     lambda m: probe_stub.ClusterProbe(probe_request, timeout=5, metadata=m)):
            with pytest.raises(grpc.RpcError) as info:
                call(metadata)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value.details()
            assert "MUNGE credential" in info.value.details() and "\n" not in info.value.details()
    # A user learns the node is up, not what runs on it.
    user = agent_stub.Ping(slurm_pb2.PingRequest(), timeout=5,
                           metadata=(("spur-auth", credential(munge, as_nobody=True)),))
    assert user.node == agent.name and user.registered and not user.running
    with pytest.raises(grpc.RpcError) as info:
        probe_stub.ClusterProbe(probe_request, timeout=5, metadata=(("spur-auth", credential(munge, as_nobody=True)),))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "controllers only" in info.value.details()
    # root (an administrator) gets the details.
    admin = agent_stub.Ping(slurm_pb2.PingRequest(), timeout=5, metadata=(("spur-auth", credential(munge)),))
    running = {r.job_id: r.supervisor_pid for r in admin.running}
    assert running.get(job_id) == agent.running()[job_id]["supervisor_pid"] > 0
    reply = probe_stub.ClusterProbe(probe_request, timeout=5, metadata=(("spur-auth", credential(munge)),))
    assert reply.has_cluster and sorted(reply.members) == sorted(cluster.peers)
    # Changing the controllers, or seeing their Raft progress, is for administrators only (spur admin raft).
    stub = cluster.stub(cluster.wait_leader())
    change = slurm_pb2.ChangeMembershipRequest(action="remove", raft_addr=cluster.peers[0])
    for call in (lambda m: stub.RaftStatus(slurm_pb2.RaftStatusRequest(), timeout=5, metadata=m),
                 lambda m: stub.ChangeMembership(change, timeout=5, metadata=m)):
        with pytest.raises(grpc.RpcError) as info:
            call((("spur-auth", credential(munge, as_nobody=True)),))  # a credential is good for one call
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, info.value.details()
    status = stub.RaftStatus(slurm_pb2.RaftStatusRequest(), timeout=5, metadata=(("spur-auth", credential(munge)),))
    assert sorted(m.raft_addr for m in status.members) == sorted(cluster.peers) and all(m.voter for m in status.members)
    assert run(env, work, "scancel", str(job_id)).returncode == 0
