"""gRPC servicers: translate protobuf <-> domain calls and map domain errors to status codes, once."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import grpc

from spur_hpc import buildinfo, grpcutil
from spur_hpc.controller import errors, partitions, peer_names, placement
from spur_hpc.controller.authz import OPERATOR
from spur_hpc.controller.service import ControllerService, copy_job, missing_job
from spur_hpc.controller.steplaunch import step_to_pb, steps_key, steps_to_pb
from spur_hpc.controller.suspension import shown_state, suspend_time, suspended_secs
from spur_hpc.proto import raft_internal_pb2, raft_internal_pb2_grpc, slurm_pb2, slurm_pb2_grpc
from spur_hpc.protoconv import alloc_to_pb, spec_from_pb, spec_to_pb

log = logging.getLogger("spurctld.grpc")

_CODES = [
    (errors.NotLeader, grpc.StatusCode.UNAVAILABLE),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
]


def rpc(method: Callable) -> Callable:
    """Map domain errors to gRPC status codes; an unexpected error is logged and answered INTERNAL. A coroutine
    method (run on the server's event loop) gets a coroutine wrapper, a plain one (run in its thread pool) a plain
    wrapper: the same answers either way."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def async_wrapper(self, request, context):
            try:
                return await method(self, request, context)
            except Exception as exc:
                code, details = _refusal(method.__name__, exc, context)
            await context.abort(code, details)

        return async_wrapper

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except Exception as exc:
            code, details = _refusal(method.__name__, exc, context)
        context.abort(code, details)

    return wrapper


def _refusal(name: str, exc: Exception, context) -> tuple[grpc.StatusCode, str]:
    """The status code and details an error from a handler is answered with; sets the trailing metadata that
    goes with it (the leader a NotLeader names, the Slurm error a SlurmRefusal carries)."""
    if isinstance(exc, errors.ControllerError):
        trailing = []
        if isinstance(exc, errors.NotLeader) and exc.leader:
            trailing.append((grpcutil.LEADER_METADATA_KEY, exc.leader))
        if isinstance(exc, errors.SlurmRefusal):
            trailing.append((errors.SLURM_ERROR_METADATA_KEY, exc.slurm_error))
        if trailing:
            context.set_trailing_metadata(tuple(trailing))
        code = next((code for cls, code in _CODES if isinstance(exc, cls)), grpc.StatusCode.INTERNAL)
        return code, str(exc)
    if isinstance(exc, ValueError):  # protobuf enum/field conversions
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    log.error("%s failed", name, exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"{name} failed inside the controller; see its log"


# ------------------------------------------------------------------ conversions

_JOB_STATES = {name: slurm_pb2.JobState.Value(name) for name in slurm_pb2.JobState.keys()}
_NODE_STATES = {name: slurm_pb2.NodeState.Value(name) for name in slurm_pb2.NodeState.keys()}


# The Job message's fields that a job record feeds besides job_id, state and spec: field -> its value when
# the record has none (a record written by an older release lacks the newer fields).
JOB_RECORD_FIELDS = {
    "reason": "",
    "exit_code": 0,
    "signal": 0,
    "submit_time": 0.0,
    "start_time": 0.0,
    "end_time": 0.0,
    "nodes": (),
    "attempt": 0,
    "cancel_requested": False,
    "held": False,
    "array_job_id": 0,
    "array_task_id": 0,
    "array_pending": "",
    "array_max_running": 0,
    "restart_count": 0,
    "eligible_time": 0.0,
    "priority": 0,
    "suspend_time": 0.0,
    "suspended_secs": 0.0,
    "cancelled_by_uid": -1,
    "preempted_by": 0,
    "preempt_time": 0.0,
}


def job_to_pb(job: dict[str, Any], brief: bool = False, allocs: bool = True) -> slurm_pb2.Job:
    """A job record as the API shows it; brief leaves out the script and environment, allocs=False (the queue
    listings) what it holds on each node."""
    fields = {f: job.get(f, default) for f, default in JOB_RECORD_FIELDS.items()}
    fields.update(suspend_time=suspend_time(job), suspended_secs=suspended_secs(job))  # this run's
    per_node = ((job.get("alloc") or {}).get("per_node") or {}) if allocs else {}
    return slurm_pb2.Job(
        job_id=job["job_id"],
        spec=spec_to_pb(job["spec"], brief),
        state=_JOB_STATES[shown_state(job)],
        steps=steps_to_pb(job),
        allocs={node: alloc_to_pb(job, node) for node in job["nodes"] if node in per_node},
        **fields,
    )


_RECORD_NAMES, _RECORD_DEFAULTS = tuple(JOB_RECORD_FIELDS), tuple(JOB_RECORD_FIELDS.values())
_RECORD_LISTS = [index for index, default in enumerate(_RECORD_DEFAULTS) if isinstance(default, tuple)]


def _brief_key(job: dict[str, Any]) -> tuple:
    """What job_to_pb reads of a job: its state, the revision of its spec (scontrol update raises it) and
    every field of JOB_RECORD_FIELDS (the list ones, whose default is a tuple, copied as tuples: the record may
    change a list in place). Under the state lock for every job of a listing: map() reads the fields in C."""
    values = list(map(job.get, _RECORD_NAMES, _RECORD_DEFAULTS))
    for index in _RECORD_LISTS:
        values[index] = tuple(values[index])
    return (shown_state(job), job.get("spec_rev", 0), steps_key(job), *values)


class BriefJobList:
    """ListJobs replies in the brief form, from each job's message serialized once per change of the job.

    Building 10,000 Job messages in Python took most of a squeue's time on the controller, and copying
    10,000 records under the state lock most of the rest; most jobs in a queue do not change between two
    squeues. So under the lock, `view` compares each job with its cached entry and copies only the jobs that
    changed; `reply` serializes those and joins every job's bytes into the reply.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[tuple, bytes]] = {}

    def view(self, job: dict[str, Any]) -> tuple[int, tuple, bytes | None, dict[str, Any] | None]:
        """Under the state lock: (job id, its cache entry, the cached bytes, None) when the job is unchanged, else
        (job id, its key, None, a copy of it)."""
        key = _brief_key(job)
        entry = self._entries.get(job["job_id"])
        if entry is not None and entry[0] == key:
            return job["job_id"], entry, entry[1], None
        return job["job_id"], key, None, copy_job(job)

    def reply(self, views: list[tuple], whole_queue: bool) -> slurm_pb2.ListJobsReply:
        kept: dict[int, tuple[tuple, bytes]] = {} if whole_queue else self._entries
        parts = []
        for job_id, key_or_entry, data, job in views:
            if data is None:
                data = job_to_pb(job, brief=True, allocs=False).SerializeToString()
                kept[job_id] = (key_or_entry, data)
            else:
                # the entry itself, not a new key and tuple: 20,000 objects a listing of 10,000 unchanged jobs
                # would leave behind for the garbage collector, whose full passes then cost as much as the rest
                kept[job_id] = key_or_entry
            parts.append(_JOBS_FIELD_TAG + _varint(len(data)))
            parts.append(data)
        if whole_queue:
            self._entries = kept  # a listing of the whole queue also forgets the jobs that left it
        return slurm_pb2.ListJobsReply.FromString(b"".join(parts))


_JOBS_FIELD_TAG = bytes([(slurm_pb2.ListJobsReply.DESCRIPTOR.fields_by_name["jobs"].number << 3) | 2])


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# what an agent reports of its host and its start (RegisterAgentRequest), kept in the node record as they came
NODE_HOST_FIELDS = {
    "agent_started": 0.0, "boot_time": 0.0, "arch": "", "os": "", "sockets": 0, "cores_per_socket": 0,
    "threads_per_core": 0,
}  # fmt: skip


def node_to_pb(node: dict[str, Any], last_heartbeat: float = 0.0) -> slurm_pb2.Node:
    return slurm_pb2.Node(
        name=node["name"],
        state=_NODE_STATES[node["state"]],
        reason=node["reason"],
        reason_set_by=node["reason_set_by"],
        reason_time=node["reason_time"],
        address=node["address"],
        resources=slurm_pb2.NodeResources(cpus=node["cpus"], memory_mb=node["memory_mb"], gres=node.get("gres") or {}),
        allocated=slurm_pb2.NodeResources(
            cpus=node["alloc_cpus"], memory_mb=node["alloc_mem"], gres=node.get("alloc_gres") or {}
        ),
        features=node.get("features") or [],
        job_ids=node["jobs"],
        version=node["version"],
        build=node["build"],
        registered=node["registered"],
        last_registered=node["last_registered"],
        last_heartbeat=last_heartbeat,
        # Node.partition is the first of Node.partitions ("" for a node in none: see controller/partitions.py)
        partition=(node.get("partitions") or [""])[0] if "partitions" in node else node["partition"],
        partitions=node.get("partitions") or [],
        drain=node["drain"],
        dispatch_hold_until=node.get("dispatch_hold_until", 0.0),
        last_busy=node.get("last_busy", 0.0),
        **{field: node.get(field, default) for field, default in NODE_HOST_FIELDS.items()},
    )


def priorities_reply(rows: list[dict[str, Any]] | None, weights: dict[str, int]) -> slurm_pb2.ListPrioritiesReply:
    """ControllerService.list_priorities' rows (None: priority_type basic, which has no factors) as the reply."""
    if rows is None:
        return slurm_pb2.ListPrioritiesReply(priority_type="basic")
    names = {"partition": "partition_factor", "qos": "qos_factor", "assoc": "assoc_factor"}
    return slurm_pb2.ListPrioritiesReply(
        priority_type="multifactor",
        weights=slurm_pb2.PriorityWeights(**weights),
        jobs=[
            slurm_pb2.JobPriority(
                **{k: r[k] for k in ("job_id", "user", "account", "partition", "qos", "priority", "nice")},
                **{names.get(k, k): v for k, v in r["factors"].items()},
            )
            for r in rows
        ],
    )


def shares_reply(rows: list[dict[str, Any]]) -> slurm_pb2.ListSharesReply:
    """ControllerService.list_shares' rows (fairshare.shares) as the reply; parent is the parent account's name."""
    fields = ("account", "user", "partition", "raw_shares", "norm_shares", "raw_usage", "norm_usage",
              "effective_usage", "fairshare", "depth")  # fmt: skip
    return slurm_pb2.ListSharesReply(
        shares=[slurm_pb2.Share(**{k: r[k] for k in fields}, parent=r["parent"].split("|")[0]) for r in rows]
    )


def partition_to_pb(part: partitions.Partition) -> slurm_pb2.Partition:
    return slurm_pb2.Partition(
        name=part.name,
        nodes=part.nodes,
        nodes_expr=part.nodes_expr,
        is_default=part.is_default,
        max_time_secs=part.max_time_secs,
        default_time_secs=part.default_time_secs,
        max_nodes=part.max_nodes,
        min_nodes=part.min_nodes,
        state=part.state,
        hidden=part.hidden,
        priority_tier=part.priority_tier,
        priority_job_factor=part.priority_job_factor,
        preempt_mode=part.preempt_mode,
    )


def _state_name(enum_value: int, states: dict[str, int], what: str) -> str:
    for name, value in states.items():
        if value == enum_value:
            return name
    raise errors.InvalidArgument(f"{what} {enum_value} is not a known state")


# ------------------------------------------------------------------ servicers


class ControllerServicer(slurm_pb2_grpc.SlurmControllerServicer):
    """SlurmController. `node` is the ControllerNode (daemon-side facade: service, duties, status)."""

    def __init__(self, node) -> None:
        self.node = node
        self.brief_jobs = BriefJobList()

    @property
    def service(self) -> ControllerService:
        service = self.node.service
        if service is None:
            raise errors.Unavailable("this controller is still starting (probing its peers); try another one")
        return service

    def _store(self) -> dict[str, Any] | None:
        """The association store (AdminLevel, coordinators; None before WAL level 5). assoc_apply replaces its
        tables whole, so reading one outside the state lock sees one version or the next, never half a change."""
        return self.service.read(lambda s: s.assoc)

    def _require_job_owner(self, who, job_id: int, action: str, store: dict[str, Any] | None = None) -> None:
        """Its owner, a coordinator of its account, an operator or an administrator may act on a job."""
        spec = self.service.get_job(job_id)["spec"]
        store = self._store() if store is None else store
        self.node.authz.require_job_actor(who, spec, f"{action} {job_id}", store)

    def _require_operator(self, who, action: str) -> dict[str, Any] | None:
        """Operators and administrators only; the store the check read, for the caller's further checks."""
        store = self._store()
        self.node.authz.require_level(who, OPERATOR, action, store)
        return store

    @rpc
    def Ping(self, request, context):
        self.node.authz.caller(context)
        return self.node.ping_reply()

    @rpc
    def GetClusterInfo(self, request, context):
        self.node.authz.caller(context)
        return self.node.cluster_info()

    @rpc
    def RegisterAgent(self, request, context):
        self.node.authz.require_admin(self.node.authz.caller(context), "act as a node agent")
        running = [(r.job_id, r.attempt) for r in request.running]
        result = self.service.register_agent(
            request.name,
            request.address,
            request.resources.cpus,
            request.resources.memory_mb,
            request.version,
            request.build,
            request.partition,
            running,
            gres=dict(request.resources.gres),
            features=list(request.features),
            host={field: getattr(request, field) for field in NODE_HOST_FIELDS},
        )
        node = self.service.get_node(request.name)
        self.node.poke_scheduler()
        return slurm_pb2.RegisterAgentReply(
            node=node_to_pb(node),
            heartbeat_interval_ms=int(self.node.conf.agent.heartbeat_interval_secs * 1000),
            stale=[slurm_pb2.RunningJob(job_id=j, attempt=a) for j, a in result.get("stale", [])],
        )

    @rpc
    async def Heartbeat(self, request, context):
        # On the event loop: leader-local bookkeeping and reads under the state lock, never a Raft write.
        self.node.authz.require_admin(self.node.authz.caller(context), "act as a node agent")
        self.service.require_leader()
        known = self.service.read(lambda s: request.name in s.nodes and s.nodes[request.name]["registered"])
        if not known:
            return slurm_pb2.HeartbeatReply(reregister=True)
        running = [(r.job_id, r.attempt) for r in request.running]
        self.node.duties.heartbeat_seen(request.name, running)
        stale = self.service.read(
            lambda s: [
                (j, a)
                for j, a in running
                if j not in s.jobs
                or s.jobs[j]["state"] != "RUNNING"
                or s.jobs[j]["attempt"] != a
                or request.name not in s.jobs[j]["nodes"]
            ]
        )
        return slurm_pb2.HeartbeatReply(stale=[slurm_pb2.RunningJob(job_id=j, attempt=a) for j, a in stale])

    @rpc
    def DeregisterAgent(self, request, context):
        self.node.authz.require_admin(self.node.authz.caller(context), "act as a node agent")
        self.service.deregister_agent(request.name, request.reason)
        return slurm_pb2.DeregisterAgentReply(node=node_to_pb(self.service.get_node(request.name)))

    @rpc
    def ListNodes(self, request, context):
        self.node.authz.caller(context)
        nodes = self.service.list_nodes(list(request.names))
        wanted = {_state_name(s, _NODE_STATES, "node state") for s in request.states}
        seen = self.node.duties.last_seen_wall()
        return slurm_pb2.ListNodesReply(
            nodes=[node_to_pb(n, seen.get(n["name"], 0.0)) for n in nodes if not wanted or n["state"] in wanted]
        )

    @rpc
    def ListPartitions(self, request, context):
        self.node.authz.caller(context)
        return slurm_pb2.ListPartitionsReply(
            partitions=[partition_to_pb(p) for p in self.service.list_partitions(list(request.names))]
        )

    @rpc
    def GetNode(self, request, context):
        self.node.authz.caller(context)
        node = self.service.get_node(request.name)
        return node_to_pb(node, self.node.duties.last_seen_wall().get(request.name, 0.0))

    @rpc
    def DrainNode(self, request, context):
        who = self.node.authz.caller(context)
        self._require_operator(who, "drain nodes")
        set_by = request.set_by or who.user
        self.service.drain(request.name, request.reason, set_by)
        return node_to_pb(self.service.get_node(request.name))

    @rpc
    def ResumeNode(self, request, context):
        self._require_operator(self.node.authz.caller(context), "resume nodes")
        self.service.resume(request.name, request.only_if_reason_prefix)
        self.node.poke_scheduler()
        return node_to_pb(self.service.get_node(request.name))

    @rpc
    def HoldDispatch(self, request, context):
        # An agent before its restart (the rolling upgrade in place) or an administrator: agents run as root.
        self.node.authz.require_admin(self.node.authz.caller(context), "hold dispatch to a node")
        node = self.service.hold_dispatch(request.name, request.hold_secs)
        # Answer once every launch that left before the hold has landed: then a restart loses none.
        left = max(0.0, node["dispatch_hold_until"] - self.service.clock())
        if not self.node.duties.dispatch.wait_idle(node["name"], left):
            log.warning("node %s: launches still in flight when its dispatch hold ran out", node["name"])
        return node_to_pb(self.service.get_node(node["name"]))

    @rpc
    def UpdateNode(self, request, context):
        who = self.node.authz.caller(context)
        self._require_operator(who, "update nodes")
        set_by = request.set_by or who.user
        state = _state_name(request.state, _NODE_STATES, "node state")
        if state in ("DRAINED", "DRAINING"):
            if not request.reason:
                raise errors.InvalidArgument("draining a node needs a reason (Reason=...)")
            self.service.drain(request.name, request.reason, set_by)
        elif state == "IDLE":
            self.service.resume(request.name)
        elif state == "DOWN":
            if not request.reason:
                raise errors.InvalidArgument("setting a node DOWN needs a reason (Reason=...)")
            result = self.service.down(request.name, request.reason, set_by)
            for job_id in result.get("failed", []):
                self.node.kill_job_everywhere(job_id)
        else:
            raise errors.InvalidArgument(f"a node can be set to DRAIN, RESUME (IDLE) or DOWN, not {state}")
        self.node.poke_scheduler()
        return node_to_pb(self.service.get_node(request.name))

    @rpc
    async def SubmitJob(self, request, context):
        # On the event loop: the checks, then the commit awaited without a thread (service.submit_async).
        who = self.node.authz.caller(context)
        spec = spec_from_pb(request.spec)
        self.node.authz.submit_as(who, spec)
        spec["alloc_node"] = peer_names.host_of(context.peer())  # Slurm's AllocNode: the client's address, resolved
        if spec.get("nice", 0) < 0:  # a negative nice raises the job's priority over other users' jobs
            self._require_operator(who, "submit with a negative --nice")
        if request.test_only:  # sbatch --test-only: checked like a submit, answered, nothing written
            spec = self.service.validate_spec(spec)
            now = self.service.clock()
            estimate, nodes = self.service.read(lambda s: placement.test_only(s, spec, now, self.service.partitions))
            return slurm_pb2.SubmitJobReply(start_estimate=estimate, nodes=nodes)
        job_id, duplicate = await self.service.submit_async(spec, request.idempotency_key, submitter_uid=who.uid)
        self.node.poke_scheduler()
        return slurm_pb2.SubmitJobReply(job_id=job_id, duplicate=duplicate)

    @rpc
    def ListJobs(self, request, context):
        who = self.node.authz.caller(context)
        store = self._store()
        visible = self.node.authz.job_filter(who, store)  # [auth] private_data "jobs": others' jobs are absent
        filtered = request.job_ids or request.users or request.states or request.partitions or request.names
        whole_queue = not (filtered or visible)
        jobs = self.service.list_jobs(
            job_ids=list(request.job_ids),
            users=list(request.users),
            states=[_state_name(s, _JOB_STATES, "job state") for s in request.states],
            partitions=list(request.partitions),
            names=list(request.names),
            include_finished=request.include_finished,
            view=self.brief_jobs.view if request.brief else copy_job,
            visible=visible,
            finish=(lambda views: self.brief_jobs.reply(views, whole_queue)) if request.brief else None,
        )
        if request.brief:
            return jobs  # the reply, built (or kept) by list_jobs
        operator = self.node.authz.at_least(who, OPERATOR, store)
        return slurm_pb2.ListJobsReply(jobs=[self._job_for(who, j, operator) for j in jobs])

    @rpc
    def GetJob(self, request, context):
        who = self.node.authz.caller(context)
        store = self._store()
        job = self.service.get_job(request.job_id)
        visible = self.node.authz.job_filter(who, store)
        if visible is not None and not visible(job["spec"]):
            raise missing_job(request.job_id)  # as Slurm: a hidden job is answered as one that does not exist
        return self._job_for(who, job, self.node.authz.at_least(who, OPERATOR, store))

    @staticmethod
    def _job_for(who, job: dict[str, Any], operator: bool) -> slurm_pb2.Job:
        """A job as this caller may see it: its script and environment (which hold tokens and passwords as often
        as not) only for its owner, operators and administrators; everyone else gets the brief form, as squeue
        does."""
        spec = job["spec"]
        private = operator or who.uid == spec.get("uid", -1) or who.user == spec.get("user", "")
        return job_to_pb(job, brief=not private)

    @rpc
    def CancelJob(self, request, context):
        who = self.node.authz.caller(context)  # MUNGE vouches for its uid: who cancelled (requested_by is unchecked)
        self._require_job_owner(who, request.job_id, "cancel job")
        if request.step_id:  # scancel N.M, srun's Ctrl-C: the step's supervisors, through the leader
            self.service.require_leader()
            self.node.duties.steps.signal(request.job_id, request.step_id, request.signal)
            job = self.service.get_job(request.job_id)
            return slurm_pb2.CancelJobReply(job=job_to_pb(job, brief=True))
        result = self.service.cancel(
            request.job_id, request.signal, request.requested_by, request.array_tasks, by_uid=who.uid
        )
        if "signal" in result and isinstance(result["signal"], list):  # an array: each running task named
            self._signal_tasks(result["signal"], request.signal)
        elif result.get("signal_agent") and self.node.service.raft.is_leader():
            self.node.duties.signal_job(request.job_id, result["attempt"], result["nodes"], request.signal)
        elif result.get("signal_agent") and request.signal:
            raise errors.NotLeader("signals are delivered by the leader", self.node.leader_grpc())
        job = self.service.get_job(request.job_id)
        return slurm_pb2.CancelJobReply(job=job_to_pb(job), already_finished=result.get("already_finished", False))

    @rpc
    def CompleteJob(self, request, context):
        self.node.authz.require_admin(self.node.authz.caller(context), "report job completions")
        state = _state_name(request.state, _JOB_STATES, "job state")
        accepted = self.service.complete(
            request.job_id,
            request.attempt,
            request.node,
            state,
            request.exit_code,
            request.signal,
            request.end_time,
            request.reason,
        )
        self.node.poke_scheduler()
        return slurm_pb2.CompleteJobReply(accepted=accepted)

    @rpc
    def CreateStep(self, request, context):
        step, job = self.node.duties.steps.create(self.node.authz.caller(context), request)
        return slurm_pb2.CreateStepReply(step=step_to_pb(step), job=job_to_pb(job, brief=True))

    @rpc
    def CompleteStep(self, request, context):
        self.node.authz.require_admin(self.node.authz.caller(context), "report step completions")
        return slurm_pb2.CompleteStepReply(accepted=self.node.duties.steps.complete(request))

    @rpc
    def EndAllocation(self, request, context):
        self._require_job_owner(self.node.authz.caller(context), request.job_id, "end job")
        job = self.node.duties.steps.end_allocation(request.job_id, request.exit_code, request.signal)
        return job_to_pb(job, brief=True)

    def _signal_tasks(self, targets: list, signal: int) -> None:
        """Deliver a cancel (0) or a signal to running array tasks [[job_id, attempt, nodes], ...]."""
        if not targets:
            return
        if not self.node.service.raft.is_leader():
            if signal:
                raise errors.NotLeader("signals are delivered by the leader", self.node.leader_grpc())
            return  # a cancel: the leader's follow-up signals the cancelled tasks
        for job_id, attempt, nodes in targets:
            self.node.duties.signal_job(job_id, attempt, nodes, signal)

    @rpc
    def SuspendJob(self, request, context):
        """scontrol suspend / resume: operators and administrators only, as in Slurm; the leader writes the change
        and then stops (SIGSTOP) or continues (SIGCONT) every process of the job and its steps on their nodes."""
        what = "resume" if request.resume else "suspend"
        self._require_operator(self.node.authz.caller(context), f"{what} job {request.job_id}")
        result = self.service.suspend(request.job_id, request.resume)
        self.node.duties.suspend_job(request.job_id, result["attempt"], result["nodes"], request.resume)
        return job_to_pb(self.service.get_job(request.job_id))

    @rpc
    def HoldJob(self, request, context):
        who = self.node.authz.caller(context)
        store = self._store()
        self._require_job_owner(who, request.job_id, "hold job", store)
        self.service.hold(request.job_id, True, by_admin=self.node.authz.at_least(who, OPERATOR, store))
        return job_to_pb(self.service.get_job(request.job_id))

    @rpc
    def ReleaseJob(self, request, context):
        who = self.node.authz.caller(context)
        store = self._store()
        self._require_job_owner(who, request.job_id, "release job", store)
        self.service.hold(request.job_id, False, by_admin=self.node.authz.at_least(who, OPERATOR, store))
        self.node.poke_scheduler()
        return job_to_pb(self.service.get_job(request.job_id))

    @rpc
    def RequeueJob(self, request, context):
        self._require_job_owner(self.node.authz.caller(context), request.job_id, "requeue job")
        stopped = self.service.requeue(request.job_id, request.hold)
        self._signal_tasks(stopped, 0)  # the stopped runs' supervisors end; they report attempts nobody waits for
        self.node.poke_scheduler()
        return job_to_pb(self.service.get_job(request.job_id))

    @rpc
    def UpdateJob(self, request, context):
        who = self.node.authz.caller(context)
        store = self._store()
        self._require_job_owner(who, request.job_id, "update job", store)
        values = spec_from_pb(request.spec)
        operator = self.node.authz.at_least(who, OPERATOR, store)
        self.service.update_job(request.job_id, list(request.fields), values, operator)
        self.node.poke_scheduler()
        return job_to_pb(self.service.get_job(request.job_id))

    @rpc
    def JobHistory(self, request, context):
        who = self.node.authz.caller(context)
        visible = self.node.authz.job_filter(who, self._store())  # [auth] private_data "jobs"
        cluster_id = None if request.all_clusters else self.service.read(lambda s: s.cluster_id)
        records = self.node.accounting.history(
            cluster_id,
            job_ids=list(request.job_ids),
            users=list(request.users),
            start=request.start_time or None,
            end=request.end_time or None,
            states=list(request.states),
            names=list(request.names),
        )
        return slurm_pb2.ListJobsReply(jobs=[job_to_pb(r) for r in records if visible is None or visible(r["spec"])])

    # ---------------------------------------------------------- priorities and shares (sprio, sshare)

    @rpc
    def ListPriorities(self, request, context):
        who = self.node.authz.caller(context)
        visible = self.node.authz.job_filter(who, self._store())  # [auth] private_data "jobs"
        rows = self.service.list_priorities(list(request.job_ids), list(request.users), visible)
        return priorities_reply(rows, self.service.priority.weights)

    @rpc
    def ListShares(self, request, context):
        """sshare: without -a or -u, the caller's own associations and every account's, as Slurm's."""
        who = self.node.authz.caller(context)
        visible = self.node.authz.assoc_filter(who, self._store())  # [auth] private_data "usage"
        users = list(request.users) or [who.user]
        return shares_reply(self.service.list_shares(users, list(request.accounts), request.all_users, visible))

    # ---------------------------------------------------------- accounts, users, QOS (sacctmgr)

    @rpc
    def ListAssociations(self, request, context):
        who = self.node.authz.caller(context)
        visible = self.node.authz.assoc_filter(who, self._store())  # [auth] private_data "usage"
        found = self.service.list_associations(list(request.users), list(request.accounts))
        return slurm_pb2.ListAssociationsReply(
            cluster=found["cluster"],
            qos=[_row_pb(slurm_pb2.Qos, r) for r in found["qos"]],
            accounts=[_row_pb(slurm_pb2.Account, r) for r in found["accounts"]],
            users=[_row_pb(slurm_pb2.User, r) for r in found["users"]],
            associations=[_row_pb(slurm_pb2.Association, r) for r in found["assocs"] if visible is None or visible(r)],
        )

    @rpc
    def ModifyAssociations(self, request, context):
        """sacctmgr's changes: operators and administrators (sacctmgr AdminLevel, or [auth] admins), as slurmdbd
        lets an Operator change any object; making someone an Administrator takes an Administrator."""
        who = self.node.authz.caller(context)
        asked = {k.lower(): v for k, v in [*request.where.items(), *request.set.items()]}.get("adminlevel", "")
        wanted = "Administrator" if asked.strip().lower().startswith("admin") else "Operator"
        self.node.authz.require_level(who, wanted, "change accounts, users or QOS", self._store())
        result = self.service.modify_associations(
            request.verb, request.entity, list(request.names), dict(request.where), dict(request.set), request.dry_run
        )
        return slurm_pb2.ModifyAssociationsReply(**result)

    @rpc
    def SetWalLevel(self, request, context):
        self.node.authz.require_admin(self.node.authz.caller(context), "raise the WAL level")
        result = self.service.set_wal_level(request.level)
        return slurm_pb2.SetWalLevelReply(level=result["level"], changed=result["changed"])

    # ---------------------------------------------------------------- membership (controller/membership.py)

    @rpc
    def RaftStatus(self, request, context):
        self.node.authz.require_admin(self.node.authz.caller(context), "see the Raft membership")
        membership = self.node.membership_or_unavailable()
        if not self.service.raft.is_leader() and self.service.raft.leader_addr():
            membership.require_leader(self.node.leader_grpc)  # match indexes and lag are the leader's to tell
        st = membership.status()
        return slurm_pb2.RaftStatusReply(
            members=[slurm_pb2.RaftMember(**row) for row in st["members"]],
            term=st["term"],
            commit_index=st["commit_index"],
            leader=st["leader"],
            change_in_flight=st["change_in_flight"],
        )

    @rpc
    def ChangeMembership(self, request, context):
        self.node.authz.require_admin(self.node.authz.caller(context), f"{request.action or 'change'} a controller")
        membership = self.node.membership_or_unavailable()
        membership.require_leader(self.node.leader_grpc)
        _members, message = membership.change(
            request.action, request.raft_addr, request.grpc_addr, request.catch_up_timeout_secs
        )
        rows = membership.status()["members"]
        return slurm_pb2.ChangeMembershipReply(members=[slurm_pb2.RaftMember(**r) for r in rows], message=message)


class RaftInternalServicer(raft_internal_pb2_grpc.RaftInternalServicer):
    def __init__(self, node) -> None:
        self.node = node

    @rpc
    def ClusterProbe(self, request, context):
        # Controllers ask each other at start, as root; the membership and addresses are nobody else's business.
        self.node.authz.require_admin(self.node.authz.caller(context), "probe the cluster (controllers only)")
        reply = self.node.probe_reply()
        if request.from_raft_addr:
            log.info("ClusterProbe from %s: answered has_cluster=%s", request.from_raft_addr, reply.has_cluster)
        return reply


def _row_pb(message: type, row: dict[str, Any]) -> Any:
    """A store row (controller/associations.py) as its proto message: the row's fields are the message's."""
    known = message.DESCRIPTOR.fields_by_name
    return message(**{k: v for k, v in row.items() if k in known})


def version_fields() -> dict[str, str]:
    return {"version": buildinfo.version(), "build": buildinfo.build()}


def empty_probe_reply(raft_addr: str) -> raft_internal_pb2.ClusterProbeReply:
    return raft_internal_pb2.ClusterProbeReply(has_cluster=False, raft_addr=raft_addr, **version_fields())
