"""How sacct prints job records: named fields, Slurm's widths, '+' on truncation, --parsable variants.

Independent of where the records come from (the controller today, the accounting database later): it takes
objects with the Job message's attributes.
"""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import jobview, slurmformat, units
from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"


def _elapsed(job: Any, now: float) -> float:
    return jobview.elapsed_seconds(job, now)


# lower-case name -> (title, width, right-justified, value)
FIELDS: dict[str, tuple[str, int, bool, Callable[[Any, float], str]]] = {
    "jobid": ("JobID", 12, False, lambda j, now: str(j.job_id)),
    "jobidraw": ("JobIDRaw", 12, False, lambda j, now: str(j.job_id)),
    "jobname": ("JobName", 10, True, lambda j, now: j.spec.name),
    "user": ("User", 9, True, lambda j, now: j.spec.user or str(j.spec.uid)),
    "uid": ("UID", 6, True, lambda j, now: str(j.spec.uid)),
    "gid": ("GID", 6, True, lambda j, now: str(j.spec.gid)),
    "account": ("Account", 10, True, lambda j, now: j.spec.account),
    "partition": ("Partition", 10, True, lambda j, now: jobview.partition(j)),
    "alloccpus": ("AllocCPUS", 10, True, lambda j, now: str(jobview.cpu_count(j)) if j.start_time else "0"),
    "ncpus": ("NCPUS", 10, True, lambda j, now: str(jobview.cpu_count(j))),
    "reqcpus": ("ReqCPUS", 8, True, lambda j, now: str(jobview.cpu_count(j))),
    "allocnodes": ("AllocNodes", 10, True, lambda j, now: str(len(j.nodes))),
    "nnodes": ("NNodes", 8, True, lambda j, now: str(jobview.node_count(j))),
    "nodelist": ("NodeList", 15, False, lambda j, now: model.compress_hostlist(list(j.nodes)) or "None assigned"),
    "state": ("State", 10, True, lambda j, now: jobview.state_name(j)),
    "exitcode": ("ExitCode", 8, True, lambda j, now: f"{j.exit_code}:{j.signal}"),
    "elapsed": ("Elapsed", 10, True, lambda j, now: units.format_clock(_elapsed(j, now))),
    "elapsedraw": ("ElapsedRaw", 10, True, lambda j, now: str(int(_elapsed(j, now)))),
    "submit": ("Submit", 19, True, lambda j, now: units.format_timestamp(j.submit_time)),
    "start": ("Start", 19, True, lambda j, now: units.format_timestamp(j.start_time)),
    "end": ("End", 19, True, lambda j, now: units.format_timestamp(j.end_time)),
    "timelimit": ("Timelimit", 10, True, lambda j, now: units.format_limit(j.spec.time_limit_secs, clock=True)),
    "reqmem": ("ReqMem", 10, True, lambda j, now: f"{j.spec.memory_mb}M" if j.spec.memory_mb else "0"),
    "workdir": ("WorkDir", 20, False, lambda j, now: j.spec.work_dir),
    "reason": ("Reason", 20, True, lambda j, now: j.reason or "None"),
}


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


def _fit(value: str, width: int, right: bool) -> str:
    if len(value) > width:
        value = value[: width - 1] + "+"
    return value.rjust(width) if right else value.ljust(width)


def sacct_lines(
    jobs: list[Any], fields: list[FieldSpec], now: float, header: bool = True, parsable: str = ""
) -> list[str]:
    """parsable: '' (columns), 'parsable' (every value followed by '|') or 'parsable2' ('|' between values)."""
    rows = [[printable(FIELDS[f.key][3](job, now)) for f in fields] for job in jobs]  # one record, one line
    titles = [FIELDS[f.key][0] for f in fields]
    lines = []
    if parsable:
        ending = "|" if parsable == "parsable" else ""
        if header:
            lines.append("|".join(titles) + ending)
        lines.extend("|".join(row) + ending for row in rows)
        return lines
    if header:
        lines.append(" ".join(_fit(t, f.width, f.right) for t, f in zip(titles, fields, strict=True)).rstrip())
        lines.append(" ".join("-" * f.width for f in fields))
    lines.extend(" ".join(_fit(v, f.width, f.right) for v, f in zip(row, fields, strict=True)).rstrip() for row in rows)
    return lines
