"""A fake SlurmController (real grpcio server, in-memory state) for the CLI's tests, and its own checks.

It answers like spurctld does: NOT_FOUND for unknown ids, UNAVAILABLE plus the spur-leader trailing
metadata on a follower asked to write, idempotent submissions. Tests point SPUR_CONTROLLER_ADDR at it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from spur_hpc import grpcutil
from spur_hpc.proto import slurm_pb2 as pb
from spur_hpc.proto import slurm_pb2_grpc as pb_grpc
from spur_hpc.wire import grpcwire

FINISHED = {pb.COMPLETED, pb.FAILED, pb.CANCELLED, pb.TIMEOUT, pb.NODE_FAIL}


class ClusterState:
    """What every fake controller of one fake cluster shares."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[int, pb.Job] = {}
        self.nodes: dict[str, pb.Node] = {}
        self.keys: dict[str, int] = {}
        self.next_id = 1
        self.calls: list[tuple[str, str]] = []  # (address, method)
        self.leader = ""
        self.members: list[str] = []
        self.submit_keys: list[str] = []  # idempotency key of every SubmitJob received
        self.cancel_signals: list[int] = []  # signal of every CancelJob received
        self.cancel_tasks: list[tuple[int, str]] = []  # (job id, array_tasks) of every CancelJob received
        self.cancel_steps: list[tuple[int, str]] = []  # (job id, step_id) of every CancelJob received
        self.updates: list[pb.UpdateJobRequest] = []  # every UpdateJob and RequeueJob received
        self.partitions: list[pb.Partition] | None = None  # ListPartitions' answer; None: UNIMPLEMENTED (an old one)
        self.requeues: list[pb.RequeueJobRequest] = []


class FakeController(pb_grpc.SlurmControllerServicer):
    def __init__(self, state: ClusterState, address: str = "", role: str = "leader") -> None:
        self.state = state
        self.address = address
        self.role = role
        self.fail_writes_with: grpc.StatusCode | None = None
        self.lose_next_submit_answer = False  # store the job, then answer UNAVAILABLE (an answer lost in transit)

    def _record(self, method: str) -> None:
        self.state.calls.append((self.address, method))

    def _leader_only(self, context: grpc.ServicerContext) -> None:
        if self.role != "leader":
            context.set_trailing_metadata(((grpcutil.LEADER_METADATA_KEY, self.state.leader),))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{self.address} is not the leader; the leader is elsewhere")
        if self.fail_writes_with is not None:
            context.abort(self.fail_writes_with, "injected failure")

    def Ping(self, request, context):
        self._record("Ping")
        return pb.PingReply(
            version="0.1.0", build="abc123def456", role=self.role, leader=self.state.leader, term=4,
            commit_index=120, applied_index=120 if self.role == "leader" else 117, cluster_name="spur",
            grpc_addr=self.address,
        )  # fmt: skip

    def GetClusterInfo(self, request, context):
        self._record("GetClusterInfo")
        members = [
            pb.MemberInfo(raft_addr=f"raft-{a}", grpc_addr=a, version="0.1.0", build="abc123def456")
            for a in self.state.members
        ]
        return pb.ClusterInfo(
            cluster_name="spur",
            cluster_id="c0ffee",
            leader=f"raft-{self.state.leader}",
            leader_grpc=self.state.leader,
            term=4,
            members=members,
            wal_level=1,
        )

    def ListNodes(self, request, context):
        self._record("ListNodes")
        with self.state.lock:
            nodes = [n for n in self.state.nodes.values() if not request.names or n.name in request.names]
            nodes = [n for n in nodes if not request.states or n.state in request.states]
            return pb.ListNodesReply(nodes=nodes)

    def ListPartitions(self, request, context):
        self._record("ListPartitions")
        if self.state.partitions is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        return pb.ListPartitionsReply(
            partitions=[p for p in self.state.partitions if not request.names or p.name in request.names]
        )

    def GetNode(self, request, context):
        self._record("GetNode")
        with self.state.lock:
            if request.name not in self.state.nodes:
                context.abort(grpc.StatusCode.NOT_FOUND, f"node {request.name} does not exist")
            return self.state.nodes[request.name]

    def _set_drain(self, name: str, drain: bool, reason: str, by: str, context) -> pb.Node:
        with self.state.lock:
            node = self.state.nodes.get(name)
            if node is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"node {name} does not exist")
            node.drain = drain
            node.reason = reason if drain else ""
            node.reason_set_by = by if drain else ""
            node.state = (pb.DRAINING if node.job_ids else pb.DRAINED) if drain else pb.IDLE
            return node

    def DrainNode(self, request, context):
        self._record("DrainNode")
        self._leader_only(context)
        return self._set_drain(request.name, True, request.reason, request.set_by, context)

    def ResumeNode(self, request, context):
        self._record("ResumeNode")
        self._leader_only(context)
        return self._set_drain(request.name, False, "", "", context)

    def UpdateNode(self, request, context):
        self._record("UpdateNode")
        self._leader_only(context)
        if request.state in (pb.DRAINED, pb.DRAINING):
            return self._set_drain(request.name, True, request.reason, request.set_by, context)
        if request.state == pb.IDLE:
            return self._set_drain(request.name, False, "", "", context)
        with self.state.lock:
            node = self.state.nodes.get(request.name)
            if node is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"node {request.name} does not exist")
            node.state = pb.DOWN
            node.reason = request.reason
            return node

    def SubmitJob(self, request, context):
        self._record("SubmitJob")
        self.state.submit_keys.append(request.idempotency_key)
        self._leader_only(context)
        if request.test_only:  # say where it would start, keep nothing (the controller's contract)
            return pb.SubmitJobReply(start_estimate=1700000100.0, nodes=sorted(self.state.nodes)[:1] or ["n1"])
        with self.state.lock:
            key = request.idempotency_key
            if key and key in self.state.keys:
                return pb.SubmitJobReply(job_id=self.state.keys[key], duplicate=True)
            job_id = self.state.next_id
            self.state.next_id += 1
            self.state.jobs[job_id] = pb.Job(
                job_id=job_id, spec=request.spec, state=pb.PENDING, reason="None", submit_time=1700000000.0
            )
            if key:
                self.state.keys[key] = job_id
        if self.lose_next_submit_answer:
            self.lose_next_submit_answer = False
            context.abort(grpc.StatusCode.UNAVAILABLE, "the leader lost its quorum before answering")
        return pb.SubmitJobReply(job_id=job_id)

    def ListJobs(self, request, context):
        self._record("ListJobs")
        with self.state.lock:
            jobs = []
            for job in self.state.jobs.values():
                if request.job_ids and not {job.job_id, job.array_job_id} & set(request.job_ids):
                    continue  # an array's id names all its records, as the controller's list does
                if request.users and job.spec.user not in request.users:
                    continue
                if request.states and job.state not in request.states:
                    continue
                if request.names and job.spec.name not in request.names:
                    continue
                if job.state in FINISHED and not request.include_finished:
                    continue
                jobs.append(job)
            return pb.ListJobsReply(jobs=jobs)

    def GetJob(self, request, context):
        self._record("GetJob")
        with self.state.lock:
            if request.job_id not in self.state.jobs:
                context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} does not exist")
            return self.state.jobs[request.job_id]

    def _job_command(self, request, context, wanted: int, became: int, what: str):
        """HoldJob / SuspendJob as the controller answers them: the job must be in state `wanted`."""
        self._leader_only(context)
        with self.state.lock:
            job = self.state.jobs.get(request.job_id)
            if job is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} does not exist")
            if job.state != wanted:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"job {request.job_id} cannot be {what} now")
            job.state = became
            return job

    def HoldJob(self, request, context):
        self._record("HoldJob")
        return self._job_command(request, context, pb.PENDING, pb.PENDING, "held")

    def SuspendJob(self, request, context):
        self._record("SuspendJob")
        if request.resume:
            return self._job_command(request, context, pb.SUSPENDED, pb.RUNNING, "resumed")
        return self._job_command(request, context, pb.RUNNING, pb.SUSPENDED, "suspended")

    def CancelJob(self, request, context):
        self._record("CancelJob")
        self.state.cancel_signals.append(request.signal)
        self.state.cancel_tasks.append((request.job_id, request.array_tasks))
        self.state.cancel_steps.append((request.job_id, request.step_id))
        self._leader_only(context)
        with self.state.lock:
            job = self.state.jobs.get(request.job_id)
            if job is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} does not exist")
            if job.spec.user == "someone-else":
                context.abort(grpc.StatusCode.PERMISSION_DENIED, f"job {request.job_id} belongs to someone-else")
            if job.state in FINISHED:
                return pb.CancelJobReply(job=job, already_finished=True)
            if not request.signal and not request.step_id:  # a signal or a step's cancel leaves the job running
                job.state = pb.CANCELLED
            return pb.CancelJobReply(job=job)

    def UpdateJob(self, request, context):
        self._record("UpdateJob")
        self._leader_only(context)
        with self.state.lock:
            job = self.state.jobs.get(request.job_id)
            if job is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} does not exist")
            self.state.updates.append(request)
            return job

    def RequeueJob(self, request, context):
        self._record("RequeueJob")
        self._leader_only(context)
        with self.state.lock:
            job = self.state.jobs.get(request.job_id)
            if job is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} does not exist")
            self.state.requeues.append(request)
            return job


class FakeCluster:
    """count fake controllers on 127.0.0.1; the first is the leader unless leader_index says otherwise."""

    def __init__(self, count: int = 1, leader_index: int = 0) -> None:
        self.state = ClusterState()
        self.servers: list[grpc.Server] = []
        self.controllers: list[FakeController] = []
        self.addresses: list[str] = []
        for index in range(count):
            server, port = grpcutil.create_server("127.0.0.1:0", workers=4)
            address = f"127.0.0.1:{port}"
            controller = FakeController(self.state, address, "leader" if index == leader_index else "follower")
            pb_grpc.add_SlurmControllerServicer_to_server(controller, server)
            server.start()
            self.servers.append(server)
            self.controllers.append(controller)
            self.addresses.append(address)
        self.state.leader = self.addresses[leader_index]
        self.state.members = list(self.addresses)

    def add_node(self, name: str, **fields) -> pb.Node:
        fields.setdefault("state", pb.IDLE)
        fields.setdefault("registered", True)
        fields.setdefault("resources", pb.NodeResources(cpus=4, memory_mb=8000))
        node = pb.Node(name=name, **fields)
        self.state.nodes[name] = node
        return node

    def add_job(self, job_id: int, **fields) -> pb.Job:
        fields.setdefault("spec", pb.JobSpec(name=f"job{job_id}", user="alice", uid=1000, gid=1000, nodes=1))
        job = pb.Job(job_id=job_id, **fields)
        self.state.jobs[job_id] = job
        self.state.next_id = max(self.state.next_id, job_id + 1)
        return job

    def env(self) -> str:
        return ",".join(self.addresses)

    def stop(self) -> None:
        for server in self.servers:
            server.stop(0)


@contextmanager
def fake_cluster(monkeypatch: pytest.MonkeyPatch, count: int = 1, leader_index: int = 0) -> Iterator[FakeCluster]:
    cluster = FakeCluster(count, leader_index)
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", cluster.env())
    try:
        yield cluster
    finally:
        cluster.stop()


# ---------------------------------------------------------------- the fake's own checks


def test_fake_cluster_answers_a_ping_through_the_cli_client(monkeypatch: pytest.MonkeyPatch) -> None:
    from spur_hpc.cli.controller import ControllerClient

    with fake_cluster(monkeypatch) as cluster:
        reply = ControllerClient().call_one(cluster.addresses[0], "Ping")
        assert reply.role == "leader" and reply.term == 4


def test_follower_refuses_writes_with_a_leader_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_cluster(monkeypatch, count=2, leader_index=1) as cluster:
        connection = grpcwire.Connection(cluster.addresses[0])
        with pytest.raises(grpcwire.RpcError) as caught:
            connection.call("/spur.v1.SlurmController/DrainNode", b"")
        assert caught.value.code == "UNAVAILABLE"
        assert caught.value.leader_hint() == cluster.addresses[1]
