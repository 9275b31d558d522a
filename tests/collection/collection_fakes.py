"""Stand-ins for unit tests: probe HTTP servers on 127.0.0.1, and a controller whose state is the real one.

FakeController runs the real ControllerService and ClusterState (so drains, resumes, jobs and WAL levels obey
the controller's own rules) behind the same call interface as the collection's ControllerRpc, without Raft or
HTTP/2: requests and answers cross as bytes, encoded by the collection's copy of the codec and read by the
generated protobuf classes (and the other way round), as on the wire. ProbeServer answers /status,
/metrics/nodes and /readyz like spurctld, from a dict a test edits.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

from ansible_collections.spur.cluster.plugins.module_utils import spur_client, spur_protocodec

from spur_hpc.controller import errors, wal
from spur_hpc.controller.grpc_api import job_to_pb, node_to_pb
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.state import ClusterState
from spur_hpc.proto import slurm_pb2
from spur_hpc.protoconv import spec_from_pb

# ------------------------------------------------------------------ HTTP probes


class ProbeServer:
    """One fake controller (or agent) probe: routes maps a path to (status code, JSON-able body)."""

    def __init__(self, routes: dict[str, tuple[int, Any]] | None = None) -> None:
        self.routes = routes or {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                code, body = outer.routes.get(self.path, (404, {"error": "no such path"}))
                data = json.dumps(body).encode() if not isinstance(body, str) else body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def controller_status(
    index: int,
    role: str = "follower",
    term: int = 3,
    leader: int | None = 0,
    applied: int = 100,
    commit: int = 100,
    build: str = "build-a",
    version: str = "1.0.0",
    wal_level: int = 1,
    max_levels: tuple[int, ...] = (2, 2, 2),
    members: int = 3,
) -> dict[str, Any]:
    """A /status body as spurctld writes it, for controller `index` of a `members`-controller cluster."""
    raft = [f"127.0.1.{i + 1}:6821" for i in range(members)]
    return {
        "raft_addr": raft[index],
        "grpc_addr": f"127.0.1.{index + 1}:6817",
        "version": version,
        "build": build,
        "max_wal_level": max_levels[index],
        "phase": "running",
        "role": role,
        "leader": raft[leader] if leader is not None else None,
        "leader_grpc": f"127.0.1.{leader + 1}:6817" if leader is not None else None,
        "term": term,
        "members": raft,
        "member_info": {
            raft[i]: {"grpc_addr": f"127.0.1.{i + 1}:6817", "version": version, "build": build, "max_level": lvl}
            for i, lvl in enumerate(max_levels)
        },
        "commit_index": commit,
        "applied_index": applied,
        "cluster_name": "test",
        "cluster_id": "c0ffee",
        "wal_level": wal_level,
        "has_quorum": True,
        "stalled": None,
        "lag": {r: 0 for r in raft if r != raft[index]} if role == "leader" else None,
    }


class FakeCluster:
    """Three probe servers answering like a cluster whose controller `leader` leads (None: no leader)."""

    def __init__(self, leader: int | None = 0, **status: Any) -> None:
        self.servers = [ProbeServer() for _ in range(3)]
        self.set(leader, **status)

    def set(self, leader: int | None = 0, down: tuple[int, ...] = (), **status: Any) -> None:
        for i, server in enumerate(self.servers):
            body = controller_status(i, role="leader" if i == leader else "follower", leader=leader, **status)
            server.routes = {
                "/status": (200, body),
                "/metrics/nodes": (200 if i == leader else 503, {"role": body["role"]}),
                "/readyz": (200 if leader is not None else 503, "ready"),
            }
            if i in down:
                server.routes = {"/status": (503, "starting")}

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def close(self) -> None:
        for server in self.servers:
            server.close()


# ------------------------------------------------------------------ controller


class _Raft:
    """Just enough of SpurRaft for ControllerService: apply records at once, always the leader."""

    def __init__(self) -> None:
        self.state = ClusterState()
        self.lock = threading.Lock()

    def propose(self, record: dict[str, Any], timeout: float) -> dict[str, Any]:
        wal.check_level(record, self.state.wal_level)
        with self.lock:
            return self.state.apply(record)

    def read(self, fn):
        with self.lock:
            return fn(self.state)

    def is_leader(self) -> bool:
        return True

    def leader_addr(self) -> str:
        return "127.0.1.1:6821"


_ERROR_CODES = [
    (errors.NotFound, "NOT_FOUND"),
    (errors.InvalidArgument, "INVALID_ARGUMENT"),
    (errors.Conflict, "FAILED_PRECONDITION"),
    (errors.Unavailable, "UNAVAILABLE"),
]


class FakeController:
    """The call interface of spur_client.ControllerRpc over the real ControllerService."""

    def __init__(self) -> None:
        self.raft = _Raft()
        conf = SimpleNamespace(controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=60))
        self.service = ControllerService(conf, self.raft, lambda addr: "127.0.1.1:6817", clock=time.time)
        self.raft.state.apply(
            wal.make_record("cluster_init", name="test", cluster_id="c0ffee", members=["127.0.1.1:6821"], wal_level=1)
        )
        self.raft.state.apply(
            wal.make_record(
                "member_announce",
                raft_addr="127.0.1.1:6821",
                grpc_addr="127.0.1.1:6817",
                version="1.0.0",
                build="build-a",
                max_level=wal.MAX_WAL_LEVEL,
            )
        )
        self.calls: list[str] = []

    # the interface the collection uses
    def call(self, method: str, request: dict | None = None, write: bool = False, patience: float | None = None):
        self.calls.append(method)
        sch = spur_client.schema()
        request_type, reply_type = sch.services[spur_client.SERVICE][method]
        pb_request = getattr(slurm_pb2, request_type).FromString(
            spur_protocodec.encode(request_type, request or {}, sch)
        )
        try:
            reply = getattr(self, "_" + method)(pb_request)
        except errors.ControllerError as exc:
            code = next(c for cls, c in _ERROR_CODES if isinstance(exc, cls))
            raise spur_client.rpc_error(method, "fake", code, str(exc)) from None
        return spur_protocodec.decode(reply_type, reply.SerializeToString(), sch)

    def close(self) -> None:
        pass

    # helpers for tests
    def add_node(self, name: str, registered: bool = True) -> None:
        # Through the replicated records (a stable format), not the service's registration call.
        self.service.write(
            "node_register",
            name=name,
            address=f"{name}:6818",
            cpus=4,
            memory_mb=4096,
            version="1.0.0",
            build="build-a",
            partition="default",
            running=[],
            time=time.time(),
        )
        if not registered:
            self.service.write("node_deregister", name=name, reason="spurd stopped", time=time.time())

    def start_job(self, node: str, name: str = "job") -> int:
        job_id, _dup = self.service.submit(
            {"name": name, "script": "#!/bin/sh\ntrue\n", "user": "root", "work_dir": "/tmp"}, ""
        )
        self.service.write("job_start", job_id=job_id, nodes=[node], attempt=1, time=time.time())
        return job_id

    def end_job(self, job_id: int, state: str = "COMPLETED", exit_code: int = 0) -> None:
        self.service.write(
            "job_end", job_id=job_id, attempt=1, state=state, exit_code=exit_code, signal=0, time=time.time(), reason=""
        )

    # SlurmController methods
    def _GetNode(self, request):  # noqa: N802
        return node_to_pb(self.service.get_node(request.name))

    def _ListNodes(self, request):  # noqa: N802
        return slurm_pb2.ListNodesReply(nodes=[node_to_pb(n) for n in self.service.list_nodes(list(request.names))])

    def _DrainNode(self, request):  # noqa: N802
        self.service.drain(request.name, request.reason, request.set_by)
        return self._GetNode(request)

    def _ResumeNode(self, request):  # noqa: N802
        self.service.resume(request.name, request.only_if_reason_prefix)
        return self._GetNode(request)

    def _UpdateNode(self, request):  # noqa: N802
        assert request.state == slurm_pb2.NodeState.Value("DOWN")
        self.service.down(request.name, request.reason, request.set_by)
        return self._GetNode(request)

    def _SubmitJob(self, request):  # noqa: N802
        job_id, duplicate = self.service.submit(spec_from_pb(request.spec), request.idempotency_key)
        return slurm_pb2.SubmitJobReply(job_id=job_id, duplicate=duplicate)

    def _GetJob(self, request):  # noqa: N802
        return job_to_pb(self.service.get_job(request.job_id))

    def _ListJobs(self, request):  # noqa: N802
        jobs = self.service.list_jobs(names=list(request.names), include_finished=request.include_finished)
        return slurm_pb2.ListJobsReply(jobs=[job_to_pb(j) for j in jobs])

    def _CancelJob(self, request):  # noqa: N802
        result = self.service.cancel(request.job_id, request.signal, request.requested_by)
        if result.get("signal_agent"):  # the agent would report the end; do it at once
            self.end_job(request.job_id, "CANCELLED")
        job = self.service.get_job(request.job_id)
        return slurm_pb2.CancelJobReply(job=job_to_pb(job), already_finished=result.get("already_finished", False))

    def _HoldDispatch(self, request):  # noqa: N802
        self.service.hold_dispatch(request.name, request.hold_secs)  # no launches in flight to wait for here
        return self._GetNode(request)

    def _GetClusterInfo(self, request):  # noqa: N802
        return slurm_pb2.ClusterInfo(wal_level=self.service.read(lambda s: s.wal_level))

    def _SetWalLevel(self, request):  # noqa: N802
        result = self.service.set_wal_level(request.level)
        return slurm_pb2.SetWalLevelReply(level=result["level"], changed=result["changed"])


# ------------------------------------------------------------------ module arguments shared by the module tests

NAMES = ["ctl-0", "ctl-1", "ctl-2"]
PREFIX = "spur-ansible: "
MEMBERS = ["127.0.1.1", "127.0.1.2", "127.0.1.3"]


def conn(cluster: FakeCluster, **extra):
    return dict(controllers=cluster.urls, controller_names=NAMES, timeout=2, **extra)


def dead_url() -> str:
    server = ProbeServer()
    url = server.url
    server.close()
    return url


def node_args(cluster, **extra):
    return conn(cluster, name="n1", **extra)


def job_args(cluster, **extra):
    return conn(cluster, name="verify", wrap="echo hi", **extra)
