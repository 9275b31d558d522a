"""salloc: get an allocation, run a command (or $SHELL) here with SLURM_JOB_ID set, then give it back.

The allocation is an interactive job (spec.interactive): the controller places it like any job, but no
agent starts anything in it; srun run from the command starts steps there. When the command exits, salloc
ends the allocation (EndAllocation). An allocation whose salloc vanished (killed, host lost) stays until
scancel or its time limit, which the controller enforces for interactive jobs itself.
"""

from __future__ import annotations

import os
import sys

from spur_hpc.cli.runner import CliError, submit_failure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "salloc"
SYNOPSIS = "[OPTIONS] [COMMAND [ARGS...]]"
WAIT_POLL_SECS = 0.3
INTERACTIVE_SCRIPT = "#!/bin/sh\n# An interactive allocation (salloc or srun): no batch step runs in it.\n"


def allocation_spec(parsed, command: list[str], environ: dict[str, str], program: str) -> dict[str, Any]:
    from spur_hpc.cli import caller
    from spur_hpc.cli.sbatch import environment_to_export

    spec: dict[str, Any] = {
        "name": os.path.basename(command[0]) if command else "interactive",
        "script": INTERACTIVE_SCRIPT,
        "user": caller.user_name(),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "work_dir": os.getcwd(),
        "environment": {},
        "interactive": True,
        "submit_host": caller.host_name(),
        "alloc_sid": os.getsid(0),  # scontrol show job's AllocNode:Sid
    }
    fields = parsed.spec_fields()
    fields.pop("environment", None)
    spec.update(fields)
    if parsed.values.get("chdir"):
        spec["work_dir"] = os.path.abspath(parsed.values["chdir"])
    env = environment_to_export(None, environ)
    env.setdefault("SLURM_SUBMIT_DIR", os.getcwd())
    env.setdefault("SLURM_SUBMIT_HOST", caller.host_name())
    from spur_hpc import joblimits

    spec["environment"] = env if not joblimits.environment_problem(env) else {}
    return spec


def allocate(client, parsed, command: list[str], environ: dict[str, str], program: str) -> int:
    """Submit the interactive job and wait until it runs; its id. Ctrl-C while waiting cancels it."""
    import time
    import uuid

    from spur_hpc.wire.grpcwire import RpcError

    spec = allocation_spec(parsed, command, environ, program)
    quiet = bool(parsed.values.get("quiet"))
    try:
        reply = client.call("SubmitJob", {"spec": spec, "idempotency_key": str(uuid.uuid4())}, write=True)
    except RpcError as exc:
        raise submit_failure(program, "Job submit/allocate failed", exc) from None
    job_id = int(reply.job_id)
    said_waiting = False
    started = time.monotonic()
    try:
        while True:
            try:
                job = client.call("GetJob", {"job_id": job_id})
            except RpcError as exc:
                raise CliError(f"job {job_id}: cannot follow the allocation: {exc.details}") from None
            state = _state(job.state)
            if state == "RUNNING":
                break
            if state != "PENDING":
                raise CliError(f"job {job_id} ended {state} before it started ({job.reason})")
            if not said_waiting and time.monotonic() - started > 1.0 and not quiet:
                print(f"{program}: Pending job allocation {job_id}", file=sys.stderr)
                print(f"{program}: job {job_id} queued and waiting for resources", file=sys.stderr)
                said_waiting = True
            time.sleep(WAIT_POLL_SECS)
    except KeyboardInterrupt:
        try:
            client.call("CancelJob", {"job_id": job_id}, write=True)
        except RpcError:
            pass
        print(f"{program}: Job allocation {job_id} has been revoked.", file=sys.stderr)
        raise
    if program == PROGRAM and not quiet:
        print(f"{program}: Granted job allocation {job_id}", file=sys.stderr)
    return job_id


def release(client, job_id: int, exit_code: int, program: str) -> None:
    from spur_hpc.wire.grpcwire import RpcError

    code, signal = (0, exit_code - 128) if exit_code > 128 else (exit_code, 0)
    try:
        client.call("EndAllocation", {"job_id": job_id, "exit_code": code, "signal": signal}, write=True)
    except RpcError as exc:
        print(f"{program}: error: cannot end job {job_id}: {exc.details} (scancel {job_id} ends it)", file=sys.stderr)
        return
    if program == PROGRAM:
        print(f"{program}: Relinquishing job allocation {job_id}", file=sys.stderr)


def _state(value: Any) -> str:
    from spur_hpc.cli.srun import _state_name

    return _state_name(value)


def job_environment(client, job_id: int, environ: dict[str, str]) -> dict[str, str]:
    """What the command sees: the caller's environment and the allocation's SLURM_* variables."""
    from spur_hpc import model

    job = client.call("GetJob", {"job_id": job_id})
    nodes = list(job.nodes)
    env = dict(environ)
    env.update(
        {
            "SLURM_JOB_ID": str(job_id),
            "SLURM_JOBID": str(job_id),
            "SLURM_JOB_NAME": job.spec.name,
            "SLURM_JOB_NODELIST": model.compress_hostlist(nodes),
            "SLURM_NODELIST": model.compress_hostlist(nodes),
            "SLURM_JOB_NUM_NODES": str(len(nodes)),
            "SLURM_NNODES": str(len(nodes)),
            "SLURM_NTASKS": str(job.spec.tasks or 1),
            "SLURM_NPROCS": str(job.spec.tasks or 1),
            "SLURM_CPUS_PER_TASK": str(job.spec.cpus_per_task or 1),
            "SLURM_JOB_PARTITION": job.spec.partition,
            "SLURM_SUBMIT_DIR": os.getcwd(),
        }
    )
    return env


def main(argv: list[str], program: str = PROGRAM) -> int:
    import subprocess

    from spur_hpc.cli import commandline
    from spur_hpc.cli.controller import ControllerClient
    from spur_hpc.cli.jobopts import options_for, parse_job_options

    environ = dict(os.environ)
    parsed, command = parse_job_options(program, argv, environ)
    if commandline.answer_info_flags(program, parsed.values, SYNOPSIS, "Get an allocation.", options_for(program)):
        return 0
    parsed.print_warnings()
    command = command or [environ.get("SHELL") or "/bin/sh"]
    client = ControllerClient()
    job_id = allocate(client, parsed, command, environ, program)
    code = 1
    try:
        env = job_environment(client, job_id, environ)
        import signal

        # Ctrl-C is the command's (a handler, unlike SIG_IGN, is not inherited through exec); salloc waits.
        previous = signal.signal(signal.SIGINT, lambda *_: None)
        try:
            code = subprocess.call(command, env=env)
        except OSError as exc:
            print(f"{program}: error: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
            code = 127
        finally:
            signal.signal(signal.SIGINT, previous)
        if code < 0:
            code = 128 - code
    finally:
        release(client, job_id, code, program)
    return code
