"""The controller's API server on grpc.aio (grpcutil.AioServer) and the @rpc decorator on both kinds of handler:
coroutines on the loop and plain methods in the pool answer errors alike, and a stop drains calls in flight."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from spur_hpc import grpcutil
from spur_hpc.controller import errors
from spur_hpc.controller.grpc_api import rpc
from spur_hpc.proto import slurm_pb2 as pb
from spur_hpc.proto import slurm_pb2_grpc as pb_grpc


class _Servicer(pb_grpc.SlurmControllerServicer):
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release: asyncio.Event | None = None  # made on the loop by the first SubmitJob
        self.threads: dict[str, str] = {}

    @rpc
    async def Heartbeat(self, request, context):
        self.threads["Heartbeat"] = threading.current_thread().name
        if request.name == "follower":
            raise errors.NotLeader("this controller is not the leader", "10.0.0.1:6817")
        if request.name == "bug":
            raise RuntimeError("a bug")
        return pb.HeartbeatReply(reregister=True)

    @rpc
    def Ping(self, request, context):
        self.threads["Ping"] = threading.current_thread().name
        raise errors.SlurmRefusal("partition x does not exist", "Invalid partition name specified")

    @rpc
    def GetJob(self, request, context):
        if request.job_id == 1:
            raise errors.NotLeader("this controller is not the leader", "10.0.0.2:6817")
        raise ValueError("unknown enum value 99")

    @rpc
    async def SubmitJob(self, request, context):
        self.release = asyncio.Event()
        self.entered.set()
        await self.release.wait()
        return pb.SubmitJobReply(job_id=7)


@pytest.fixture()
def served():
    servicer = _Servicer()
    server, port = grpcutil.create_aio_server("127.0.0.1:0", workers=2)
    server.add(pb_grpc.add_SlurmControllerServicer_to_server, servicer)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield servicer, server, pb_grpc.SlurmControllerStub(channel)
    channel.close()
    server.stop(0).wait(5)


def _error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=10)
    return caught.value


def test_coroutines_run_on_the_loop_and_plain_handlers_in_the_pool(served) -> None:
    servicer, _server, stub = served
    assert stub.Heartbeat(pb.HeartbeatRequest(name="n1"), timeout=10).reregister
    _error(stub.Ping, pb.PingRequest())
    assert servicer.threads == {"Heartbeat": "grpc-loop", "Ping": servicer.threads["Ping"]}
    assert servicer.threads["Ping"].startswith("grpc_")


def test_errors_are_answered_alike_from_both_kinds(served) -> None:
    _servicer, _server, stub = served
    for error in (
        _error(stub.Heartbeat, pb.HeartbeatRequest(name="follower")),
        _error(stub.GetJob, pb.GetJobRequest(job_id=1)),
    ):
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert grpcutil.leader_hint(error) in ("10.0.0.1:6817", "10.0.0.2:6817")
    refusal = _error(stub.Ping, pb.PingRequest())
    assert refusal.code() == grpc.StatusCode.INVALID_ARGUMENT and refusal.details() == "partition x does not exist"
    assert (errors.SLURM_ERROR_METADATA_KEY, "Invalid partition name specified") in tuple(refusal.trailing_metadata())
    assert _error(stub.GetJob, pb.GetJobRequest(job_id=2)).code() == grpc.StatusCode.INVALID_ARGUMENT
    bug = _error(stub.Heartbeat, pb.HeartbeatRequest(name="bug"))
    assert (
        bug.code() == grpc.StatusCode.INTERNAL
        and bug.details() == "Heartbeat failed inside the controller; see its log"
    )


def test_a_stop_lets_the_call_in_flight_finish_and_refuses_new_ones(served) -> None:
    servicer, server, stub = served
    future = stub.SubmitJob.future(pb.SubmitJobRequest(), timeout=10)
    assert servicer.entered.wait(10)
    stopped = server.stop(5)
    server.loop.call_soon_threadsafe(servicer.release.set)
    assert future.result().job_id == 7
    assert stopped.wait(10)
    assert _error(stub.Heartbeat, pb.HeartbeatRequest(name="n1")).code() == grpc.StatusCode.UNAVAILABLE
