"""The replicated state machine: nodes, jobs, membership, the job-id counter.

Pure and deterministic: no clocks, no I/O, no randomness. Every time and id arrives inside the record
(the proposer computed it). apply() never raises: a bad record answers with an error result, and a
record this code cannot read stalls the machine (it applies nothing more) so the daemon can stop this
member loudly while the rest of the cluster carries on.
"""

from __future__ import annotations

import copy
from typing import Any

from spur_hpc.controller import associations, fairshare, placement, priority, wal
from spur_hpc.controller.steps import StepOps

# Job and node states (names match slurm.proto's JobState and NodeState) and the groups: spur_hpc.model
from spur_hpc.model import (
    ALLOCATED,
    CANCELLED,
    COMPLETED,
    DOWN,
    DRAINED,
    DRAINING,
    FAILED,
    FINISHED_STATES,
    IDLE,
    MIXED,
    NO_REASON,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PENDING,
    PREEMPTED,
    REASON_AGENT_STOPPED,
    REASON_DRAINED,
    REASON_HELD_USER,
    REASON_NOT_RESPONDING,
    RUNNING,
    TIMEOUT,
    TOP_PRIORITY,
    format_array_ranges,
    parse_array,
    parse_array_ranges,
)

# The snapshot format this code reads. A snapshot is written as format 1 while the cluster runs WAL level 1
# or 2 (a release before arrays reads it), and as format 2 from WAL level 3 on: its job records carry arrays,
# dependencies and requeues that an older release would misread, so it refuses the snapshot instead. From WAL
# level 5 on it is format 3: it holds the association store, which a release before it would drop.
STATE_FORMAT = 3
MAX_PRIORITY = 0xFFFFFFFF  # Slurm's job priority is 32 bits (controller/priority.py)
# A requeued job waits this long before it may start again (reason BeginTime), so the supervisor of its
# previous run is stopped first: two runs of one job never write the same output at once.
REQUEUE_DELAY_SECS = 5.0


class StateFormatError(Exception):
    """A snapshot written by a newer release."""


def ok(**fields: Any) -> dict[str, Any]:
    return {"ok": True, **fields}


def err(code: str, message: str) -> dict[str, Any]:
    """code is one of: not_found, invalid, conflict, stalled."""
    return {"ok": False, "code": code, "message": message}


def submission_key(uid: int, key: str) -> str:
    """The idempotency index entry of a client's key: scoped to the submitter's uid, so one user's key never
    answers with another user's job. Clients cannot send a NUL (the service refuses it), so a scoped entry
    never equals an unscoped key written by an older release (see find_submission)."""
    return f"{uid}\x00{key}"


class ClusterState(StepOps):
    def __init__(self) -> None:
        self.format = STATE_FORMAT
        self.cluster_name = ""
        self.cluster_id = ""
        self.members: list[str] = []  # raft addresses of the voters (member_change adds and removes them)
        # A controller being added: it receives the log without voting until member_change promotes it
        # (controller/membership.py). At most one at a time: while one joins, no other change is taken.
        self.learners: dict[str, dict[str, Any]] = {}  # raft addr -> {"grpc_addr"}
        self.member_info: dict[str, dict[str, Any]] = {}  # raft addr -> grpc_addr, version, build, max_level
        self.wal_level = 1
        self.next_job_id = 1
        # Slurm's priority/basic: each job gets one below the last priority given (its lowest_prio) less its nice,
        # so the queue runs in submission order; a held job has 0, and a new one below the rest when released.
        self.lowest_priority = TOP_PRIORITY
        self.nodes: dict[str, dict[str, Any]] = {}
        self.jobs: dict[int, dict[str, Any]] = {}
        # Derived from jobs, never snapshotted: squeue -u must not walk 10,000 jobs under the state lock.
        self.jobs_by_user: dict[str, set[int]] = {}
        # Derived too: array job id -> the ids of its tasks' own records (the array's own record not included).
        self.array_tasks: dict[int, set[int]] = {}
        self.idempotency: dict[str, int] = {}
        # The association store (controller/associations.py): None until the cluster runs WAL level 5.
        self.assoc: dict[str, Any] | None = None
        self.stalled: dict[str, Any] | None = None
        self.applied = 0  # records applied (for determinism checks and metrics)

    # -------------------------------------------------------------- snapshot format

    def __getstate__(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data.pop("jobs_by_user")
        data.pop("array_tasks")
        data["format"] = 3 if self.wal_level >= 5 else 2 if self.wal_level >= 3 else 1
        return data

    def __setstate__(self, data: dict[str, Any]) -> None:
        if data.get("format", 0) > STATE_FORMAT:
            raise StateFormatError(
                f"snapshot format {data.get('format')} is newer than this release reads ({STATE_FORMAT})"
            )
        self.__init__()
        self.__dict__.update(data)
        self.jobs_by_user = {}
        self.array_tasks = {}
        for job_id, job in self.jobs.items():
            self._index_job(job_id, job)

    def _index_job(self, job_id: int, job: dict[str, Any]) -> None:
        self.jobs_by_user.setdefault(job["spec"].get("user", ""), set()).add(job_id)
        array_id = job.get("array_job_id") or 0
        if array_id and array_id != job_id:
            self.array_tasks.setdefault(array_id, set()).add(job_id)

    def _unindex_job(self, job_id: int, job: dict[str, Any]) -> None:
        user = job["spec"].get("user", "")
        self.jobs_by_user[user].discard(job_id)
        if not self.jobs_by_user[user]:
            del self.jobs_by_user[user]
        array_id = job.get("array_job_id") or 0
        if array_id in self.array_tasks:
            self.array_tasks[array_id].discard(job_id)
            if not self.array_tasks[array_id]:
                del self.array_tasks[array_id]

    def array_records(self, array_id: int) -> list[dict[str, Any]]:
        """Every record of array `array_id`: its own (while kept) and its tasks', by job id."""
        ids = sorted(self.array_tasks.get(array_id, ()))
        own = self.jobs.get(array_id)
        if own is not None and own.get("array_job_id") == array_id:
            ids.insert(0, array_id)
        return [self.jobs[i] for i in ids]

    def array_running(self, array_id: int) -> int:
        """How many tasks of the array run now (what its %N throttle counts)."""
        return sum(1 for j in self.array_tasks.get(array_id, ()) if self.jobs[j]["state"] == RUNNING)

    def user_job_ids(self, users: set[str]) -> list[int]:
        """The ids of the jobs of these users, in submission order."""
        return sorted(j for user in users for j in self.jobs_by_user.get(user, ()))

    def find_submission(self, uid: int, key: str) -> int | None:
        """The job this user already submitted with this idempotency key, if any."""
        job_id = self.idempotency.get(submission_key(uid, key))
        if job_id is None:
            # Recorded unscoped by an older release: the same submission only if it was this user's.
            job_id = self.idempotency.get(key)
            if job_id is None or self.jobs.get(job_id, {}).get("spec", {}).get("uid") != uid:
                return None
        return job_id

    def fingerprint(self) -> Any:
        """Everything that must be equal on every member after the same records."""
        return copy.deepcopy(
            (
                self.cluster_id,
                self.members,
                self.learners,
                self.wal_level,
                self.next_job_id,
                self.nodes,
                self.jobs,
                self.idempotency,
                self.assoc,
            )
        )

    # -------------------------------------------------------------- apply

    def apply(self, record: Any) -> dict[str, Any]:
        if self.stalled is not None:
            return err("stalled", f"this member stopped applying at {self.stalled['reason']}")
        problem = wal.readable(record)
        if problem is not None:
            self.stalled = {"reason": problem, "record_op": str(record.get("op")) if isinstance(record, dict) else ""}
            return err("stalled", problem)
        handler = getattr(self, "_op_" + record["op"])
        try:
            result = handler(record)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # A malformed record from a proposer bug: refuse it the same way on every member.
            result = err("invalid", f"malformed {record['op']} record: {type(exc).__name__}: {exc}")
        self.applied += 1
        return result

    # -------------------------------------------------------------- cluster

    def _op_cluster_init(self, r: dict[str, Any]) -> dict[str, Any]:
        if self.cluster_id:
            return ok(cluster_id=self.cluster_id, already=True)
        self.cluster_name = r["name"]
        self.cluster_id = r["cluster_id"]
        self.members = sorted(r["members"])
        self.wal_level = min(int(r["wal_level"]), wal.MAX_WAL_LEVEL)
        self._open_assoc_store()
        return ok(cluster_id=self.cluster_id)

    def _open_assoc_store(self) -> None:
        """From WAL level 5 on the cluster keeps associations; it starts as a new slurmdbd cluster does."""
        if self.wal_level >= 5 and self.assoc is None:
            self.assoc = associations.default_store(self.cluster_name)

    def _op_member_announce(self, r: dict[str, Any]) -> dict[str, Any]:
        info = {k: r[k] for k in ("grpc_addr", "version", "build", "max_level")}
        changed = self.member_info.get(r["raft_addr"]) != info
        self.member_info[r["raft_addr"]] = info
        return ok(changed=changed)

    def _op_member_change(self, r: dict[str, Any]) -> dict[str, Any]:
        """learn (a new controller receives the log), promote (it votes from now on), remove (a voter, or a learner
        that is not promoted). The proposer names the voters it saw (expect): a change decided on another
        membership is refused, so two changes proposed at once never both apply."""
        action, addr = r["action"], r["raft_addr"]
        if not self.cluster_id:
            return err("conflict", "the cluster is not initialised yet")
        if action == "remove" and addr in self.learners:  # the end of an add that did not finish
            del self.learners[addr]
            self.member_info.pop(addr, None)
            return ok(members=list(self.members), changed=True)
        if sorted(r["expect"]) != self.members:
            return err("conflict", f"the membership changed meanwhile (now {', '.join(self.members)}); ask again")
        pending = [a for a in self.learners if a != addr]
        if pending:
            return err("conflict", f"a change is in flight: {pending[0]} is joining; wait for it, or remove it")
        if action == "learn":
            if addr in self.members:
                return err("conflict", f"{addr} is a member already")
            self.learners[addr] = {"grpc_addr": r["grpc_addr"]}
            if addr not in self.member_info:
                self.member_info[addr] = {"grpc_addr": r["grpc_addr"], "version": "", "build": "", "max_level": 0}
        elif action == "promote":
            if addr not in self.learners:
                return err("conflict", f"{addr} is not joining (add it first)")
            del self.learners[addr]
            self.members = sorted([*self.members, addr])
        elif action == "remove":
            if addr not in self.members:
                return err("not_found", f"{addr} is not a member (members: {', '.join(self.members)})")
            if len(self.members) == 1:
                return err("conflict", f"{addr} is the last controller; a cluster cannot remove its last member")
            self.members = [m for m in self.members if m != addr]
            self.member_info.pop(addr, None)
        else:
            return err("invalid", f"unknown member_change action {action!r}")
        return ok(members=list(self.members), changed=True)

    def _op_set_wal_level(self, r: dict[str, Any]) -> dict[str, Any]:
        level = int(r["target"])
        if level < self.wal_level:
            return err("invalid", f"the WAL level only goes up (cluster runs {self.wal_level}, asked {level})")
        if level > wal.MAX_WAL_LEVEL:
            return err("invalid", f"level {level} is above what this release reads ({wal.MAX_WAL_LEVEL})")
        if level == self.wal_level:
            return ok(level=level, changed=False)
        behind = [m for m in self.members if self.member_info.get(m, {}).get("max_level", 1) < level]
        if behind:
            return err("conflict", f"members {', '.join(behind)} cannot read WAL level {level} yet; upgrade them first")
        changed = level != self.wal_level
        self.wal_level = level
        self._open_assoc_store()
        return ok(level=level, changed=changed)

    # -------------------------------------------------------------- accounts, users, QOS (WAL level 5)

    def _op_assoc_apply(self, r: dict[str, Any]) -> dict[str, Any]:
        if self.assoc is None:
            return err("invalid", "the cluster keeps no associations before WAL level 5")
        problem = associations.apply_change(self.assoc, list(r.get("puts") or []), list(r.get("deletes") or []))
        if problem:
            return err("invalid", problem)
        return ok(changed=bool(r.get("puts") or r.get("deletes")))

    # -------------------------------------------------------------- nodes

    def node_state(self, node: dict[str, Any]) -> str:
        if not node["registered"] or node["admin_down"]:
            return DOWN
        if node["drain"]:
            return DRAINING if node["jobs"] else DRAINED
        if not node["jobs"]:
            return IDLE
        if node["alloc_cpus"] >= node["cpus"] or (node["memory_mb"] and node["alloc_mem"] >= node["memory_mb"]):
            return ALLOCATED
        if node.get("exclusive_job"):
            return ALLOCATED
        return MIXED

    def node_reason(self, node: dict[str, Any]) -> tuple[str, str, float]:
        """(reason, set_by, time) that explains the node's state, empty when it is in service."""
        if node["admin_down"]:
            return node["down_reason"], node["down_by"], node["down_time"]
        if not node["registered"]:
            return node["lost_reason"], "spurctld", node["lost_time"]
        if node["drain"]:
            return node["drain_reason"], node["drain_by"], node["drain_time"]
        return "", "", 0.0

    def schedulable(self, node: dict[str, Any]) -> bool:
        return node["registered"] and not node["admin_down"] and not node["drain"]

    def dispatch_held(self, node: dict[str, Any], now: float) -> bool:
        """Whether the node's agent announced a restart (node_dispatch_hold) whose hold still runs at `now`."""
        return node.get("dispatch_hold_until", 0.0) > now

    def _op_node_register(self, r: dict[str, Any]) -> dict[str, Any]:
        name = r["name"]
        node = self.nodes.get(name)
        if node is None:
            node = {
                "name": name,
                "jobs": [],
                "alloc_cpus": 0,
                "alloc_mem": 0,
                "admin_down": False,
                "down_reason": "",
                "down_by": "",
                "down_time": 0.0,
                "drain": False,
                "drain_reason": "",
                "drain_by": "",
                "drain_time": 0.0,
                "lost_reason": "",
                "lost_time": 0.0,
            }
            self.nodes[name] = node
        node.update(
            address=r["address"],
            cpus=int(r["cpus"]),
            memory_mb=int(r["memory_mb"]),
            partition=r.get("partition") or "default",
            version=r["version"],
            build=r["build"],
            registered=True,
            last_registered=float(r["time"]),
            lost_reason="",
            lost_time=0.0,
            gres=dict(r.get("gres") or {}),  # [agent] gres and features (placement.py)
            features=list(r.get("features") or []),
            last_busy=node.get("last_busy") or float(r["time"]),  # Slurm's LastBusyTime starts at registration
            **dict(r.get("host") or {}),  # the agent's start, the host's boot, arch, OS and CPU layout, as reported
        )
        # The restarted agent is back: a hold it asked for before its restart ends (the key goes, so a node that
        # never held is the same record an older release writes).
        node.pop("dispatch_hold_until", None)
        # Reconcile: what the agent holds vs what we think runs there.
        reported = {(int(j), int(a)) for j, a in r.get("running", [])}
        stale = []
        for job_id, attempt in sorted(reported):
            job = self.jobs.get(job_id)
            if job is None or job["state"] != RUNNING or job["attempt"] != attempt or name not in job["nodes"]:
                stale.append([job_id, attempt])
        return ok(stale=stale)

    def _op_node_deregister(self, r: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes.get(r["name"])
        if node is None:
            return err("not_found", f"node {r['name']} is not registered")
        if node["jobs"]:
            return err("conflict", f"node {r['name']} still runs jobs {node['jobs']}; it cannot deregister")
        node["registered"] = False
        node["lost_reason"] = r.get("reason") or REASON_AGENT_STOPPED
        node["lost_time"] = float(r["time"])
        return ok()

    def _op_node_lost(self, r: dict[str, Any]) -> dict[str, Any]:
        """Heartbeat timeout: the node is DOWN until its agent registers again; its jobs are NODE_FAIL."""
        node = self.nodes.get(r["name"])
        if node is None:
            return err("not_found", f"node {r['name']} is not registered")
        if not node["registered"]:
            return ok(failed=[])
        if "registration" in r and float(r["registration"]) != node["last_registered"]:
            return ok(failed=[], newer_registration=True)
        node["registered"] = False
        node["lost_reason"] = r.get("reason") or REASON_NOT_RESPONDING
        node["lost_time"] = float(r["time"])
        failed = self._fail_node_jobs(node, float(r["time"]), node["lost_reason"])
        return ok(failed=failed)

    def _fail_node_jobs(self, node: dict[str, Any], when: float, reason: str) -> list[int]:
        failed = []
        for job_id in list(node["jobs"]):
            job = self.jobs.get(job_id)
            if job is not None and job["state"] == RUNNING:
                if self.wal_level >= 3 and requeueable(job) and not job["cancel_requested"]:
                    self._requeue(job, when, hold=False)  # Slurm's JobRequeue=1: the batch job runs again
                else:
                    self._finish(job, NODE_FAIL, when, exit_code=0, signal=0, reason=f"node {node['name']}: {reason}")
                failed.append(job_id)
        return failed

    def _op_node_drain(self, r: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes.get(r["name"])
        if node is None:
            return err("not_found", f"node {r['name']} does not exist")
        before = {"drain": node["drain"], "reason": node["drain_reason"], "by": node["drain_by"]}
        node["drain"] = True
        node["drain_reason"] = r.get("reason") or REASON_DRAINED
        node["drain_by"] = r.get("set_by") or ""
        node["drain_time"] = float(r["time"])
        return ok(before=before)

    def _op_node_resume(self, r: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes.get(r["name"])
        if node is None:
            return err("not_found", f"node {r['name']} does not exist")
        prefix = r.get("only_prefix") or ""
        if prefix and node["drain"] and not node["drain_reason"].startswith(prefix):
            return err(
                "conflict",
                f"node {node['name']} was drained by {node['drain_by'] or 'someone else'} with reason "
                f"{node['drain_reason']!r}, which does not start with {prefix!r}; not resuming it",
            )
        was = {"drain": node["drain"], "admin_down": node["admin_down"]}
        node["drain"] = False
        node["drain_reason"] = node["drain_by"] = ""
        node["drain_time"] = 0.0
        if not prefix:
            node["admin_down"] = False
            node["down_reason"] = node["down_by"] = ""
            node["down_time"] = 0.0
        return ok(before=was)

    def _op_node_dispatch_hold(self, r: dict[str, Any]) -> dict[str, Any]:
        """The node's agent is about to restart: no job or step starts there before `until` (the proposer's clock
        plus the capped hold) or its next registration. Its state, drain and running jobs stay as they are."""
        node = self.nodes.get(r["name"])
        if node is None:
            return err("not_found", f"node {r['name']} does not exist")
        before = node.get("dispatch_hold_until", 0.0)
        node["dispatch_hold_until"] = float(r["until"])
        return ok(before=before, until=node["dispatch_hold_until"])

    def _op_node_down(self, r: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes.get(r["name"])
        if node is None:
            return err("not_found", f"node {r['name']} does not exist")
        node["admin_down"] = True
        node["down_reason"] = r.get("reason") or "set DOWN by an administrator"
        node["down_by"] = r.get("set_by") or ""
        node["down_time"] = float(r["time"])
        failed = self._fail_node_jobs(node, float(r["time"]), node["down_reason"])
        return ok(failed=failed)

    # -------------------------------------------------------------- jobs

    def _op_job_submit(self, r: dict[str, Any]) -> dict[str, Any]:
        key = r.get("key") or ""
        if key and key in self.idempotency:
            return ok(job_id=self.idempotency[key], duplicate=True)
        job_id = self.next_job_id
        spec = dict(r["spec"])
        job = new_job_record(job_id, spec, float(r["time"]), key)
        if self.wal_level >= 3:  # the fields a release before level 3 does not read (see wal.OP_LEVELS)
            job.update(LEVEL3_JOB_FIELDS, eligible_time=job["submit_time"])
            if spec.get("array"):
                tasks, limit = parse_array(spec["array"])
                job.update(array_job_id=job_id, array_pending=format_array_ranges(tasks), array_max_running=limit)
            if spec.get("hold"):
                job.update(held=True, reason=REASON_HELD_USER)
            job["eligible_time"] = max(job["submit_time"], float(spec.get("begin_time") or 0.0))
        if self.wal_level >= 5 and r.get("priority"):
            # priority/multifactor: the leader computed it (controller/priority.py); kept for a release of a hold
            job["mf_priority"] = max(1, min(MAX_PRIORITY, int(r["priority"])))
        job["priority"] = 0 if job["held"] else self._next_priority(job)
        self.next_job_id += 1
        self.jobs[job_id] = job
        self._index_job(job_id, job)
        if key:
            self.idempotency[key] = job_id
        return ok(job_id=job_id, duplicate=False)

    def _next_priority(self, job: dict[str, Any]) -> int:
        """Slurm's priority/basic: one below the last priority given, less the job's nice (nice lowers it, and a
        negative one raises it); the count itself ignores nice, so one job's nice moves no other job. Under
        priority/multifactor (a job with mf_priority) its last multifactor priority instead."""
        if "mf_priority" in job:
            return int(job["mf_priority"])
        nice = int(job["spec"].get("nice") or 0)
        priority = self.lowest_priority - 1 if self.lowest_priority >= 2 else 1
        if nice <= 0 or priority > nice + 1:
            priority -= nice
        priority = max(1, priority)
        self.lowest_priority = min(priority + nice, self.lowest_priority)
        return priority

    def fits(self, node: dict[str, Any], spec: dict[str, Any]) -> bool:
        if not self.schedulable(node):
            return False
        return placement.fits(node, placement.node_free(node), spec)

    def _op_job_start(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != PENDING or job["held"]:
            return err("conflict", f"job {job['job_id']} is {job['state']}, not startable")
        if job.get("array_pending"):
            return err("conflict", f"job {job['job_id']} is an array: its tasks start with job_array_split")
        names = list(r["nodes"])
        problem = placement.start_problem(self, job, names)  # the nodes, their free share, --nodelist
        if problem is not None:
            return err(*problem)
        held = [n for n in names if self.dispatch_held(self.nodes[n], float(r["time"]))]
        if held:  # decided before the hold, proposed after it: every member refuses it alike
            return err("conflict", f"node {held[0]} holds dispatch while its agent restarts; job {job['job_id']} waits")
        job.update(
            state=RUNNING,
            reason=NO_REASON,
            nodes=names,
            attempt=int(r["attempt"]),
            start_time=float(r["time"]),
            alloc=placement.hold(self, job, names),
        )
        self._steps_job_started(job)
        return ok(job_id=job["job_id"], attempt=job["attempt"])

    def _release(self, job: dict[str, Any]) -> None:
        placement.release(self, job)  # what job["alloc"] holds on each node, gres and exclusivity included

    def _finish(self, job: dict[str, Any], state: str, when: float, exit_code: int, signal: int, reason: str) -> None:
        for name in job.get("nodes") or []:  # Slurm's LastBusyTime: when a job last left the node
            if name in self.nodes:
                self.nodes[name]["last_busy"] = when
        self._charge_usage(job, when)  # before the release, which forgets the CPUs the job held
        self._release(job)
        if self.wal_level >= 4:  # a level-3 member keeps the words of the report (see end_reason)
            reason = end_reason(job, state, exit_code, reason)
        job.update(state=state, end_time=when, exit_code=exit_code, signal=signal, reason=reason or NO_REASON)
        self._steps_job_finished(job)

    def _charge_usage(self, job: dict[str, Any], when: float) -> None:
        """A run charges its CPU seconds not charged yet to its association and every ancestor (fairshare.py),
        at the record's time: when it ends, and at each period of the leader's while it runs. The fair-share
        factor's usage. Before WAL level 5 there is no store to charge."""
        if self.wal_level < 5 or self.assoc is None or not job.get("start_time"):
            return
        key = priority.job_assoc_key(self.assoc, job["spec"])
        if key is None:
            return
        qos = self.assoc["qos"].get(priority.job_qos(self.assoc, job["spec"], key)) or {}
        amount = fairshare.job_charge(job, float(qos.get("usage_factor", 1.0)), when)
        fairshare.charge(self.assoc, key, amount, when)

    def _op_job_priorities(self, r: dict[str, Any]) -> dict[str, Any]:
        """The leader's periodic priority/multifactor recalculation: [[job id, priority], ...] of pending jobs
        (a job no longer pending is skipped; a held one keeps 0 until released), the decay half-life the
        store's usage is charged with from now on (fairshare.py), and with charge_running, the running jobs'
        usage up to the record's time."""
        changed = 0
        for job_id, value in r.get("priorities") or []:
            job = self.jobs.get(int(job_id))
            if job is None or job["state"] != PENDING:
                continue
            job["mf_priority"] = max(1, min(MAX_PRIORITY, int(value)))
            if not job["held"]:
                job["priority"] = job["mf_priority"]
                changed += 1
        if self.assoc is not None and "half_life" in r:
            self.assoc[fairshare.HALF_LIFE_KEY] = max(0.0, float(r["half_life"]))
        if r.get("charge_running") and "time" in r:  # usage of the runs so far, as slurmctld charges every period
            when = float(r["time"])
            for job in self.jobs.values():
                if job["state"] == RUNNING:
                    self._charge_usage(job, when)
        return ok(changed=changed)

    def _op_job_requeue(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != RUNNING or job["attempt"] != int(r["attempt"]):
            return err("conflict", f"job {job['job_id']} attempt {r['attempt']} is not running")
        self._release(job)
        if job["cancel_requested"]:
            job.update(state=CANCELLED, end_time=float(r["time"]), reason="cancelled before launch")
            return ok(state=CANCELLED)
        job.update(state=PENDING, nodes=[], start_time=0.0, reason=r.get("reason") or "launch failed")
        return ok(state=PENDING)

    def _op_job_end(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != RUNNING or job["attempt"] != int(r["attempt"]):
            return ok(accepted=False, state=job["state"])
        state = r["state"]
        if state not in FINISHED_STATES:
            return err("invalid", f"{state} is not an end state")
        if job["cancel_requested"] and state != NODE_FAIL:
            # the cancel of a preemption (job_preempt, mode cancel) ends the run PREEMPTED, as Slurm's
            state = PREEMPTED if job.get("preempt_cancel") == job["attempt"] else CANCELLED
        elif state == NODE_FAIL:
            job.pop("cancelled_by_uid", None)  # its node ended it before the cancel did: nobody's (Slurm's requid -1)
        # The leader's NODE_FAIL of a job its node lost (the agent came back without it) may ask for a requeue;
        # a release before level 3 does not read the field, so it is judged only from level 3 on.
        if state == NODE_FAIL and r.get("requeue") and self.wal_level >= 3:
            if requeueable(job) and not job["cancel_requested"]:
                self._requeue(job, float(r["time"]), hold=False, reprioritise=True)
                return ok(accepted=True, state=PENDING)
        self._finish(
            job, state, float(r["time"]), int(r.get("exit_code", 0)), int(r.get("signal", 0)), r.get("reason", "")
        )
        return ok(accepted=True, state=state)

    def _op_job_cancel(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] in FINISHED_STATES:
            return ok(already_finished=True, state=job["state"])
        _record_canceller(job, r)
        if job["state"] == PENDING:
            job.update(state=CANCELLED, end_time=float(r["time"]), reason=self._cancel_reason(job, r))
            return ok(already_finished=False, state=CANCELLED, signal_agent=False)
        job["cancel_requested"] = True
        return ok(
            already_finished=False, state=RUNNING, signal_agent=True, nodes=list(job["nodes"]), attempt=job["attempt"]
        )

    def _op_job_preempt(self, r: dict[str, Any]) -> dict[str, Any]:
        """qos_priority preemption of a running job for job r['by_job_id'] (controller/preemption.py chose it).
        requeue: back to PENDING at once, as scontrol requeue (a job that may not be requeued, --no-requeue or an
        interactive allocation, is cancelled instead, as Slurm's); cancel: the leader kills its processes and the
        end report ends it PREEMPTED. Either way the answer names the run the leader stops."""
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        mode = r["mode"]
        if mode not in ("cancel", "requeue"):
            return err("invalid", f"preempt mode {mode!r} is not cancel or requeue")
        if job["state"] != RUNNING or job["attempt"] != int(r["attempt"]) or job["cancel_requested"]:
            return err("conflict", f"job {job['job_id']} attempt {r['attempt']} is not running (or already ending)")
        when = float(r["time"])
        was = {"attempt": job["attempt"], "nodes": list(job["nodes"])}
        job.update(preempted_by=int(r["by_job_id"]), preempt_time=when)
        if mode == "requeue" and requeueable(job):
            self._requeue(job, when, hold=False)
            return ok(mode="requeue", **was)
        job.update(cancel_requested=True, preempt_cancel=job["attempt"])
        return ok(mode="cancel", **was)

    # -------------------------------------------------------------- suspend / resume (WAL level 4)

    def _op_job_suspend(self, r: dict[str, Any]) -> dict[str, Any]:
        """scontrol suspend: the running job keeps its nodes; its processes stop (the leader signals them) and its
        time limit waits. `suspended` holds the attempt suspended, so a later run of the job starts unsuspended."""
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != RUNNING or job["cancel_requested"]:
            return err("conflict", f"job {job['job_id']} is {job['state']}; only a running job can be suspended")
        if job.get("suspended") == job["attempt"]:
            return err("conflict", f"job {job['job_id']} is already suspended")
        if job.get("suspend_attempt") != job["attempt"]:  # the first suspend of this run: its own count
            job.update(suspended_secs=0.0, suspend_attempt=job["attempt"])
        job.update(suspended=job["attempt"], suspend_time=float(r["time"]))
        job["priority"] = 0  # as Slurm's: a resumed job gets a new priority, below the queue's
        return ok(nodes=list(job["nodes"]), attempt=job["attempt"])

    def _op_job_resume(self, r: dict[str, Any]) -> dict[str, Any]:
        """scontrol resume: the time spent suspended is added to suspended_secs (not run time; the limit moves)."""
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != RUNNING or job.get("suspended") != job["attempt"]:
            return err("conflict", f"job {job['job_id']} is not suspended")
        when = float(r["time"])
        paused = max(0.0, when - float(job["suspend_time"]))
        job.update(suspended=0, suspend_time=when, suspended_secs=float(job.get("suspended_secs", 0.0)) + paused)
        job["priority"] = self._next_priority(job)
        return ok(nodes=list(job["nodes"]), attempt=job["attempt"])

    def _cancel_reason(self, job: dict[str, Any] | None, r: dict[str, Any]) -> str:
        """A job cancelled before it started keeps the reason it waited for (the proposer sends what squeue showed
        then: JobHeldUser, Dependency, Priority...), as Slurm's does; before level 4 the reason said who cancelled."""
        if self.wal_level >= 4:
            return r.get("reason") or (job or {}).get("reason") or NO_REASON
        return f"cancelled by {r.get('by') or 'user'}"

    def _op_jobs_purge(self, r: dict[str, Any]) -> dict[str, Any]:
        """Forget finished jobs that ended before r['before'] (accounting keeps their history). An array's own
        record stays while any of its tasks' records is not finished (squeue -j N and scancel N find them)."""
        before = float(r["before"])
        keep_ids = set(r.get("keep", []))
        gone = [
            j
            for j, job in self.jobs.items()
            if job["state"] in FINISHED_STATES
            and job["end_time"] < before
            and j not in keep_ids
            and not any(self.jobs[t]["state"] not in FINISHED_STATES for t in self.array_tasks.get(j, ()))
        ]
        for job_id in gone:
            job = self.jobs.pop(job_id)
            self._unindex_job(job_id, job)
            key = job.get("key")
            if key:
                self.idempotency.pop(key, None)
        return ok(purged=len(gone))

    def _op_job_hold(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != PENDING:
            return err("conflict", f"job {job['job_id']} is {job['state']}; only pending jobs can be held")
        job.update(held=True, priority=0)
        # The leader's own hold (launch kept failing) says why; an older member shows JobHeldAdmin instead.
        job["reason"] = r.get("reason") or "JobHeldAdmin"
        return ok()

    def _op_job_release(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        was_held, job["held"] = job["held"], False
        if job["state"] == PENDING:
            job["reason"] = NO_REASON
            if was_held:
                job["priority"] = self._next_priority(job)
        return ok()

    # -------------------------------------------------------------- arrays, requeue, update (WAL level 3)

    def _op_job_array_split(self, r: dict[str, Any]) -> dict[str, Any]:
        """Start the array's lowest pending task: a record of its own with the next job id, or, for the last
        task left, the array's own record (as Slurm does). Fields as job_start's; job_id is the array's."""
        parent = self.jobs.get(int(r["job_id"]))
        if parent is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        pending = parent.get("array_pending") or ""
        if parent["state"] != PENDING or parent["held"] or not pending:
            return err("conflict", f"job {parent['job_id']} is {parent['state']}, with no task to start")
        limit = parent.get("array_max_running") or 0
        if limit and self.array_running(parent["job_id"]) >= limit:
            return err("conflict", f"array {parent['job_id']} already runs {limit} tasks (its %{limit} throttle)")
        ids = parse_array_ranges(pending, "array_pending")
        start = {"nodes": r["nodes"], "attempt": r["attempt"], "time": r["time"]}
        if len(ids) == 1:
            parent.update(array_pending="", array_task_id=ids[0])
            result = self._op_job_start({"job_id": parent["job_id"], **start})
            if not result["ok"]:
                parent.update(array_pending=pending, array_task_id=0)
                return result
            return ok(job_id=parent["job_id"], attempt=result["attempt"], array_task_id=ids[0])
        task_id = self.next_job_id
        task = new_job_record(task_id, dict(parent["spec"]), parent["submit_time"], "")
        task.update(LEVEL3_JOB_FIELDS, eligible_time=parent.get("eligible_time", parent["submit_time"]))
        task.update(array_job_id=parent["job_id"], array_task_id=ids[0], array_max_running=limit)
        task["priority"] = parent.get("priority", 0)  # the tasks of an array share its priority
        self.jobs[task_id] = task
        result = self._op_job_start({"job_id": task_id, **start})
        if not result["ok"]:
            del self.jobs[task_id]
            return result
        self.next_job_id += 1
        self._index_job(task_id, task)
        parent["array_pending"] = format_array_ranges(ids[1:])
        return ok(job_id=task_id, attempt=result["attempt"], array_task_id=ids[0])

    def _op_job_array_cancel(self, r: dict[str, Any]) -> dict[str, Any]:
        """Cancel tasks of array r['array_job_id']: r['tasks'] (task ids), or every record of it when empty.
        Pending tasks leave the array's pending list (the array's own record ends CANCELLED when none are
        left); running ones are cancelled like jobs (the answer lists them for the leader to signal)."""
        array_id = int(r["array_job_id"])
        when = float(r["time"])
        reason = self._cancel_reason(self.jobs.get(array_id), r)
        records = self.array_records(array_id)
        if not records:
            return err("not_found", f"job {array_id} is not an array (or finished long ago)")
        wanted = {int(t) for t in r.get("tasks") or ()}
        parent = self.jobs.get(array_id) if records[0]["job_id"] == array_id else None
        cancelled, signal, matched = [], [], set()
        pending = parent.get("array_pending") if parent is not None else ""
        if wanted and pending and parent["state"] == PENDING:
            ids = parse_array_ranges(pending, "array_pending")
            left = [t for t in ids if t not in wanted]
            gone = [t for t in ids if t in wanted]
            matched.update(gone)
            if gone:
                if left:
                    parent["array_pending"] = format_array_ranges(left)
                else:  # the array's own record now stands for the tasks cancelled before they started
                    parent["array_pending"] = format_array_ranges(gone)
                    parent.update(state=CANCELLED, end_time=when, reason=reason)
                    _record_canceller(parent, r)
                cancelled.extend(gone)
        for job in records:
            if wanted:
                if job.get("array_pending") or job.get("array_task_id") not in wanted:
                    continue
                matched.add(job["array_task_id"])
            if job["state"] == PENDING:
                job.update(state=CANCELLED, end_time=when, reason=reason)
                _record_canceller(job, r)
                cancelled.append(job["job_id"] if not job.get("array_pending") else array_id)
            elif job["state"] == RUNNING:
                job["cancel_requested"] = True
                _record_canceller(job, r)
                signal.append([job["job_id"], job["attempt"], list(job["nodes"])])
        unknown = sorted(wanted - matched)
        if wanted and not matched:
            return err("not_found", f"array {array_id} has no task {format_array_ranges(unknown)}")
        return ok(cancelled=len(cancelled), signal=signal, unknown=format_array_ranges(unknown))

    def _requeue(self, job: dict[str, Any], when: float, hold: bool, reprioritise: bool = False) -> None:
        """A job that started (or ended) goes back to PENDING for another run; see REQUEUE_DELAY_SECS. Held, its
        priority is 0; requeued after its node failed, it gets a new one (as Slurm's does); else it keeps its own."""
        if job["state"] == RUNNING:  # the run that ends here is charged as if it had finished
            self._charge_usage(job, when)
        self._release(job)
        self._steps_job_requeued(job, when)
        job.pop("cancelled_by_uid", None)  # the next run has not been cancelled by anyone
        job.update(
            state=PENDING,
            nodes=[],
            start_time=0.0,
            end_time=0.0,
            exit_code=0,
            signal=0,
            cancel_requested=False,
            restart_count=int(job.get("restart_count") or 0) + 1,
            eligible_time=when + REQUEUE_DELAY_SECS,
            held=hold,
            reason=REASON_HELD_USER if hold else NO_REASON,
        )
        if hold:
            job["priority"] = 0
        elif reprioritise:
            job["priority"] = self._next_priority(job)

    def _op_job_requeue_user(self, r: dict[str, Any]) -> dict[str, Any]:
        """scontrol requeue (hold=False) / requeuehold (hold=True) of a running or finished batch job."""
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["spec"].get("interactive"):
            return err("invalid", f"job {job['job_id']} is an interactive allocation; only batch jobs are requeued")
        if not requeueable(job):
            return err(
                "conflict",
                f"job {job['job_id']} may not be requeued: it was submitted with --no-requeue (or while "
                "[controller] job_requeue was false)",
            )
        if job["state"] not in FINISHED_STATES and job["state"] != RUNNING:
            return err(
                "conflict", f"job {job['job_id']} is {job['state']}; only running or finished jobs can be requeued"
            )
        was = {"state": job["state"], "attempt": job["attempt"], "nodes": list(job["nodes"])}
        self._requeue(job, float(r["time"]), bool(r.get("hold")))
        return ok(signal_agent=was["state"] == RUNNING, attempt=was["attempt"], nodes=was["nodes"])

    def _op_job_update(self, r: dict[str, Any]) -> dict[str, Any]:
        """scontrol update: r['changes'] are spec fields (the service checked who may change what)."""
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        changes = dict(r["changes"])
        if job["state"] == RUNNING and set(changes) - {"time_limit_secs"}:
            return err("conflict", f"job {job['job_id']} is RUNNING; only its time limit can change now")
        if job["state"] not in (PENDING, RUNNING):
            return err("conflict", f"job {job['job_id']} is {job['state']}; only pending jobs can be updated")
        if "nice" in changes and job.get("priority"):  # Slurm moves the priority by the change of nice
            moved = int(changes["nice"] or 0) - int(job["spec"].get("nice") or 0)
            job["priority"] = max(1, int(job["priority"]) - moved)
        job["spec"].update(changes)
        job["spec_rev"] = int(job.get("spec_rev") or 0) + 1
        return ok(spec_rev=job["spec_rev"])

    def _op_job_pending_end(self, r: dict[str, Any]) -> dict[str, Any]:
        """The leader ends a job that never started: DEADLINE, or CANCELLED (a dependency never satisfied)."""
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != PENDING:
            return ok(ended=False, state=job["state"])
        if r["state"] not in FINISHED_STATES:
            return err("invalid", f"{r['state']} is not an end state")
        job.update(state=r["state"], end_time=float(r["time"]), reason=r.get("reason") or NO_REASON)
        return ok(ended=True, state=job["state"])


# Slurm's reasons for a job that ended on its own (job_complete in its job_mgr.c).
_END_REASONS = {TIMEOUT: "TimeLimit", OUT_OF_MEMORY: "OutOfMemory", NODE_FAIL: "NodeDown"}


def end_reason(job: dict[str, Any], state: str, exit_code: int, detail: str) -> str:
    """The reason a finished job keeps, as Slurm's: TimeLimit for a timeout; NonZeroExitCode for a failed script
    (JobLaunchFailure when it never ran: a signal, a refused launch); a cancelled or completed job keeps the one it
    had (None while it ran). What went wrong at a launch, with the memory or on the node, stays in Spur's own
    words (Slurm's state_desc); the report's restatements of the state (time limit, cancel requested) do not."""
    if state in (CANCELLED, COMPLETED, PREEMPTED):
        return job["reason"]
    if state == TIMEOUT:
        return _END_REASONS[TIMEOUT]
    if detail:
        return detail
    if state == FAILED:
        return "NonZeroExitCode" if exit_code else "JobLaunchFailure"
    return _END_REASONS.get(state, NO_REASON)


# The fields a job record has from WAL level 3 on (a record written before lacks them; readers use these).
LEVEL3_JOB_FIELDS: dict[str, Any] = {
    "array_job_id": 0,
    "array_task_id": 0,
    "array_pending": "",
    "array_max_running": 0,
    "restart_count": 0,
    "eligible_time": 0.0,
    "spec_rev": 0,
}


def new_job_record(job_id: int, spec: dict[str, Any], submit_time: float, key: str) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "spec": spec,
        "state": PENDING,
        "reason": NO_REASON,
        "exit_code": 0,
        "signal": 0,
        "submit_time": submit_time,
        "start_time": 0.0,
        "end_time": 0.0,
        "nodes": [],
        "attempt": 0,
        "cancel_requested": False,
        "held": False,
        "key": key,
    }


def _record_canceller(job: dict[str, Any], r: dict[str, Any]) -> None:
    """Keep who cancelled the job (Slurm's requid: sacct's `CANCELLED by UID`): the uid the leader authenticated
    (MUNGE), never the name the client sent. A record of a release before the field has none: the job keeps none,
    so it replays as it did."""
    if "by_uid" in r and int(r["by_uid"]) >= 0:
        job["cancelled_by_uid"] = int(r["by_uid"])


def requeueable(job: dict[str, Any]) -> bool:
    """Whether a node failure (or scontrol requeue) may put the job back: a batch job not sent --no-requeue
    (spec requeue 2). Slurm's default, JobRequeue=1, allows it."""
    return job["spec"].get("requeue", 0) != 2 and not job["spec"].get("interactive")
