"""Slurm's --json (and --yaml) documents for squeue, sinfo, sacct and scontrol show: openapi v0.0.38, Slurm 22.05.

The layout, field names, value types and the fields Slurm leaves null follow the captures of Debian's Slurm
22.05.8 in tests/golden/slurm-22.05-json (squeue --json: jobs[] of job_info; sinfo --json: nodes[]; sacct --json:
jobs[] of accounting records with steps[]). 22.05's scontrol has no --json: Spur's `scontrol --json show
job|node|partition` prints the same jobs[] and nodes[] as squeue and sinfo, and partitions[] as slurmrestd's
v0.0.38 /partitions (src/plugins/openapi/v0.0.38/partitions.c), which is what later Slurm's scontrol does.
Neither layout has a job's script or environment, so no listing carries them; docs/cli.md lists the fields
Spur fills differently from Slurm and why.
"""

from __future__ import annotations

import sys

from spur_hpc import model
from spur_hpc.cli import jobview
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PLUGIN_VERSION = "v0.0.38"  # the only layout Spur emits: Slurm 22.05's
VERSIONS = (PLUGIN_VERSION,)
SLURM_RELEASE = (22, 5, 8)  # the Slurm whose layout this is (the captures' release)
ONE_YEAR = 365 * 86400  # a running job without a time limit: Slurm's end_time is its start plus a year
SHOW_FLAGS = ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"]
UNMEASURED_CPU_TIME = {"seconds": 0, "microseconds": 0}  # Spur's accounting records no CPU times
TRES_IDS = {"cpu": 1, "mem": 2, "energy": 3, "node": 4, "billing": 5}  # Slurm's fixed TRES ids
ACTIVE_STATES = ("RUNNING", "SUSPENDED", "COMPLETING")


def requested_version(value: Any, option: str = "--json") -> str | None:
    """The layout asked for by --json / --json=VERSION / --yaml=VERSION (None when not given).

    Slurm 22.05 takes no version; later Slurm takes --json=v0.0.NN; Spur accepts both and emits v0.0.38."""
    if value is None or value is False:
        return None
    if value is True or value == "":
        return PLUGIN_VERSION
    text = str(value).strip()
    wanted = text if text.startswith("v") else f"v{text}"
    if wanted not in VERSIONS:
        raise CliError(
            f"{option}={text}: Spur emits the data_parser layout {PLUGIN_VERSION} only (Slurm 22.05's); "
            f"use {option} or {option}={PLUGIN_VERSION}"
        )
    return wanted


def meta() -> dict[str, Any]:
    """Slurm's meta block. 22.05's has no place for the client command (later Slurm's meta.client): Spur names
    itself and its version in the plugin's name, leaving plugin.type and the Slurm version readers check."""
    from spur_hpc import buildinfo  # here: its hashlib and pathlib are 5 ms every squeue would pay

    major, minor, micro = SLURM_RELEASE
    return {
        "plugin": {
            "type": f"openapi/{PLUGIN_VERSION}",
            "name": f"Slurm OpenAPI {PLUGIN_VERSION} (Spur {buildinfo.version()})",
        },
        "Slurm": {
            "version": {"major": major, "micro": micro, "minor": minor},
            "release": f"{major}.{minor:02d}.{micro}",
        },
    }


def document(key: str, records: list[dict[str, Any]], errors: list[dict[str, Any]] | None = None) -> dict:
    """{meta, errors, <key>: records}, as 22.05 prints them (no warnings list in 22.05's CLI output)."""
    return {"meta": meta(), "errors": errors or [], key: records}


def error(text: str, errno: int = 0) -> dict[str, Any]:
    return {"error": text, "errno": errno}


def dumps(doc: dict[str, Any]) -> str:
    """Slurm's serializer: two-space indent, '/' written as '\\/', empty lists as '[\\n  ]' (json.loads reads
    them the same; a script comparing text sees Slurm's)."""
    import json

    return json.dumps(doc, indent=2, ensure_ascii=False).replace("/", "\\/") + "\n"


def print_document(doc: dict[str, Any], yaml: bool = False) -> None:
    """--json prints JSON; --yaml prints the same document as JSON too, which is valid YAML (a YAML reader gets
    the mapping Slurm's YAML gives, whose empty strings are `!!null null`; Slurm's has explicit !!tags too)."""
    import json

    if yaml:
        sys.stdout.write(json.dumps(_empty_as_null(doc), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(dumps(doc))


def _empty_as_null(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _empty_as_null(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_empty_as_null(v) for v in value]
    return None if value == "" else value


# ---------------------------------------------------------------------------------------------- shared pieces


def _int(value: float) -> int:
    return int(value or 0)


def memory_text(mb: int) -> str:
    """Memory in a TRES string as Slurm writes it: 4G, 512M, 1536M."""
    return f"{mb // 1024}G" if mb and mb % 1024 == 0 else f"{mb}M"


def _is_array_task(job: Any) -> bool:
    return bool(job.array_job_id) and not job.array_pending


def _started(job: Any) -> bool:
    return bool(job.start_time) and bool(job.nodes)


def _wait_status(exit_code: int, signal: int) -> int:
    """Slurm's exit_code in job_info is the wait(2) status: the exit code in the high byte, the signal below."""
    return ((exit_code & 0xFF) << 8) | (signal & 0x7F)


def _end_time(job: Any) -> int:
    if job.end_time:
        return _int(job.end_time)
    if job.start_time:
        return _int(job.start_time + (job.spec.time_limit_secs or ONE_YEAR))
    return 0


def _time_limit_minutes(secs: int) -> int | None:
    return secs // 60 if secs else None  # null: no limit (Slurm's INFINITE)


def _tres(job: Any, allocated: bool) -> str:
    cpus, nodes = jobview.cpu_count(job), jobview.node_count(job)
    parts = [f"cpu={cpus}"]
    if job.spec.memory_mb and not allocated:
        parts.append(f"mem={memory_text(job.spec.memory_mb * nodes)}")
    parts += [f"node={nodes}", f"billing={cpus}"]
    return ",".join(parts)


def _dependency(job: Any) -> str:
    spec = job.spec.dependency
    if not spec:
        return ""
    return spec if job.reason != "Dependency" else f"{spec}(unfulfilled)"


def _cpus_per_node(job: Any) -> int:
    return max(1, jobview.cpu_count(job) // max(1, len(job.nodes)))


# ---------------------------------------------------------------------------------------------- squeue's jobs[]


def job_record(job: Any, cluster: str = "") -> dict[str, Any]:
    """One job as squeue --json shows it (job_info, v0.0.38)."""
    spec = job.spec
    state = jobview.state_name(job)
    started = _started(job)
    task = _is_array_task(job)
    pending_rest = jobview.array_task_text(job) if job.array_job_id and job.array_pending else ""
    never_ran = state in model.FINISHED_STATES and not job.start_time
    record: dict[str, Any] = {
        "account": spec.account,
        "accrue_time": _int(job.eligible_time),
        "admin_comment": "",
        "array_job_id": job.array_job_id,
        "array_task_id": job.array_task_id if task else None,
        "array_max_tasks": job.array_max_running,
        "array_task_string": pending_rest,
        "association_id": 0,
        "batch_features": "",
        "batch_flag": not spec.interactive,
        "batch_host": job.nodes[0] if started else "",
        "flags": ["JOB_WAS_RUNNING"] if state in ACTIVE_STATES else [],
        "burst_buffer": "",
        "burst_buffer_state": "",
        "cluster": spec.cluster_name or cluster,
        "cluster_features": "",
        "command": getattr(spec, "command", ""),  # the batch script's path; "" for --wrap, as in Slurm
        "comment": spec.comment,
        "container": "",
        "contiguous": False,
        "core_spec": None,
        "thread_spec": None,
        "cores_per_socket": None,
        "billable_tres": float(jobview.cpu_count(job)) if started else None,
        "cpus_per_task": spec.cpus_per_task if spec.cpus_per_task > 1 else None,  # 1: Spur's default, not -c
        "cpu_frequency_minimum": None,
        "cpu_frequency_maximum": None,
        "cpu_frequency_governor": None,
        "cpus_per_tres": "",
        "deadline": _int(spec.deadline),
        "delay_boot": 0,
        "dependency": _dependency(job),
        "derived_exit_code": _wait_status(*_worst_step(job)),
        "eligible_time": _int(job.eligible_time),
        "end_time": _end_time(job),
        "excluded_nodes": spec.exclude,
        "exit_code": _wait_status(job.exit_code, job.signal),
        "features": spec.constraint,
        "federation_origin": "",
        "federation_siblings_active": "",
        "federation_siblings_viable": "",
        "gres_detail": [],
        "group_id": spec.gid,
        "group_name": jobview.group_name(spec.gid),
        "job_id": job.job_id,
    }
    if started:
        per_node = _cpus_per_node(job)
        record["job_resources"] = {
            "nodes": model.compress_hostlist(list(job.nodes)),
            "allocated_cores": jobview.cpu_count(job),
            "allocated_hosts": len(job.nodes),
            "allocated_nodes": [
                {
                    # Spur does not place a job on given sockets: its CPUs are counted on socket 0
                    "sockets": {"0": {"cores": {str(core): "allocated" for core in range(per_node)}}},
                    "nodename": node,
                    "cpus_used": 0,
                    "memory_used": 0,
                    "memory_allocated": spec.memory_mb,
                }
                for node in job.nodes
            ],
        }
    record.update(
        {
            "job_state": state,
            "last_sched_evaluation": _int(job.start_time or job.eligible_time or job.submit_time),
            "licenses": "",
            "max_cpus": 0,
            "max_nodes": 0,
            "mcs_label": "",
            "memory_per_tres": "",
            "name": spec.name,
            "nodes": model.compress_hostlist(list(job.nodes)) if job.nodes else "",
            "nice": spec.nice or None,
            "tasks_per_core": None,
            "tasks_per_node": spec.ntasks_per_node,
            "tasks_per_socket": None,
            "tasks_per_board": 0,
            "cpus": None if never_ran else jobview.cpu_count(job),  # Slurm drops them when it ends a pending job
            "node_count": jobview.node_count(job),
            "tasks": None if never_ran else max(1, spec.tasks),
            "het_job_id": 0,
            "het_job_id_set": "",
            "het_job_offset": 0,
            "partition": jobview.partition(job),
            "prefer": "",
            "memory_per_node": spec.memory_mb or None,
            "memory_per_cpu": spec.mem_per_cpu_mb or None,
            "minimum_cpus_per_node": max(1, spec.cpus_per_task),
            "minimum_tmp_disk_per_node": 0,
            "preempt_time": 0,
            "pre_sus_time": 0,
            "priority": 0 if job.held else job.priority,
            "profile": None,
            "qos": spec.qos or "normal",
            "reboot": False,
            "required_nodes": spec.nodelist,
            "requeue": spec.requeue != 2,
            "resize_time": 0,
            "restart_cnt": job.restart_count,
            "resv_name": "",
            "shared": None,
            "show_flags": list(SHOW_FLAGS),
            "sockets_per_board": 0,
            "sockets_per_node": None,
            "start_time": _int(job.start_time),
            "state_description": "",
            "state_reason": job.reason or "None",
            "standard_error": spec.stderr_path,
            "standard_input": "/dev/null",
            "standard_output": spec.stdout_path,
            "submit_time": _int(job.submit_time),
            "suspend_time": _int(job.suspend_time),
            "system_comment": "",
            "time_limit": _time_limit_minutes(spec.time_limit_secs),
            "time_minimum": spec.time_min_secs // 60,
            "threads_per_core": None,
            "tres_bind": "",
            "tres_freq": "",
            "tres_per_job": f"gres:gpu:{spec.gpus}" if spec.gpus else "",
            "tres_per_node": "" if jobview.tres_per_node(spec) == "N/A" else jobview.tres_per_node(spec),
            "tres_per_socket": "",
            "tres_per_task": f"gres:gpu:{spec.gpus_per_task}" if spec.gpus_per_task else "",
            "tres_req_str": _tres(job, allocated=False),
            "tres_alloc_str": _tres(job, allocated=True) if started else "",
            "user_id": spec.uid,
            "user_name": spec.user or str(spec.uid),
            "wckey": spec.wckey,
            "current_working_directory": spec.work_dir,
        }
    )
    return record


def _worst_step(job: Any) -> tuple[int, int]:
    """The derived exit code: the largest of the srun steps' (the batch step's is the job's own exit code)."""
    steps = [s for s in getattr(job, "steps", None) or [] if s.step_id not in ("batch", "extern")]
    return max(((s.exit_code, s.signal) for s in steps), default=(0, 0))


def jobs_document(jobs: list[Any], cluster: str = "") -> dict[str, Any]:
    return document("jobs", [job_record(job, cluster) for job in jobs])


# ---------------------------------------------------------------------------------------------- sinfo's nodes[]


def _node_state(node: Any) -> tuple[str, list[str]]:
    """Slurm's base state in lower case and its flags: a drained node is idle with DRAIN, a draining one is
    mixed or allocated with DRAIN."""
    from spur_hpc.cli import nodeview  # here, not at the top: squeue --json needs no node code

    name = nodeview.state_name(node)
    flags = []
    if name in ("DRAINING", "DRAINED") or getattr(node, "drain", False):
        flags.append("DRAIN")
    if name == "DRAINED":
        base = "idle"
    elif name == "DRAINING":
        base = "allocated" if node.allocated.cpus >= node.resources.cpus else "mixed"
    else:
        base = name.lower()
    if nodeview.not_responding(node) and base != "down":
        flags.append("NOT_RESPONDING")
    return base, flags


def _port(address: str) -> int:
    host, _, port = address.rpartition(":")
    return int(port) if host and port.isdigit() else 0


def _host(address: str) -> str:
    host, _, port = address.rpartition(":")
    return (host if host and port.isdigit() else address).strip("[]")


def node_record(node: Any) -> dict[str, Any]:
    """One node as sinfo --json shows it (node_info, v0.0.38)."""
    from spur_hpc.cli import nodeview

    cpus, memory = node.resources.cpus, node.resources.memory_mb
    alloc = node.allocated.cpus
    state, flags = _node_state(node)
    sockets = node.sockets or cpus
    features = ",".join(node.features)
    return {
        "architecture": node.arch,
        "burstbuffer_network_address": "",
        "boards": 1,
        "boot_time": _int(node.boot_time),
        "comment": "",
        "cores": node.cores_per_socket or 1,
        "cpu_binding": 0,
        "cpu_load": 0,  # Spur's agents report no load average
        "extra": "",
        "free_memory": 0,  # nor free memory
        "cpus": cpus,
        "last_busy": _int(node.last_busy),
        "features": features,
        "active_features": features,
        "gres": "" if nodeview.gres_text(node.resources) == "(null)" else nodeview.gres_text(node.resources),
        "gres_drained": "N/A",
        "gres_used": "",
        "mcs_label": "",
        "name": node.name,
        "next_state_after_reboot": "invalid",
        "address": _host(node.address),
        "hostname": node.name,
        "state": state,
        "state_flags": flags,
        "next_state_after_reboot_flags": [],
        "operating_system": node.os,
        "owner": None,
        "partitions": list(node.partitions) or [nodeview.partition(node)],
        "port": _port(node.address),
        "real_memory": memory,
        "reason": node.reason,
        "reason_changed_at": _int(node.reason_time),
        "reason_set_by_user": (node.reason_set_by or "root") if node.reason else None,
        "slurmd_start_time": _int(node.agent_started),
        "sockets": sockets,
        "threads": node.threads_per_core or 1,
        "temporary_disk": 0,
        "weight": 1,
        "tres": f"cpu={cpus},mem={memory_text(memory)},billing={cpus}",
        "slurmd_version": node.version,
        "alloc_memory": node.allocated.memory_mb,
        "alloc_cpus": alloc,
        "idle_cpus": max(0, cpus - alloc),
        "tres_used": _node_tres_used(node),
        "tres_weighted": float(alloc),
    }


def _node_tres_used(node: Any) -> str | None:
    if not node.allocated.cpus:
        return None
    used = f"cpu={node.allocated.cpus}"
    return used + (f",mem={memory_text(node.allocated.memory_mb)}" if node.allocated.memory_mb else "")


def nodes_document(nodes: list[Any]) -> dict[str, Any]:
    return document("nodes", [node_record(n) for n in nodes])


# ---------------------------------------------------------------------------------------------- partitions[]


def _minutes_or_unlimited(secs: int) -> int:
    return secs // 60 if secs else -1  # slurmrestd writes INFINITE as -1


def partition_records(nodes: list[Any], partitions: list[Any] | None = None) -> list[dict[str, Any]]:
    """Partitions (nodeview.PartitionView, as sinfo.list_partitions gives them; None: the ones the nodes imply)
    as slurmrestd's v0.0.38 /partitions gives them; their CPUs and memory are their nodes'."""
    if partitions is None:
        from spur_hpc.cli import nodeview

        partitions = nodeview.partitions_of(None, nodes)
    by_name = {n.name: n for n in nodes}
    records = []
    for part in partitions:
        members = [by_name[name] for name in part.nodes if name in by_name]
        cpus = sum(n.resources.cpus for n in members)
        memory = sum(n.resources.memory_mb for n in members)
        flags = (["default"] if part.is_default else []) + (["hidden"] if part.hidden else [])
        records.append(
            {
                "flags": flags,
                "preemption_mode": ["disabled"],
                "allowed_allocation_nodes": "",
                "allowed_accounts": "",
                "allowed_groups": "",
                "allowed_qos": "",
                "alternative": "",
                "billing_weights": "",
                "default_memory_per_cpu": 0,
                # null: no DefaultTime of its own (the MaxTime applies)
                "default_time_limit": part.default_time_secs // 60 if part.default_time_secs else None,
                "denied_accounts": "",
                "denied_qos": "",
                "preemption_grace_time": 0,
                "maximum_cpus_per_node": -1,
                "maximum_memory_per_node": 0,
                "maximum_nodes_per_job": part.max_nodes or -1,
                "max_time_limit": _minutes_or_unlimited(part.max_time_secs or 0),
                "min nodes per job": part.min_nodes or 0,
                "name": part.name,
                "nodes": model.compress_hostlist(list(part.nodes)) if part.nodes else "",
                "over_time_limit": None,
                "priority_job_factor": part.priority_job_factor or 1,
                "priority_tier": part.priority_tier or 1,
                "qos": "",
                "state": part.state,
                "total_cpus": cpus,
                "total_nodes": len(part.nodes),
                "tres": f"cpu={cpus},mem={memory_text(memory)},node={len(part.nodes)},billing={cpus}",
            }
        )
    return records


# ---------------------------------------------------------------------------------------------- sacct's jobs[]


def _exit_status(exit_code: int, signal: int) -> dict[str, Any]:
    """sacct's {status, return_code} (and signal when one ended it)."""
    if signal:
        return {"status": "SIGNALED", "return_code": exit_code, "signal": {"signal_id": signal, "name": ""}}
    return {"status": "FAILED" if exit_code else "SUCCESS", "return_code": exit_code}


def _tres_item(kind: str, count: int | None) -> dict[str, Any]:
    return {"type": kind, "name": None, "id": TRES_IDS[kind], "count": count}


def _elapsed(start: float, end: float, now: float) -> int:
    return max(0, _int((end or now) - start)) if start else 0


def _step_record(job: Any, step: Any, now: float) -> dict[str, Any]:
    nodes = list(step.nodes)
    cpus = max(1, step.tasks) * max(1, step.cpus_per_task)
    step_id: int | str = int(step.step_id) if step.step_id.isdigit() else step.step_id
    return {
        "nodes": {"list": nodes, "count": len(nodes), "range": model.compress_hostlist(nodes) if nodes else ""},
        "tres": {
            "requested": {"max": [], "min": [], "average": [], "total": []},
            "consumed": {"max": [], "min": [], "average": [], "total": []},
            "allocated": [
                _tres_item("cpu", cpus),
                _tres_item("mem", job.spec.memory_mb * len(nodes)),
                _tres_item("node", len(nodes)),
            ],
        },
        "time": {
            "elapsed": _elapsed(step.start_time, step.end_time, now),
            "end": _int(step.end_time),
            "start": _int(step.start_time),
            "suspended": 0,
            "system": dict(UNMEASURED_CPU_TIME),
            "total": dict(UNMEASURED_CPU_TIME),
            "user": dict(UNMEASURED_CPU_TIME),
        },
        "exit_code": _exit_status(step.exit_code, step.signal),
        "tasks": {"count": max(1, step.tasks)},
        "pid": None,
        "CPU": _step_cpu_frequency(step.step_id == "batch"),
        "kill_request_user": None,
        "state": _step_state(step),
        "statistics": {"CPU": {"actual_frequency": 0}, "energy": {"consumed": 0}},
        "step": {"job_id": job.job_id, "het": {"component": None}, "id": step_id, "name": step.name or step.step_id},
        "task": {"distribution": "Unknown" if step.step_id == "batch" else "Cyclic"},
    }


SRUN_GOVERNORS = ["Conservative", "Performance", "PowerSave", "OnDemand", "UserSpace"]


def _step_cpu_frequency(batch: bool) -> dict[str, Any]:
    """Slurm's batch step records frequency 0 and no governor; an srun step no frequency (null) and every
    governor srun may ask for (Spur sets no CPU frequency either way)."""
    if batch:
        return {"requested_frequency": {"min": 0, "max": 0}, "governor": []}
    return {"requested_frequency": {"min": None, "max": None}, "governor": list(SRUN_GOVERNORS)}


def _step_state(step: Any) -> str:
    from spur_hpc.wire import protocodec

    return protocodec.schema().enum_name("JobState", step.state)


def accounting_record(job: Any, now: float, cluster: str = "") -> dict[str, Any]:
    """One job as sacct --json shows it (the slurmdbd job record, v0.0.38)."""
    spec = job.spec
    task = _is_array_task(job)
    cpus, nodes = jobview.cpu_count(job), jobview.node_count(job)
    started = bool(job.start_time)
    allocated = [_tres_item("cpu", cpus), _tres_item("energy", None), _tres_item("node", nodes)]
    allocated.append(_tres_item("billing", cpus))
    requested = [_tres_item("cpu", cpus)]
    if spec.memory_mb:
        requested.append(_tres_item("mem", spec.memory_mb * nodes))
    requested += [_tres_item("node", nodes), _tres_item("billing", cpus)]
    cluster_name = spec.cluster_name or cluster
    return {
        "account": spec.account,
        "comment": {"administrator": None, "job": spec.comment or None, "system": None},
        "allocation_nodes": len(job.nodes) if started else 0,
        "array": {
            "job_id": job.array_job_id,
            "limits": {"max": {"running": {"tasks": job.array_max_running}}},
            "task": jobview.array_task_text(job) if job.array_pending else None,
            "task_id": job.array_task_id if task else None,
        },
        "association": {"account": spec.account, "cluster": cluster_name, "partition": None, "user": spec.user},
        "cluster": cluster_name,
        "constraints": spec.constraint,
        "container": None,
        "derived_exit_code": _exit_status(*_worst_step(job)),
        "time": {
            "elapsed": _elapsed(job.start_time, job.end_time, now),
            "eligible": _int(job.eligible_time),
            "end": _int(job.end_time),
            "start": _int(job.start_time),
            "submission": _int(job.submit_time),
            "suspended": _int(job.suspended_secs),
            "system": dict(UNMEASURED_CPU_TIME),
            "limit": _time_limit_minutes(spec.time_limit_secs),
            "total": dict(UNMEASURED_CPU_TIME),
            "user": dict(UNMEASURED_CPU_TIME),
        },
        "exit_code": _exit_status(job.exit_code, job.signal),
        "flags": ["CLEAR_SCHEDULING", "STARTED_ON_SCHEDULE"] if started else ["CLEAR_SCHEDULING"],
        "group": jobview.group_name(spec.gid),
        "het": {"job_id": 0, "job_offset": None},
        "job_id": job.job_id,
        "name": spec.name,
        "mcs": {"label": ""},
        "nodes": model.compress_hostlist(list(job.nodes)) if job.nodes else "None assigned",
        "partition": jobview.partition(job),
        "priority": 0 if job.held else job.priority,
        "qos": spec.qos or "normal",
        "required": {"CPUs": cpus, "memory": spec.memory_mb},
        "kill_request_user": None,
        "reservation": {"id": 0, "name": 0},
        "state": {"current": jobview.state_name(job), "reason": job.reason or "None"},
        "steps": [_step_record(job, step, now) for step in getattr(job, "steps", None) or []],
        "tres": {"allocated": allocated if started else [], "requested": requested},
        "user": spec.user or str(spec.uid),
        "wckey": {"wckey": spec.wckey, "flags": []},
        "working_directory": spec.work_dir,
    }


def accounting_document(jobs: list[Any], now: float, cluster: str = "") -> dict[str, Any]:
    return document("jobs", [accounting_record(job, now, cluster) for job in jobs])


JSON_OPTION_HELP = f"print Slurm's JSON (openapi {PLUGIN_VERSION}, Slurm 22.05's; VERSION may only be {PLUGIN_VERSION})"
YAML_OPTION_HELP = "the same document as --json, for YAML readers (JSON is YAML)"


def layout(values: dict[str, Any]) -> bool | None:
    """--json[=VERSION] / --yaml[=VERSION] -> None (neither given) or whether YAML was asked for; a version
    Spur does not emit is one line naming the one it does."""
    if values.get("json") is None and values.get("yaml") is None:
        return None
    requested_version(values.get("json"), "--json")
    requested_version(values.get("yaml"), "--yaml")
    return values.get("yaml") is not None and values.get("json") is None


def cluster_name(client: Any) -> str:
    """The cluster's name for the records' cluster fields (one GetClusterInfo call; "" when it fails)."""
    try:
        return client.call("GetClusterInfo").cluster_name
    except Exception:  # noqa: BLE001 (an old controller: the records keep an empty cluster rather than fail)
        return ""
