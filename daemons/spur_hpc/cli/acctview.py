"""How sacct prints job records: named fields, Slurm's widths, '+' on truncation, --parsable variants.

Independent of where the records come from (the accounting database or the controller's job list): it takes
objects with the Job message's attributes. Each job is one line, followed by one line per step (N.batch,
N.0, ...) unless only allocations are asked for; array tasks are N_T and an array's waiting tasks
N_[pending%max], as in Slurm.
"""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import jobview, slurmformat, units
from spur_hpc.cli.runner import CliError, printable
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
MEMORY_UNITS = "KMGTP"  # sacct --units


class Line:
    """One line of sacct: a job (step None) or one of its steps (a Step message). units: --units (a letter of
    MEMORY_UNITS), NO_CONVERT (--noconvert) or '' (Slurm's default: the largest unit that keeps the value whole)."""

    __slots__ = ("job", "step", "units")

    def __init__(self, job: Any, step: Any = None, units: str = "") -> None:
        self.job = job
        self.step = step
        self.units = units


NO_CONVERT = "noconvert"


def job_label(job: Any) -> str:
    """JobID as sacct prints it: N, N_T for an array task, N_[pending%max] for an array's waiting tasks."""
    if job.array_job_id:
        return model.array_task_label(job.array_job_id, job.array_task_id, job.array_pending, job.array_max_running)
    return str(job.job_id)


def _state(value: Any) -> str:
    return value if isinstance(value, str) else protocodec.schema().enum_name("JobState", value)


def job_state(job: Any) -> str:
    """A job's State as sacct prints it: a job someone cancelled names them, `CANCELLED by UID` (Slurm's requid;
    the column cuts it to `CANCELLED+`), its steps do not."""
    name = jobview.state_name(job)
    if name == "CANCELLED" and job.cancelled_by_uid >= 0:
        return f"{name} by {job.cancelled_by_uid}"
    return name


def _elapsed(line: Line, now: float) -> float:
    if line.step is None:
        return jobview.elapsed_seconds(line.job, now)
    step = line.step
    if not step.start_time:
        return 0.0
    return max(0.0, (step.end_time or now) - step.start_time)


def _job_only(value: Callable[[Any, float], str]) -> Callable[[Line, float], str]:
    """A field Slurm leaves empty on step lines."""
    return lambda line, now: value(line.job, now) if line.step is None else ""


def _either(job_value: Callable[[Any, float], str], step_value: Callable[[Any, float], str]):
    return lambda line, now: job_value(line.job, now) if line.step is None else step_value(line.step, now)


def _memory(mb: int, units: str) -> str:
    """Slurm's convert_num_unit of a size in MB: to --units; kept in M with --noconvert; else divided by 1024
    while that stays whole (4096 -> 4G, 1536 -> 1536M)."""
    unit = MEMORY_UNITS.index("M")
    if units == NO_CONVERT:
        return f"{mb}M"
    if units:
        value = mb * 1024.0 ** (unit - MEMORY_UNITS.index(units))
        return f"{value:.0f}{units}" if value == int(value) else f"{value:.2f}{units}"
    while mb >= 1024 and mb % 1024 == 0 and unit + 1 < len(MEMORY_UNITS):
        mb, unit = mb // 1024, unit + 1
    return f"{mb}{MEMORY_UNITS[unit]}"


def _cpus(step: Any) -> int:
    return max(1, step.tasks) * max(1, step.cpus_per_task)


def _times(step_field: str, job_field: str):
    return _either(
        lambda j, now: units.format_timestamp(getattr(j, job_field)),
        lambda s, now: units.format_timestamp(getattr(s, step_field)),
    )


# Usage Spur does not measure (Slurm's accounting gather in slurmstepd): known to --format, printed empty.
UNMEASURED_FIELDS = ("MaxRSS", "MaxVMSize", "AveRSS", "AveVMSize", "AveCPU", "MinCPU", "TotalCPU", "UserCPU",
                     "SystemCPU", "MaxDiskRead", "MaxDiskWrite", "ConsumedEnergy")  # fmt: skip

# lower-case name -> (title, width, right-justified, value)
FIELDS: dict[str, tuple[str, int, bool, Callable[[Line, float], str]]] = {
    "jobid": ("JobID", 12, False, lambda ln, now: job_label(ln.job) + (f".{ln.step.step_id}" if ln.step else "")),
    "jobidraw": (
        "JobIDRaw",
        12,
        False,
        lambda ln, now: str(ln.job.job_id) + (f".{ln.step.step_id}" if ln.step else ""),
    ),
    "jobname": ("JobName", 10, True, _either(lambda j, now: j.spec.name, lambda s, now: s.name)),
    "user": ("User", 9, True, _job_only(lambda j, now: j.spec.user or str(j.spec.uid))),
    "uid": ("UID", 6, True, _job_only(lambda j, now: str(j.spec.uid))),
    "gid": ("GID", 6, True, _job_only(lambda j, now: str(j.spec.gid))),
    "account": ("Account", 10, True, lambda ln, now: ln.job.spec.account),
    "partition": ("Partition", 10, True, _job_only(lambda j, now: jobview.partition(j))),
    "alloccpus": (
        "AllocCPUS",
        10,
        True,
        _either(lambda j, now: str(jobview.cpu_count(j)), lambda s, now: str(_cpus(s))),  # asked for, while pending
    ),
    "ncpus": ("NCPUS", 10, True, _either(lambda j, now: str(jobview.cpu_count(j)), lambda s, now: str(_cpus(s)))),
    "reqcpus": ("ReqCPUS", 8, True, _either(lambda j, now: str(jobview.cpu_count(j)), lambda s, now: str(_cpus(s)))),
    "allocnodes": ("AllocNodes", 10, True, _either(lambda j, now: str(len(j.nodes)), lambda s, now: str(len(s.nodes)))),
    "nnodes": ("NNodes", 8, True, _either(lambda j, now: str(jobview.node_count(j)), lambda s, now: str(len(s.nodes)))),
    "reqnodes": (
        "ReqNodes",
        8,
        True,
        _either(lambda j, now: str(jobview.node_count(j)), lambda s, now: str(len(s.nodes))),
    ),
    "ntasks": ("NTasks", 8, True, _either(lambda j, now: "", lambda s, now: str(max(1, s.tasks)))),
    "nodelist": (
        "NodeList",
        15,
        False,
        _either(
            lambda j, now: model.compress_hostlist(list(j.nodes)) or "None assigned",
            lambda s, now: model.compress_hostlist(list(s.nodes)) or "None assigned",
        ),
    ),
    "state": ("State", 10, True, _either(lambda j, now: job_state(j), lambda s, now: _state(s.state))),
    "exitcode": (
        "ExitCode",
        8,
        True,
        _either(lambda j, now: f"{j.exit_code}:{j.signal}", lambda s, now: f"{s.exit_code}:{s.signal}"),
    ),
    "elapsed": ("Elapsed", 10, True, lambda ln, now: units.format_clock(_elapsed(ln, now))),
    "elapsedraw": ("ElapsedRaw", 10, True, lambda ln, now: str(int(_elapsed(ln, now)))),
    "submit": ("Submit", 19, True, _times("start_time", "submit_time")),  # a step is submitted as it starts
    "eligible": ("Eligible", 19, True, _times("start_time", "eligible_time")),
    "start": ("Start", 19, True, _times("start_time", "start_time")),
    "end": ("End", 19, True, _times("end_time", "end_time")),
    "timelimit": (
        "Timelimit",
        10,
        True,
        _job_only(lambda j, now: units.format_limit(j.spec.time_limit_secs, clock=True)),
    ),
    "timelimitraw": (
        "TimelimitRaw",
        12,
        True,
        _job_only(lambda j, now: str(j.spec.time_limit_secs // 60) if j.spec.time_limit_secs else "UNLIMITED"),
    ),
    "reqmem": ("ReqMem", 10, True, lambda ln, now: _memory(ln.job.spec.memory_mb, ln.units)),
    "workdir": ("WorkDir", 20, False, _job_only(lambda j, now: j.spec.work_dir)),
    "reason": ("Reason", 20, True, _job_only(lambda j, now: j.reason or "None")),
    "comment": ("Comment", 15, True, _job_only(lambda j, now: j.spec.comment)),
    "wckey": ("WCKey", 10, True, _job_only(lambda j, now: j.spec.wckey)),
    "qos": ("QOS", 10, True, _job_only(lambda j, now: j.spec.qos)),
    "constraints": ("Constraints", 19, True, _job_only(lambda j, now: j.spec.constraint)),
    "restarts": ("Restarts", 8, True, _job_only(lambda j, now: str(j.restart_count))),
    "stdout": ("StdOut", 20, False, _job_only(lambda j, now: jobview.stdout_path(j))),
    "stderr": ("StdErr", 20, False, _job_only(lambda j, now: jobview.stderr_path(j))),
    "group": ("Group", 9, True, _job_only(lambda j, now: _group_name(j.spec.gid))),
    "cputime": ("CPUTime", 10, True, lambda ln, now: units.format_clock(_cpu_seconds(ln, now))),
    "cputimeraw": ("CPUTimeRAW", 10, True, lambda ln, now: str(int(_cpu_seconds(ln, now)))),
    "derivedexitcode": ("DerivedExitCode", 15, True, _job_only(lambda j, now: _derived_exit_code(j))),
    "alloctres": ("AllocTRES", 10, False, lambda ln, now: _tres(ln) if _started(ln) else ""),
    "reqtres": ("ReqTRES", 10, False, lambda ln, now: _tres(ln)),
    "suspended": ("Suspended", 10, True, lambda ln, now: "00:00:00"),
    **{name.lower(): (name, 10, True, lambda ln, now: "") for name in UNMEASURED_FIELDS},
}


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return str(gid)


def _started(line: Line) -> bool:
    return bool(line.step.start_time if line.step is not None else line.job.start_time)


def _alloc_cpus(line: Line) -> int:
    return _cpus(line.step) if line.step is not None else jobview.cpu_count(line.job)


def _cpu_seconds(line: Line, now: float) -> float:
    return _elapsed(line, now) * _alloc_cpus(line) if _started(line) else 0.0


def _derived_exit_code(job: Any) -> str:
    """The largest exit code of the job's steps (and the signal with it), as Slurm derives it."""
    worst = max(((s.exit_code, s.signal) for s in getattr(job, "steps", None) or []), default=(0, 0))
    return f"{worst[0]}:{worst[1]}"


def _tres(line: Line) -> str:
    job = line.job
    cpus = _alloc_cpus(line)
    nodes = len(line.step.nodes) if line.step is not None else jobview.node_count(job)
    parts = [f"cpu={cpus}"] if line.step is not None else [f"billing={cpus}", f"cpu={cpus}"]
    if job.spec.memory_mb:
        parts.append(f"mem={job.spec.memory_mb * nodes}M")
    parts.append(f"node={nodes}")
    return ",".join(parts)


class FieldSpec:
    __slots__ = ("key", "width", "right")

    def __init__(self, key: str, width: int, right: bool) -> None:
        self.key = key
        self.width = width
        self.right = right


def parse_fields(text: str) -> list[FieldSpec]:
    """'JobID,JobName%30,State%-12' -> fields; a width after % overrides the default, '-' left-justifies."""
    specs = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, width_text = item.partition("%")
        key = name.lower()
        if key not in FIELDS:
            known = ",".join(title for title, *_ in FIELDS.values())
            raise CliError(f"unknown field '{name}' in --format; known fields: {known}")
        title, width, right, _value = FIELDS[key]
        if width_text:
            left = width_text.startswith("-")
            digits = width_text.lstrip("-")
            if not units.is_number(digits):
                raise CliError(f"bad width '%{width_text}' for field {title} in --format; write it like JobName%30")
            width, right = slurmformat.parse_width(digits, f"--format field {name}", low=1), not left
        specs.append(FieldSpec(key, width, right))
    if not specs:
        raise CliError("--format lists no fields; write it like JobID,JobName,State")
    return specs


def _cell(value: str, field: FieldSpec) -> str:
    return slurmformat.print_field(value, field.width, field.right) + " "


def lines_of(jobs: list[Any], allocations: bool = False, units: str = "") -> list[Line]:
    """A line per job and, unless allocations, a line per step under it (batch first, then 0, 1, ...)."""
    out = []
    for job in jobs:
        out.append(Line(job, None, units))
        if not allocations:
            out.extend(Line(job, step, units) for step in getattr(job, "steps", None) or [])
    return out


def sacct_lines(
    lines: list[Any],
    fields: list[FieldSpec],
    now: float,
    header: bool = True,
    parsable: str = "",
    delimiter: str = "|",
) -> list[str]:
    """lines: Lines, or jobs (each then one line of its own). parsable: '' (columns), 'parsable' (every value
    followed by the delimiter) or 'parsable2' (the delimiter between values)."""
    lines = [line if isinstance(line, Line) else Line(line) for line in lines]
    rows = [[printable(FIELDS[f.key][3](line, now)) for f in fields] for line in lines]
    titles = [FIELDS[f.key][0] for f in fields]
    out = []
    if parsable:
        ending = delimiter if parsable == "parsable" else ""
        if header:
            out.append(delimiter.join(titles) + ending)
        out.extend(delimiter.join(row) + ending for row in rows)
        return out
    # Slurm prints a space after every column, the last one included.
    if header:
        out.append("".join(_cell(t, f) for t, f in zip(titles, fields, strict=True)))
        out.append("".join("-" * f.width + " " for f in fields))
    out.extend("".join(_cell(v, f) for v, f in zip(row, fields, strict=True)) for row in rows)
    return out


def field_list() -> list[str]:
    """sacct -e: the field names in alphabetical order, four to a line in columns of 19, as Slurm prints them."""
    names = sorted((title for title, *_ in FIELDS.values()), key=str.lower)
    return [" ".join(f"{name:<19}" for name in names[i : i + 4]) for i in range(0, len(names), 4)]
