"""Controller operations in domain terms: validate, build a WAL record, commit it, map the result.

The gRPC servicers call these methods and nothing else; the leader's background duties (scheduler,
heartbeat timeouts) live in leader.py and use the same write path.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from spur_hpc import joblimits, model
from spur_hpc.conf import Config
from spur_hpc.controller import (
    associations,
    assocplan,
    eligibility,
    errors,
    fairshare,
    limits,
    partitions,
    placement,
    preemption,
    priority,
    scheduler,
    wal,
)
from spur_hpc.controller.raft import DiskFullError, NoLeaderError, SpurRaft, StalledError, UnknownOutcomeError
from spur_hpc.controller.state import ClusterState, submission_key
from spur_hpc.controller.suspension import shown_state
from spur_hpc.model import (
    FINISHED_STATES,
    NO_REASON,
    PENDING,
    REASON_AGENT_STOPPED,
    REASON_DRAINED,
    REASON_HELD_ADMIN,
    REASON_HELD_USER,
    RUNNING,
    InvalidValue,
    parse_array,
    parse_array_ranges,
    parse_dependency,
)

log = logging.getLogger("spurctld.service")

MAX_JOB_ID = 2**63 - 1
# 30 days: a longer limit is almost always a unit mistake (Slurm's INFINITE is written as 0 here)
MAX_TIME_LIMIT_SECS = 365 * 24 * 3600
# --begin and --deadline: epoch seconds before the year 10000 (what Slurm's time parser takes)
MAX_EPOCH_SECS = 253402300799.0
# Slurm's nice range (NICE_OFFSET - 3); negative values only for administrators
MAX_NICE = 2147483645
# What scontrol update may change, as JobSpec fields (only pending jobs, but a running job's time limit)
UPDATABLE_FIELDS = ("time_limit_secs", "partition", "dependency", "cpus_per_task", "tasks", "nice", "name")
# The job options a release before WAL level 3 would not honour (sbatch's names): refused until the level is 3
LEVEL3_OPTIONS = (
    ("array", "--array"),
    ("dependency", "--dependency"),
    ("hold", "--hold"),
    ("begin_time", "--begin"),
    ("deadline", "--deadline"),
)


class ControllerService:
    def __init__(
        self,
        conf: Config,
        raft: SpurRaft,
        member_grpc: Callable[[str], str | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conf = conf
        self.raft = raft
        self.clock = clock
        self.member_grpc = member_grpc  # raft address -> gRPC address
        self.timeout = conf.controller.write_timeout_secs
        # Slurm's JobRequeue, resolved into each job at submit (a stand-in config of a test may lack the key)
        self.requeue_default = getattr(conf.controller, "job_requeue", True)
        self.set_partitions(conf)
        # Pending and running jobs per user, account, partition and QOS: what submit limits count (limits.py)
        self.submit_counts = limits.SubmitCounts()
        if hasattr(raft, "add_state_listener"):  # a test's stand-in raft has none: a fresh count each time
            raft.add_state_listener(self.submit_counts.note)
        self._assoc_lock = threading.Lock()
        # [accounting] enforce with what each word implies (Slurm's AccountingStorageEnforce)
        self.enforce = associations.enforced(getattr(getattr(conf, "accounting", None), "enforce", ()))
        self.on_heartbeat: Callable[[str, list[tuple[int, int]]], None] | None = None
        # Whether a node's agent still heartbeats (the leader's liveness); unset: every registered node is live.
        self.node_alive: Callable[[str], bool] | None = None
        # listed_reasons: (state, partitions, key, valid from, valid until, the jobs as squeue shows them)
        self._listed: tuple | None = None
        self._whole_listing: tuple | None = None  # list_jobs: ((the listed_reasons it used, view, finished), answer)

    def set_partitions(self, conf: Config) -> None:
        """[partitions.NAME] tables (or the agents' partitions), [scheduler] enforce_part_limits and preempt_type:
        the leader decides with them (controller/partitions.py); at start, and again on SIGHUP."""
        self.partitions = partitions.PartitionTable.from_conf(conf)
        self.enforce_part_limits = getattr(getattr(conf, "scheduler", None), "enforce_part_limits", "NO")
        limits.configure(getattr(getattr(conf, "accounting", None), "enforce", ()))  # [accounting] enforce "limits"
        self.priority = priority.settings(conf)  # [scheduler] priority_* (controller/priority.py)
        self.preempt_type = getattr(getattr(conf, "scheduler", None), "preempt_type", "none")  # preemption.py

    def plan_levels(self, s: ClusterState) -> Mapping[str, int]:
        """The QOS preemption ranks the plan orders the queue by (scheduler.order_key): none unless preempt_type
        is qos_priority."""
        if self.preempt_type != preemption.QOS_PRIORITY or s.assoc is None:
            return {}
        return preemption.preempt_levels(s.assoc)

    # -------------------------------------------------------------- the write path

    def write(self, op: str, **fields: Any) -> dict[str, Any]:
        try:
            result = self.raft.propose(wal.make_record(op, **fields), self.timeout)
        except _WRITE_FAILURES as exc:
            raise _write_refusal(exc) from None
        return _written(result)

    async def write_async(self, op: str, **fields: Any) -> dict[str, Any]:
        """write() for a coroutine on the API server's event loop."""
        try:
            result = await self.raft.propose_async(wal.make_record(op, **fields), self.timeout)
        except _WRITE_FAILURES as exc:
            raise _write_refusal(exc) from None
        return _written(result)

    def read(self, fn: Callable[[ClusterState], Any]) -> Any:
        return self.raft.read(fn)

    def require_leader(self) -> None:
        if not self.raft.is_leader():
            leader = self.raft.leader_addr()
            grpc_addr = self.member_grpc(leader) if leader else None
            raise errors.NotLeader(
                f"this controller is not the leader (leader: {grpc_addr or leader or 'unknown'})", grpc_addr
            )

    # -------------------------------------------------------------- cluster

    def set_wal_level(self, level: int) -> dict[str, Any]:
        if level < 1:
            raise errors.InvalidArgument(f"WAL level {level} is not valid; levels start at 1")
        if level > wal.MAX_WAL_LEVEL:
            raise errors.InvalidArgument(f"WAL level {level} is above what this release reads ({wal.MAX_WAL_LEVEL})")
        return self.write("set_wal_level", target=level)

    # -------------------------------------------------------------- accounts, users, QOS (sacctmgr; WAL level 5)

    def modify_associations(
        self, verb: str, entity: str, names: list[str], where: dict[str, str], set_: dict[str, str], dry_run: bool
    ) -> dict[str, Any]:
        """sacctmgr add / modify / delete: the leader plans the change against the store (assocplan.plan_change)
        and writes it as one assoc_apply record; dry_run answers what would change and writes nothing.
        -> {"affected": lines as sacctmgr lists them, "changed": bool, "message": "" or Slurm's "Nothing ..."}."""
        self.require_leader()
        with self._assoc_lock:  # one plan at a time: two plans from one store would hand out the same ids
            _refuse_below_store_level(self.read(lambda s: s.wal_level))

            def plan(s: ClusterState) -> assocplan.Plan:
                planned = assocplan.plan_change(s.assoc, verb, entity, names, where, set_, s.cluster_name)
                busy = _active_jobs_of(s, planned[1])
                if busy:  # slurmdbd's refusal: a running or pending job still needs what would go
                    raise assocplan.PlanError(
                        f"Job(s) active, cancel job(s) before remove: job {', '.join(map(str, busy[:5]))} "
                        f"{'uses' if len(busy) == 1 else 'use'} what this deletes"
                    )
                return planned

            try:
                puts, deletes, affected = self.read(plan)
            except assocplan.PlanError as exc:
                raise errors.InvalidArgument(str(exc)) from None
            if not puts and not deletes:
                nothing = {"add": "Nothing new added.", "delete": "Nothing deleted"}
                return {"affected": [], "changed": False, "message": nothing.get(verb.lower(), "Nothing modified")}
            if not dry_run:
                self.write("assoc_apply", puts=puts, deletes=deletes)
            return {"affected": affected, "changed": not dry_run, "message": ""}

    def list_associations(self, users: list[str], accounts: list[str]) -> dict[str, Any]:
        """The store (a copy) for sacctmgr show: every QOS, account and user, and the associations of the users
        and accounts named (all when none), each with its raw usage; refused before WAL level 5."""
        wanted_users, wanted_accounts = set(users), set(accounts)
        now = self.clock()

        def collect(s: ClusterState) -> dict[str, Any]:
            if s.assoc is None:
                _refuse_below_store_level(s.wal_level)
            store = s.assoc
            assocs = [
                {**row, "raw_usage": fairshare.usage_at(store, key, now)}  # decayed to the reply's time
                for key, row in store["assocs"].items()
                if (not wanted_users or row["user"] in wanted_users)
                and (not wanted_accounts or row["account"] in wanted_accounts)
            ]
            return {
                "cluster": store["cluster"],
                "qos": [dict(r) for r in store["qos"].values()],
                "accounts": [dict(r) for r in store["accounts"].values()],
                "users": [dict(r) for r in store["users"].values()],
                "assocs": sorted(assocs, key=lambda r: r["id"]),
            }

        return self.read(collect)

    def admin_level(self, user: str) -> str:
        """sacctmgr's AdminLevel of a user in the store (None before WAL level 5)."""
        return self.read(lambda s: associations.admin_level(s.assoc, user))

    # -------------------------------------------------------------- nodes

    def _node_name(self, name: str) -> str:
        if not name or len(name) > 255 or not all(c.isalnum() or c in "-_." for c in name):
            raise errors.InvalidArgument(f"node name {name!r} is not valid (letters, digits, '-', '_', '.')")
        return name

    def register_agent(
        self,
        name: str,
        address: str,
        cpus: int,
        memory_mb: int,
        version: str,
        build: str,
        partition: str,
        running: list[tuple[int, int]],
        gres: dict[str, int] | None = None,
        features: list[str] | None = None,
        host: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """host: what the agent reports of its host and its start (grpc_api.NODE_HOST_FIELDS), kept as sent."""
        self.require_leader()
        self._node_name(name)
        problem = placement.node_offer_problem(gres or {}, features or [])
        if problem:
            raise errors.InvalidArgument(f"node {name}: {problem}; fix [agent] gres / features in its spurd.toml")
        if cpus <= 0:
            raise errors.InvalidArgument(f"node {name} reports {cpus} CPUs; an agent must offer at least 1")
        if memory_mb < 0:
            raise errors.InvalidArgument(f"node {name} reports negative memory {memory_mb}")
        if not address:
            raise errors.InvalidArgument(f"node {name} sent no address; set [agent] listen_addr or advertise_addr")
        self._refuse_name_taken(name, address)
        now = self.clock()
        if self.on_heartbeat:
            self.on_heartbeat(name, running)  # before the write: the timeout check must not judge the old time
        result = self.write(
            "node_register",
            name=name,
            address=address,
            cpus=cpus,
            memory_mb=memory_mb,
            version=version,
            build=build,
            partition=partition or "default",
            running=[[j, a] for j, a in running],
            time=now,
            gres=dict(gres or {}),
            features=list(features or []),
            host=dict(host or {}),
        )
        if self.on_heartbeat:
            self.on_heartbeat(name, running)  # after the write too: the held/missing bookkeeping needs the node
        return result

    def _refuse_name_taken(self, name: str, address: str) -> None:
        """A second spurd with a live node's name (a cloned host's default name) must not take the node over;
        the same spurd restarted at the same address re-registers at once."""
        holder = self.read(lambda s: s.nodes[name]["address"] if s.nodes.get(name, {}).get("registered") else None)
        if holder is None or holder == address or (self.node_alive is not None and not self.node_alive(name)):
            return
        raise errors.AlreadyExists(
            f"node {name} is registered by a live spurd at {holder}, so this spurd at {address} may not take it "
            f"over: set [agent] node_name to a name of its own (the name is free again once the other spurd "
            f"stops or misses heartbeats for heartbeat_timeout_secs = {self.conf.controller.heartbeat_timeout_secs})"
        )

    def deregister_agent(self, name: str, reason: str) -> None:
        self.require_leader()
        reason = reason or REASON_AGENT_STOPPED
        self.write("node_deregister", name=self._node_name(name), reason=reason, time=self.clock())

    def drain(self, name: str, reason: str, set_by: str) -> dict[str, Any]:
        self._check_text("reason", reason, one_line=True)
        return self.write(
            "node_drain", name=self._node_name(name), reason=reason or REASON_DRAINED, set_by=set_by, time=self.clock()
        )

    def resume(self, name: str, only_prefix: str = "") -> dict[str, Any]:
        return self.write("node_resume", name=self._node_name(name), only_prefix=only_prefix, time=self.clock())

    def down(self, name: str, reason: str, set_by: str) -> dict[str, Any]:
        self._check_text("reason", reason, one_line=True)
        return self.write("node_down", name=self._node_name(name), reason=reason, set_by=set_by, time=self.clock())

    def hold_dispatch(self, name: str, hold_secs: float) -> dict[str, Any]:
        """HoldDispatch: the node's agent is about to restart, so no new job or step goes to it until it registers
        again or the hold ends: hold_secs (0 = the longest), at most heartbeat_timeout_secs, after which a silent
        agent is judged lost anyway. The node's state and drain are left alone. -> the node."""
        self.require_leader()
        name = self._node_name(name)
        longest = float(self.conf.controller.heartbeat_timeout_secs)
        if not math.isfinite(hold_secs) or hold_secs < 0:
            raise errors.InvalidArgument(
                f"hold_secs {hold_secs} is not valid; give 0 (the longest, [controller] heartbeat_timeout_secs = "
                f"{longest:g}) or a positive number of seconds"
            )
        needed = wal.OP_LEVELS["node_dispatch_hold"]
        level = self.read(lambda s: s.wal_level)
        if level < needed:
            raise errors.Conflict(
                f"holding dispatch to a restarting agent needs WAL level {needed}, the cluster runs level {level}; "
                f"restart agents in place one at a time until every controller runs this release and the level is "
                f"raised (spur cluster wal-level {needed}, the rolling upgrade's last step)"
            )
        now = self.clock()
        self.write("node_dispatch_hold", name=name, until=now + min(hold_secs or longest, longest), time=now)
        return self.get_node(name)

    def get_node(self, name: str) -> dict[str, Any]:
        node = self.read(lambda s: _copy_node(s, name, self.partitions))
        if node is None:
            raise errors.NotFound(f"node {name!r} does not exist")
        return node

    def list_nodes(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        def collect(s: ClusterState) -> list[dict[str, Any]]:
            wanted = names or sorted(s.nodes)
            return [n for n in (_copy_node(s, name, self.partitions) for name in wanted) if n is not None]

        return self.read(collect)

    # -------------------------------------------------------------- jobs

    def _check_text(
        self, what: str, value: str, limit: int = joblimits.MAX_FIELD_CHARS, one_line: bool = False
    ) -> None:
        if len(value) > limit:
            raise errors.InvalidArgument(f"{what} is {len(value)} characters long; the limit is {limit}")
        if "\x00" in value:
            raise errors.InvalidArgument(f"{what} contains a NUL character")
        char = joblimits.control_character(value) if one_line else None
        if char:  # a newline in a reason would forge a row of sinfo -R
            raise errors.InvalidArgument(f"{what} contains a control character ({char}); use plain text")

    def validate_spec(self, spec: dict[str, Any], submitting: bool = True) -> dict[str, Any]:
        if not spec.get("script", "").strip():
            raise errors.InvalidArgument("the job has no script; pass a batch script or --wrap 'command'")
        if len(spec["script"].encode()) > joblimits.MAX_SCRIPT_BYTES:
            raise errors.InvalidArgument(f"the script is larger than {joblimits.MAX_SCRIPT_BYTES} bytes")
        for key in ("name", "user", "work_dir", "stdout_path", "stderr_path", "partition", "account"):
            self._check_text(key, spec.get(key, ""))
        for key in joblimits.ONE_LINE_FIELDS:  # a newline in a listed field would forge a row of squeue
            char = joblimits.control_character(spec.get(key, ""))
            if char:
                raise errors.InvalidArgument(f"the job's {key} contains a control character ({char}); use plain text")
        counts = ("nodes", "tasks", "cpus_per_task")
        for key in counts:  # as given: normalize derives counts from them and must not start from a negative one
            if spec.get(key, 0) < 0:
                raise errors.InvalidArgument(_count_out_of_range(key, spec[key]))
        problem = placement.normalize(spec)  # node and task counts from --ntasks-per-node and -w, option forms
        if problem:
            raise errors.InvalidArgument(problem)
        for key in counts:
            if spec.get(key, 0) == 0:
                spec[key] = 1
            if spec[key] < 1 or spec[key] > 1_000_000:
                raise errors.InvalidArgument(_count_out_of_range(key, spec[key]))
        if spec.get("memory_mb", 0) < 0:
            raise errors.InvalidArgument(f"memory {spec['memory_mb']} MB is negative; use 0 for no limit")
        limit = spec.get("time_limit_secs", 0)
        if limit < 0:
            raise errors.InvalidArgument(f"time limit {limit} s is negative; use 0 for no limit")
        if limit > MAX_TIME_LIMIT_SECS:
            raise errors.InvalidArgument(f"time limit {limit} s is over a year; use 0 for no limit")
        if spec.get("uid", 0) < 0 or spec.get("gid", 0) < 0:
            raise errors.InvalidArgument("uid and gid must not be negative")
        if not spec.get("user"):
            raise errors.InvalidArgument("the job names no user")
        work_dir = spec.get("work_dir") or ""
        if not work_dir.startswith("/"):
            raise errors.InvalidArgument(f"work_dir {work_dir!r} must be an absolute path")
        env = spec.get("environment") or {}
        problem = joblimits.environment_problem(env)
        if problem:
            raise errors.InvalidArgument(problem)
        for k, v in env.items():
            if not k or "=" in k or "\x00" in k or "\x00" in v:
                raise errors.InvalidArgument(f"environment variable {k!r} is not valid")
        self._resolve_partition(spec, submitting)
        if submitting:
            self._resolve_association(spec)
        if not spec.get("cluster_name"):  # SLURM_CLUSTER_NAME in the job's environment
            spec["cluster_name"] = self.read(lambda s: s.cluster_name)
        self._check_fit(spec)
        self._check_queue_options(spec)
        return spec

    def _resolve_partition(self, spec: dict[str, Any], submitting: bool) -> None:
        """The job's partition as Slurm resolves it: -p names one that exists; without -p the default one, written
        into the spec (squeue and sacct show it). At submit a job without -t gets the partition's DefaultTime, else
        its MaxTime; a DRAIN or INACTIVE partition takes no new job; [scheduler] enforce_part_limits ANY or ALL
        refuses a job over the partition's limits, where NO queues it (partitions.limits_reason: why it waits)."""
        name = spec.get("partition") or ""
        if "," in name:
            raise errors.InvalidArgument(
                f"--partition={name}: a list of partitions is not supported; name one partition (sinfo lists them)"
            )
        listing = self.read(lambda s: {p.name: p for p in self.partitions.listing(s.nodes)})
        if not name:
            part = next((p for p in listing.values() if p.is_default), None)
            if part is None:
                raise errors.SlurmRefusal(
                    "no -p given and no partition is the default; pass -p NAME (sinfo lists them) or set "
                    "default = true on one [partitions.NAME] table",
                    partitions.SLURM_NO_DEFAULT,
                )
            spec["partition"] = part.name
        else:
            part = listing.get(name)
            if part is None:  # Slurm's own words, to the byte (the capture 174-sbatch-invalid-partition)
                raise errors.SlurmRefusal(f"invalid partition specified: {name}", partitions.SLURM_INVALID_PARTITION)
        if not submitting:
            return
        if part.state in (partitions.DRAIN, partitions.INACTIVE):
            raise errors.SlurmRefusal(
                f"partition {part.name} is {part.state}: it takes no new jobs; choose another partition with -p",
                partitions.SLURM_NOT_AVAILABLE,
            )
        if not spec.get("time_limit_secs"):
            spec["time_limit_secs"] = part.job_time_limit
        reason = partitions.limits_reason(part, spec) if self.enforce_part_limits != "NO" else None
        if reason == model.REASON_PARTITION_NODE_LIMIT:
            most = f", at most {part.max_nodes}" if part.max_nodes else ""
            raise errors.SlurmRefusal(
                f"the job asks for {placement.node_count(spec)} nodes; partition {part.name} has {len(part.nodes)}"
                f"{most}, at least {part.min_nodes or 1} (enforce_part_limits = {self.enforce_part_limits})",
                partitions.SLURM_NODE_COUNT,
            )
        if reason == model.REASON_PARTITION_TIME_LIMIT:
            raise errors.SlurmRefusal(
                f"the job's time limit is over partition {part.name}'s MaxTime of {part.max_time_secs // 60} minutes "
                f"(enforce_part_limits = {self.enforce_part_limits}); ask for less with -t",
                partitions.SLURM_TIME_LIMIT,
            )

    def _resolve_association(self, spec: dict[str, Any]) -> None:
        """The job's account and QOS from the association store (WAL level 5 on), as slurmctld fills them in:
        the user's default account, the association's default QOS; [accounting] enforce refuses what it must
        (associations.resolve_job). Before level 5 a job keeps what it named."""
        self._check_text("qos", spec.get("qos", ""), 64, one_line=True)

        def resolve(s: ClusterState) -> tuple[str, str] | None:
            if s.assoc is None:
                return None
            return associations.resolve_job(
                s.assoc, spec["user"], spec.get("account", ""), spec["partition"], spec.get("qos", ""), self.enforce
            )

        try:
            resolved = self.read(resolve)
        except associations.Refusal as exc:
            raise errors.SlurmRefusal(str(exc), exc.slurm_error) from None
        if resolved is not None:
            spec["account"], spec["qos"] = resolved

    def list_partitions(self, names: list[str] | None = None) -> list[partitions.Partition]:
        """ListPartitions: every partition (or those named, in the order they are configured)."""
        listing = self.read(lambda s: self.partitions.listing(s.nodes))
        return [p for p in listing if not names or p.name in names]

    def _check_queue_options(self, spec: dict[str, Any], job_id: int = 0) -> None:
        """Arrays, dependencies, holds, times, nice and requeue of a job to be (or already) submitted."""
        used = [option for key, option in LEVEL3_OPTIONS if spec.get(key)]
        if used and self.read(lambda s: s.wal_level) < 3:
            raise errors.Conflict(f"{used[0]} needs WAL level 3; finish the upgrade (spur cluster wal-level 3)")
        try:
            if spec.get("array"):
                parse_array(spec["array"])
            if spec.get("dependency"):
                self._check_dependency(spec["dependency"], job_id)
        except InvalidValue as exc:
            raise errors.InvalidArgument(str(exc)) from None
        for key, option in (("begin_time", "--begin"), ("deadline", "--deadline")):
            value = spec.get(key) or 0.0
            if not 0.0 <= value <= MAX_EPOCH_SECS:  # also refuses NaN
                raise errors.InvalidArgument(f"{option} {value} is not a time Spur can keep; give a date before 9999")
        if spec.get("deadline") and not job_id and spec["deadline"] <= self.clock():
            raise errors.InvalidArgument("--deadline is in the past; give a later time (or no deadline)")
        if spec.get("deadline") and spec.get("begin_time") and spec["deadline"] <= spec["begin_time"]:
            raise errors.InvalidArgument("--deadline is not after --begin; the job could never start in time")
        if not spec.get("requeue"):  # kept with the job: every member then judges a node failure alike
            spec["requeue"] = 1 if self.requeue_default else 2
        if spec.get("requeue", 0) not in (0, 1, 2):
            raise errors.InvalidArgument(
                f"requeue={spec['requeue']} is not 0 (the default), 1 (--requeue) or 2 (--no-requeue)"
            )
        if abs(spec.get("nice", 0)) > MAX_NICE:
            raise errors.InvalidArgument(f"--nice={spec['nice']} is out of range; use -{MAX_NICE} to {MAX_NICE}")

    def _check_dependency(self, text: str, job_id: int) -> None:
        """The dependency parses, and names jobs that exist or existed (a finished job purged since counts as
        done, as in Slurm); never the job itself."""
        self._check_text("dependency", text, one_line=True)
        _any, terms = parse_dependency(text)
        next_id = self.read(lambda s: s.next_job_id)
        for kind, dep_id, _minutes in terms:
            if kind == "singleton":
                continue
            if dep_id == job_id:
                raise errors.InvalidArgument(f"--dependency={text!r}: job {job_id} cannot depend on itself")
            if dep_id >= next_id:
                raise errors.InvalidArgument(
                    f"--dependency={text!r}: job {dep_id} does not exist; name a job submitted before"
                )
        if job_id:  # an update: a chain back to the job itself would wait for ever (Slurm refuses it too)
            loop = self.read(lambda s: eligibility.dependency_path(s, [t[1] for t in terms if t[1]], job_id))
            if loop:
                chain = " -> ".join(str(j) for j in [job_id, *loop])
                raise errors.InvalidArgument(f"--dependency={text!r} makes a circle ({chain}); no job could start")

    def _check_fit(self, spec: dict[str, Any]) -> None:
        """A job that could never start (a named node that does not exist, more CPUs, memory or gres than any
        node has, features no node has) is refused now with one line instead of pending forever."""
        option = placement.uses_level3(spec)
        if option and self.read(lambda s: s.wal_level) < 3:
            raise errors.Conflict(f"{option} needs WAL level 3; finish the upgrade (spur cluster wal-level 3)")
        problem = self.read(lambda s: placement.never_fits(s, spec, self.partitions))
        if problem:
            raise errors.InvalidArgument(problem)

    def submit(self, spec: dict[str, Any], key: str, submitter_uid: int | None = None) -> tuple[int, bool]:
        """Submit a job; a key this submitter (default: the job's uid) used before answers with that job."""
        earlier, fields = self._submission(spec, key, submitter_uid)
        if earlier is not None:
            return earlier, True
        result = self.write("job_submit", **fields)
        return result["job_id"], result["duplicate"]

    async def submit_async(
        self, spec: dict[str, Any], key: str, submitter_uid: int | None = None
    ) -> tuple[int, bool]:
        """submit() for a coroutine on the API server's event loop."""
        earlier, fields = self._submission(spec, key, submitter_uid)
        if earlier is not None:
            return earlier, True
        result = await self.write_async("job_submit", **fields)
        return result["job_id"], result["duplicate"]

    def _submission(
        self, spec: dict[str, Any], key: str, submitter_uid: int | None
    ) -> tuple[int | None, dict[str, Any]]:
        """(the job this key already submitted, or None; the job_submit record's fields), after every check."""
        self._check_text("idempotency_key", key, 128)
        time_given = bool(spec.get("time_limit_secs"))
        spec = self.validate_spec(spec)
        self._check_limits(spec, time_given)
        uid = spec.get("uid", 0) if submitter_uid is None else submitter_uid
        if key:
            earlier = self.read(lambda s: s.find_submission(uid, key))
            if earlier is not None:
                return earlier, {}
        # The record carries the scoped key, so every member (of any release) indexes it the same way.
        scoped = submission_key(uid, key) if key else ""
        now = self.clock()
        first: dict[str, int] = {}
        if self.priority.multifactor:  # the job's first multifactor priority travels in its record (state.py)
            value = self.read(
                lambda s: priority.new_job_priority(s, spec, now, self.partitions, self.priority)
                if s.wal_level >= 5
                else 0
            )
            first = {"priority": value} if value else {}
        return None, dict(spec=spec, key=scoped, time=now, **first)

    # -------------------------------------------------------------- priorities and shares (sprio, sshare)

    def list_priorities(
        self, job_ids: list[int], users: list[str], visible: Callable[[dict[str, Any]], bool] | None = None
    ) -> list[dict[str, Any]] | None:
        """sprio: each pending job with a priority (a held job's is 0: not listed, as Slurm's), its priority and
        its factors worked out now (priority.factors), by job id. None under priority_type basic, which has no
        factors (sprio then says what Slurm's says of priority/basic)."""
        if not self.priority.multifactor:
            return None
        now, wanted_ids, wanted_users = self.clock(), set(job_ids), set(users)

        def collect(s: ClusterState) -> list[dict[str, Any]]:
            ctx = priority.Context(s, now, self.partitions, self.priority)
            rows = []
            ids = sorted(wanted_ids) if wanted_ids else sorted(s.jobs)
            for job_id in ids:
                job = s.jobs.get(job_id)
                if job is None or job["state"] != PENDING or not job.get("priority"):
                    continue
                spec = job["spec"]
                if (wanted_users and spec.get("user") not in wanted_users) or (visible and not visible(spec)):
                    continue
                key = priority.job_assoc_key(s.assoc, spec)
                rows.append(
                    {
                        "job_id": job_id,
                        "user": spec.get("user", ""),
                        "account": spec.get("account", ""),
                        "partition": placement.job_partition(spec),
                        "qos": priority.job_qos(s.assoc, spec, key),
                        "priority": int(job["priority"]),
                        "nice": int(spec.get("nice") or 0),
                        "factors": priority.factors(job, ctx),
                    }
                )
            return rows

        return self.read(collect)

    def list_shares(
        self, users: list[str], accounts: list[str], all_users: bool, visible: Callable | None = None
    ) -> list[dict[str, Any]]:
        """sshare: the association tree's rows (fairshare.shares) in Slurm's order. Without -a and -u only the
        accounts and the caller's own associations (`users` then holds the caller), as sshare shows them; -A
        keeps the named accounts' subtrees."""
        now = self.clock()

        def collect(s: ClusterState) -> list[dict[str, Any]]:
            if s.assoc is None:
                return []
            rows = sorted(fairshare.shares(s.assoc, now).values(), key=lambda r: r["order"])
            return [dict(r) for r in rows]

        rows = self.read(collect)
        if accounts:
            unknown = sorted(set(accounts) - {r["account"] for r in rows})
            if len(unknown) == len(set(accounts)):
                return []
            rows = [r for r in rows if r["account"] in accounts]
        if not all_users:
            rows = [r for r in rows if not r["user"] or r["user"] in users]
        if visible is not None:
            rows = [r for r in rows if visible(r)]
        return rows

    def _check_limits(self, spec: dict[str, Any], time_given: bool) -> None:
        """Association and QOS limits at submit ([accounting] enforce "limits", controller/limits.py): a job without
        -t gets its MaxWall as its time limit (the partition's default when MaxWall is over its MaxTime), as Slurm's
        does; a submission over GrpSubmitJobs, MaxSubmitJobs or MaxSubmitJobsPerUser (or, under a QOS with
        DenyOnLimit, over any limit) is refused with Slurm's words."""
        jobs = len(parse_array(spec["array"])[0]) if spec.get("array") else 1

        def check(s: ClusterState) -> tuple[str, str] | None:
            wall = None if time_given else limits.max_wall(s, spec)
            if wall is not None:
                part = next((p for p in self.partitions.listing(s.nodes) if p.name == spec["partition"]), None)
                if part is None or not part.max_time_secs or wall <= part.max_time_secs:
                    spec["time_limit_secs"] = wall
            return limits.submit_problem(s, spec, jobs, self.submit_counts)

        problem = self.read(check)
        if problem is not None:
            raise errors.SlurmRefusal(problem[1], limits.SLURM_ACCOUNTING_POLICY)

    def shown_reason(self, s: ClusterState, job: dict[str, Any], now: float, memo: dict) -> dict[str, Any]:
        """The job as squeue shows it: a pending job's reason is worked out now (a dependency, a begin time, a
        throttle), never written; under the state lock. Returns the record itself when nothing differs."""
        if job["state"] != PENDING:
            return job
        reason = eligibility.waiting_reason(s, job, now, memo)
        if reason is None and job["reason"] == NO_REASON:  # may its partition run it, is there room (placement.py)?
            reason = partitions.waiting_reason(self.partitions, s, job["spec"], memo)
            reason = reason or placement.queue_reason(s, job, memo, self.partitions)
        reason = reason or job["reason"]
        return job if reason == job["reason"] else {**job, "reason": reason}

    def shown_in_plan_order(
        self, s: ClusterState, jobs: list[dict[str, Any]], now: float, memo: dict, whole_queue: bool
    ) -> dict[int, dict[str, Any]]:
        """{job id: the job as squeue shows it} for the pending ones of `jobs`, their reasons worked out in the
        planner's order: the first job of a partition that does not fit says why, those of lower priority behind
        it say Priority (placement.queue_reason). Unless `jobs` holds every pending job of their partitions
        (whole_queue), the pending jobs of higher priority there are looked at too (squeue -j N says Priority as
        plain squeue does)."""
        pending = [j for j in jobs if j["state"] == PENDING]
        if not pending:
            return {}
        wanted = {j["job_id"] for j in pending}
        queues: dict[str, list[tuple[tuple[int, int, int], int]]] = {}  # partition -> (order key, job id), a heap
        levels = self.plan_levels(s)  # the leader's order (under qos_priority, preemptors first)
        for j in pending:
            key = scheduler.order_key(j, levels)
            queues.setdefault(placement.job_partition(j["spec"]), []).append((key, j["job_id"]))
        asked = {part: len(entries) for part, entries in queues.items()}  # the wanted jobs of each partition
        if not whole_queue:
            last = {part: max(entries)[0] for part, entries in queues.items()}
            for j in s.jobs.values():
                if j["state"] != PENDING or j["job_id"] in wanted:
                    continue
                part = placement.job_partition(j["spec"])
                if part in last and (key := scheduler.order_key(j, levels)) < last[part]:
                    queues[part].append((key, j["job_id"]))
        shown: dict[int, dict[str, Any]] = {}
        blocked = memo.setdefault("placement_blocked", set())  # placement.queue_reason's, shared
        for part, queue in queues.items():
            heapq.heapify(queue)
            left = asked[part]
            while queue and left:
                if part in blocked:  # every later job of the partition says Priority: no need to go in order
                    for _later, other in queue:  # (nor to pop the 10,000 of a long queue off the heap one by one)
                        if other in wanted:
                            shown[other] = self.shown_reason(s, s.jobs[other], now, memo)
                    break
                _key, job_id = heapq.heappop(queue)
                if job_id in wanted:
                    shown[job_id] = self.shown_reason(s, s.jobs[job_id], now, memo)
                    left -= 1
                else:
                    self.shown_reason(s, s.jobs[job_id], now, memo)  # may block the partition for those behind
        return shown

    def listed_reasons(self, s: ClusterState, now: float, memo: dict) -> dict[int, dict[str, Any]]:
        """shown_in_plan_order of every pending job, worked out once per state and kept while the clock crosses no
        time a reason depends on; under the state lock. squeue's listings in between (the whole queue, or -u, -j:
        a job's reason does not depend on what was asked, see shown_in_plan_order) read it instead of working out
        10,000 reasons each (half of a listing's time). The state changes only by applying a record (s.applied
        counts them) or by a snapshot (another ClusterState); the configuration by SIGHUP (set_partitions); the
        clock matters at a pending job's begin time and deadline (eligibility.waiting_reason), and, to the second,
        for a dependency with +minutes."""
        key = (s.applied, self.preempt_type, limits.enforced())
        cached = self._listed
        if (
            cached is not None
            and cached[0] is s
            and cached[1] is self.partitions
            and cached[2] == key
            and cached[3] <= now < cached[4]
        ):
            return cached[5]
        pending = [j for j in s.jobs.values() if j["state"] == PENDING]
        shown = self.shown_in_plan_order(s, pending, now, memo, whole_queue=True)
        until = math.inf
        for j in pending:
            spec = j["spec"]
            for moment in (j.get("eligible_time") or 0.0, spec.get("deadline") or 0.0):
                if now < moment < until:
                    until = moment
            if "+" in (spec.get("dependency") or ""):  # after:N+minutes: N's start time plus the minutes
                until = min(until, math.floor(now) + 1)
        self._listed = (s, self.partitions, key, now, until, shown)
        return shown

    def get_job(self, job_id: int) -> dict[str, Any]:
        _check_job_id(job_id)
        now = self.clock()

        def one(s: ClusterState) -> dict[str, Any] | None:
            if job_id not in s.jobs:
                self.require_leader_for_unapplied(s, [job_id])
                return None
            job = s.jobs[job_id]
            return copy_job(self.shown_in_plan_order(s, [job], now, {}, whole_queue=False).get(job_id, job))

        job = self.read(one)
        if job is None:
            raise missing_job(job_id)
        return job

    def require_leader_for_unapplied(self, s: ClusterState, job_ids) -> None:
        """On a follower, a job id it does not hold and has not given out yet may be a job the leader just took
        (a follower applies a commit with the leader's next message): the leader answers for it instead, so that
        `sbatch` followed by `scontrol show job` never says "Invalid job id" for the job just submitted."""
        if any(i >= s.next_job_id for i in job_ids) and not self.raft.is_leader():
            self.require_leader()

    def list_jobs(
        self,
        job_ids=(),
        users=(),
        states=(),
        partitions=(),
        names=(),
        include_finished=False,
        view: Callable[[dict[str, Any]], Any] | None = None,
        visible: Callable[[dict[str, Any]], bool] | None = None,
        finish: Callable[[list[Any]], Any] | None = None,
    ):
        """The selected jobs, each as view(job), which runs under the state lock (by default a copy); `visible`
        (a test of a job's spec: [auth] private_data) leaves out the jobs the caller may not see. With `finish`,
        the answer is finish(views), built after the lock is released; the answer to a listing of the whole queue
        is kept and given again while the listing would be the same (listed_reasons: no record applied, no begin
        time or deadline reached), so that squeue run again and again does not look at each of 10,000 jobs again."""
        view = view or copy_job
        ids, users, states = set(job_ids), set(users), set(states)
        partitions, names = set(partitions), set(names)
        whole = finish is not None and not (ids or users or states or partitions or names or visible)

        now = self.clock()

        def collect(s: ClusterState) -> tuple[list[Any] | None, tuple | None]:
            memo: dict = {}
            shown = self.listed_reasons(s, now, memo)
            key = (self._listed, view, include_finished) if whole else None
            kept = self._whole_listing
            if key is not None and kept is not None and kept[0][0] is key[0] and kept[0][1:] == key[1:]:
                return None, kept
            if ids:
                self.require_leader_for_unapplied(s, [i for i in ids if i not in s.jobs])
                source = [s.jobs[i] for i in sorted({j["job_id"] for i in ids for j in _records_of(s, i)})]
            elif users:
                source = [s.jobs[i] for i in s.user_job_ids(users)]
            else:
                source = s.jobs.values()
            chosen = []
            for j in source:
                if not include_finished and not ids and j["state"] in FINISHED_STATES and j["state"] not in states:
                    continue
                if users and j["spec"].get("user") not in users:
                    continue
                if states and shown_state(j) not in states:
                    continue
                if partitions and j["spec"].get("partition") not in partitions:
                    continue
                if names and j["spec"].get("name") not in names:
                    continue
                if visible is not None and not visible(j["spec"]):
                    continue
                chosen.append(j)
            return [view(shown.get(j["job_id"], j)) for j in chosen], key

        views, key = self.read(collect)
        if views is None:
            return key[1]  # what was kept
        if finish is None:
            return views
        answer = finish(views)
        if key is not None:
            self._whole_listing = (key, answer)  # one assignment: a listing running beside it sees both or neither
        return answer

    def suspend(self, job_id: int, resume: bool) -> dict[str, Any]:
        """scontrol suspend / resume (WAL level 4): the record changes; the leader then stops or continues the
        job's processes ({"nodes", "attempt"} of the answer)."""
        _check_job_id(job_id)
        self.require_leader()  # the leader signals the job's nodes right after the write
        return self.write("job_resume" if resume else "job_suspend", job_id=job_id, time=self.clock())

    def cancel(self, job_id: int, signal: int, by: str, array_tasks: str = "", by_uid: int = -1) -> dict[str, Any]:
        """Cancel (signal 0) or signal a job; an array's id means all its records, array_tasks some tasks. by_uid is
        the caller's authenticated uid (-1: not a user), recorded as who cancelled it; `by` is the name it sent."""
        _check_job_id(job_id)
        if not 0 <= signal <= 64:
            raise errors.InvalidArgument(f"signal {signal} is not a valid signal number (1-64, 0 to cancel)")
        is_array = self.read(lambda s: _is_array(s, job_id))
        if array_tasks and not is_array:
            raise errors.InvalidArgument(f"job {job_id} is not an array; cancel it without task ids")
        if is_array:
            return self._cancel_array(job_id, signal, by, array_tasks, by_uid)
        if signal:
            job = self.get_job(job_id)
            if job["state"] in FINISHED_STATES:
                return {"already_finished": True, "state": job["state"], "signal_agent": False}
            if job["state"] != RUNNING:
                raise errors.Conflict(f"job {job_id} is {job['state']}; only running jobs can be signalled")
            return {
                "already_finished": False,
                "state": RUNNING,
                "signal_agent": True,
                "nodes": job["nodes"],
                "attempt": job["attempt"],
                "signal": signal,
            }
        now = self.clock()
        reason = self._reason_now(job_id, now)
        return self.write("job_cancel", job_id=job_id, by=by, by_uid=by_uid, time=now, reason=reason)

    def _reason_now(self, job_id: int, now: float) -> str:
        """The reason squeue shows for a job at `now` (a pending job's is worked out, never stored): a job cancelled
        while it waits keeps it, as Slurm's does (JobHeldUser, Dependency, Priority...)."""

        def reason(s: ClusterState) -> str:
            job = s.jobs.get(job_id)
            if job is None:
                return NO_REASON
            return self.shown_in_plan_order(s, [job], now, {}, whole_queue=False).get(job_id, job)["reason"]

        return self.read(reason)

    def complete(
        self,
        job_id: int,
        attempt: int,
        node: str,
        state: str,
        exit_code: int,
        signal: int,
        end_time: float,
        reason: str = "",
    ) -> bool:
        self.require_leader()
        _check_job_id(job_id)
        if state not in model.REPORTED_END_STATES:
            raise errors.InvalidArgument(f"{state} is not an end state of a job")
        self._check_text("reason", reason, one_line=True)
        if state == model.OUT_OF_MEMORY and self.read(lambda s: s.wal_level) < 3:
            state = model.FAILED  # a release before level 3 does not know the state; the reason still says OOM
        result = self.write(
            "job_end",
            job_id=job_id,
            attempt=attempt,
            state=state,
            exit_code=exit_code,
            signal=signal,
            time=end_time or self.clock(),
            reason=reason,
        )
        return bool(result.get("accepted"))

    def hold(self, job_id: int, held: bool, by_admin: bool = True) -> None:
        """scontrol hold / release. A user's hold is JobHeldUser; an administrator's JobHeldAdmin, which only
        an administrator releases."""
        _check_job_id(job_id)
        if held:
            self.write("job_hold", job_id=job_id, reason=REASON_HELD_ADMIN if by_admin else REASON_HELD_USER)
            return
        job = self.get_job(job_id)
        if not by_admin and job.get("held") and job.get("reason") == REASON_HELD_ADMIN:
            raise errors.PermissionDenied(
                f"job {job_id} was held by an administrator (JobHeldAdmin); only an administrator may release it"
            )
        self.write("job_release", job_id=job_id)

    # -------------------------------------------------------------- arrays, requeue, update (WAL level 3)

    def _cancel_array(self, array_id: int, signal: int, by: str, array_tasks: str, by_uid: int = -1) -> dict[str, Any]:
        try:
            tasks = parse_array_ranges(array_tasks, "array_tasks") if array_tasks else []
        except InvalidValue as exc:
            raise errors.InvalidArgument(str(exc)) from None
        if signal:  # scancel -s: the running tasks named (or all of them) get the signal; nothing is written
            wanted = set(tasks)

            def running(s: ClusterState) -> list[list[Any]]:
                return [
                    [j["job_id"], j["attempt"], list(j["nodes"])]
                    for j in s.array_records(array_id)
                    if j["state"] == RUNNING and (not wanted or j.get("array_task_id") in wanted)
                ]

            targets = self.read(running)
            return {"already_finished": not targets, "state": RUNNING, "signal": targets}
        now = self.clock()
        reason = self._reason_now(array_id, now)  # what the array's waiting tasks show, kept when they are cancelled
        result = self.write(
            "job_array_cancel", array_job_id=array_id, tasks=tasks, by=by, by_uid=by_uid, time=now, reason=reason
        )
        return {**result, "already_finished": not result["cancelled"] and not result["signal"]}

    def requeue(self, job_id: int, hold: bool) -> list[list[Any]]:
        """scontrol requeue / requeuehold: a running or finished batch job goes back to PENDING; an array's id
        means each of its records that started (its pending tasks stay as they are). The answer lists the runs
        that were stopped, [[job id, attempt, nodes], ...], for the leader to signal."""
        _check_job_id(job_id)

        def started(s: ClusterState) -> list[int] | None:
            if not _is_array(s, job_id):
                return None
            return [j["job_id"] for j in s.array_records(job_id) if j["state"] != PENDING]

        ids = self.read(started)
        if ids == []:
            raise errors.Conflict(f"job {job_id} is an array none of whose tasks has started; nothing to requeue")
        stopped = []
        for one in ids or [job_id]:
            result = self.write("job_requeue_user", job_id=one, hold=hold, time=self.clock())
            if result.get("signal_agent"):
                stopped.append([one, result["attempt"], result["nodes"]])
        return stopped

    def update_job(self, job_id: int, fields: list[str], values: dict[str, Any], by_admin: bool) -> dict[str, Any]:
        """scontrol update JobId=N: the named spec fields of a pending job take the values given; of a running
        job only the time limit (the owner may lower it, only an administrator raise it)."""
        job = self.get_job(job_id)
        if not fields:
            raise errors.InvalidArgument("the update names no field to change")
        unknown = [f for f in fields if f not in UPDATABLE_FIELDS]
        if unknown:
            raise errors.InvalidArgument(
                f"scontrol update cannot change {', '.join(unknown)}; it changes {', '.join(UPDATABLE_FIELDS)}"
            )
        if job["state"] == RUNNING and set(fields) != {"time_limit_secs"}:
            raise errors.Conflict(f"job {job_id} is RUNNING; only its time limit (TimeLimit) can change now")
        if job["state"] not in (PENDING, RUNNING):
            raise errors.Conflict(f"job {job_id} is {job['state']}; only pending jobs can be updated")
        spec = dict(job["spec"])
        old_limit, new_limit = spec.get("time_limit_secs") or 0, values.get("time_limit_secs") or 0
        raises_limit = old_limit != 0 and (new_limit == 0 or new_limit > old_limit)
        if "time_limit_secs" in fields and raises_limit and not by_admin:
            raise errors.PermissionDenied(
                f"only an administrator may raise the time limit of job {job_id}; its owner may lower it"
            )
        if "nice" in fields and values.get("nice", 0) < 0 and not by_admin:
            raise errors.PermissionDenied("only an administrator may set a negative nice (a higher priority)")
        for f in fields:
            spec[f] = values.get(f)
        if job["state"] == PENDING:
            spec = self.validate_spec(spec, submitting=False)
            self._check_queue_options(spec, job_id)
        elif not 0 <= new_limit <= MAX_TIME_LIMIT_SECS:
            raise errors.InvalidArgument(f"time limit {new_limit} s is out of range; use 0 for no limit")
        changes = {f: spec[f] for f in fields}
        return self.write("job_update", job_id=job_id, changes=changes, time=self.clock())


_WRITE_FAILURES = (wal.WalLevelError, NoLeaderError, UnknownOutcomeError, StalledError, DiskFullError)


def _write_refusal(exc: Exception) -> errors.ControllerError:
    """What a write that did not commit (one of _WRITE_FAILURES) answers the client."""
    if isinstance(exc, wal.WalLevelError):
        return errors.Conflict(str(exc))
    if isinstance(exc, UnknownOutcomeError):
        return errors.Unavailable(f"{exc}; retry (a submission retried with the same key is not duplicated)")
    return errors.Unavailable(str(exc))


def _written(result: dict[str, Any]) -> dict[str, Any]:
    """A committed record's result, or the refusal its op answered with (raised)."""
    if result.get("ok"):
        return result
    code, message = result.get("code"), result.get("message", "refused")
    if code == "not_found":
        raise errors.NotFound(message)
    if code == "invalid":
        raise errors.InvalidArgument(message)
    if code == "stalled":
        raise errors.Unavailable(message)
    raise errors.Conflict(message)


def _active_jobs_of(s: ClusterState, deletes: list[dict[str, Any]]) -> list[int]:
    """The pending and running jobs (ids, in order) whose association or QOS is among `deletes`."""
    pairs = {associations.split_key(d["key"])[:2] for d in deletes if d["kind"] == "assoc"}
    qos = {d["key"] for d in deletes if d["kind"] == "qos"}
    if not pairs and not qos:
        return []
    return sorted(
        j["job_id"]
        for j in s.jobs.values()
        if j["state"] not in FINISHED_STATES
        and (
            (j["spec"].get("account", ""), j["spec"].get("user", "")) in pairs
            or (j["spec"].get("account", ""), "") in pairs
            or j["spec"].get("qos") in qos
        )
    )


def _refuse_below_store_level(level: int) -> None:
    """The association store exists from WAL level 5 on: before it, the usual line saying how to get there."""
    try:
        wal.check_level(wal.make_record("assoc_apply"), level)
    except wal.WalLevelError as exc:
        raise errors.Conflict(str(exc)) from None


def _is_array(s: ClusterState, job_id: int) -> bool:
    job = s.jobs.get(job_id)
    return job_id in s.array_tasks or (job is not None and job.get("array_job_id") == job_id)


def _records_of(s: ClusterState, job_id: int) -> list[dict[str, Any]]:
    """What squeue -j N lists: the job, or every record of array N."""
    if _is_array(s, job_id):
        return s.array_records(job_id)
    return [s.jobs[job_id]] if job_id in s.jobs else []


def _check_job_id(job_id: int) -> None:
    if not 0 < job_id <= MAX_JOB_ID:
        raise errors.InvalidArgument(f"job id {job_id} is out of range; job ids are positive")


def _count_out_of_range(key: str, value: int) -> str:
    return f"{key}={value} is out of range; use a number from 1 to 1000000"


def missing_job(job_id: int) -> errors.NotFound:
    """The answer for a job id the controllers do not hold, and for one the caller may not see ([auth] private_data
    "jobs"): Slurm answers both alike (Invalid job id specified)."""
    return errors.NotFound(f"job {job_id} does not exist (or finished long ago)")


def copy_job(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job record a reader may keep: its own spec and node list (the state machine changes the live one)."""
    if job is None:
        return None
    out = dict(job)
    out["spec"] = dict(job["spec"])
    out["nodes"] = list(job["nodes"])
    if "steps" in job:  # each step record is changed in place by step_end (controller/steps.py)
        out["steps"] = {step_id: dict(step) for step_id, step in job["steps"].items()}
    return out


def _copy_node(s: ClusterState, name: str, parts: partitions.PartitionTable | None = None) -> dict[str, Any] | None:
    node = s.nodes.get(name)
    if node is None:
        return None
    out = dict(node)
    out["jobs"] = list(node["jobs"])
    out["gres"], out["alloc_gres"] = dict(node.get("gres") or {}), dict(node.get("alloc_gres") or {})
    out["features"] = list(node.get("features") or [])
    out["state"] = s.node_state(node)
    out["reason"], out["reason_set_by"], out["reason_time"] = s.node_reason(node)
    out["partitions"] = list(parts.node_partitions(node)) if parts else [node["partition"]]  # every one, in order
    return out
