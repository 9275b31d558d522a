"""Controller operations in domain terms: validate, build a WAL record, commit it, map the result.

The gRPC servicers call these methods and nothing else; the leader's background duties (scheduler,
heartbeat timeouts) live in leader.py and use the same write path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from spur_hpc import joblimits
from spur_hpc.conf import Config
from spur_hpc.controller import errors, placement, wal
from spur_hpc.controller.raft import DiskFullError, NoLeaderError, SpurRaft, StalledError, UnknownOutcomeError
from spur_hpc.controller.state import ClusterState, submission_key
from spur_hpc.model import FINISHED_STATES, REASON_AGENT_STOPPED, REASON_DRAINED, RUNNING

log = logging.getLogger("spurctld.service")

MAX_JOB_ID = 2**63 - 1
# 30 days: a longer limit is almost always a unit mistake (Slurm's INFINITE is written as 0 here)
MAX_TIME_LIMIT_SECS = 365 * 24 * 3600


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
        self.on_heartbeat: Callable[[str, list[tuple[int, int]]], None] | None = None
        # Whether a node's agent still heartbeats (the leader's liveness); unset: every registered node is live.
        self.node_alive: Callable[[str], bool] | None = None

    # -------------------------------------------------------------- the write path

    def write(self, op: str, **fields: Any) -> dict[str, Any]:
        record = wal.make_record(op, **fields)
        try:
            result = self.raft.propose(record, self.timeout)
        except wal.WalLevelError as exc:
            raise errors.Conflict(str(exc)) from None
        except NoLeaderError as exc:
            raise errors.Unavailable(str(exc)) from None
        except UnknownOutcomeError as exc:
            raise errors.Unavailable(
                f"{exc}; retry (a submission retried with the same key is not duplicated)"
            ) from None
        except (StalledError, DiskFullError) as exc:
            raise errors.Unavailable(str(exc)) from None
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
    ) -> dict[str, Any]:
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

    def get_node(self, name: str) -> dict[str, Any]:
        node = self.read(lambda s: _copy_node(s, name))
        if node is None:
            raise errors.NotFound(f"node {name!r} does not exist")
        return node

    def list_nodes(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        def collect(s: ClusterState) -> list[dict[str, Any]]:
            wanted = names or sorted(s.nodes)
            return [n for n in (_copy_node(s, name) for name in wanted) if n is not None]

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

    def validate_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
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
        problem = placement.normalize(spec)  # node and task counts from --ntasks-per-node and -w, option forms
        if problem:
            raise errors.InvalidArgument(problem)
        for key, low in (("nodes", 1), ("tasks", 1), ("cpus_per_task", 1)):
            if spec.get(key, 0) == 0:
                spec[key] = 1
            if spec[key] < low or spec[key] > 1_000_000:
                raise errors.InvalidArgument(f"{key}={spec[key]} is out of range; use a number from {low} to 1000000")
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
        spec.setdefault("partition", "default")
        if not spec["partition"]:
            spec["partition"] = "default"
        self._check_fit(spec)
        return spec

    def _check_fit(self, spec: dict[str, Any]) -> None:
        """A job that could never start (a named node that does not exist, more CPUs, memory or gres than any
        node has, features no node has) is refused now with one line instead of pending forever."""
        option = placement.uses_level3(spec)
        if option and self.read(lambda s: s.wal_level) < 3:
            raise errors.Conflict(f"{option} needs WAL level 3; finish the upgrade (spur cluster wal-level 3)")
        problem = self.read(lambda s: placement.never_fits(s, spec))
        if problem:
            raise errors.InvalidArgument(problem)


    def submit(self, spec: dict[str, Any], key: str, submitter_uid: int | None = None) -> tuple[int, bool]:
        """Submit a job; a key this submitter (default: the job's uid) used before answers with that job."""
        self._check_text("idempotency_key", key, 128)
        spec = self.validate_spec(spec)
        uid = spec.get("uid", 0) if submitter_uid is None else submitter_uid
        if key:
            earlier = self.read(lambda s: s.find_submission(uid, key))
            if earlier is not None:
                return earlier, True
        # The record carries the scoped key, so every member (of any release) indexes it the same way.
        scoped = submission_key(uid, key) if key else ""
        result = self.write("job_submit", spec=spec, key=scoped, time=self.clock())
        return result["job_id"], result["duplicate"]

    def get_job(self, job_id: int) -> dict[str, Any]:
        _check_job_id(job_id)
        job = self.read(lambda s: copy_job(s.jobs.get(job_id)))
        if job is None:
            raise errors.NotFound(f"job {job_id} does not exist (or finished long ago)")
        return job

    def list_jobs(self, job_ids=(), users=(), states=(), partitions=(), names=(), include_finished=False,
                  view: Callable[[dict[str, Any]], Any] | None = None):
        """The selected jobs, each as view(job), which runs under the state lock (by default a copy)."""
        view = view or copy_job
        ids, users, states = set(job_ids), set(users), set(states)
        partitions, names = set(partitions), set(names)

        def collect(s: ClusterState) -> list[dict[str, Any]]:
            if ids:
                source = [s.jobs[i] for i in sorted(ids) if i in s.jobs]
            elif users:
                source = [s.jobs[i] for i in s.user_job_ids(users)]
            else:
                source = s.jobs.values()
            out = []
            for j in source:
                if not include_finished and not ids and j["state"] in FINISHED_STATES and j["state"] not in states:
                    continue
                if users and j["spec"].get("user") not in users:
                    continue
                if states and j["state"] not in states:
                    continue
                if partitions and j["spec"].get("partition") not in partitions:
                    continue
                if names and j["spec"].get("name") not in names:
                    continue
                out.append(view(j))
            return out

        return self.read(collect)

    def cancel(self, job_id: int, signal: int, by: str) -> dict[str, Any]:
        _check_job_id(job_id)
        if not 0 <= signal <= 64:
            raise errors.InvalidArgument(f"signal {signal} is not a valid signal number (1-64, 0 to cancel)")
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
        return self.write("job_cancel", job_id=job_id, by=by, time=self.clock())

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
        if state not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            raise errors.InvalidArgument(f"{state} is not an end state of a job")
        self._check_text("reason", reason, one_line=True)
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

    def hold(self, job_id: int, held: bool) -> None:
        _check_job_id(job_id)
        self.write("job_hold" if held else "job_release", job_id=job_id)


def _check_job_id(job_id: int) -> None:
    if not 0 < job_id <= MAX_JOB_ID:
        raise errors.InvalidArgument(f"job id {job_id} is out of range; job ids are positive")


def copy_job(job: dict[str, Any] | None) -> dict[str, Any] | None:
    """A job record a reader may keep: its own spec and node list (the state machine changes the live one)."""
    if job is None:
        return None
    out = dict(job)
    out["spec"] = dict(job["spec"])
    out["nodes"] = list(job["nodes"])
    return out


def _copy_node(s: ClusterState, name: str) -> dict[str, Any] | None:
    node = s.nodes.get(name)
    if node is None:
        return None
    out = dict(node)
    out["jobs"] = list(node["jobs"])
    out["gres"], out["alloc_gres"] = dict(node.get("gres") or {}), dict(node.get("alloc_gres") or {})
    out["features"] = list(node.get("features") or [])
    out["state"] = s.node_state(node)
    out["reason"], out["reason_set_by"], out["reason_time"] = s.node_reason(node)
    return out
