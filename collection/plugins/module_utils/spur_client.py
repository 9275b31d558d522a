# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controllers' gRPC API from modules: the connection options every module takes, ControllerRpc (which
walks the controllers with spur_failover, a copy of the daemons' policy) and SpurConnection's typed calls,
whose answers are plain dicts. Probes live in spur_probes and spur_view, errors in spur_errors.

The calls go through generated copies of the CLI's standard-library client (spur_grpcwire, spur_hpack), its
protobuf codec (spur_protocodec, reading slurm.proto's text from spur_slurm_proto) and its credentials
(spur_auth: MUNGE through libmunge), so every module runs on the managed host's own Python, with or without
a Spur release installed there.
"""

from __future__ import annotations

import time
import uuid

from ansible_collections.spur.cluster.plugins.module_utils import spur_auth, spur_grpcwire, spur_protocodec
from ansible_collections.spur.cluster.plugins.module_utils import spur_slurm_proto
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import (
    SpurError,
    SpurInvalid,
    SpurNotFound,
    SpurRefused,
    SpurUnreachable,
)
from ansible_collections.spur.cluster.plugins.module_utils.spur_failover import (
    RETRY_CODES,
    WRITE_PATIENCE_SECS,
    Failover,
)
from ansible_collections.spur.cluster.plugins.module_utils.spur_model import (
    CONTROLLER_GRPC_PORT,
    CONTROLLER_PROBE_PORT,
    with_port,
)
from ansible_collections.spur.cluster.plugins.module_utils.spur_view import ClusterView, probe_controllers

SERVICE = "SlurmController"
_SCHEMA = None

# Drains and DOWNs set by this collection start with this, so a resume can tell ours from an operator's.
DEFAULT_REASON_PREFIX = "spur-ansible: "


# ---------------------------------------------------------------------------------------------- arguments


def connection_argument_spec() -> dict:
    """The connection options every module accepts (documented once in the spur.cluster.connection fragment)."""
    return dict(
        controllers=dict(type="list", elements="str", default=["http://127.0.0.1:%d" % CONTROLLER_PROBE_PORT]),
        controller_names=dict(type="list", elements="str"),
        grpc_hosts=dict(type="list", elements="str"),
        timeout=dict(type="float", default=5.0),
        auth_type=dict(type="str", choices=["auto", "munge", "none"], default="auto"),
        munge_socket=dict(type="path"),
    )


# ---------------------------------------------------------------------------------------------- gRPC


def schema():
    """slurm.proto's messages and services, parsed once per module run from the copy of its text."""
    global _SCHEMA  # pylint: disable=global-statement
    if _SCHEMA is None:
        _SCHEMA = spur_protocodec.parse_proto(spur_slurm_proto.TEXT, "slurm.proto")
    return _SCHEMA


def enum_name(enum: str, value: int) -> str:
    return schema().enum_name(enum, value)


class ControllerRpc:
    """Calls SlurmController methods by name with dict requests, trying each controller; follows the leader
    hint of a refusal. Answers are spur_protocodec Messages (one attribute per field, enums as ints).

    Reads take the first answer. Writes are retried on UNAVAILABLE for WRITE_PATIENCE_SECS (an election
    takes about a second); they are idempotent (drain, resume, set level) or carry an idempotency key.
    """

    def __init__(self, addresses: list[str], timeout: float, auth_type: str = "auto",
                 munge_socket: str | None = None) -> None:
        if not addresses:
            raise SpurUnreachable("no controller gRPC address is known: no probe answered with one and "
                                  "grpc_hosts is empty", override="grpc_hosts")
        self.addresses = list(dict.fromkeys(with_port(a, CONTROLLER_GRPC_PORT) for a in addresses))
        self.timeout = timeout
        self.auth_type = None if auth_type == "auto" else auth_type
        self.munge_socket = munge_socket
        self.connections: dict = {}

    def credential(self) -> tuple:
        """Metadata for one call: a MUNGE credential is good for one request only, so each call gets its own."""
        try:
            return spur_auth.client_metadata(self.auth_type, self.munge_socket)
        except spur_auth.AuthError as exc:
            raise SpurRefused("cannot get a MUNGE credential on this host: %s" % exc, override="auth_type") from None

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()

    def _connection(self, address: str):
        if address not in self.connections:
            self.connections[address] = spur_grpcwire.Connection(address, connect_timeout=self.timeout)
        return self.connections[address]

    def call(self, method: str, request: dict | None = None, write: bool = False, patience: float | None = None):
        """A read takes one round over the addresses unless patience says otherwise; a write waits for elections."""
        sch = schema()
        request_type, reply_type = sch.services[SERVICE][method]
        try:
            body = spur_protocodec.encode(request_type, request or {}, sch)
        except spur_protocodec.ProtoError as exc:
            raise SpurInvalid("%s: %s" % (method, exc)) from None
        path = "/%s.%s/%s" % (sch.package, SERVICE, method)
        if patience is None:
            patience = WRITE_PATIENCE_SECS if write else 0
        policy = Failover(self.addresses, time.monotonic() + patience, write=True)
        for address in policy:
            try:
                data, _metadata = self._connection(address).call(path, body, self.timeout, self.credential())
            except spur_grpcwire.RpcError as exc:
                if exc.code not in RETRY_CODES:
                    raise rpc_error(method, address, exc.code, exc.details) from None
                hint = exc.leader_hint()
                unreachable = "cannot reach controller %s: " % address
                why = exc.details[len(unreachable):] if exc.details.startswith(unreachable) else exc.details
                policy.failed(address, why, hint=with_port(hint, CONTROLLER_GRPC_PORT) if hint else None,
                              reachable=why == exc.details)
                continue
            try:
                return spur_protocodec.decode(reply_type, data, sch)
            except spur_protocodec.ProtoError as exc:
                raise SpurError("the answer of %s to %s is not a valid %s (%s)" % (address, method, reply_type, exc))
        raise SpurUnreachable("no controller could answer %s (%s)" % (method, policy.summary()))


def rpc_error(method: str, address: str, code: str, details: str) -> SpurError:
    text = "%s refused by %s: %s" % (method, address, details)
    if code == "NOT_FOUND":
        return SpurNotFound(details)
    if code == "INVALID_ARGUMENT":
        return SpurInvalid(text)
    if code == "FAILED_PRECONDITION":
        return SpurRefused(text)
    if code == "UNAUTHENTICATED":
        return SpurRefused(text, override="auth_type")
    if code == "PERMISSION_DENIED":
        return SpurRefused(text + "; run the task as root or a user in [auth] admins (become: true)")
    return SpurError(text + " (%s)" % code)


def grpc_addresses(params: dict, view: ClusterView | None) -> list[str]:
    """grpc_hosts when given, else the gRPC addresses the probes reported; the leader first either way."""
    explicit = [with_port(a, CONTROLLER_GRPC_PORT) for a in params.get("grpc_hosts") or []]
    leader_first = []
    if view is not None:
        if view.leader and view.leader.get("grpc_addr"):
            leader_first.append(view.leader["grpc_addr"])
        for record in view.reachable:
            if record.get("leader_grpc"):
                leader_first.append(record["leader_grpc"])
    if explicit:
        first = [a for a in leader_first if a in explicit]
        return list(dict.fromkeys(first + explicit))
    discovered = [c["grpc_addr"] for c in (view.reachable if view else []) if c.get("grpc_addr")]
    return list(dict.fromkeys(leader_first + discovered))


class SpurConnection:
    """The controllers as the connection options describe them: probes first, then gRPC to the leader."""

    def __init__(self, params: dict) -> None:
        self.params = params
        self.timeout = float(params["timeout"])
        if self.timeout <= 0:
            raise SpurInvalid("timeout must be above 0 seconds, not %s" % params["timeout"], override="timeout")
        self._view: ClusterView | None = None
        self._rpc: ControllerRpc | None = None

    def view(self, refresh: bool = False) -> ClusterView:
        if self._view is None or refresh:
            self._view = probe_controllers(self.params)
        return self._view

    def forget(self) -> None:
        """Drop what discovery found, so that the next call probes the controllers again (after an outage)."""
        if self._rpc is not None:
            self._rpc.close()
        self._rpc = None
        self._view = None

    def rpc(self) -> ControllerRpc:
        if self._rpc is None:
            self._rpc = ControllerRpc(grpc_addresses(self.params, self.view()), self.timeout,
                                      self.params.get("auth_type") or "auto", self.params.get("munge_socket"))
        return self._rpc

    def close(self) -> None:
        if self._rpc is not None:
            self._rpc.close()

    # ---------------------------------------------------------------- typed calls

    def get_node(self, name: str) -> dict:
        return node_to_dict(self.rpc().call("GetNode", dict(name=name)))

    def list_nodes(self, names: list[str] | None = None) -> list[dict]:
        reply = self.rpc().call("ListNodes", dict(names=names or []))
        return [node_to_dict(n) for n in reply.nodes]

    def drain_node(self, name: str, reason: str, set_by: str) -> dict:
        request = dict(name=name, reason=reason, set_by=set_by)
        return node_to_dict(self.rpc().call("DrainNode", request, write=True))

    def resume_node(self, name: str, only_if_reason_prefix: str = "") -> dict:
        request = dict(name=name, only_if_reason_prefix=only_if_reason_prefix)
        return node_to_dict(self.rpc().call("ResumeNode", request, write=True))

    def down_node(self, name: str, reason: str, set_by: str) -> dict:
        request = dict(name=name, state="DOWN", reason=reason, set_by=set_by)
        return node_to_dict(self.rpc().call("UpdateNode", request, write=True))

    def submit_job(self, spec: dict, idempotency_key: str | None) -> tuple[int, bool]:
        key = idempotency_key or "spur.cluster:" + uuid.uuid4().hex  # a retried submission is never doubled
        reply = self.rpc().call("SubmitJob", dict(spec=spec, idempotency_key=key), write=True)
        return int(reply.job_id), bool(reply.duplicate)

    def get_job(self, job_id: int) -> dict:
        return job_to_dict(self.rpc().call("GetJob", dict(job_id=job_id)))

    def list_jobs(self, names: list[str] | None = None, include_finished: bool = True) -> list[dict]:
        request = dict(names=names or [], include_finished=include_finished)
        return [job_to_dict(j) for j in self.rpc().call("ListJobs", request).jobs]

    def cancel_job(self, job_id: int, requested_by: str) -> dict:
        request = dict(job_id=job_id, signal=0, requested_by=requested_by)
        reply = self.rpc().call("CancelJob", request, write=True)
        return dict(job_to_dict(reply.job), already_finished=bool(reply.already_finished))

    def hold_dispatch(self, name: str, hold_secs: float) -> dict:
        return node_to_dict(self.rpc().call("HoldDispatch", dict(name=name, hold_secs=hold_secs), write=True))

    def wal_level(self) -> int:
        return int(self.rpc().call("GetClusterInfo").wal_level)

    def set_wal_level(self, level: int) -> tuple[int, bool]:
        reply = self.rpc().call("SetWalLevel", dict(level=level), write=True)
        return int(reply.level), bool(reply.changed)


# ---------------------------------------------------------------------------------------------- conversions


def node_to_dict(node) -> dict:
    return dict(
        name=node.name,
        state=enum_name("NodeState", node.state),
        reason=node.reason,
        reason_set_by=node.reason_set_by,
        reason_time=node.reason_time,
        drain=bool(node.drain),
        registered=bool(node.registered),
        address=node.address,
        partition=node.partition,
        cpus=node.resources.cpus,
        memory_mb=node.resources.memory_mb,
        allocated_cpus=node.allocated.cpus,
        allocated_memory_mb=node.allocated.memory_mb,
        job_ids=[int(j) for j in node.job_ids],
        version=node.version,
        build=node.build,
        last_registered=node.last_registered,
        last_heartbeat=node.last_heartbeat,
        dispatch_hold_until=node.dispatch_hold_until,
    )


def job_to_dict(job) -> dict:
    spec = job.spec
    return dict(
        job_id=int(job.job_id),
        name=spec.name,
        state=enum_name("JobState", job.state),
        reason=job.reason,
        exit_code=job.exit_code,
        signal=job.signal,
        nodes=list(job.nodes),
        attempt=job.attempt,
        submit_time=job.submit_time,
        start_time=job.start_time,
        end_time=job.end_time,
        user=spec.user,
        work_dir=spec.work_dir,
        stdout_path=spec.stdout_path,
        environment=dict(spec.environment),
        cancel_requested=bool(job.cancel_requested),
    )
