"""The leader's part of job steps: check an srun's request against its allocation, record the step, start
it on each of its nodes' agents (LaunchStep), deliver signals to it, record each node's end, and end
interactive allocations (salloc) that have no batch supervisor to do it.

docs/controller.md ("Steps") describes the records; controller/steps.py holds their ops.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from typing import Any

import grpc

from spur_hpc import joblimits, model
from spur_hpc.controller import errors
from spur_hpc.controller.steps import (
    MAX_ARGV_BYTES,
    MAX_ARGV_ENTRIES,
    MAX_STEP_TASKS,
    public_step,
    task_layout,
)
from spur_hpc.model import CANCELLED, COMPLETED, FAILED, FINISHED_STATES, RUNNING, TIMEOUT
from spur_hpc.proto import slurm_pb2
from spur_hpc.protoconv import alloc_to_pb

log = logging.getLogger("spurctld.steps")

STEPS_WAL_LEVEL = 3
LAUNCH_STEP_TIMEOUT = 15.0
SIGNAL_STEP_TIMEOUT = 5.0
HOLD_POLL_SECS = 0.05  # how often a step launch to a node that holds dispatch looks whether its agent is back


def step_to_pb(step: dict[str, Any]) -> slurm_pb2.Step:
    fields = public_step(step)
    fields["state"] = slurm_pb2.JobState.Value(fields["state"])
    return slurm_pb2.Step(**{k: v for k, v in fields.items() if v is not None})


def steps_to_pb(job: dict[str, Any]) -> list[slurm_pb2.Step]:
    steps = job.get("steps") or {}
    order = sorted(steps, key=lambda s: (s != "batch", int(s) if s.isdigit() else 0))
    return [step_to_pb(steps[s]) for s in order]


def steps_key(job: dict[str, Any]) -> tuple:
    """What steps_to_pb reads of a job (for the brief listing's cache key)."""
    steps = job.get("steps")
    if not steps:
        return ()  # a pending job's, most of a long queue: no generator to build
    return tuple(
        (s["step_id"], s["state"], s["exit_code"], s["end_time"], len(s.get("node_results") or ()))
        for s in steps.values()
    )


class StepLauncher:
    """Owned by LeaderDuties: uses its service, agent clients and thread pool."""

    def __init__(self, duties) -> None:
        self.duties = duties
        self.service = duties.service

    # -------------------------------------------------------------- create

    def _require_level(self, what: str) -> None:
        level = self.service.read(lambda s: s.wal_level)
        if level < STEPS_WAL_LEVEL:
            raise errors.Conflict(
                f"{what} needs WAL level {STEPS_WAL_LEVEL}; finish the upgrade (spur cluster wal-level "
                f"{STEPS_WAL_LEVEL})"
            )

    def create(self, who, request) -> tuple[dict[str, Any], dict[str, Any]]:
        """CreateStep: (step record, job). The caller must own the job (MUNGE's uid, never a request field)."""
        service = self.service
        service.require_leader()
        self._require_level("srun (a job step)")
        job = service.get_job(request.job_id)
        if who is not None and who.uid != job["spec"].get("uid", -1):
            raise errors.PermissionDenied(
                f"user {who.user} (uid {who.uid}) may not start a step in job {request.job_id}: it belongs to "
                f"{job['spec'].get('user')}"
            )
        if job["state"] != RUNNING:
            raise errors.Conflict(
                f"job {request.job_id} is {job['state']}; srun starts steps only inside a running allocation"
            )
        spec = self._check_request(request, job)
        layout = self._layout(request, job)
        # srun's token is new for each srun, so its digest tells a retry of this request from a new step.
        key = hashlib.sha256(spec["io_token"].encode()).hexdigest()[:32]
        result = service.write(
            "step_create",
            key=key,
            job_id=job["job_id"],
            attempt=job["attempt"],
            name=spec.pop("name"),
            cpus_per_task=spec["cpus_per_task"],
            layout=layout,
            spec=spec,
            time=service.clock(),
        )
        step_id = result["step_id"]
        if result.get("duplicate"):
            job = service.get_job(job["job_id"])
            return job["steps"][step_id], job
        log.info(
            "job %s step %s: %d tasks on %s (%s)",
            job["job_id"],
            step_id,
            sum(len(t) for t in layout.values()),
            ",".join(layout),
            " ".join(spec["argv"])[:200],
        )
        self.duties.pool.submit(self.launch, job["job_id"], step_id)
        job = service.get_job(job["job_id"])
        return job["steps"][step_id], job

    def _check_request(self, request, job: dict[str, Any]) -> dict[str, Any]:
        check = self.service._check_text
        argv = list(request.argv)
        if not argv or not argv[0]:
            raise errors.InvalidArgument("the step has no command; give srun a program to run")
        if len(argv) > MAX_ARGV_ENTRIES or sum(len(a.encode()) + 1 for a in argv) > MAX_ARGV_BYTES:
            raise errors.InvalidArgument(
                f"the step's command line is over {MAX_ARGV_ENTRIES} words or {MAX_ARGV_BYTES} bytes"
            )
        if any("\x00" in a for a in argv):
            raise errors.InvalidArgument("the step's command line contains a NUL character")
        env = dict(request.environment)
        problem = joblimits.environment_problem(env)
        if problem:
            raise errors.InvalidArgument(problem)
        for k, v in env.items():
            if not k or "=" in k or "\x00" in k or "\x00" in v:
                raise errors.InvalidArgument(f"environment variable {k!r} is not valid")
        work_dir = request.work_dir or job["spec"].get("work_dir") or ""
        if not os.path.isabs(work_dir):
            raise errors.InvalidArgument(f"the step's work_dir {work_dir!r} must be an absolute path")
        for what, value in (("work_dir", work_dir), ("output", request.stdout_path), ("error", request.stderr_path)):
            check(what, value)
        name = request.name or os.path.basename(argv[0])
        check("name", name, one_line=True)
        try:
            model.split_host_port(request.io_address)
        except model.InvalidValue as exc:
            raise errors.InvalidArgument(f"io_address: {exc}") from None
        if not request.io_token or len(request.io_token) > 128:
            raise errors.InvalidArgument("io_token must be 1 to 128 characters (srun makes a random one)")
        check("cpu_bind", request.cpu_bind, 256, one_line=True)
        return {
            "name": name,
            "argv": argv,
            "environment": env,
            "work_dir": work_dir,
            "io_address": request.io_address,
            "io_token": request.io_token,
            "stdout_path": request.stdout_path,
            "stderr_path": request.stderr_path,
            "kill_on_bad_exit": bool(request.kill_on_bad_exit),
            "cpu_bind": request.cpu_bind,
            "cpus_per_task": max(1, int(request.cpus_per_task or 1)),
        }

    def _layout(self, request, job: dict[str, Any]) -> dict[str, list[int]]:
        nodes = list(job["nodes"])
        if request.nodelist:
            wanted = model.expand_hostlist(request.nodelist)
            outside = [n for n in wanted if n not in nodes]
            if outside:
                raise errors.InvalidArgument(
                    f"-w {request.nodelist}: {', '.join(outside)} not in job {job['job_id']}'s allocation "
                    f"({model.compress_hostlist(nodes)})"
                )
            nodes = [n for n in nodes if n in wanted]
        npn = max(0, int(request.ntasks_per_node or 0))
        count = int(request.nodes or 0)
        tasks = int(request.tasks or 0) or (npn * (count or len(nodes)) if npn else 0)
        tasks = tasks or int(job["spec"].get("tasks") or 1)
        if not 1 <= tasks <= MAX_STEP_TASKS:
            raise errors.InvalidArgument(f"--ntasks={tasks} is out of range; use 1 to {MAX_STEP_TASKS}")
        if count > len(nodes):
            raise errors.InvalidArgument(
                f"--nodes={count}: job {job['job_id']}'s allocation has {len(nodes)} node(s) for this step"
            )
        if count and count > tasks:
            raise errors.InvalidArgument(f"--nodes={count} is more than the step's {tasks} task(s)")
        if npn and -(-tasks // npn) > (count or len(nodes)):
            raise errors.InvalidArgument(
                f"--ntasks={tasks} with --ntasks-per-node={npn} needs {-(-tasks // npn)} nodes; the step has "
                f"{count or len(nodes)}"
            )
        used = nodes[:count] if count else nodes
        if count and not npn:
            layout = task_layout(tasks, used)
        else:
            layout = task_layout(tasks, used, npn)
        cpt = max(1, int(request.cpus_per_task or 1))
        held = int((job.get("alloc") or {}).get("cpus") or model.per_node_cpus(job["spec"]))
        for node, ids in layout.items():
            if len(ids) * cpt > held:
                raise errors.InvalidArgument(
                    f"the step needs {len(ids) * cpt} CPUs on {node} ({len(ids)} tasks x {cpt}), but job "
                    f"{job['job_id']} holds {held} there; ask for fewer tasks or CPUs (or more nodes)"
                )
        return layout

    # -------------------------------------------------------------- launch

    def resume_launches(self) -> None:
        """A new leader sends LaunchStep again for every running srun step to each node that has not reported
        its part: an agent answers a repeat with the supervisor it already runs (or ran), so this only starts
        what the old leader recorded but never got to launch."""
        pending = self.service.read(
            lambda s: [
                (j["job_id"], step_id)
                for j in s.jobs.values()
                if j["state"] == RUNNING
                for step_id, step in (j.get("steps") or {}).items()
                if step_id != "batch" and step["state"] == RUNNING and step.get("spec")
            ]
        )
        if pending:
            log.info("launching again the parts of %d running steps whose nodes have not reported", len(pending))
        for job_id, step_id in pending:
            self.duties.pool.submit(self.launch, job_id, step_id, True)

    def launch(self, job_id: int, step_id: str, missing_only: bool = False) -> None:
        """LaunchStep on every node of the step (missing_only: those that have not reported their part); a node
        that cannot start its part ends it FAILED."""
        try:
            job = self.service.get_job(job_id)
            step = job["steps"][step_id]
            spec = step.get("spec") or {}
            request_pb = slurm_pb2.CreateStepRequest(
                job_id=job_id,
                argv=spec.get("argv", []),
                environment=spec.get("environment", {}),
                work_dir=spec.get("work_dir", ""),
                io_address=spec.get("io_address", ""),
                io_token=spec.get("io_token", ""),
                stdout_path=spec.get("stdout_path", ""),
                stderr_path=spec.get("stderr_path", ""),
                kill_on_bad_exit=spec.get("kill_on_bad_exit", False),
                cpus_per_task=step["cpus_per_task"],
                name=step["name"],
            )
            job_pb = self.duties.job_to_pb(job)
            step_pb = step_to_pb(step)
        except Exception:
            log.exception("job %s step %s: cannot prepare its launch", job_id, step_id)
            return
        threads = []
        for index, node in enumerate(step["nodes"]):
            if missing_only and node in (step.get("node_results") or {}):
                continue
            request = slurm_pb2.LaunchStepRequest(
                job=job_pb,
                step=step_pb,
                task_ids=step["layout"][node],
                node_index=index,
                request=request_pb,
                alloc=alloc_to_pb(job, node),
            )
            args = (job, step, node, request)
            threads.append(threading.Thread(target=self._launch_one, args=args, name=f"step-{job_id}.{step_id}"))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _after_hold(self, node: str) -> str | None:
        """Wait while the node holds dispatch (its agent restarts), counted in the leader's dispatch gate from
        before the check, so a HoldDispatch written meanwhile waits for this launch. -> the node's address now
        (a restarted agent may have registered a new one); the caller ends the count."""
        gate = self.duties.dispatch
        while True:
            gate.begin(node)
            until, address = self.service.read(
                lambda s: (
                    (s.nodes[node].get("dispatch_hold_until", 0.0), s.nodes[node]["address"])
                    if node in s.nodes
                    else (0.0, None)
                )
            )
            wait = until - self.service.clock()
            if wait <= 0 or self.duties.stopping.is_set():
                return address
            gate.end(node)
            self.duties.stopping.wait(min(wait, HOLD_POLL_SECS))

    def _launch_one(self, job, step, node: str, request) -> None:
        job_id, step_id = job["job_id"], step["step_id"]
        error = ""
        address = self._after_hold(node)  # the node's address now (None: not known)
        try:
            if address is None:
                error = f"node {node} is not registered"
            else:
                reply = self.duties.agents.stub(address).LaunchStep(
                    request, timeout=LAUNCH_STEP_TIMEOUT, metadata=self.duties.agents.metadata()
                )
                pid = reply.supervisor_pid
                log.info("job %s step %s started on %s (supervisor pid %s)", job_id, step_id, node, pid)
                return
        except grpc.RpcError as exc:
            error = f"{exc.code().name}: {exc.details()}"
        finally:
            self.duties.dispatch.end(node)
        log.warning("job %s step %s: launch on %s failed: %s", job_id, step_id, node, error)
        try:
            self.service.write(
                "step_end",
                job_id=job_id,
                attempt=job["attempt"],
                step_id=step_id,
                node=node,
                state=FAILED,
                exit_code=1,
                signal=0,
                time=self.service.clock(),
                reason=f"launch on {node} failed: {error}"[:1000],
            )
        except errors.ControllerError as exc:
            log.warning("job %s step %s: cannot record the failed launch: %s", job_id, step_id, exc)

    # -------------------------------------------------------------- signals and ends

    def signal(self, job_id: int, step_id: str, signal: int) -> bool:
        """Deliver a signal (0 = cancel the step) to the step's supervisor on each of its nodes."""
        job = self.service.get_job(job_id)
        step = (job.get("steps") or {}).get(step_id)
        if step is None:
            raise errors.NotFound(f"job {job_id} has no step {step_id}")
        if step["state"] != RUNNING:
            return False
        addresses = self.service.read(lambda s: [s.nodes[n]["address"] for n in step["nodes"] if n in s.nodes])
        delivered = False
        for address in addresses:
            try:
                reply = self.duties.agents.stub(address).SignalJob(
                    slurm_pb2.SignalJobRequest(job_id=job_id, attempt=step["attempt"], signal=signal, step_id=step_id),
                    timeout=SIGNAL_STEP_TIMEOUT,
                    metadata=self.duties.agents.metadata(),
                )
                delivered = delivered or reply.delivered
            except grpc.RpcError as exc:
                log.info("signal %s to step %s.%s at %s failed: %s", signal, job_id, step_id, address, exc.code().name)
        return delivered

    def cancel_steps(self, job_id: int) -> None:
        """Cancel every running srun step of a job (its allocation is ending)."""
        try:
            job = self.service.get_job(job_id)
        except errors.ControllerError:
            return
        for step_id, step in (job.get("steps") or {}).items():
            if step_id != "batch" and step["state"] == RUNNING:
                self.signal(job_id, step_id, 0)

    def complete(self, request) -> bool:
        """CompleteStep from an agent: one node's part of a step ended."""
        self.service.require_leader()
        state = slurm_pb2.JobState.Name(request.state)
        if state not in FINISHED_STATES:
            raise errors.InvalidArgument(f"{state} is not an end state of a step")
        self.service._check_text("reason", request.reason, one_line=True)
        result = self.service.write(
            "step_end",
            job_id=request.job_id,
            attempt=request.attempt,
            step_id=request.step_id,
            node=request.node,
            state=state,
            exit_code=request.exit_code,
            signal=request.signal,
            time=request.end_time or self.service.clock(),
            reason=request.reason,
        )
        return bool(result.get("accepted"))

    def end_allocation(self, job_id: int, exit_code: int, signal: int) -> dict[str, Any]:
        """EndAllocation (its owner, checked by the servicer): salloc's command exited, so its interactive
        allocation ends, and its steps with it."""
        self.service.require_leader()
        job = self.service.get_job(job_id)
        if not job["spec"].get("interactive"):
            raise errors.Conflict(f"job {job_id} is a batch job; it ends with its script (scancel ends it early)")
        if job["state"] != RUNNING:
            return job
        state = COMPLETED if exit_code == 0 and signal == 0 else FAILED
        self.service.write(
            "job_end",
            job_id=job_id,
            attempt=job["attempt"],
            state=state,
            exit_code=exit_code,
            signal=signal,
            time=self.service.clock(),
            reason="",
        )
        self.duties.pool.submit(self.cancel_steps, job_id)
        self.duties.poke()
        return self.service.get_job(job_id)

    def follow_up_interactive(self, job_id: int, attempt: int, cancel: bool, over_limit: bool) -> None:
        """An interactive allocation has no supervisor to stop it: scancel and its time limit end it here."""
        state, reason = (CANCELLED, "cancelled") if cancel else (TIMEOUT, "time limit")
        log.info("interactive job %s: %s; ending it and its steps", job_id, reason)
        self.service.write(
            "job_end",
            job_id=job_id,
            attempt=attempt,
            state=state,
            exit_code=0,
            signal=0 if cancel else 9,
            time=self.service.clock(),
            reason=reason,
        )
        self.duties.pool.submit(self.cancel_steps, job_id)
        self.duties.poke()
