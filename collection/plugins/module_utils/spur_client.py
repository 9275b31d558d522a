# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Talking to Spur daemons from modules: HTTP probes, the controllers' gRPC API, and typed errors.

Nothing in module_utils calls fail_json. Every problem is raised as a SpurError subclass that carries one
line saying what was found and, where one exists, the module option that overrides it; a module's main()
turns it into the failure message once.
"""

from __future__ import annotations

import json
import socket
import time
import traceback
import urllib.error
import uuid

from ansible.module_utils.basic import missing_required_lib
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import Request, make_context
from ansible_collections.spur.cluster.plugins.module_utils.spur_model import CONTROLLER_GRPC_PORT, CONTROLLER_PROBE_PORT, address_host, with_port
from ansible_collections.spur.cluster.plugins.module_utils.spur_failover import (
    RETRY_CODES,
    WRITE_PATIENCE_SECS,
    Failover,
    leader_hint,
)

try:
    import grpc
    from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc
except ImportError:
    grpc = None
    slurm_pb2 = None
    slurm_pb2_grpc = None
    GRPC_IMPORT_ERROR = traceback.format_exc()
else:
    GRPC_IMPORT_ERROR = None

try:
    from spur_hpc import auth as spur_auth
except ImportError:
    spur_auth = None  # a release from before authentication: its controllers ask for no credential

# Drains and DOWNs set by this collection start with this, so a resume can tell ours from an operator's.
DEFAULT_REASON_PREFIX = "spur-ansible: "


# ---------------------------------------------------------------------------------------------- errors


class SpurError(Exception):
    """Base of every error the modules report: one line, plus the option that overrides it, if any."""

    def __init__(self, message: str, override: str | None = None, details: dict | None = None,
                 exception: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.override = override
        self.details = dict(details or {})
        self.exception = exception

    def fail_result(self) -> dict:
        """Keyword arguments for fail_json: the message, the overriding option and what was observed."""
        msg = self.message
        if self.override and self.override not in msg:
            msg = "%s (set %s to override)" % (msg, self.override)
        result = dict(self.details)
        result["msg"] = msg
        if self.override:
            result["override"] = self.override
        if self.exception:
            result["exception"] = self.exception
        return result


class SpurMissingLibrary(SpurError):
    """grpcio or spur-hpc cannot be imported by the module's Python interpreter."""


class SpurUnreachable(SpurError):
    """No daemon answered (connection refused, timeout, no leader)."""


class SpurNotFound(SpurError):
    """The controller does not know the node or job."""


class SpurInvalid(SpurError):
    """A module parameter or a request field is not valid."""


class SpurRefused(SpurError):
    """The observed state refuses the request (a guard rail, a drain we do not own, a lower WAL level)."""


class SpurTimeout(SpurError):
    """A wait ran out before the condition held."""


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


def probe_url(address: str, port: int = CONTROLLER_PROBE_PORT) -> str:
    """A probe endpoint as a base URL: 'http://h:p', 'h:p' and 'h' are accepted (port defaults to port)."""
    text = address.strip().rstrip("/")
    if not text:
        raise SpurInvalid("an empty probe address was given; use host:port or http://host:port",
                          override="controllers")
    if "://" in text:
        scheme, _sep, rest = text.partition("://")
        if scheme not in ("http", "https"):
            raise SpurInvalid("probe address %r uses %s://; the probes speak http" % (address, scheme),
                              override="controllers")
        host = rest.split("/", 1)[0]
        return "%s://%s" % (scheme, with_port(host, port))
    return "http://%s" % with_port(text, port)


def controller_endpoints(params: dict) -> list[tuple[str, str]]:
    """[(name, probe URL)] in the order given; names default to host:port of each probe."""
    addresses = params.get("controllers") or []
    if not addresses:
        raise SpurInvalid("controllers is empty; give at least one controller probe address (host:port)",
                          override="controllers")
    urls = [probe_url(a) for a in addresses]
    names = params.get("controller_names")
    if names:
        if len(names) != len(urls):
            raise SpurInvalid("controller_names has %d names but controllers has %d addresses; give one name per "
                              "controller, in the same order" % (len(names), len(urls)),
                              override="controller_names")
    else:
        names = [u.partition("://")[2] for u in urls]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise SpurInvalid("controller names must be unique; %s appear more than once" % ", ".join(dupes),
                          override="controller_names")
    return list(zip(names, urls))


# ---------------------------------------------------------------------------------------------- HTTP probes


_TLS_CONTEXT: list = []


def _tls_context():
    """One TLS context per process: building one reads the CA store, which costs more than a probe."""
    if not _TLS_CONTEXT:
        _TLS_CONTEXT.append(make_context())
    return _TLS_CONTEXT[0]


def http_get(url: str, timeout: float) -> tuple[int, str]:
    """(status, body) of a GET; any HTTP status is an answer. Raises SpurUnreachable when nothing answers."""
    try:
        response = Request().open("GET", url, timeout=timeout, use_proxy=False, follow_redirects="none",
                                  http_agent="spur.cluster", context=_tls_context())
        return response.getcode(), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read().decode("utf-8", "replace")
        except Exception:  # the body of an error answer is a courtesy; its status is what counts
            body = ""
        return exc.code, body
    except urllib.error.URLError as exc:
        raise SpurUnreachable("%s: %s" % (url, exc.reason)) from None
    except (socket.timeout, TimeoutError):
        raise SpurUnreachable("%s: no answer within %.1f s" % (url, timeout)) from None
    except (OSError, ValueError, UrlConnectionError) as exc:
        raise SpurUnreachable("%s: %s" % (url, exc)) from None


def get_json(url: str, timeout: float) -> dict:
    """GET url and parse a JSON object; SpurUnreachable for no answer or a non-200 / non-JSON answer."""
    code, body = http_get(url, timeout)
    if code != 200:
        raise SpurUnreachable("%s answered HTTP %d: %s" % (url, code, body.strip()[:200]))
    try:
        data = json.loads(body)
    except ValueError:
        raise SpurUnreachable("%s did not answer JSON (%r...); is this a Spur probe port?" % (url, body[:60])) from None
    if not isinstance(data, dict):
        raise SpurUnreachable("%s answered JSON that is not an object; is this a Spur probe port?" % url)
    return data


_CONTROLLER_FIELDS = (
    "role", "leader", "leader_grpc", "term", "members", "member_info", "commit_index", "applied_index",
    "version", "build", "wal_level", "max_wal_level", "cluster_id", "cluster_name", "raft_addr", "grpc_addr",
    "phase", "has_quorum", "stalled", "joining",
)


def probe_controller(name: str, url: str, timeout: float) -> dict:
    """Everything one controller's probes say about it. Never raises for a down controller.

    is_leader comes from /metrics/nodes (200 only on a leader that holds a quorum), role from /status.
    """
    record = dict(name=name, url=url, reachable=False, error=None, is_leader=False, ready=False, lag=None)
    for key in _CONTROLLER_FIELDS:
        record[key] = None
    try:
        status = get_json(url + "/status", timeout)
    except SpurUnreachable as exc:
        record["error"] = exc.message
        return record
    record["reachable"] = True
    for key in _CONTROLLER_FIELDS:
        record[key] = status.get(key)
    record["lag_map"] = status.get("lag")
    for path, key in (("/metrics/nodes", "is_leader"), ("/readyz", "ready")):
        try:
            record[key] = http_get(url + path, timeout)[0] == 200
        except SpurUnreachable as exc:
            record["error"] = exc.message
    record["grpc_addr"] = reachable_grpc_addr(record.get("grpc_addr"), url)
    record["leader_grpc"] = reachable_grpc_addr(record.get("leader_grpc"), url)
    return record


def reachable_grpc_addr(address: str | None, via_url: str) -> str | None:
    """A wildcard listen address (0.0.0.0:6817) is reached through the host its probe answered on."""
    if not address:
        return None
    host, _sep, port = address.rpartition(":")
    if host in ("0.0.0.0", "::", "[::]", ""):
        probe_host = address_host(via_url)
        if ":" in probe_host:
            probe_host = "[%s]" % probe_host
        return "%s:%s" % (probe_host, port)
    return address


def probe_agent(url: str, timeout: float) -> dict:
    """An agent's /status: node, registered, controller, running_jobs, version, build (reachable false if down)."""
    record = dict(url=url, reachable=False, error=None, node=None, registered=None, controller=None,
                  running_jobs=[], version=None, build=None)
    try:
        status = get_json(url + "/status", timeout)
    except SpurUnreachable as exc:
        record["error"] = exc.message
        return record
    record["reachable"] = True
    for key in ("node", "registered", "controller", "version", "build"):
        record[key] = status.get(key)
    record["running_jobs"] = [
        dict(job_id=r.get("job_id"), attempt=r.get("attempt"), supervisor_pid=r.get("supervisor_pid"))
        for r in status.get("running_jobs") or []
    ]
    return record


# ---------------------------------------------------------------------------------------------- cluster view


class ClusterView:
    """What the controller probes say together: the leader, the term, each member's lag."""

    def __init__(self, controllers: list[dict]) -> None:
        self.controllers = controllers
        self.reachable = [c for c in controllers if c["reachable"]]
        self.leaders = [c for c in self.reachable if c["is_leader"]]
        self._fill_lag()

    @property
    def one_leader(self) -> bool:
        return len(self.leaders) == 1

    @property
    def leader(self) -> dict | None:
        return self.leaders[0] if self.one_leader else None

    @property
    def term(self) -> int | None:
        return self.leader["term"] if self.leader else None

    def committed_members(self) -> list[str] | None:
        """The committed membership (raft addresses), from the leader, else from any member that knows it."""
        for record in ([self.leader] if self.leader else []) + self.reachable:
            if record.get("cluster_id") and record.get("members"):
                return sorted(record["members"])
        return None

    def member_info(self) -> dict:
        source = self.leader or next((c for c in self.reachable if c.get("member_info")), None)
        return dict(source.get("member_info") or {}) if source else {}

    def wal_level(self) -> int | None:
        source = self.leader or next((c for c in self.reachable if c.get("cluster_id")), None)
        return source.get("wal_level") if source else None

    def _fill_lag(self) -> None:
        leader = self.leader
        if leader is None:
            return
        lag_map = leader.get("lag_map") or {}
        for record in self.reachable:
            if record is leader:
                record["lag"] = 0
            elif record.get("applied_index") is not None and leader.get("commit_index") is not None:
                record["lag"] = max(0, int(leader["commit_index"]) - int(record["applied_index"]))
            elif record.get("raft_addr") in lag_map:
                record["lag"] = int(lag_map[record["raft_addr"]])

    def member_lags(self) -> dict:
        """raft address -> lag for every committed member (None when the member did not answer)."""
        members = self.committed_members() or []
        by_raft = {c.get("raft_addr"): c for c in self.reachable}
        lags = {}
        leader_map = (self.leader or {}).get("lag_map") or {}
        for member in members:
            record = by_raft.get(member)
            if record is not None and record.get("lag") is not None:
                lags[member] = record["lag"]
            elif member in leader_map:
                lags[member] = int(leader_map[member])
            else:
                lags[member] = None
        return lags

    def problems(self, max_lag: int | None = None, require_all_members: bool = True) -> list[str]:
        """Why this cluster is not healthy, one line each; empty when it is."""
        found = []
        for record in self.controllers:
            if not record["reachable"]:
                found.append("controller %s does not answer (%s)" % (record["name"], record["error"]))
            elif record.get("stalled"):
                found.append("controller %s stopped applying the log: %s" % (
                    record["name"], (record["stalled"] or {}).get("reason")))
        if not self.leaders:
            found.append("no controller answers as leader")
        elif len(self.leaders) > 1:
            found.append("several controllers answer as leader: %s" % ", ".join(c["name"] for c in self.leaders))
        else:
            terms = {c["term"] for c in self.reachable if c.get("term") is not None}
            if len(terms) > 1:
                found.append("controllers disagree on the term (%s)" % ", ".join(str(t) for t in sorted(terms)))
            lags = self.member_lags()
            for member, lag in sorted(lags.items()):
                if lag is None:
                    if require_all_members:
                        found.append("member %s reports no replication progress" % member)
                elif max_lag is not None and lag > max_lag:
                    found.append("member %s lags %d entries behind the leader (max_lag %d)" % (member, lag, max_lag))
        return found


def probe_controllers(params: dict) -> ClusterView:
    timeout = params["timeout"]
    return ClusterView([probe_controller(name, url, timeout) for name, url in controller_endpoints(params)])


# ---------------------------------------------------------------------------------------------- gRPC


def require_grpc() -> None:
    if GRPC_IMPORT_ERROR is not None:
        raise SpurMissingLibrary(
            missing_required_lib("grpcio and spur-hpc", reason="to call the Spur controllers' gRPC API") +
            " Run the module with the release's interpreter, for example "
            "ansible_python_interpreter=/opt/spur/current/bin/python.",
            exception=GRPC_IMPORT_ERROR,
        )


class ControllerRpc:
    """Calls SlurmController methods, trying each controller; follows the leader hint of a refusal.

    Reads take the first answer. Writes are retried on UNAVAILABLE for WRITE_PATIENCE_SECS (an election
    takes about a second); they are idempotent (drain, resume, set level) or carry an idempotency key.
    """

    def __init__(self, addresses: list[str], timeout: float, auth_type: str = "auto",
                 munge_socket: str | None = None) -> None:
        require_grpc()
        if not addresses:
            raise SpurUnreachable("no controller gRPC address is known: no probe answered with one and "
                                  "grpc_hosts is empty", override="grpc_hosts")
        self.addresses = list(dict.fromkeys(with_port(a, CONTROLLER_GRPC_PORT) for a in addresses))
        self.timeout = timeout
        self.auth_type = None if auth_type == "auto" else auth_type
        self.munge_socket = munge_socket
        self.channels: dict = {}

    def credential(self) -> tuple:
        """Metadata for one call: a MUNGE credential is good for one request only, so each call gets its own."""
        if spur_auth is None:
            return ()
        try:
            return spur_auth.client_metadata(self.auth_type, self.munge_socket)
        except spur_auth.AuthError as exc:
            raise SpurRefused("cannot get a MUNGE credential on this host: %s" % exc, override="auth_type") from None

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        self.channels.clear()

    def _stub(self, address: str):
        if address not in self.channels:
            self.channels[address] = grpc.insecure_channel(address, options=[("grpc.enable_retries", 0)])
        return slurm_pb2_grpc.SlurmControllerStub(self.channels[address])

    def call(self, method: str, request, write: bool = False, patience: float | None = None):
        """A read takes one round over the addresses unless patience says otherwise; a write waits for elections."""
        if patience is None:
            patience = WRITE_PATIENCE_SECS if write else 0
        policy = Failover(self.addresses, time.monotonic() + patience, write=True)
        for address in policy:
            try:
                return getattr(self._stub(address), method)(request, timeout=self.timeout,
                                                            metadata=self.credential())
            except grpc.RpcError as exc:
                code = exc.code().name if exc.code() is not None else "UNKNOWN"
                details = exc.details() or code
                if code not in RETRY_CODES:
                    raise rpc_error(method, address, code, details) from None
                hint = _leader_hint(exc)
                policy.failed(address, details, hint=with_port(hint, CONTROLLER_GRPC_PORT) if hint else None)
        raise SpurUnreachable("no controller could answer %s (%s)" % (method, policy.summary()))


def _leader_hint(exc) -> str | None:
    try:
        metadata = exc.trailing_metadata()
    except Exception:  # an error that is not a call's has no metadata; the next address is tried
        return None
    return leader_hint(metadata)


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
            require_grpc()
            self._rpc = ControllerRpc(grpc_addresses(self.params, self.view()), self.timeout,
                                      self.params.get("auth_type") or "auto", self.params.get("munge_socket"))
        return self._rpc

    def close(self) -> None:
        if self._rpc is not None:
            self._rpc.close()

    # ---------------------------------------------------------------- typed calls

    def get_node(self, name: str) -> dict:
        return node_to_dict(self.rpc().call("GetNode", slurm_pb2.GetNodeRequest(name=name)))

    def list_nodes(self, names: list[str] | None = None) -> list[dict]:
        reply = self.rpc().call("ListNodes", slurm_pb2.ListNodesRequest(names=names or []))
        return [node_to_dict(n) for n in reply.nodes]

    def drain_node(self, name: str, reason: str, set_by: str) -> dict:
        request = slurm_pb2.DrainNodeRequest(name=name, reason=reason, set_by=set_by)
        return node_to_dict(self.rpc().call("DrainNode", request, write=True))

    def resume_node(self, name: str, only_if_reason_prefix: str = "") -> dict:
        request = slurm_pb2.ResumeNodeRequest(name=name, only_if_reason_prefix=only_if_reason_prefix)
        return node_to_dict(self.rpc().call("ResumeNode", request, write=True))

    def down_node(self, name: str, reason: str, set_by: str) -> dict:
        request = slurm_pb2.UpdateNodeRequest(name=name, state=slurm_pb2.NodeState.Value("DOWN"), reason=reason,
                                              set_by=set_by)
        return node_to_dict(self.rpc().call("UpdateNode", request, write=True))

    def submit_job(self, spec: dict, idempotency_key: str | None) -> tuple[int, bool]:
        pb_spec = slurm_pb2.JobSpec(**{k: v for k, v in spec.items() if k != "environment"})
        pb_spec.environment.update(spec.get("environment") or {})
        key = idempotency_key or "spur.cluster:" + uuid.uuid4().hex  # a retried submission is never doubled
        reply = self.rpc().call("SubmitJob", slurm_pb2.SubmitJobRequest(spec=pb_spec, idempotency_key=key),
                                write=True)
        return int(reply.job_id), bool(reply.duplicate)

    def get_job(self, job_id: int) -> dict:
        return job_to_dict(self.rpc().call("GetJob", slurm_pb2.GetJobRequest(job_id=job_id)))

    def list_jobs(self, names: list[str] | None = None, include_finished: bool = True) -> list[dict]:
        request = slurm_pb2.ListJobsRequest(names=names or [], include_finished=include_finished)
        return [job_to_dict(j) for j in self.rpc().call("ListJobs", request).jobs]

    def cancel_job(self, job_id: int, requested_by: str) -> dict:
        request = slurm_pb2.CancelJobRequest(job_id=job_id, signal=0, requested_by=requested_by)
        reply = self.rpc().call("CancelJob", request, write=True)
        return dict(job_to_dict(reply.job), already_finished=bool(reply.already_finished))

    def set_wal_level(self, level: int) -> tuple[int, bool]:
        reply = self.rpc().call("SetWalLevel", slurm_pb2.SetWalLevelRequest(level=level), write=True)
        return int(reply.level), bool(reply.changed)


# ---------------------------------------------------------------------------------------------- conversions


def node_to_dict(node) -> dict:
    return dict(
        name=node.name,
        state=slurm_pb2.NodeState.Name(node.state),
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
    )


def job_to_dict(job) -> dict:
    spec = job.spec
    return dict(
        job_id=int(job.job_id),
        name=spec.name,
        state=slurm_pb2.JobState.Name(job.state),
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
