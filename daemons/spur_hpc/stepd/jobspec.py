"""What a job needs to run: who it runs as, where its output goes, its environment, its command line.

spurd calls check_launch() to refuse a bad LaunchJob with one clear line; spurstepd calls the same code
again when it starts the job, so both agree on every rule. Nothing here imports protobuf: spurd turns
the JobSpec into a plain dict (the launch record) and spurstepd reads only that.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from typing import Any

from spur_hpc import model
from spur_hpc.stepd.enforce import gpu_environment
from spur_hpc.stepd.session import launch_job_field

SCRIPT_FD = 3  # the job reads its script from this descriptor (a memfd); see Supervisor.spawn
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class InvalidJob(Exception):
    """A launch request that cannot run; the message is one line naming the field, the value and why."""


@dataclass(frozen=True)
class Identity:
    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str
    switch: bool  # False when this daemon cannot (not root) or need not (same uid) change user


def check_spec_types(spec: dict[str, Any]) -> None:
    for key, kind in model.JOB_SPEC_FIELDS.items():
        if key in spec and not isinstance(spec[key], kind):
            raise InvalidJob(f"spec.{key}: expected {kind.__name__}, got {type(spec[key]).__name__}")


def resolve_identity(spec: dict[str, Any]) -> Identity:
    """Find the job's user on this node. The user name wins when given; the uid must then agree with it."""
    user, uid, gid = spec.get("user") or "", int(spec.get("uid") or 0), int(spec.get("gid") or 0)
    try:
        pw = pwd.getpwnam(user) if user else pwd.getpwuid(uid)
    except KeyError:
        what = f"user {user!r}" if user else f"uid {uid}"
        raise InvalidJob(
            f"unknown user: {what} does not exist on this node; create it or submit as another user"
        ) from None
    if user and uid and pw.pw_uid != uid:
        raise InvalidJob(f"user {user!r} is uid {pw.pw_uid} on this node but the job says uid {uid}; sync the user db")
    # gid 0 means "not given" unless the user's primary group really is 0; never hand out root's group otherwise.
    gid = gid or pw.pw_gid
    # Membership is this node's answer, from the user's own primary group: getgrouplist(name, gid) always
    # contains gid, so asking it with the job's gid proves nothing.
    if gid not in os.getgrouplist(pw.pw_name, pw.pw_gid):
        try:
            name = grp.getgrgid(gid).gr_name
        except KeyError:
            name = str(gid)
        raise InvalidJob(f"user {pw.pw_name!r} is not a member of group {name} (gid {gid}); submit with its own group")
    groups = tuple(os.getgrouplist(pw.pw_name, gid))
    me = os.geteuid()
    return Identity(
        user=pw.pw_name,
        uid=pw.pw_uid,
        gid=gid,
        groups=groups,
        home=pw.pw_dir,
        shell=pw.pw_shell,
        switch=me == 0 and (pw.pw_uid != 0 or gid != 0),
    )


def check_launch(job_id: int, attempt: int, script: str, spec: dict[str, Any]) -> Identity:
    """Every rule a launch must satisfy before a supervisor starts; raises InvalidJob."""
    if job_id <= 0:
        raise InvalidJob(f"job.job_id: {job_id} is not a job id; the controller must send a positive id")
    if attempt < 0:
        raise InvalidJob(f"job.attempt: {attempt} is negative")
    if not script.strip():
        raise InvalidJob(f"job {job_id}: spec.script is missing or empty; submit a batch script")
    check_spec_types(spec)
    limit = int(spec.get("time_limit_secs") or 0)
    if limit < 0:
        raise InvalidJob(f"job {job_id}: spec.time_limit_secs is {limit}; use 0 for no limit or a positive number")
    work_dir = spec.get("work_dir") or ""
    if work_dir and not os.path.isabs(work_dir):
        raise InvalidJob(f"job {job_id}: spec.work_dir {work_dir!r} is relative; submit an absolute path")
    return resolve_identity(spec)


# The fields of a step launch record's "step" (spurd writes it from LaunchStep): name -> type.
STEP_FIELDS = {
    "step_id": str,
    "name": str,
    "nodes": list,
    "tasks": int,
    "cpus_per_task": int,
    "task_ids": list,
    "node_index": int,
    "argv": list,
    "environment": dict,
    "work_dir": str,
    "io_address": str,
    "io_token": str,
    "stdout_path": str,
    "stderr_path": str,
    "kill_on_bad_exit": bool,
}
MAX_TASKS_PER_NODE = 4096


def check_step_launch(job_id: int, attempt: int, spec: dict[str, Any], step: dict[str, Any]) -> Identity:
    """Every rule a step launch must satisfy before its supervisor starts; raises InvalidJob."""
    if job_id <= 0 or attempt < 0:
        raise InvalidJob(f"step of job {job_id} attempt {attempt}: not a job id and attempt")
    for key, kind in STEP_FIELDS.items():
        if not isinstance(step.get(key), kind):
            raise InvalidJob(f"step.{key}: missing or not a {kind.__name__}")
    if not step["step_id"].isdigit():
        raise InvalidJob(f"step.step_id {step['step_id']!r} is not a step number")
    ids = step["task_ids"]
    if not ids or len(ids) > MAX_TASKS_PER_NODE or not all(isinstance(t, int) and t >= 0 for t in ids):
        raise InvalidJob(f"step {job_id}.{step['step_id']}: task_ids must be 1 to {MAX_TASKS_PER_NODE} task numbers")
    if not step["argv"] or not all(isinstance(a, str) for a in step["argv"]) or not step["argv"][0]:
        raise InvalidJob(f"step {job_id}.{step['step_id']}: no command to run")
    if not os.path.isabs(step["work_dir"]):
        raise InvalidJob(f"step {job_id}.{step['step_id']}: work_dir {step['work_dir']!r} is not absolute")
    check_spec_types(spec)
    return resolve_identity(spec)


def work_dir(spec: dict[str, Any], ident: Identity) -> str:
    return spec.get("work_dir") or ident.home or "/tmp"


def array_fields(launch: dict[str, Any]) -> dict[str, int]:
    """The launch record's array_job_id and array_task_id (0 when not an array task or an older record)."""
    return {key: launch_job_field(launch, key) for key in ("array_job_id", "array_task_id")}


def output_paths(job_id: int, spec: dict[str, Any], ident: Identity, node: str, **pattern: Any) -> tuple[str, str]:
    """(stdout, stderr) as absolute paths; stderr goes with stdout unless asked otherwise, as in Slurm.
    The patterns are model.output_file's, which scontrol shows too: the path shown is the file written.
    pattern: model.output_file's keywords (array_job_id, array_task_id, step, task, node_index)."""
    base, name = work_dir(spec, ident), spec.get("name") or ""
    out = model.output_file(spec.get("stdout_path") or "", base, job_id, name, ident.user, node, **pattern)
    if not spec.get("stderr_path"):
        return out, out
    return out, model.output_file(spec["stderr_path"], base, job_id, name, ident.user, node, **pattern)


def job_environment(launch: dict[str, Any], ident: Identity) -> dict[str, str]:
    """The submitter's environment plus the SLURM_* variables Slurm sets for a batch script."""
    spec = launch["spec"]
    job_id, attempt = int(launch["job_id"]), int(launch["attempt"])
    nodes = list(launch.get("nodes") or [launch["node"]])
    env = {str(k): str(v) for k, v in (spec.get("environment") or {}).items()}
    # A login session would set these; keep the submitter's values when sbatch exported them.
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("HOME", ident.home)
    env.setdefault("USER", ident.user)
    env.setdefault("LOGNAME", ident.user)
    env.setdefault("SHELL", ident.shell or "/bin/sh")
    tasks = max(1, int(spec.get("tasks") or 1))
    cpt = max(1, int(spec.get("cpus_per_task") or 1))
    per_node_cpus = model.per_node_cpus({"nodes": len(nodes), "tasks": tasks, "cpus_per_task": cpt})
    cpus_here = len(os.sched_getaffinity(0)) if spec.get("exclusive") else per_node_cpus  # exclusive: the node
    nodelist = model.compress_hostlist(nodes)
    slurm = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": spec.get("name") or model.DEFAULT_JOB_NAME,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NTASKS": str(tasks),
        "SLURM_NPROCS": str(tasks),
        "SLURM_CPUS_ON_NODE": str(cpus_here),
        "SLURM_JOB_CPUS_PER_NODE": str(cpus_here),
        "SLURM_JOB_PARTITION": spec.get("partition") or "default",
        "SLURM_JOB_USER": ident.user,
        "SLURM_JOB_UID": str(ident.uid),
        "SLURM_JOB_GID": str(ident.gid),
        "SLURM_SUBMIT_DIR": env.get("SLURM_SUBMIT_DIR") or work_dir(spec, ident),
        "SLURM_SUBMIT_HOST": spec.get("submit_host") or env.get("SLURM_SUBMIT_HOST") or launch["node"],
        "SLURMD_NODENAME": launch["node"],
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_RESTART_COUNT": str(launch_job_field(launch, "restart_count")),
        "SLURM_SPUR_ATTEMPT": str(attempt),
        "ENVIRONMENT": "BATCH",
    }
    optional = {
        # Slurm sets SLURM_CPUS_PER_TASK only when -c was given; a spec keeps 1 for "not given".
        "SLURM_CPUS_PER_TASK": str(cpt) if cpt > 1 else "",
        "SLURM_NTASKS_PER_NODE": str(spec.get("ntasks_per_node") or ""),
        "SLURM_MEM_PER_NODE": str(int(spec.get("memory_mb") or 0) or ""),
        "SLURM_MEM_PER_CPU": str(int(spec.get("mem_per_cpu_mb") or 0) or ""),
        "SLURM_CLUSTER_NAME": spec.get("cluster_name") or "",
        "SLURM_JOB_ACCOUNT": spec.get("account") or "",
        "SLURM_JOB_QOS": spec.get("qos") or "",
        "SLURM_GPUS": spec.get("gpus") or "",
        "SLURM_GPUS_PER_NODE": spec.get("gpus_per_node") or "",
        "SLURM_GPUS_PER_TASK": spec.get("gpus_per_task") or "",
        "SLURM_JOB_TIME_LIMIT_SECS": str(int(spec.get("time_limit_secs") or 0) or ""),
    }
    slurm.update({key: value for key, value in optional.items() if value})
    slurm.update(array_environment(launch))
    slurm.update(gpu_environment(launch))  # the GPUs the controller gave the job here, by index
    env.update(slurm)
    return env


def array_environment(launch: dict[str, Any]) -> dict[str, str]:
    """SLURM_ARRAY_* for an array task (spec.array parsed as the controller parsed it), else nothing.
    TASK_STEP is the stride of an evenly spaced array (0-20:4 gives 4), 1 otherwise, as Slurm."""
    fields = array_fields(launch)
    array = launch["spec"].get("array") or ""
    if not fields["array_job_id"] or not array:
        return {}
    try:
        ids, _limit = model.parse_array(array)
    except model.InvalidValue:  # the controller checked it at submit; never fail a job over its variables
        ids = [fields["array_task_id"]]
    strides = {b - a for a, b in zip(ids, ids[1:], strict=False)}
    return {
        "SLURM_ARRAY_JOB_ID": str(fields["array_job_id"]),
        "SLURM_ARRAY_TASK_ID": str(fields["array_task_id"]),
        "SLURM_ARRAY_TASK_COUNT": str(len(ids)),
        "SLURM_ARRAY_TASK_MIN": str(ids[0]),
        "SLURM_ARRAY_TASK_MAX": str(ids[-1]),
        "SLURM_ARRAY_TASK_STEP": str(strides.pop() if len(strides) == 1 else 1),
    }


def script_command(script: bytes, argv: Any = ()) -> list[str]:
    """argv that runs the script read from SCRIPT_FD: its own #! interpreter, else /bin/bash, then the
    script's arguments (sbatch job.sh arg1 arg2: $1 $2 in the script).

    The interpreter line is split the way the kernel splits it (interpreter plus at most one argument),
    so the script behaves as if it had been executed directly.
    """
    script_path = f"/dev/fd/{SCRIPT_FD}"
    args = [str(a) for a in argv]
    if script.startswith(b"#!"):
        line = script[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        if line:
            interp, _, arg = line.partition(" ")
            arg = arg.strip()
            return ([interp, arg, script_path] if arg else [interp, script_path]) + args
    return ["/bin/bash", script_path] + args


def job_umask(env: dict[str, str]) -> int:
    """sbatch exports the submitter's umask as SLURM_UMASK; otherwise the usual 022."""
    try:
        return int(env.get("SLURM_UMASK", "0022"), 8) & 0o777
    except ValueError:
        return 0o022
