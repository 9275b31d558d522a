"""Job steps as the commands show them: squeue -s (Slurm's "STEPID NAME PARTITION USER TIME NODELIST") and
scontrol show step N.M. The steps come in each Job message's `steps` (docs/controller.md "Steps")."""

from __future__ import annotations

from spur_hpc import model
from spur_hpc.cli import jobview, units
from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# squeue -s: Slurm's "%.15i %.8j %.9P %.8u %.9M %N"
STEP_COLUMNS = (("STEPID", 15, True), ("NAME", 8, True), ("PARTITION", 9, True), ("USER", 8, True),
                ("TIME", 9, True), ("NODELIST", 0, False))  # fmt: skip
BATCH_STEP_NUMBER = 0xFFFFFFFB  # Slurm's number for a batch step: squeue -s sorts 12.0 and 12.1 before 12.batch


def state_name(value: Any) -> str:
    if isinstance(value, str):
        return value
    from spur_hpc.wire import protocodec

    return protocodec.schema().enum_name("JobState", value)


def step_label(job: Any, step: Any) -> str:
    return f"{job.job_id}.{step.step_id}"


def squeue_step_label(job: Any, step: Any) -> str:
    """squeue -s names an array task's steps after the array: 7_0.batch (scontrol show step keeps 8.batch)."""
    if job.array_job_id and not job.array_pending and job.array_task_id >= 0:
        return f"{job.array_job_id}_{job.array_task_id}.{step.step_id}"
    return step_label(job, step)


def step_order(pair: tuple[Any, Any]) -> tuple[str, int, int]:
    """squeue -s's order, Slurm's "P,i": partition, then job id, then step number (the batch step last)."""
    job, step = pair
    number = int(step.step_id) if step.step_id.isdigit() else BATCH_STEP_NUMBER
    return jobview.partition(job), job.job_id, number


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
            squeue_step_label(job, step),
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


def step_tres(job: Any, step: Any) -> str:
    """TRES=cpu=N,mem=M,node=K of an srun step (mem is the job's per-node --mem on each node, 0 without it)."""
    cpus = max(1, step.tasks) * max(1, step.cpus_per_task)
    nodes = max(1, len(step.nodes))
    spec = job.spec
    mem = spec.mem_per_cpu_mb * cpus if spec.mem_per_cpu_mb else spec.memory_mb * nodes
    return f"cpu={cpus},mem={units.format_tres_memory(mem) if mem else 0},node={nodes}"


def show_step_lines(job: Any, step: Any, now: float) -> list[str]:
    """scontrol show step: Slurm 22.05's lines in its order. A step has no time limit of its own (UNLIMITED);
    the batch step counts no CPUs and no TRES, as Slurm shows it; Spur records neither srun's host nor its pid,
    nor reserved ports. A step that has ended (Slurm no longer shows those) adds its ExitCode and EndTime."""
    batch = step.step_id == model.BATCH_STEP
    cpus = 0 if batch else max(1, step.tasks) * max(1, step.cpus_per_task)
    dist = "" if batch else " Dist=" + ("Cyclic" if step.tasks <= max(1, len(step.nodes)) else "Block")
    lines = [
        f"StepId={step_label(job, step)} UserId={job.spec.uid} StartTime={units.format_timestamp(step.start_time)} "
        "TimeLimit=UNLIMITED",
        f"   State={state_name(step.state)} Partition={job.spec.partition or 'default'} "
        f"NodeList={model.compress_hostlist(list(step.nodes))}",
        f"   Nodes={len(step.nodes)} CPUs={cpus} Tasks={step.tasks} Name={step.name} Network=(null)",
        f"   TRES={'(null)' if batch else step_tres(job, step)}",
        "   ResvPorts=(null)",
        f"   CPUFreqReq=Default{dist}",
        "   SrunHost:Pid=(null):0",
    ]
    if state_name(step.state) != model.RUNNING:
        lines.append(f"   ExitCode={step.exit_code}:{step.signal} EndTime={units.format_timestamp(step.end_time)}")
        if step.reason:
            lines[-1] += f" Reason={step.reason}"
    return [printable(line) for line in lines]
