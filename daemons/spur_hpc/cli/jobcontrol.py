"""scontrol's job commands beyond show/hold/release: requeue, requeuehold, update JobId=..., show config.

Each parses every argument before the first call, so a typo changes nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from spur_hpc import model
from spur_hpc.cli import commandline, units
from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "scontrol"
UPDATE_KEYS = ("TimeLimit", "Partition", "Dependency", "NumCPUs", "NumTasks", "Nice", "Name", "JobName")


def is_job_update(args: list[str]) -> bool:
    return any(arg.partition("=")[0].lower() in ("jobid", "job") for arg in args)


def parse_job_update(args: list[str]) -> tuple[list[int], dict[str, str]]:
    """update JobId=12[,13] Key=Value ... -> (job ids, {lower key: value}); unknown keys are refused."""
    job_ids: list[int] = []
    fields: dict[str, str] = {}
    known = {key.lower(): key for key in UPDATE_KEYS}
    for arg in args:
        key, has_value, value = arg.partition("=")
        if not has_value:
            raise CliError(f"invalid update argument '{arg}': write Key=Value, like TimeLimit=30")
        lower = key.lower()
        if lower in ("jobid", "job"):
            job_ids.extend(commandline.parse_job_ids([value], "JobId"))
        elif lower in known:
            fields["name" if lower == "jobname" else lower] = value
        else:
            raise CliError(
                f"updating '{key}' of a job is not supported: Spur updates {', '.join(UPDATE_KEYS[:-1])} "
                "of pending jobs (and TimeLimit of running ones)"
            )
    if not job_ids:
        raise CliError("update needs JobId=ID, like: scontrol update JobId=42 TimeLimit=30")
    if not fields:
        raise CliError(f"update JobId={job_ids[0]} changes nothing: add one of {', '.join(UPDATE_KEYS[:-1])}")
    spec_of(fields, None)  # every value is checked before any call
    return job_ids, fields


def spec_of(fields: dict[str, str], job: Any) -> tuple[list[str], dict[str, Any]]:
    """Key=Value pairs -> (UpdateJobRequest.fields, its spec). NumCPUs keeps the job's task count when it
    divides evenly (CPUs per task), else it becomes that many one-CPU tasks."""
    from spur_hpc.cli import jobopts

    names: list[str] = []
    spec: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "timelimit":
            spec["time_limit_secs"] = units.parse_time_limit(value, "TimeLimit")
            names.append("time_limit_secs")
        elif key == "partition":
            spec["partition"] = jobopts.one_line_text(value.strip(), "Partition")
            names.append("partition")
        elif key == "dependency":
            text = value.strip()
            if text and text.lower() != "none":
                try:
                    model.parse_dependency(text)
                except model.InvalidValue as exc:
                    raise CliError(f"Dependency: {exc}") from None
            spec["dependency"] = "" if text.lower() == "none" else text
            names.append("dependency")
        elif key == "nice":
            spec["nice"] = jobopts.bounded(value, "Nice", -jobopts.NICE_LIMIT, jobopts.NICE_LIMIT)
            names.append("nice")
        elif key == "name":
            spec["name"] = jobopts.one_line_text(value, "Name")
            names.append("name")
        elif key == "numtasks":
            spec["tasks"] = jobopts.bounded(value, "NumTasks", 1, units.INT32_MAX)
            names.append("tasks")
        elif key == "numcpus":
            cpus = jobopts.bounded(value, "NumCPUs", 1, units.INT32_MAX)
            tasks = max(1, int(spec.get("tasks") or (job.spec.tasks if job is not None else 1)))
            if cpus % tasks == 0:
                spec["cpus_per_task"] = cpus // tasks
                names.append("cpus_per_task")
            else:
                spec.update(tasks=cpus, cpus_per_task=1)
                names += [n for n in ("tasks", "cpus_per_task") if n not in names]
    return names, spec


def update_jobs(client: Any, args: list[str]) -> int:
    from spur_hpc.cli import caller
    from spur_hpc.wire.grpcwire import RpcError

    job_ids, fields = parse_job_update(args)
    me = caller.user_name()
    failures = 0
    for index, job_id in enumerate(job_ids):
        try:
            job = client.call("GetJob", {"job_id": job_id}) if "numcpus" in fields else None
            names, spec = spec_of(fields, job)
            client.call("UpdateJob", {"job_id": job_id, "fields": names, "spec": spec, "requested_by": me}, write=True)
        except RpcError as exc:
            from spur_hpc.cli import scontrol

            commandline.stop_if_unreachable(exc, f"job {job_id}", len(job_ids) - index - 1)
            failures += 1
            print(printable(f"{scontrol.job_error_text(client, exc, job_id)} for job {job_id}"), file=sys.stderr)
    return 1 if failures else 0


def outlive_own_requeue(job_ids: list[int]) -> None:
    """`scontrol requeue $SLURM_JOB_ID` inside the job (a checkpointing script's, submitit's): the requeue
    SIGTERMs every process of the job, this one too, and the signal can land before the answer is printed, so
    the caller sees 143 for a requeue that was done. SIGTERM is ignored here for that call; KillWait's SIGKILL
    still ends a command that hangs."""
    own = {os.environ.get(name, "") for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID")}
    if any(str(job_id) in own for job_id in job_ids):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def requeue(client: Any, command: str, args: list[str]) -> int:
    """requeue / requeuehold [Incomplete] JOB_ID[,...]: back to pending (held with requeuehold)."""
    from spur_hpc.cli import caller
    from spur_hpc.wire.grpcwire import RpcError

    words = [a for a in args if a.lower() not in ("incomplete", "state=specialexit")]
    if not words:
        raise CliError(f"{command} needs job ids, like: scontrol {command} 42")
    job_ids = commandline.parse_job_ids(words)
    me = caller.user_name()
    outlive_own_requeue(job_ids)
    failures = 0
    for index, job_id in enumerate(job_ids):
        try:
            client.call(
                "RequeueJob", {"job_id": job_id, "hold": command == "requeuehold", "requested_by": me}, write=True
            )
        except RpcError as exc:
            from spur_hpc.cli import scontrol

            commandline.stop_if_unreachable(exc, f"job {job_id}", len(job_ids) - index - 1)
            failures += 1
            print(printable(f"{scontrol.job_error_text(client, exc, job_id)} for job {job_id}"), file=sys.stderr)
    return 1 if failures else 0


CONFIG_KEY_WIDTH = 23  # Slurm's "%-23s = %s"


def _secs(value: float, unit: str = "sec") -> str:
    return f"{int(value)} {unit}"


def config_pairs(conf: Any, info: Any, addresses: list[str], path: str) -> list[tuple[str, str]]:
    """The keys of Slurm's `scontrol show config` that Spur has an equivalent for, in Slurm's order, each with the
    value of Spur's setting (this host's spur.conf, read as the controllers read theirs, or the controllers'
    answer). docs/cli.md lists the keys left out and why."""
    from spur_hpc import buildinfo
    from spur_hpc.conf import enforce_flags

    c, a = conf.controller, conf.agent
    munge = conf.auth.type == "munge"
    pairs = [
        # [accounting] enforce with what its words imply, as Slurm prints AccountingStorageEnforce
        ("AccountingStorageEnforce", ",".join(enforce_flags(conf.accounting.enforce)) or "none"),
        *([("AuthInfo", f"socket={conf.auth.munge_socket}")] if munge else []),
        ("AuthType", "auth/munge" if munge else "auth/none"),
        ("ClusterName", info.cluster_name or "(null)"),
        ("DefMemPerNode", "UNLIMITED"),  # a job without --mem may use its nodes' memory
        ("EnforcePartLimits", conf.scheduler.enforce_part_limits),
        ("JobRequeue", "1" if c.job_requeue else "0"),
        ("KillWait", _secs(a.kill_wait_secs)),  # SIGTERM to SIGKILL, as spurstepd waits
        ("MaxArraySize", str(model.MAX_ARRAY_TASKS)),
        ("MaxMemPerNode", "UNLIMITED"),
        ("MinJobAge", _secs(c.min_job_age_secs)),
        ("MpiDefault", "none"),
        ("NEXT_JOB_ID", str(info.next_job_id)),
        ("OverTimeLimit", "0 min"),
        ("PreemptMode", "OFF"),
        # Slurm's preempt/qos is what [scheduler] preempt_type = "qos_priority" does (docs/controller.md "Preemption")
        ("PreemptType", "preempt/qos" if conf.scheduler.preempt_type == "qos_priority" else "preempt/none"),
        *priority_pairs(conf.scheduler),
        ("PrivateData", "none"),
        ("ReturnToService", "1"),  # a node that stopped responding is back in service when its agent registers
        ("SchedulerType", "sched/builtin"),
        ("SelectType", "select/cons_tres"),
    ]
    pairs += [(f"SlurmctldHost[{i}]", address) for i, address in enumerate(addresses)]
    pairs += [
        ("SlurmctldPort", str(model.split_host_port(addresses[0], model.CONTROLLER_GRPC_PORT)[1])),
        ("SlurmdPort", str(model.split_host_port(a.listen_addr, model.AGENT_GRPC_PORT)[1])),
        ("SlurmdSpoolDir", a.state_dir),
        ("SlurmdTimeout", _secs(c.heartbeat_timeout_secs)),  # no heartbeat this long: Not responding, DOWN
        ("SLURM_CONF", path),
        ("SLURM_VERSION", buildinfo.version()),
        ("StateSaveLocation", c.state_dir),
    ]
    return pairs


def priority_pairs(sch: Any) -> list[tuple[str, str]]:
    """[scheduler] priority_*: priority/basic is submission order less nice (controller/state.py); multifactor
    adds Slurm's Priority* keys (docs/controller.md "Priority"): Fair Tree needs no PriorityFlags, usage is never
    reset, and no TRES has a weight."""
    if sch.priority_type != "multifactor":
        return [("PriorityType", "priority/basic")]
    limit = model.parse_time_limit
    return [
        ("PriorityDecayHalfLife", units.format_clock(limit(sch.priority_decay_half_life))),
        ("PriorityCalcPeriod", units.format_clock(limit(sch.priority_calc_period))),
        ("PriorityFavorSmall", "Yes" if sch.priority_favor_small else "No"),
        ("PriorityFlags", ""),
        ("PriorityMaxAge", units.format_clock(limit(sch.priority_max_age))),
        ("PriorityUsageResetPeriod", "NONE"),
        ("PriorityType", "priority/multifactor"),
        ("PriorityWeightAge", str(sch.priority_weight_age)),
        ("PriorityWeightAssoc", str(sch.priority_weight_assoc)),
        ("PriorityWeightFairShare", str(sch.priority_weight_fairshare)),
        ("PriorityWeightJobSize", str(sch.priority_weight_job_size)),
        ("PriorityWeightPartition", str(sch.priority_weight_partition)),
        ("PriorityWeightQOS", str(sch.priority_weight_qos)),
        ("PriorityWeightTRES", "(null)"),
    ]


def config_lines(client: Any, now: float | None = None) -> list[str]:
    """scontrol show config: Slurm's `Configuration data as of TIME`, then `Key = value` lines (snakemake reads
    MinJobAge and MaxArraySize). Settings come from spur.conf at SPUR_CONF or /etc/spur/spur.conf when this host
    has one, else their defaults."""
    import os

    from spur_hpc import conf
    from spur_hpc.cli.controller import DEFAULT_CONF_PATH, controller_addresses

    path = os.environ.get("SPUR_CONF") or DEFAULT_CONF_PATH
    try:
        settings = conf.load(path, role="client")
    except (conf.ConfigError, OSError):
        settings = conf.parse("")  # no readable spur.conf here (SPUR_CONTROLLER_ADDR): the defaults
    pairs = config_pairs(settings, client.call("GetClusterInfo"), controller_addresses(), path)
    stamp = units.format_timestamp(time.time() if now is None else now)
    return [f"Configuration data as of {stamp}"] + [f"{k:<{CONFIG_KEY_WIDTH}} = {v}" for k, v in pairs]
