"""Job steps in the replicated state: the ops that create and end them, and the task layout.

A job is an allocation plus steps. The batch script is step "batch" (created when the job starts, ended
with it); each srun inside the allocation is step "0", "1", ... A step record lives in its job's record:

  job["steps"][step_id] = {"step_id", "name", "state", "nodes", "tasks", "cpus_per_task", "exit_code",
                           "signal", "start_time", "end_time", "attempt", "reason",
                           "layout": {node: [task ids]}, "node_results": {node: {...}}, "spec": {...}}

An srun step runs on several nodes, one spurstepd each; every node reports its part (step_end), and the
step ends when the last node has reported: exit code and signal are the largest of the nodes' (each
node's is the largest of its tasks'). Like ClusterState, everything here is pure: times and ids come in
the record, never from a clock.
"""

from __future__ import annotations

from typing import Any

from spur_hpc.model import CANCELLED, COMPLETED, FAILED, FINISHED_STATES, NODE_FAIL, RUNNING, batch_step_state

BATCH_STEP = "batch"
# Bounds of one step request (the controller refuses more; srun says so first).
MAX_STEPS_PER_JOB = 10_000
MAX_STEP_TASKS = 100_000
MAX_ARGV_ENTRIES = 4096
MAX_ARGV_BYTES = 1024 * 1024
# The fields a step record shares with slurm.proto's Step message.
STEP_RECORD_FIELDS = (
    "step_id",
    "name",
    "state",
    "nodes",
    "tasks",
    "cpus_per_task",
    "exit_code",
    "signal",
    "start_time",
    "end_time",
    "attempt",
    "reason",
)
# Worst first: a step's state when its nodes disagree.
_STATE_RANK = {NODE_FAIL: 4, CANCELLED: 3, "TIMEOUT": 2, "OUT_OF_MEMORY": 2, FAILED: 1, COMPLETED: 0}


def task_layout(tasks: int, nodes: list[str], ntasks_per_node: int = 0) -> dict[str, list[int]]:
    """Slurm's default block distribution: consecutive task ids per node, the first nodes taking one more
    when the tasks do not divide evenly; with ntasks_per_node each node takes that many in turn."""
    if not nodes or tasks < 1:
        return {}
    layout: dict[str, list[int]] = {}
    if ntasks_per_node > 0:
        used = nodes[: -(-tasks // ntasks_per_node)]
        counts = [min(ntasks_per_node, tasks - i * ntasks_per_node) for i in range(len(used))]
    else:
        used = nodes[: min(tasks, len(nodes))]
        base, extra = divmod(tasks, len(used))
        counts = [base + (1 if i < extra else 0) for i in range(len(used))]
    first = 0
    for node, count in zip(used, counts, strict=True):
        layout[node] = list(range(first, first + count))
        first += count
    return layout


def public_step(step: dict[str, Any]) -> dict[str, Any]:
    """A step record as readers see it: the Step message's fields (never the I/O token or environment)."""
    out = {key: step.get(key) for key in STEP_RECORD_FIELDS}
    out["nodes"] = list(step.get("nodes") or [])
    return out


class StepOps:
    """The step ops of ClusterState (it inherits this class). Uses its jobs dict and its ok/err results."""

    jobs: dict[int, dict[str, Any]]
    wal_level: int

    # -------------------------------------------------------------- hooks of the job ops

    def _steps_job_started(self, job: dict[str, Any]) -> None:
        """job_start: a batch job's script is its step "batch" (an interactive allocation has none). Only from
        WAL level 3 on, so that every member of a cluster still being upgraded keeps the same records."""
        if self.wal_level < 3 or job["spec"].get("interactive"):
            return
        steps = job.setdefault("steps", {})
        steps[BATCH_STEP] = {
            "step_id": BATCH_STEP,
            "name": BATCH_STEP,
            "state": RUNNING,
            "nodes": list(job["nodes"][:1]),
            "tasks": 1,
            "cpus_per_task": int(job["spec"].get("cpus_per_task") or 1),
            "exit_code": 0,
            "signal": 0,
            "start_time": job["start_time"],
            "end_time": 0.0,
            "attempt": job["attempt"],
            "reason": "",
        }

    def _steps_job_finished(self, job: dict[str, Any]) -> None:
        """A job ended: its batch step ends with it, and its srun steps still running are CANCELLED (spurd
        cancels what is left of them once the job is over). A step whose nodes all report afterwards gets the
        state they report instead: an srun that ended just before its batch script is reported late, not
        cancelled. On a failed node a step ends NODE_FAIL."""
        for step in (job.get("steps") or {}).values():
            if step["state"] != RUNNING:
                continue
            if step["step_id"] == BATCH_STEP:
                step.update(
                    state=batch_step_state(job["state"]),
                    exit_code=job["exit_code"],
                    signal=job["signal"],
                    end_time=job["end_time"],
                    reason=job.get("reason") or "",
                )
            elif job["state"] == NODE_FAIL:
                step.update(state=NODE_FAIL, end_time=job["end_time"], reason=job.get("reason") or "")
                step.pop("spec", None)
            else:
                step.update(state=CANCELLED, end_time=job["end_time"], reason="the job ended", ended_with_job=True)

    def _steps_job_requeued(self, job: dict[str, Any], when: float) -> None:
        """A running job goes back to the queue: its batch step and srun steps of this attempt are over."""
        for step in (job.get("steps") or {}).values():
            if step["state"] == RUNNING:
                step.update(state=CANCELLED, end_time=when, reason="job requeued")
                step.pop("spec", None)

    # -------------------------------------------------------------- ops

    def _op_step_create(self, r: dict[str, Any]) -> dict[str, Any]:
        from spur_hpc.controller.state import err, ok

        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        if job["state"] != RUNNING or job["attempt"] != int(r["attempt"]):
            return err("conflict", f"job {job['job_id']} is {job['state']}; steps run only in a running job")
        steps = job.setdefault("steps", {})
        key = str(r.get("key") or "")
        if key:  # a retried CreateStep (an unknown outcome) answers with the step the first one created
            for step_id, step in steps.items():
                if step.get("key") == key:
                    return ok(step_id=step_id, duplicate=True)
        if len(steps) >= MAX_STEPS_PER_JOB:
            return err("conflict", f"job {job['job_id']} already has {len(steps)} steps, the limit")
        layout = {str(node): [int(t) for t in ids] for node, ids in dict(r["layout"]).items()}
        if not layout or not set(layout) <= set(job["nodes"]):
            return err("invalid", f"the step's nodes {sorted(layout)} are not all nodes of job {job['job_id']}")
        step_id = str(job.get("next_step_id", 0))
        job["next_step_id"] = int(step_id) + 1
        nodes = [n for n in job["nodes"] if n in layout]
        steps[step_id] = {
            "step_id": step_id,
            "name": str(r.get("name") or ""),
            "state": RUNNING,
            "nodes": nodes,
            "tasks": sum(len(ids) for ids in layout.values()),
            "cpus_per_task": int(r.get("cpus_per_task") or 1),
            "exit_code": 0,
            "signal": 0,
            "start_time": float(r["time"]),
            "end_time": 0.0,
            "attempt": job["attempt"],
            "reason": "",
            "layout": layout,
            "node_results": {},
            "spec": dict(r.get("spec") or {}),
            "key": key,
        }
        return ok(step_id=step_id, duplicate=False)

    def _op_step_end(self, r: dict[str, Any]) -> dict[str, Any]:
        from spur_hpc.controller.state import err, ok

        job = self.jobs.get(int(r["job_id"]))
        if job is None:
            return err("not_found", f"job {r['job_id']} does not exist")
        step = (job.get("steps") or {}).get(str(r["step_id"]))
        if step is None or step["attempt"] != int(r["attempt"]):
            return ok(accepted=False)
        node = str(r["node"])
        if node not in step["nodes"]:
            return err("invalid", f"node {node} does not run step {job['job_id']}.{step['step_id']}")
        state = r["state"]
        if state not in FINISHED_STATES:
            return err("invalid", f"{state} is not an end state")
        if node in step["node_results"]:
            return ok(accepted=False, state=step["state"])
        step["node_results"][node] = {
            "state": state,
            "exit_code": int(r.get("exit_code", 0)),
            "signal": int(r.get("signal", 0)),
            "time": float(r["time"]),
            "reason": str(r.get("reason") or ""),
        }
        if len(step["node_results"]) < len(step["nodes"]) and (step["state"] == RUNNING or step.get("ended_with_job")):
            return ok(accepted=True, state=step["state"])
        results = list(step["node_results"].values())
        worst = max(results, key=lambda x: (_STATE_RANK.get(x["state"], 1), x["exit_code"]))
        if step["state"] in (RUNNING, NODE_FAIL) or step.pop("ended_with_job", False):
            step.update(
                state=step["state"] if step["state"] == NODE_FAIL else worst["state"],
                exit_code=max(x["exit_code"] for x in results),
                signal=max(x["signal"] for x in results),
                end_time=max(x["time"] for x in results),
                reason=worst["reason"],
            )
        step.pop("spec", None)  # the command, environment and I/O token are needed only to launch it
        return ok(accepted=True, state=step["state"])
