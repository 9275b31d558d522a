# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Generated from daemons/spur_hpc/model.py by tools/gen_module_utils.py: do not edit; change the source and run the tool.
"""What every part of Spur shares, each fact once: job and node states, reasons, output-path patterns,
hostlists and addresses.

The controller, the agents, the CLI and accounting import this module; the Ansible collection gets a
generated copy (collection/plugins/module_utils/spur_model.py, written by tools/gen_module_utils.py), so
this file uses the standard library only and must run on Python 3.8.
"""

from __future__ import annotations

import posixpath
from itertools import groupby

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# ------------------------------------------------------------------ job states (slurm.proto's JobState)

PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, DEADLINE, PREEMPTED = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "DEADLINE",
    "PREEMPTED",
)
JOB_STATES = (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, DEADLINE, PREEMPTED)
# Shown, never stored: a RUNNING job that scontrol suspend stopped (the record keeps RUNNING and `suspended`).
SUSPENDED = "SUSPENDED"
# A finished job never changes state again (the agent's end reports are these too).
FINISHED_STATES = frozenset({COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, DEADLINE, PREEMPTED})
# The end states a supervisor or an agent may report (DEADLINE is the controller's own: a job still pending;
# PREEMPTED too: a cancel the leader's preemption asked for, reported CANCELLED).
REPORTED_END_STATES = FINISHED_STATES - {DEADLINE, PREEMPTED}
# Slurm's short state codes (squeue %t, squeue -t and sacct -s accept them).
JOB_STATE_CODES = {
    PENDING: "PD",
    RUNNING: "R",
    COMPLETED: "CD",
    FAILED: "F",
    CANCELLED: "CA",
    TIMEOUT: "TO",
    NODE_FAIL: "NF",
    OUT_OF_MEMORY: "OOM",
    DEADLINE: "DL",
    PREEMPTED: "PR",
}
# The batch step (N.batch) ends as its job did, except that Slurm kills the batch shell of a job that ran out
# of time, lost a node, passed its deadline or was preempted, so that step shows CANCELLED.
_BATCH_STEP_ENDS = {TIMEOUT: CANCELLED, NODE_FAIL: CANCELLED, DEADLINE: CANCELLED, PREEMPTED: CANCELLED}


def batch_step_state(job_state: str) -> str:
    """The state of a job's batch step, given the job's."""
    return _BATCH_STEP_ENDS.get(job_state, job_state)


# ------------------------------------------------------------------ node states (slurm.proto's NodeState)

IDLE, MIXED, ALLOCATED, DRAINING, DRAINED, DOWN = "IDLE", "MIXED", "ALLOCATED", "DRAINING", "DRAINED", "DOWN"
NODE_STATES = (IDLE, MIXED, ALLOCATED, DRAINING, DRAINED, DOWN)
IN_SERVICE_STATES = (IDLE, MIXED, ALLOCATED)  # the scheduler may place jobs there

# A job's reason when there is none, as Slurm shows it.
NO_REASON = "None"
# The node reasons the daemons set themselves (an operator's own reason is kept as written).
REASON_AGENT_STOPPED = "spurd stopped"  # spurd deregistered on its way down
REASON_NOT_RESPONDING = "Not responding"  # no heartbeat within the timeout (Slurm's words)
REASON_DRAINED = "drained"  # a drain asked for without a reason


def per_node_cpus(spec: dict[str, Any]) -> int:
    """The CPUs a job holds on each of its nodes: its tasks times CPUs per task, shared out, rounded up."""
    nodes = max(1, spec.get("nodes") or 1)
    total = max(1, spec.get("tasks") or 1) * max(1, spec.get("cpus_per_task") or 1)
    return -(-total // nodes)


# A job's spec as every part stores it (slurm.proto's JobSpec as a plain dict): field -> Python type. The
# order is the replicated record's (protoconv builds it in this order).
JOB_SPEC_FIELDS = {
    "name": str,
    "script": str,
    "user": str,
    "uid": int,
    "gid": int,
    "work_dir": str,
    "stdout_path": str,
    "stderr_path": str,
    "nodes": int,
    "tasks": int,
    "cpus_per_task": int,
    "memory_mb": int,
    "time_limit_secs": int,
    "partition": str,
    "account": str,
    "environment": dict,
    "comment": str,
    "hold": bool,
    "nodelist": str,
    "exclude": str,
    "exclusive": bool,
    "ntasks_per_node": int,
    "mem_per_cpu_mb": int,
    "gres": str,
    "gpus": str,
    "gpus_per_node": str,
    "gpus_per_task": str,
    "constraint": str,
    "open_mode": str,
    "signal_number": int,
    "signal_secs": int,
    "signal_batch_only": bool,
    "wckey": str,
    "qos": str,
    "begin_time": float,
    "deadline": float,
    "time_min_secs": int,
    "requeue": int,
    "nice": int,
    "mail_type": str,
    "mail_user": str,
    "argv": list,
    "array": str,
    "dependency": str,
    "kill_on_invalid_dep": bool,
    "submit_host": str,
    "cluster_name": str,
    "interactive": bool,
    "command": str,
    "alloc_node": str,  # set by the controller from the client's address, whatever the client sent
    "alloc_sid": int,
}


class InvalidValue(ValueError):
    """A value a user wrote that cannot be read; the message is one line naming it and the fix."""


# ------------------------------------------------------------------ numbers

INT64_MAX = 2**63 - 1


def is_number(text: str) -> bool:
    """ASCII digits only: str.isdigit() also says yes to '²', which int() refuses."""
    return text.isascii() and text.isdigit()


def bounded_int(text: str, high: int) -> int | None:
    """ASCII digits with a value of at most high -> the number; anything else -> None. Never converts a
    string longer than high's digits (int() of thousands of digits is slow, and refused past 4300)."""
    if not is_number(text):
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(high)):
        return None
    value = int(digits)
    return value if value <= high else None


TIME_LIMIT_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (or UNLIMITED)"


def parse_time_limit(text: str, what: str = "--time") -> int:
    """A Slurm time limit (sbatch -t, scontrol's TimeLimit, a partition's MaxTime) -> seconds (0: no limit)."""
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return 0

    def bad() -> InvalidValue:
        return InvalidValue(f"invalid {what} value '{text}': use {TIME_LIMIT_FORMS}")

    too_long = InvalidValue(
        f"invalid {what} value '{text}': it is over {INT64_MAX} seconds; use UNLIMITED for no limit"
    )
    days = 0
    day_text, has_days, clock = value.rpartition("-") if "-" in value else ("", "", value)
    if has_days:
        if not is_number(day_text) or not clock:
            raise bad()
        days = bounded_int(day_text, INT64_MAX)
    parts = clock.split(":")
    if len(parts) > 3 or not all(is_number(p) for p in parts):
        raise bad()
    numbers = [bounded_int(p, INT64_MAX) for p in parts]
    if days is None or None in numbers:
        raise too_long
    if has_days:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (numbers + [0, 0])[:3]
    elif len(numbers) == 3:
        hours, minutes, seconds = numbers
    else:  # minutes[:seconds]
        hours, minutes, seconds = 0, numbers[0], numbers[1] if len(numbers) == 2 else 0
    if seconds > 59 or (minutes > 59 and (has_days or len(numbers) == 3)):
        raise bad()
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total > INT64_MAX:
        raise too_long
    return total


# ------------------------------------------------------------------ pending reasons (squeue's NODELIST(REASON))

# Slurm's priority/basic counts job priorities down from here (its TOP_PRIORITY): see state.ClusterState
TOP_PRIORITY = 0xFFFF0000
REASON_HELD_USER = "JobHeldUser"  # sbatch -H, or scontrol hold by the job's owner
REASON_HELD_ADMIN = "JobHeldAdmin"  # scontrol hold by an administrator: only an administrator releases it
REASON_BEGIN_TIME = "BeginTime"  # --begin is still ahead (a requeued job waits a moment too)
REASON_DEPENDENCY = "Dependency"  # a --dependency that may still be satisfied
REASON_DEPENDENCY_NEVER = "DependencyNeverSatisfied"  # one that cannot be any more (afterok on a FAILED job)
REASON_ARRAY_LIMIT = "JobArrayTaskLimit"  # the array's %N throttle is reached
REASON_DEADLINE = "DeadLine"  # the job ended DEADLINE: still pending at its --deadline
# Association and QOS job-count limits (controller/limits.py): a job one of them holds back accrues no priority
# age yet (scontrol's AccrueTime=Unknown), as in Slurm; one held by a TRES or MaxWall limit does.
REASON_QOS_GRP_JOBS = "QOSGrpJobsLimit"
REASON_QOS_MAX_JOBS_PER_USER = "QOSMaxJobsPerUserLimit"
REASON_ASSOC_GRP_JOBS = "AssocGrpJobsLimit"
REASON_ASSOC_MAX_JOBS = "AssocMaxJobsLimit"
JOB_COUNT_LIMIT_REASONS = frozenset(
    {REASON_QOS_GRP_JOBS, REASON_QOS_MAX_JOBS_PER_USER, REASON_ASSOC_GRP_JOBS, REASON_ASSOC_MAX_JOBS}
)
# A job its partition does not run now (Slurm's job_limits_check; EnforcePartLimits=NO queues such jobs)
REASON_PARTITION_NODE_LIMIT = "PartitionNodeLimit"  # more (or fewer) nodes than the partition's limits or size
REASON_PARTITION_TIME_LIMIT = "PartitionTimeLimit"  # a time limit over the partition's MaxTime
REASON_PARTITION_DOWN = "PartitionDown"  # the partition's State=DOWN: queued jobs wait
REASON_PARTITION_INACTIVE = "PartitionInactive"  # State=INACTIVE: queued jobs wait
REASON_PARTITION_CONFIG = "PartitionConfig"  # the partition is no longer configured
# gRPC trailing metadata of a refusal Slurm words with one of its error texts ("Invalid partition name specified"):
# sbatch prints the controller's line, then "Batch job submission failed: " and that text, as Slurm does.
SLURM_ERROR_METADATA_KEY = "spur-slurm-error"

# ------------------------------------------------------------------ job arrays: --array=0-15:2%4

MAX_ARRAY_TASKS = 10001  # tasks of one array (Slurm's MaxArraySize bounds the ids; this bounds the records too)
MAX_ARRAY_TASK_ID = 4000000  # Slurm's own ceiling of MaxArraySize is 4000001


def parse_array_ranges(text: str, what: str = "--array") -> list[int]:
    """Slurm's task-id list (0-15, 1,3,7, 0-20:4, 1-3,7-9:2) -> the sorted distinct ids. The count is
    bounded before anything is expanded."""
    ids = set()
    count = 0
    for part in text.split(","):
        rng, _colon, step_text = part.partition(":")
        first_text, dash, last_text = rng.partition("-")
        first, last = (
            bounded_int(first_text, MAX_ARRAY_TASK_ID),
            bounded_int(last_text if dash else first_text, MAX_ARRAY_TASK_ID),
        )
        step = bounded_int(step_text, MAX_ARRAY_TASK_ID) if _colon else 1
        if first is None or last is None or step is None or step < 1 or (_colon and not dash):
            raise InvalidValue(
                f"{what}={text!r}: {part!r} is not a task id, a range N-M or N-M:STEP "
                f"(ids from 0 to {MAX_ARRAY_TASK_ID}, e.g. 0-15, 1,3,7 or 0-20:4%2)"
            )
        if last < first:
            raise InvalidValue(f"{what}={text!r}: the range {rng!r} ends before it starts")
        count += (last - first) // step + 1
        if count > MAX_ARRAY_TASKS:
            raise InvalidValue(f"{what}={text!r} has more than {MAX_ARRAY_TASKS} tasks; split it into several arrays")
        ids.update(range(first, last + 1, step))
    return sorted(ids)


def parse_array(text: str) -> tuple[list[int], int]:
    """sbatch --array as written (0-15:2%4) -> (the task ids, the %N throttle or 0)."""
    ranges, percent, limit_text = text.strip().partition("%")
    limit = 0
    if percent:
        value = bounded_int(limit_text, MAX_ARRAY_TASKS)
        if not value:
            raise InvalidValue(f"--array={text!r}: the throttle after % must be a number from 1 to {MAX_ARRAY_TASKS}")
        limit = value
    if not ranges:
        raise InvalidValue(f"--array={text!r} names no task ids; write e.g. --array=0-15 or --array=1,3,7%2")
    return parse_array_ranges(ranges), limit


def format_array_ranges(ids: list[int]) -> str:
    """Sorted distinct task ids -> Slurm's short form: 0-14:2 (one stride), 3-15, 1,3,7, 1-3,7."""
    if not ids:
        return ""
    if len(ids) > 2:
        stride = ids[1] - ids[0]
        if stride > 1 and all(ids[i + 1] - ids[i] == stride for i in range(len(ids) - 1)):
            return f"{ids[0]}-{ids[-1]}:{stride}"
    parts = []
    start = prev = ids[0]
    for n in ids[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def first_array_task(ranges: str) -> int:
    """The lowest id of a non-empty formatted task list, without expanding it."""
    return int(ranges.split(",", 1)[0].split(":", 1)[0].split("-", 1)[0])


def array_task_label(array_job_id: int, task_id: int | None = None, pending: str = "", max_running: int = 0) -> str:
    """How squeue and sacct name an array's record: 12_3 for a task, 12_[3-15%4] for the pending rest."""
    if pending:
        throttle = f"%{max_running}" if max_running else ""
        return f"{array_job_id}_[{pending}{throttle}]"
    return f"{array_job_id}_{task_id}"


# ------------------------------------------------------------------ dependencies: --dependency=afterok:12:13,singleton

DEPENDENCY_TYPES = ("after", "afterany", "afterok", "afternotok", "singleton")
MAX_DEPENDENCY_TERMS = 1000  # job ids named in one --dependency


def parse_dependency(text: str) -> tuple[bool, list[tuple[str, int, int]]]:
    """--dependency as written -> (any: '?' separates the terms, else ',' and all must hold; the terms as
    (type, job id, minutes)). singleton is ('singleton', 0, 0); minutes (after:12+5) only follow after."""
    text = text.strip()
    if "," in text and "?" in text:
        raise InvalidValue(f"--dependency={text!r} mixes ',' (all) and '?' (any); use one of them")
    any_of = "?" in text
    terms = []
    for part in text.split("?" if any_of else ","):
        kind, _colon, rest = part.partition(":")
        if kind not in DEPENDENCY_TYPES:
            raise InvalidValue(
                f"--dependency={text!r}: {kind!r} is not a dependency type Spur knows; use one of "
                f"{', '.join(DEPENDENCY_TYPES)} (e.g. afterok:12:13)"
            )
        if kind == "singleton":
            if rest:
                raise InvalidValue(f"--dependency={text!r}: singleton takes no job ids")
            terms.append(("singleton", 0, 0))
            continue
        if not rest:
            raise InvalidValue(f"--dependency={text!r}: {kind} needs job ids ({kind}:12 or {kind}:12:13)")
        for item in rest.split(":"):
            id_text, plus, minutes_text = item.partition("+")
            job_id = bounded_int(id_text, INT64_MAX)
            minutes = bounded_int(minutes_text, 525600) if plus else 0
            if not job_id or minutes is None or (plus and kind != "after"):
                raise InvalidValue(
                    f"--dependency={text!r}: {item!r} is not a job id (a positive number; after:ID+MINUTES "
                    "also takes minutes)"
                )
            terms.append((kind, job_id, minutes))
            if len(terms) > MAX_DEPENDENCY_TERMS:
                raise InvalidValue(f"--dependency names more than {MAX_DEPENDENCY_TERMS} jobs")
    return any_of, terms


# ------------------------------------------------------------------ output paths (sbatch's filename patterns)

DEFAULT_OUTPUT = "slurm-%j.out"
DEFAULT_ARRAY_OUTPUT = "slurm-%A_%a.out"  # sbatch's default for an array task
DEFAULT_JOB_NAME = "batch"  # a job submitted without a name: SLURM_JOB_NAME and %x
BATCH_STEP = "batch"
NO_ARRAY_TASK = 4294967294  # Slurm's NO_VAL: what %a gives for a job that is not part of an array
_NUMERIC_PATTERNS = "AaJjbnst"
_PATTERNS = _NUMERIC_PATTERNS + "Nux"


def expand_output_pattern(
    pattern: str,
    job_id: int,
    name: str,
    user: str,
    node: str,
    *,
    array_job_id: int = 0,
    array_task_id: int = 0,
    step: str = BATCH_STEP,
    task: int = 0,
    node_index: int = 0,
) -> str:
    """sbatch's and srun's filename patterns as slurmstepd expands them:
    %% a percent sign, %j the job id, %A the array's job id (the job id when the job is not an array task:
    array_job_id 0), %a the array task id (4294967294 when not an array task), %b that task id modulo 10,
    %s the step (batch, or a step number), %J job id.step (only the job id for the batch step), %N the node,
    %n the node's index in the job, %t the task's rank, %u the user, %x the job name; a number after % zero-pads
    a numeric one (at most 10; for %J the job id part); a backslash anywhere turns expansion off (the
    backslashes are dropped); other %-sequences stay."""
    if "\\" in pattern:
        return pattern.replace("\\", "")
    task_id = array_task_id if array_job_id else NO_ARRAY_TASK
    values = {
        "A": array_job_id or job_id,
        "a": task_id,
        "b": task_id % 10,
        "J": job_id,
        "j": job_id,
        "N": node,
        "n": node_index,
        "t": task,
        "s": step,
        "u": user,
        "x": name or DEFAULT_JOB_NAME,
    }
    out: list[str] = []
    i, end = 0, len(pattern)
    while i < end:
        char = pattern[i]
        i += 1
        if char != "%":
            out.append(char)
            continue
        if i == end:
            break  # a lone % at the end is dropped, as Slurm does
        if pattern[i] == "%":
            out.append("%")
            i += 1
            continue
        digits_end = i
        while digits_end < end and pattern[digits_end].isascii() and pattern[digits_end].isdigit():
            digits_end += 1
        key = pattern[digits_end] if digits_end < end else ""
        known = key != "" and key in _PATTERNS
        if digits_end > i and not known:
            out.append(pattern[digits_end - 1])  # Slurm keeps only the last digit of %<digits><other>
            i = digits_end
            continue
        if not known:
            out.append("%" + key)
            i = digits_end + 1
            continue
        width = bounded_int(pattern[i:digits_end], 10) if digits_end > i else 0
        width = 10 if width is None else width  # Slurm pads to at most 10 digits
        text = str(values[key])
        if key in _NUMERIC_PATTERNS and text.isdigit():
            text = text.zfill(width)
        if key == "J" and step != BATCH_STEP:
            text += f".{step}"
        out.append(text)
        i = digits_end + 1
    return "".join(out)


def output_file(
    pattern: str,
    work_dir: str,
    job_id: int,
    name: str,
    user: str,
    node: str,
    *,
    array_job_id: int = 0,
    array_task_id: int = 0,
    step: str = BATCH_STEP,
    task: int = 0,
    node_index: int = 0,
) -> str:
    """Where a job's output goes: the expanded pattern (DEFAULT_OUTPUT when empty, DEFAULT_ARRAY_OUTPUT for an
    array task), under work_dir when relative. The keywords are expand_output_pattern's."""
    default = DEFAULT_ARRAY_OUTPUT if array_job_id else DEFAULT_OUTPUT
    path = expand_output_pattern(
        pattern or default,
        job_id,
        name,
        user,
        node,
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        step=step,
        task=task,
        node_index=node_index,
    )
    return posixpath.join(work_dir, path) if work_dir else path


# ------------------------------------------------------------------ counted resources (gres) and node features

MAX_GRES_KINDS = 32  # NAME[:TYPE] entries a job asks for (--gres, --gpus*), or an agent declares ([agent] gres)
MAX_GRES_COUNT = 1_000_000  # the count of one entry
MAX_FEATURES = 64  # features an agent declares ([agent] features), or features named in one --constraint


# ------------------------------------------------------------------ hostlists: node[1-3,7],gpu01 <-> names

MAX_HOSTLIST_NAMES = 65536  # more nodes than any cluster has; pn[1-99999999] would build 100 million names first


def _split_name(name: str) -> tuple[str, str]:
    """'node012' -> ('node', '012'); a name without a numeric suffix -> (name, '')."""
    end = len(name)
    start = end
    while start > 0 and name[start - 1] in "0123456789":  # not isdigit(): int() refuses '²'
        start -= 1
    return name[:start], name[start:end]


def compress_hostlist(names: list[str]) -> str:
    """['n1', 'n2', 'n3', 'n5', 'gpu'] -> 'gpu,n[1-3,5]', as Slurm's hostlist_ranged_string writes it: sorted by
    prefix (natural order), one bracket group per prefix, zero padding kept ('n[01-10]'); a number without a
    leading zero joins a padded range it is as wide as (n09,n10 -> n[09-10]; node-0,node-1 -> node-[0-1])."""
    plain: set[str] = set()
    numbered: dict[str, dict[int, set[int]]] = {}  # prefix -> padding width (0: none) -> numbers
    for name in set(names):
        prefix, digits = _split_name(name)
        if not digits:
            plain.add(name)
            continue
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        numbered.setdefault(prefix, {}).setdefault(width, set()).add(int(digits))
    for widths in numbered.values():
        padded = sorted(w for w in widths if w)
        for number in list(widths.get(0, ())):
            wide_enough = [w for w in padded if len(str(number)) >= w]
            if wide_enough:  # n10 belongs with n01..n09, as Slurm's width-equivalence check has it
                widths[0].discard(number)
                widths[wide_enough[-1]].add(number)
    parts: list[tuple[tuple, str]] = [((_natural_prefix(name), 0), name) for name in plain]
    for prefix, widths in numbered.items():
        ranges: list[str] = []
        for width in sorted(w for w in widths if widths[w]):
            numbers = sorted(widths[width])
            first = previous = numbers[0]
            for number in numbers[1:] + [None]:  # type: ignore[list-item]
                if number is not None and number == previous + 1:
                    previous = number
                    continue
                low, high = f"{first:0{width}d}", f"{previous:0{width}d}"
                ranges.append(low if first == previous else f"{low}-{high}")
                if number is not None:
                    first = previous = number
        single = len(ranges) == 1 and "-" not in ranges[0]
        text = f"{prefix}{ranges[0]}" if single else f"{prefix}[{','.join(ranges)}]"
        parts.append(((_natural_prefix(prefix), 1), text))
    return ",".join(text for _key, text in sorted(parts))


def _natural_prefix(text: str) -> tuple:
    """strnatcmp's order as a key: runs of digits compare as numbers ('rack2' before 'rack10'). Without `re`,
    whose import (with enum) every command would pay for this one function."""
    runs = (("".join(chars), digits) for digits, chars in groupby(text, str.isdecimal))
    return tuple((0, int(run), "") if digits else (1, 0, run) for run, digits in runs)


def _natural_key(name: str) -> tuple[str, int]:
    prefix, digits = _split_name(name)
    return prefix, int(digits) if digits else -1


def expand_hostlist(expression: str) -> list[str]:
    """'n[1-3,5],gpu01' -> ['n1', 'n2', 'n3', 'n5', 'gpu01']; a malformed expression raises InvalidValue."""
    names: list[str] = []
    depth = 0
    current = ""
    for char in expression.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                break
        if char == "," and depth == 0:
            names.extend(_expand_one(current, expression, len(names)))
            current = ""
        else:
            current += char
    if depth != 0:
        raise InvalidValue(f"bad hostlist '{expression}': unbalanced brackets; write names like node[1-3],gpu01")
    names.extend(_expand_one(current, expression, len(names)))
    return names


def _expand_one(part: str, expression: str, before: int) -> list[str]:
    """One name or prefix[ranges]suffix; before: how many names the expression gave already (for the cap)."""
    part = part.strip()
    if not part:
        return []
    if "[" not in part:
        _check_count(before + 1, expression)
        return [part]
    prefix, _open, rest = part.partition("[")
    body, _close, suffix = rest.partition("]")
    if "[" in suffix or "]" in suffix:
        raise InvalidValue(f"bad hostlist '{expression}': one bracket group per name is supported")
    out = []
    for item in body.split(","):
        low, dash, high = item.partition("-")
        start, stop = bounded_int(low, INT64_MAX), bounded_int(high if dash else low, INT64_MAX)
        if start is None or stop is None:
            raise InvalidValue(f"bad hostlist '{expression}': '{item}' is not a number or a range like 1-4")
        width = len(low) if low.startswith("0") and len(low) > 1 else 0
        if stop < start:
            raise InvalidValue(f"bad hostlist '{expression}': range {item} runs backwards")
        _check_count(before + len(out) + stop - start + 1, expression)
        out.extend(f"{prefix}{number:0{width}d}{suffix}" for number in range(start, stop + 1))
    return out


def _check_count(count: int, expression: str) -> None:
    if count > MAX_HOSTLIST_NAMES:
        raise InvalidValue(
            f"bad hostlist '{expression}': it names more than {MAX_HOSTLIST_NAMES} nodes, the limit; name fewer"
        )


# ------------------------------------------------------------------ addresses: host:port, [v6]:port, host

CONTROLLER_GRPC_PORT = 6817  # spurctld: SlurmController and RaftInternal
AGENT_GRPC_PORT = 6818  # spurd: SlurmAgent
RAFT_PORT = 6821  # spurctld <-> spurctld (pysyncobj)
CONTROLLER_PROBE_PORT = 6822  # spurctld's HTTP probes
AGENT_PROBE_PORT = 6823  # spurd's HTTP probes


def split_host_port(value: str, default_port: int | None = None) -> tuple[str, int]:
    """'host:port', '[v6]:port' or 'host' (with default_port) -> (host, port); ValueError with the reason."""
    text = value.strip()
    if text.startswith("http://"):
        text = text[len("http://") :]
    text = text.rstrip("/")
    if not text:
        raise ValueError("empty address")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("unclosed '[' in IPv6 address")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError("expected ':port' after ']'")
        port_text = rest[1:] if rest else ""
        if host and ":" not in host:
            raise ValueError("brackets are for IPv6 addresses only")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError("IPv6 addresses need brackets, like [::1]:6817")
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError("missing host")
    if not port_text:
        if default_port is None:
            raise ValueError("missing ':port'")
        port_text = str(default_port)
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5) or not 0 < int(port_text) < 65536:
        raise ValueError(f"port {port_text[:10]!r} is not a number from 1 to 65535")
    _check_host(host)
    return host, int(port_text)


def _ipv4_octet(text: str) -> bool:
    """0 to 255 in decimal without leading zeros, as ipaddress reads an IPv4 address's parts."""
    return text.isascii() and text.isdigit() and len(text) <= 3 and int(text) <= 255 and (text == "0" or text[0] != "0")


def _check_host(host: str) -> None:
    if ":" in host or not host.strip("0123456789."):  # could be an IP address (IPv6 has a colon)
        parts = host.split(".")
        if len(parts) == 4 and all(_ipv4_octet(part) for part in parts):
            return  # plain IPv4, the usual controller address: without ipaddress's import on every command
        import ipaddress

        try:
            ipaddress.ip_address(host)
            return
        except ValueError:
            pass
    # ASCII host names only (RFC 1123): anything else would reach the resolver as IDNA and fail there.
    for label in host.split("."):
        if (
            not label
            or len(label) > 63
            or not all(c.isascii() and (c.isalnum() or c == "-") for c in label)
            or (label[0] == "-")
        ):
            raise ValueError(f"{host!r} is neither an IP address nor a host name")


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def normalize_addr(value: str, default_port: int | None = None) -> str:
    """The canonical 'host:port' ('[v6]:port') of an address; ValueError with the reason."""
    return join_host_port(*split_host_port(value, default_port))


def with_port(address: str, port: int) -> str:
    """host -> host:port for an address a peer or a user handed over; one that does not parse is returned
    as given, so the connection attempt names it instead of this step."""
    try:
        return normalize_addr(address, port)
    except ValueError:
        return address.strip()


def address_host(address: str) -> str:
    """The host of 'host:port', '[v6]:port' or 'http://host:port/...' (no port, no brackets)."""
    text = address.strip()
    if "://" in text:
        text = text.partition("://")[2]
    text = text.split("/", 1)[0]
    if text.startswith("["):
        return text[1:].split("]", 1)[0]
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text
