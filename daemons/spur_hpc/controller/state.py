"""The replicated state machine: nodes, jobs, membership, the job-id counter.

Pure and deterministic: no clocks, no I/O, no randomness. Every time and id arrives inside the record
(the proposer computed it). apply() never raises: a bad record answers with an error result, and a
record this code cannot read stalls the machine (it applies nothing more) so the daemon can stop this
member loudly while the rest of the cluster carries on.
"""

from __future__ import annotations

import copy
from typing import Any

from spur_hpc.controller import placement, wal

# Job and node states (names match slurm.proto's JobState and NodeState) and the groups: spur_hpc.model
from spur_hpc.model import (
    ALLOCATED,
    CANCELLED,
    DOWN,
    DRAINED,
    DRAINING,
    FINISHED_STATES,
    IDLE,
    MIXED,
    NO_REASON,
    NODE_FAIL,
    PENDING,
    REASON_AGENT_STOPPED,
    REASON_DRAINED,
    REASON_NOT_RESPONDING,
    RUNNING,
    per_node_cpus,
)

STATE_FORMAT = 1


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


class ClusterState:
    def __init__(self) -> None:
        self.format = STATE_FORMAT
        self.cluster_name = ""
        self.cluster_id = ""
        self.members: list[str] = []  # raft addresses, fixed at first bootstrap
        self.member_info: dict[str, dict[str, Any]] = {}  # raft addr -> grpc_addr, version, build, max_level
        self.wal_level = 1
        self.next_job_id = 1
        self.nodes: dict[str, dict[str, Any]] = {}
        self.jobs: dict[int, dict[str, Any]] = {}
        # Derived from jobs, never snapshotted: squeue -u must not walk 10,000 jobs under the state lock.
        self.jobs_by_user: dict[str, set[int]] = {}
        self.idempotency: dict[str, int] = {}
        self.stalled: dict[str, Any] | None = None
        self.applied = 0  # records applied (for determinism checks and metrics)

    # -------------------------------------------------------------- snapshot format

    def __getstate__(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data.pop("jobs_by_user")
        return data

    def __setstate__(self, data: dict[str, Any]) -> None:
        if data.get("format", 0) > STATE_FORMAT:
            raise StateFormatError(
                f"snapshot format {data.get('format')} is newer than this release reads ({STATE_FORMAT})"
            )
        self.__init__()
        self.__dict__.update(data)
        self.jobs_by_user = {}
        for job_id, job in self.jobs.items():
            self._index_job(job_id, job)

    def _index_job(self, job_id: int, job: dict[str, Any]) -> None:
        self.jobs_by_user.setdefault(job["spec"].get("user", ""), set()).add(job_id)

    def _unindex_job(self, job_id: int, job: dict[str, Any]) -> None:
        user = job["spec"].get("user", "")
        self.jobs_by_user[user].discard(job_id)
        if not self.jobs_by_user[user]:
            del self.jobs_by_user[user]

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
            (self.cluster_id, self.members, self.wal_level, self.next_job_id, self.nodes, self.jobs, self.idempotency)
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
        return ok(cluster_id=self.cluster_id)

    def _op_member_announce(self, r: dict[str, Any]) -> dict[str, Any]:
        info = {k: r[k] for k in ("grpc_addr", "version", "build", "max_level")}
        changed = self.member_info.get(r["raft_addr"]) != info
        self.member_info[r["raft_addr"]] = info
        return ok(changed=changed)

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
        return ok(level=level, changed=changed)

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
        )
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
        self.next_job_id += 1
        self.jobs[job_id] = {
            "job_id": job_id,
            "spec": dict(r["spec"]),
            "state": PENDING,
            "reason": NO_REASON,
            "exit_code": 0,
            "signal": 0,
            "submit_time": float(r["time"]),
            "start_time": 0.0,
            "end_time": 0.0,
            "nodes": [],
            "attempt": 0,
            "cancel_requested": False,
            "held": False,
            "key": key,
        }
        self._index_job(job_id, self.jobs[job_id])
        if key:
            self.idempotency[key] = job_id
        return ok(job_id=job_id, duplicate=False)

    def fits(self, node: dict[str, Any], spec: dict[str, Any]) -> bool:
        if not self.schedulable(node):
            return False
        free = {"cpus": node["cpus"] - node["alloc_cpus"], "mem": node["memory_mb"] - node["alloc_mem"]}
        return placement.fits(node, free, spec)

    def _op_job_start(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != PENDING or job["held"]:
            return err("conflict", f"job {job['job_id']} is {job['state']}, not startable")
        names = list(r["nodes"])
        if len(names) != max(1, job["spec"].get("nodes") or 1) or len(set(names)) != len(names):
            return err("invalid", f"job {job['job_id']} needs {job['spec'].get('nodes') or 1} distinct nodes")
        for name in names:
            node = self.nodes.get(name)
            if node is None or not self.fits(node, job["spec"]):
                return err("conflict", f"node {name} cannot take job {job['job_id']} any more")
        cpus, mem = per_node_cpus(job["spec"]), int(job["spec"].get("memory_mb") or 0)
        for name in names:
            node = self.nodes[name]
            node["alloc_cpus"] += cpus
            node["alloc_mem"] += mem
            node["jobs"].append(job["job_id"])
        job.update(
            state=RUNNING,
            reason=NO_REASON,
            nodes=names,
            attempt=int(r["attempt"]),
            start_time=float(r["time"]),
            alloc={"cpus": cpus, "memory_mb": mem},
        )
        return ok(job_id=job["job_id"], attempt=job["attempt"])

    def _release(self, job: dict[str, Any]) -> None:
        alloc = job.get("alloc") or {"cpus": 0, "memory_mb": 0}
        for name in job["nodes"]:
            node = self.nodes.get(name)
            if node is not None and job["job_id"] in node["jobs"]:
                node["jobs"].remove(job["job_id"])
                node["alloc_cpus"] = max(0, node["alloc_cpus"] - alloc["cpus"])
                node["alloc_mem"] = max(0, node["alloc_mem"] - alloc["memory_mb"])
        job["alloc"] = {"cpus": 0, "memory_mb": 0}

    def _finish(self, job: dict[str, Any], state: str, when: float, exit_code: int, signal: int, reason: str) -> None:
        self._release(job)
        job.update(state=state, end_time=when, exit_code=exit_code, signal=signal, reason=reason or NO_REASON)

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
            state = CANCELLED
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
        if job["state"] == PENDING:
            job.update(state=CANCELLED, end_time=float(r["time"]), reason=f"cancelled by {r.get('by') or 'user'}")
            return ok(already_finished=False, state=CANCELLED, signal_agent=False)
        job["cancel_requested"] = True
        return ok(
            already_finished=False, state=RUNNING, signal_agent=True, nodes=list(job["nodes"]), attempt=job["attempt"]
        )

    def _op_jobs_purge(self, r: dict[str, Any]) -> dict[str, Any]:
        """Forget finished jobs that ended before r['before'] (accounting keeps their history)."""
        before = float(r["before"])
        keep_ids = set(r.get("keep", []))
        gone = [
            j
            for j, job in self.jobs.items()
            if job["state"] in FINISHED_STATES and job["end_time"] < before and j not in keep_ids
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
        job["held"] = True
        # The leader's own hold (launch kept failing) says why; an older member shows JobHeldAdmin instead.
        job["reason"] = r.get("reason") or "JobHeldAdmin"
        return ok()

    def _op_job_release(self, r: dict[str, Any]) -> dict[str, Any]:
        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        job["held"] = False
        if job["state"] == PENDING:
            job["reason"] = NO_REASON
        return ok()
