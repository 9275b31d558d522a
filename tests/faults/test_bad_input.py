"""Generated bad input against a live controller: a clear error, never a traceback, never a crash, never a
state change. Plus generated command lines for the Slurm commands."""

from __future__ import annotations

import subprocess

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import BIN
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

CLEAN_CODES = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
}
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=300) | st.just("x" * 10_000)

specs = st.builds(
    slurm_pb2.JobSpec,
    name=text,
    script=text,
    user=text,
    uid=int32,
    gid=int32,
    work_dir=text,
    nodes=int32,
    tasks=int32,
    cpus_per_task=int32,
    memory_mb=int64,
    time_limit_secs=int64,
    partition=text,
)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from harness import ControllerCluster, next_ip_base

    cluster = ControllerCluster(tmp_path_factory.mktemp("fuzz"), 3, ip_base=next_ip_base(3))
    cluster.start()
    yield cluster
    cluster.stop()


def call(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


def check(code, details):
    # A follower asked for a job id it has not given out names the leader (read your writes): a clean refusal too.
    named_leader = code == grpc.StatusCode.UNAVAILABLE and details.startswith("this controller is not the leader")
    assert code in CLEAN_CODES or named_leader, f"{code}: {details}"
    assert "Traceback" not in details and "\n" not in details


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=specs)
def test_random_job_specs(live, spec):
    stub = live.stub(live.members[0])
    before = stub.GetClusterInfo(slurm_pb2.ClusterInfoRequest(), timeout=5).next_job_id
    code, details = call(lambda: stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec), timeout=10))
    check(code, details)
    after = stub.GetClusterInfo(slurm_pb2.ClusterInfoRequest(), timeout=5).next_job_id
    if code != grpc.StatusCode.OK:
        assert after == before, "a refused submission changed the state"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job_id=int64, signal=int32, state=int32, name=text, level=int32)
def test_random_ids_states_and_names(live, job_id, signal, state, name, level):
    stub = live.stub(live.members[1])
    for fn in (
        lambda: stub.GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5),
        lambda: stub.CancelJob(slurm_pb2.CancelJobRequest(job_id=job_id, signal=signal), timeout=5),
        lambda: stub.UpdateNode(slurm_pb2.UpdateNodeRequest(name=name, state=state, reason="r"), timeout=5),
        lambda: stub.DrainNode(slurm_pb2.DrainNodeRequest(name=name, reason=name), timeout=5),
        lambda: stub.ListJobs(slurm_pb2.ListJobsRequest(states=[state]), timeout=5),
        lambda: stub.ListNodes(slurm_pb2.ListNodesRequest(states=[state]), timeout=5),
        lambda: stub.SetWalLevel(slurm_pb2.SetWalLevelRequest(level=level), timeout=5),
        lambda: stub.HoldJob(slurm_pb2.HoldJobRequest(job_id=job_id), timeout=5),
    ):
        check(*call(fn))


def test_controllers_survived_the_fuzzing(live):
    assert all(m.proc.alive() for m in live.members)
    assert len(live.leaders()) == 1


@settings(max_examples=40, deadline=None)
@given(
    command=st.sampled_from(["sbatch", "squeue", "sinfo", "scancel", "scontrol", "sacct"]),
    args=st.lists(
        st.sampled_from(
            [
                "-j",
                "-u",
                "-t",
                "-N",
                "-n",
                "-c",
                "--mem",
                "-o",
                "-p",
                "--bogus",
                "x",
                "-1",
                "abc",
                "99999999999999999999",
                "State=DRAIN",
                "NodeName=",
                "update",
                "show",
                "--",
                "%",
                "--parsable",
                "--wrap",
                "-h",
            ]
        ),
        max_size=5,
    ),
)
def test_random_command_lines_fail_cleanly(command, args):
    env = {"SPUR_CONTROLLER_ADDR": "127.0.0.1:1", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [str(BIN / command), *args], capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL
    )
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode != 0:
        assert result.stderr.strip(), "a failure must say why"


# ---------------------------------------------------------------- control characters, sizes, widths


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One controller is enough to see what it accepts and what the commands print."""
    from harness import ControllerCluster, next_ip_base

    cluster = ControllerCluster(tmp_path_factory.mktemp("single"), 1, ip_base=next_ip_base(1))
    cluster.start()
    yield cluster
    cluster.stop()


def plain_spec(**fields) -> slurm_pb2.JobSpec:
    values = {"name": "plain", "script": "#!/bin/sh\ntrue\n", "user": "alice", "uid": 1000, "gid": 1000,
              "work_dir": "/tmp"}  # fmt: skip
    values.update(fields)
    return slurm_pb2.JobSpec(**values)


def test_the_controller_refuses_control_characters_in_a_job_name(single):
    """The controller does not trust the client: a direct SubmitJob with a newline in the name is refused."""
    stub = single.stub(single.wait_leader())

    def submit(**fields):
        return call(lambda: stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=plain_spec(**fields)), timeout=10))

    for name, shown in (("evil\nforged", "\\n"), ("a\rb", "\\r"), ("x\x1b[2J", "\\x1b"), ("line\u2028sep", "\\u2028")):
        code, details = submit(name=name)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
        assert f"the job's name contains a control character ({shown})" in details
    code, details = submit(account="a\nb")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "account contains a control character" in details


def test_the_controller_refuses_control_characters_in_a_node_reason(single):
    """A drain reason is a row of sinfo -R: a direct DrainNode with a newline in it is refused."""
    stub = single.stub(single.wait_leader())
    request = slurm_pb2.DrainNodeRequest(name="n1", reason="maintenance\nn2 forged", set_by="root")
    code, details = call(lambda: stub.DrainNode(request, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert "reason contains a control character (\\n)" in details


def test_the_controller_bounds_the_environment_of_a_job(single):
    stub = single.stub(single.wait_leader())
    before = stub.GetClusterInfo(slurm_pb2.ClusterInfoRequest(), timeout=5).next_job_id
    huge = plain_spec(environment={"BIG": "x" * 20_000_000})
    code, details = call(lambda: stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=huge), timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert "environment variable 'BIG' is 20000005 bytes; the limit is 131072 bytes per variable" in details
    many = plain_spec(environment={f"V{i}": "y" * 100_000 for i in range(12)})
    code, details = call(lambda: stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=many), timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    assert "the job's environment is 1200050 bytes; the limit is 1048576 bytes in all" in details
    assert stub.GetClusterInfo(slurm_pb2.ClusterInfoRequest(), timeout=5).next_job_id == before


def run_cli(cluster, *argv: str) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
    env.pop("SPUR_CONTROLLER_ADDR", None)
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=60, env=env,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def assert_one_error_line(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_the_commands_refuse_hostile_input_against_a_live_cluster(single):
    """With jobs to print, an unbounded width used to raise OverflowError (squeue) or run for a minute (sacct)."""
    stub = single.stub(single.wait_leader())
    reply = stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=plain_spec(name="listed")), timeout=10)
    stub.HoldJob(slurm_pb2.HoldJobRequest(job_id=reply.job_id), timeout=10)
    assert_one_error_line(run_cli(single, "squeue", "-o", "%999999999999999999999i"), "bad width", "1024")
    assert_one_error_line(run_cli(single, "sacct", "-a", "--format", "JobID%99999999"), "bad width", "1024")
    assert_one_error_line(run_cli(single, "sbatch", "-J", "a\nb", "--wrap", "true"), "control character (\\n)")
    assert_one_error_line(run_cli(single, "sbatch", "--mem=99999999999999999999", "--wrap", "true"), "--mem")
    assert_one_error_line(run_cli(single, "scancel", "9223372036854775808"), "up to 9223372036854775807")
    assert_one_error_line(
        run_cli(single, "scontrol", "update", "NodeName=pn[1-99999999]", "State=DRAIN", "Reason=x"), "65536"
    )
    shown = run_cli(single, "squeue", "-h", "-j", str(reply.job_id), "-o", "%i %j")
    assert shown.returncode == 0 and shown.stdout == f"{reply.job_id} listed\n", shown


def test_a_record_with_a_newline_in_its_name_is_shown_on_one_line(tmp_path):
    """A job submitted before names were checked keeps its name in the journal; every listing escapes it."""
    from harness import ControllerCluster, next_ip_base

    cluster = ControllerCluster(tmp_path / "old", 1, ip_base=next_ip_base(1))
    cluster.start()
    try:
        stub = cluster.stub(cluster.wait_leader())
        job_id = stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=plain_spec(name="evilXforgedXrow")), timeout=10).job_id
        cluster.stop()
        # what an older controller wrote: the same record with newlines, same length, so the journal stays valid
        journal = cluster.members[0].state_dir / "raft.journal"
        data = journal.read_bytes()
        assert data.count(b"evilXforgedXrow") == 1
        journal.write_bytes(data.replace(b"evilXforgedXrow", b"evil\nforged\nrow"))
        cluster.start()
        queue = run_cli(cluster, "squeue", "-h", "-o", "%i|%j")
        assert queue.returncode == 0 and queue.stdout == f"{job_id}|evil\\nforged\\nrow\n", queue
        accounting = run_cli(cluster, "sacct", "-a", "-n", "-P", "--format", "JobID,JobName")
        # this cluster keeps no accounting: sacct says so, as Slurm does (test_cli_badinput checks its escaping)
        assert (accounting.returncode, accounting.stderr) == (1, "Slurm accounting storage is disabled\n"), accounting
        show = run_cli(cluster, "scontrol", "show", "job", str(job_id))
        assert f"JobId={job_id} JobName=evil\\nforged\\nrow\n" in show.stdout, show
    finally:
        cluster.stop()
