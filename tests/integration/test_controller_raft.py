"""spurctld replicas as real processes: election, failover, catch-up, safe bootstrap."""

from __future__ import annotations

import shutil
import time
import uuid

import grpc
import pytest

from harness import http_get, spawn_raft_dies, wait_until
from spur_hpc.daemon import EXIT_FATAL
from spur_hpc.proto import slurm_pb2


def spec(name: str = "t") -> slurm_pb2.JobSpec:
    return slurm_pb2.JobSpec(name=name, script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")


def submit(cluster, member, n: int = 1, key: str | None = None) -> list[int]:
    stub = cluster.stub(member)
    ids = []
    for _ in range(n):
        reply = stub.SubmitJob(
            slurm_pb2.SubmitJobRequest(spec=spec(), idempotency_key=key or uuid.uuid4().hex), timeout=10
        )
        ids.append(reply.job_id)
    return ids


def submit_anywhere(cluster, n: int) -> list[int]:
    """Submit through whichever controller answers (followers forward to the leader)."""
    ids = []
    for _ in range(n):
        key = uuid.uuid4().hex

        def attempt(key=key):
            for m in cluster.running():
                try:
                    return submit(cluster, m, 1, key)[0]
                except grpc.RpcError:
                    continue
            return None

        ids.append(wait_until(attempt, 15, "a controller to accept a submission"))
    return ids


def all_job_ids(cluster, member) -> set[int]:
    reply = cluster.stub(member).ListJobs(slurm_pb2.ListJobsRequest(include_finished=True), timeout=10)
    return {j.job_id for j in reply.jobs}


def test_three_controllers_elect_exactly_one_leader(cluster):
    codes = {m.index: m.probe("/metrics/nodes") for m in cluster.members}
    assert sorted(codes.values()) == [200, 503, 503], codes
    wait_until(lambda: all(m.status()["cluster_id"] for m in cluster.members), 5, "every member to apply the init")
    statuses = [m.status() for m in cluster.members]
    assert len({s["cluster_id"] for s in statuses}) == 1
    assert {s["role"] for s in statuses} == {"leader", "follower"}
    leader = [s for s in statuses if s["role"] == "leader"][0]
    for s in statuses:
        assert s["leader"] == leader["raft_addr"]
        assert sorted(s["members"]) == sorted(cluster.peers)
        assert s["wal_level"] >= 1 and s["version"] and s["build"]
    for m in cluster.members:
        assert m.probe("/livez") == 200
    wait_until(lambda: all(m.probe("/readyz") == 200 for m in cluster.members), 10, "every member ready")


def test_followers_serve_reads_and_forward_writes(cluster):
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m is not leader)
    ids = submit(cluster, follower, 3)
    assert ids == sorted(ids) and len(set(ids)) == 3
    wait_until(lambda: set(ids) <= all_job_ids(cluster, follower), 5, "follower to see its writes")
    # The same idempotency key never creates a second job, whichever controller answers.
    key = uuid.uuid4().hex
    first = submit(cluster, follower, 1, key)[0]
    again = cluster.stub(leader).SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec(), idempotency_key=key), timeout=10)
    assert again.job_id == first and again.duplicate


def test_a_follower_sends_a_job_id_it_has_not_applied_to_the_leader_and_never_says_it_does_not_exist(cluster):
    """Read your writes: a follower learns of a commit with the leader's next message, so a job just submitted can
    be missing there for a moment; asked for an id it has not given out yet, it names the leader instead of
    answering "does not exist" (scontrol show job right after sbatch must not say Invalid job id)."""
    leader = cluster.wait_leader()
    followers = [m for m in cluster.members if m is not leader]
    for _ in range(40):
        job_id = submit(cluster, leader, 1)[0]
        for m in followers:
            for call in (
                lambda m=m, j=job_id: cluster.stub(m).GetJob(slurm_pb2.GetJobRequest(job_id=j), timeout=10),
                lambda m=m, j=job_id: cluster.stub(m).ListJobs(slurm_pb2.ListJobsRequest(job_ids=[j]), timeout=10),
            ):
                try:
                    reply = call()
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, (exc.code(), exc.details())
                    assert dict(exc.trailing_metadata())["spur-leader"] == leader.grpc_addr
                    continue
                assert getattr(reply, "job_id", None) == job_id or [j.job_id for j in reply.jobs] == [job_id]
    # An id nobody gave out: the follower sends it on, the leader says it does not exist.
    unknown = job_id + 1000
    with pytest.raises(grpc.RpcError) as refused:
        cluster.stub(followers[0]).GetJob(slurm_pb2.GetJobRequest(job_id=unknown), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.RpcError) as missing:
        cluster.stub(leader).GetJob(slurm_pb2.GetJobRequest(job_id=unknown), timeout=10)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    # Once applied there, the follower answers for the job itself.
    wait_until(lambda: job_id in all_job_ids(cluster, followers[0]), 5, "the follower to apply the last job")
    assert cluster.stub(followers[0]).GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=10).job_id == job_id


def test_a_brief_job_list_leaves_out_script_and_environment_only(cluster):
    leader = cluster.wait_leader()
    full_spec = slurm_pb2.JobSpec(name="brief", script="#!/bin/sh\necho hi\n", user="root", work_dir="/srv/w",
                                  partition="default", cpus_per_task=2, environment={"HOME": "/root", "X": "1"})
    job_id = cluster.stub(leader).SubmitJob(
        slurm_pb2.SubmitJobRequest(spec=full_spec, idempotency_key=uuid.uuid4().hex), timeout=10
    ).job_id
    stub = cluster.stub(leader)
    full = stub.ListJobs(slurm_pb2.ListJobsRequest(job_ids=[job_id]), timeout=10).jobs[0]
    brief = stub.ListJobs(slurm_pb2.ListJobsRequest(job_ids=[job_id], brief=True), timeout=10).jobs[0]
    assert full.spec.script == full_spec.script and dict(full.spec.environment) == {"HOME": "/root", "X": "1"}
    assert brief.spec.script == "" and not brief.spec.environment
    # Everything else is the same record.
    for job in (full, brief):
        job.spec.ClearField("script")
        job.spec.ClearField("environment")
    assert brief == full and brief.spec.work_dir == "/srv/w" and brief.spec.cpus_per_task == 2


def test_kill_leader_elects_new_one_and_keeps_acknowledged_writes(cluster):
    leader = cluster.wait_leader()
    acknowledged = submit_anywhere(cluster, 20)
    cluster.kill9(leader.index)
    new_leader = cluster.wait_leader(timeout=30, exclude=leader)
    assert new_leader is not leader
    assert set(acknowledged) <= all_job_ids(cluster, new_leader)
    more = submit_anywhere(cluster, 3)
    assert min(more) > max(acknowledged), "the job-id counter went back after failover"
    # The old leader comes back with its journal and catches up.
    cluster.restart(leader.index)
    target = set(acknowledged) | set(more)
    wait_until(lambda: target <= all_job_ids(cluster, leader), 15, "restarted member to catch up")


def test_restarted_follower_catches_up_with_journal(cluster):
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m is not leader)
    submit_anywhere(cluster, 5)
    follower.proc.stop()
    written = submit_anywhere(cluster, 30)
    cluster.restart(follower.index)
    wait_until(lambda: set(written) <= all_job_ids(cluster, follower), 15, "follower to catch up")
    status = follower.status()
    assert status["cluster_id"] == leader.status()["cluster_id"]


def test_a_follower_whose_raft_core_dies_fails_readyz_at_once_and_exits_70(make_cluster, tmp_path):
    grace = 4.0
    c = make_cluster(3, extra_controller=f"fatal_exit_grace_secs = {grace}")
    leader = c.wait_leader()
    f = next(m for m in c.members if m is not leader)
    f.proc.stop()
    trigger = tmp_path / "kill-raft"
    spawn_raft_dies(f, trigger)
    wait_until(lambda: f.probe("/readyz") == 200, 60, "the follower under the test hook to be ready")
    trigger.touch()
    died = time.monotonic()
    # Before: /readyz kept answering 200 (and gRPC kept serving) with a dead Raft core, so probes sent it traffic.
    def failing_readyz():
        code, body = http_get(f.probe_url + "/readyz")
        return body if code == 503 else None

    body = wait_until(failing_readyz, 2, "/readyz to fail")
    assert f.proc.alive(), "the 503 comes at once, before the exit"
    assert "not ready: the Raft core stopped" in body and "TickThreadDies" in body, body
    assert f.probe("/livez") == 503
    assert f.proc.wait_exit(grace + 20) == EXIT_FATAL
    assert time.monotonic() - died >= grace - 0.5, "it exits after the grace, not at once"
    errors = [line for line in f.proc.log_text().splitlines() if " ERROR " in line or " CRITICAL " in line]
    assert len(errors) == 1 and "exits with status 70" in errors[0], errors
    others = [m for m in c.members if m is not f]
    assert all(m.probe("/readyz") == 200 for m in others)
    assert c.wait_leader() in others
    assert len(set(submit_anywhere(c, 3))) == 3


def test_wiped_follower_rejoins_through_cluster_probe(cluster):
    leader = cluster.wait_leader()
    follower = next(m for m in cluster.members if m is not leader)
    written = submit_anywhere(cluster, 10)
    cluster_id = leader.status()["cluster_id"]
    follower.proc.stop()
    shutil.rmtree(follower.state_dir)
    cluster.restart(follower.index)
    wait_until(lambda: set(written) <= all_job_ids(cluster, follower), 20, "wiped follower to catch up")
    wait_until(lambda: follower.status()["phase"] == "running", 10, "wiped follower to finish joining")
    assert follower.status()["cluster_id"] == cluster_id
    assert "joining it with an empty store" in follower.proc.log_text()
    assert (follower.state_dir / "cluster.json").exists()


def test_growing_a_single_controller_by_starting_empty_replicas_is_refused(make_cluster):
    c = make_cluster(3, start=False)
    a, b, d = c.members
    # A runs alone first and acknowledges writes.
    c.write_conf(a, peers=[a.raft_addr], hosts=[a.grpc_addr])
    c.start([0], wait=False)
    wait_until(lambda: a.probe("/metrics/nodes") == 200 and a.status()["cluster_id"], 15, "single controller")
    ids = submit(c, a, 5)
    # The operator raises the replica count: A restarts with three peers, B and D start empty.
    c.write_conf(a)
    c.restart(0)
    c.start([1, 2], wait=False)
    for m in (b, d):
        code = m.proc.wait_exit(30)
        assert code != 0
        text = m.proc.log_text()
        assert "refusing to start" in text and a.raft_addr in text and "spur admin raft add" in text, text[-2000:]
    # A kept all data, still leads its one-member cluster and the next id continues.
    wait_until(lambda: a.probe("/metrics/nodes") == 200, 15, "A to lead again")
    assert sorted(a.status()["members"]) == [a.raft_addr]
    assert "differ from this cluster's committed membership" in a.proc.log_text()
    assert set(ids) <= all_job_ids(c, a)
    assert submit(c, a, 1)[0] == max(ids) + 1


def test_wiped_majority_waits_for_the_member_with_data(cluster):
    leader = cluster.wait_leader()
    written = submit_anywhere(cluster, 10)
    keeper = leader
    wiped = [m for m in cluster.members if m is not keeper]
    cluster.stop()
    for m in wiped:
        shutil.rmtree(m.state_dir)
    for m in wiped:
        cluster.spawn(m)
    # Without the member that holds the data they must not form a cluster of their own.
    time.sleep(4)
    assert all(m.proc.alive() for m in wiped)
    assert all(m.probe("/metrics/nodes") != 200 for m in wiped)
    assert "waiting for peers" in wiped[0].proc.log_text()
    cluster.spawn(keeper)
    new_leader = cluster.wait_leader(timeout=30)
    # Reads are local: a leader just elected may still be applying the entries it committed before.
    wait_until(lambda: set(written) <= all_job_ids(cluster, new_leader), 20, "the new leader to apply every job")
    for m in wiped:
        wait_until(lambda m=m: set(written) <= all_job_ids(cluster, m), 20, "wiped member to catch up")
    assert submit_anywhere(cluster, 1)[0] == max(written) + 1


def test_peer_without_cluster_probe_does_not_block_bootstrap(make_cluster):
    from concurrent import futures

    c = make_cluster(3, start=False)
    old = c.members[2]
    # A gRPC server without ClusterProbe stands for an older controller release.
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_insecure_port(old.grpc_addr)
    server.start()
    try:
        c.start([0, 1], wait=False)
        # Two of three members form a majority once both decided to bootstrap.
        wait_until(lambda: len(c.leaders()) == 1, 20, "a leader among the two new members")
        assert "holds no cluster: bootstrapping" in c.members[0].proc.log_text()
    finally:
        server.stop(0)


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (
            lambda t, m: t.replace(f'raft_addr = "{m.raft_addr}"', 'raft_addr = "127.0.1.250:6821"'),
            "does not contain this controller's raft_addr",
        ),
        (lambda t, m: t + "\n[controller.extra]\n", "unknown key"),
        (lambda t, m: t.replace("[cluster]", "[cluster]\nnmae = 'x'"), "[cluster] nmae: unknown key"),
        (
            lambda t, m: t.replace("heartbeat_timeout_secs = 60", 'heartbeat_timeout_secs = "sixty"'),
            "heartbeat_timeout_secs: expected an integer",
        ),
        (lambda t, m: t.replace("peers = [", f'peers = ["{m.raft_addr}", '), "is listed twice"),
        (
            lambda t, m: t.replace(f'listen_addr = "{m.grpc_addr}"', 'listen_addr = "127.0.1.1:99999"'),
            "is not a number from 1 to 65535",
        ),
        (lambda t, m: t + "\n[bogus]\nx = 1\n", "[bogus]: unknown section"),
        (lambda t, m: t.replace("[cluster]", "[cluster"), "not valid TOML"),
    ],
)
def test_bad_config_gives_one_clear_line_and_nonzero_exit(make_cluster, mutate, needle):
    import subprocess

    from harness import BIN

    c = make_cluster(3, start=False)
    m = c.members[0]
    c.write_conf(m)
    m.conf_path.write_text(mutate(m.conf_path.read_text(), m))
    result = subprocess.run(
        [str(BIN / "spurctld"), "--conf", str(m.conf_path)], capture_output=True, text=True, timeout=20
    )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert not m.state_dir.exists() or not any(m.state_dir.iterdir())


def test_secret_file_must_be_private(make_cluster):
    import subprocess

    from harness import BIN

    c = make_cluster(1, start=False)
    m = c.members[0]
    c.write_conf(m)
    c.secret_file.chmod(0o644)
    result = subprocess.run(
        [str(BIN / "spurctld"), "--conf", str(m.conf_path)], capture_output=True, text=True, timeout=20
    )
    assert result.returncode == 2
    assert "chmod 0600" in result.stderr and result.stderr.count("\n") == 1


def test_raft_port_in_use_is_a_clear_error(make_cluster):
    import socket
    import subprocess

    from harness import BIN

    c = make_cluster(1, start=False)
    m = c.members[0]
    c.write_conf(m)
    with socket.socket() as s:
        s.bind((m.ip, m.raft_port))
        s.listen()
        result = subprocess.run(
            [str(BIN / "spurctld"), "--conf", str(m.conf_path)], capture_output=True, text=True, timeout=30
        )
    assert result.returncode == 2
    assert "raft_addr" in result.stderr and "Traceback" not in result.stderr


def test_snapshots_and_a_full_restart_keep_every_job(make_cluster):
    c = make_cluster(3, extra_controller="log_compaction_entries = 20")
    written = submit_anywhere(c, 60)
    wait_until(lambda: all((m.state_dir / "raft.dump").exists() for m in c.members), 20, "snapshots on every member")
    c.stop()
    c.start()
    leader = c.wait_leader(timeout=30)
    wait_until(lambda: set(written) <= all_job_ids(c, leader), 15, "the leader to hold every job after restart")
    for m in c.members:
        wait_until(lambda m=m: set(written) <= all_job_ids(c, m), 15, "every member to hold every job")
    assert submit_anywhere(c, 1)[0] == max(written) + 1
