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
    assert code in CLEAN_CODES, f"{code}: {details}"
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
