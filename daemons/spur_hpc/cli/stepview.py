"""Job steps as the commands show them: squeue -s (Slurm's "STEPID NAME PARTITION USER TIME NODELIST") and
scontrol show step N.M. The steps come in each Job message's `steps` (docs/controller.md "Steps")."""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import units
from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STEP_COLUMNS = (("STEPID", 15, True), ("NAME", 8, True), ("PARTITION", 9, True), ("USER", 8, True),
                ("TIME", 10, True), ("NODELIST", 0, False))  # fmt: skip


def state_name(value: Any) -> str:
    if isinstance(value, str):
        return value
    from spur_hpc.wire import protocodec

    return protocodec.schema().enum_name("JobState", value)


def step_label(job: Any, step: Any) -> str:
    return f"{job.job_id}.{step.step_id}"


def parse_step_reference(text: str) -> tuple[int, str]:
    """N.M or N.batch -> (job id, step id)."""
    job_text, dot, step_id = text.strip().partition(".")
    if not dot or not job_text.isdigit() or not (step_id.isdigit() or step_id == model.BATCH_STEP):
        raise CliError(f"invalid step id '{text}': write JOBID.STEP, like 12.0 or 12.batch")
    return int(job_text), step_id


def _cell(text: str, width: int, right: bool) -> str:
    text = printable(text)
    if not width:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


def running_steps(jobs: list[Any]) -> list[tuple[Any, Any]]:
    return [(job, step) for job in jobs for step in job.steps if state_name(step.state) == model.RUNNING]


def squeue_step_lines(pairs: list[tuple[Any, Any]], header: bool, now: float) -> list[str]:
    lines = []
    if header:
        lines.append(" ".join(_cell(name, width, right) for name, width, right in STEP_COLUMNS).rstrip())
    for job, step in pairs:
        elapsed = max(0.0, (step.end_time or now) - step.start_time) if step.start_time else 0.0
        values = (
            step_label(job, step),
            step.name,
            job.spec.partition or "default",
            job.spec.user or str(job.spec.uid),
            units.format_duration(elapsed),
            model.compress_hostlist(list(step.nodes)),
        )
        lines.append(
            " ".join(_cell(v, width, right) for v, (_n, width, right) in zip(values, STEP_COLUMNS, strict=True))
        )
    return lines


def show_step_lines(job: Any, step: Any, now: float) -> list[str]:
    """scontrol show step: Key=Value lines in Slurm's order."""
    limit = job.spec.time_limit_secs
    cpus = max(1, step.tasks) * max(1, step.cpus_per_task)
    lines = [
        f"StepId={step_label(job, step)} UserId={job.spec.user}({job.spec.uid}) "
        f"StartTime={units.format_timestamp(step.start_time)} "
        f"TimeLimit={units.format_limit(limit, clock=True) if limit else 'UNLIMITED'}",
        f"   State={state_name(step.state)} Partition={job.spec.partition or 'default'} "
        f"NodeList={model.compress_hostlist(list(step.nodes))}",
        f"   Nodes={len(step.nodes)} CPUs={cpus} Tasks={step.tasks} Name={step.name}",
        f"   ExitCode={step.exit_code}:{step.signal} EndTime={units.format_timestamp(step.end_time)}"
        + (f" Reason={step.reason}" if step.reason else ""),
    ]
    return [printable(line) for line in lines]
