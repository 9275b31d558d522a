"""gRPC SlurmAgent: translate requests into SupervisorTable calls and its errors into status codes."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Any

import grpc

from spur_hpc import auth, buildinfo
from spur_hpc.agent.supervisors import LaunchError, SupervisorTable
from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc
from spur_hpc.protoconv import alloc_from_pb, spec_from_pb
from spur_hpc.stepd.jobspec import InvalidJob
from spur_hpc.stepd.session import LAUNCH_JOB_FIELDS

log = logging.getLogger("spurd.grpc")

STEP_START_WAIT_SECS = 4.0  # a signal for a step supervisor still starting waits this long for it (leader: 5 s)


def spec_to_dict(spec: slurm_pb2.JobSpec) -> dict[str, Any]:
    """The launch record's spec: every JobSpec field but the script (stored in a file of its own)."""
    out = spec_from_pb(spec)
    del out["script"]
    return out


def running_pb(table: SupervisorTable) -> list[slurm_pb2.RunningJob]:
    return [slurm_pb2.RunningJob(job_id=j, attempt=a, supervisor_pid=p) for j, a, p in table.running_jobs()]


class AgentServicer(slurm_pb2_grpc.SlurmAgentServicer):
    """Every call needs a valid credential ([auth]); only administrators (the controllers) may launch or
    signal jobs, or see which jobs run here and their supervisor pids. verifier None: no checks (unit tests)."""

    def __init__(
        self,
        node: str,
        table: SupervisorTable,
        registered: Callable[[], bool],
        verifier: auth.Verifier | None = None,
        admins: tuple[str, ...] | list[str] = (),
    ) -> None:
        self.node = node
        self.table = table
        self.registered = registered
        self.verifier = verifier
        self.admins = tuple(admins)

    def caller(self, context: grpc.ServicerContext) -> auth.Identity | None:
        """Who asks (None when unchecked); aborts UNAUTHENTICATED without a valid credential."""
        if self.verifier is None:
            return None
        credential = dict(context.invocation_metadata() or ()).get(auth.METADATA_KEY)
        try:
            return self.verifier.identify(credential)
        except auth.AuthError as exc:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))

    def is_admin(self, who: auth.Identity | None) -> bool:
        return who is None or auth.is_admin(who, self.admins)

    def authorize(self, context: grpc.ServicerContext, action: str) -> None:
        who = self.caller(context)
        if not self.is_admin(who):
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"user {who.user} (uid {who.uid}) may not {action} on {self.node}: controllers only",
            )

    def Ping(self, request, context):  # noqa: N802 (gRPC's names)
        return slurm_pb2.AgentPingReply(
            node=self.node,
            version=buildinfo.version(),
            build=buildinfo.build(),
            registered=self.registered(),
            # Which jobs run here and their pids are for the controllers and administrators only.
            running=running_pb(self.table) if self.is_admin(self.caller(context)) else [],
        )

    def LaunchJob(self, request, context):  # noqa: N802
        self.authorize(context, "launch jobs")
        job = request.job
        if job.nodes and self.node not in job.nodes:
            # The controllers reach this address for another node (a wrong advertise_addr there): never run it here.
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"job {job.job_id} is for node {', '.join(job.nodes)}, but this spurd is node {self.node}: the "
                f"controllers have this address for another node; check that node's [agent] advertise_addr",
            )
        try:
            pid, already = self.table.launch(
                job.job_id,
                job.attempt,
                list(job.nodes),
                spec_to_dict(job.spec),
                job.spec.script,
                {key: getattr(job, key) for key in LAUNCH_JOB_FIELDS},
                alloc_from_pb(request.alloc) if request.HasField("alloc") else None,
            )
        except InvalidJob as exc:
            log.warning("LaunchJob of job %d attempt %d refused: %s", job.job_id, job.attempt, exc)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except LaunchError as exc:
            log.error("LaunchJob of job %d attempt %d failed: %s", job.job_id, job.attempt, exc)
            code = grpc.StatusCode.UNAVAILABLE if exc.retryable else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, str(exc))
        if already:
            log.info(
                "LaunchJob of job %d attempt %d repeated: supervisor pid %d already runs it",
                job.job_id,
                job.attempt,
                pid,
            )
        return slurm_pb2.LaunchJobReply(supervisor_pid=pid, already_running=already)

    def LaunchStep(self, request, context):  # noqa: N802
        self.authorize(context, "launch job steps")
        job, step, options = request.job, request.step, request.request
        label = f"step {job.job_id}.{step.step_id}"
        if self.node not in step.nodes:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{label} runs on {', '.join(step.nodes)}, but this spurd is node {self.node}: the controllers have "
                "this address for another node; check that node's [agent] advertise_addr",
            )
        record = {
            "step_id": step.step_id,
            "name": step.name,
            "nodes": list(step.nodes),
            "tasks": step.tasks,
            "cpus_per_task": step.cpus_per_task,
            "task_ids": list(request.task_ids),
            "node_index": request.node_index,
            "argv": list(options.argv),
            "environment": dict(options.environment),
            "work_dir": options.work_dir,
            "io_address": options.io_address,
            "io_token": options.io_token,
            "stdout_path": options.stdout_path,
            "stderr_path": options.stderr_path,
            "kill_on_bad_exit": options.kill_on_bad_exit,
        }
        try:
            pid, already = self.table.launch_step(
                job.job_id,
                job.attempt,
                list(job.nodes),
                spec_to_dict(job.spec),
                record,
                alloc_from_pb(request.alloc) if request.HasField("alloc") else None,
                {key: getattr(job, key) for key in LAUNCH_JOB_FIELDS},
            )
        except InvalidJob as exc:
            log.warning("LaunchStep of %s refused: %s", label, exc)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except LaunchError as exc:
            log.error("LaunchStep of %s failed: %s", label, exc)
            code = grpc.StatusCode.UNAVAILABLE if exc.retryable else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, str(exc))
        log.info(
            "%s attempt %d: tasks %s under supervisor pid %d%s",
            label,
            job.attempt,
            list(request.task_ids),
            pid,
            " (already running)" if already else "",
        )
        return slurm_pb2.LaunchStepReply(supervisor_pid=pid, already_running=already)

    def SignalJob(self, request, context):  # noqa: N802
        self.authorize(context, "signal jobs")
        session = self.table.find(request.job_id, request.attempt, request.step_id)
        if session is not None and session.state == "launching" and request.step_id:
            # A step's part still starting here (srun's Ctrl-C raced its launch): deliver once it runs.
            session.ready.wait(STEP_START_WAIT_SECS)
        if session is not None and session.state == "launching" and request.signal == 0 and request.step_id:
            # Still starting: its watcher cancels it once it runs.
            session.cancel_wanted = True
            log.info("cancel for step %d.%s: noted while its supervisor starts", request.job_id, request.step_id)
            return slurm_pb2.SignalJobReply(delivered=True)
        if session is None or session.state not in ("running",):
            log.info(
                "SignalJob %d to job %d attempt %d: no such job running here",
                request.signal,
                request.job_id,
                request.attempt,
            )
            return slurm_pb2.SignalJobReply(delivered=False)
        what = "cancel" if request.signal == 0 else f"signal {request.signal}"
        if request.suspend:  # scontrol suspend / resume: the supervisor stops or continues its time limit too
            what = "resume" if request.signal == signal.SIGCONT else "suspend"
        delivered = self.table.signal(session, request.signal, suspend=request.suspend)
        log.info(
            "%s for job %d attempt %d: %s",
            what,
            session.job_id,
            session.attempt,
            "delivered" if delivered else "not delivered",
        )
        return slurm_pb2.SignalJobReply(delivered=delivered)
