"""scancel: cancel jobs or send them a signal.

Exit status as Slurm 22.05's: an unknown job id and a job that has already finished are silent and exit 0 (the
job is gone either way), but a signal (--signal) to a finished job is an error, exit 1; a cancel or signal the
controller refuses (not allowed) exits 1. -Q hides the messages, never the status.
A signal goes, as in Slurm, to the job's steps but not its batch shell; -b to the batch shell (and its children)
only, -f to both.
"""

from __future__ import annotations

import sys

from spur_hpc.cli import commandline, units
from spur_hpc.cli.options import Option, gather, parse
from spur_hpc.cli.runner import CliError, error_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "scancel"
OPTIONS = [
    Option("signal", "s", "signal", "SIGNAL", "send this signal (name or number) instead of cancelling"),
    Option("users", "u", "user", "USERS", "cancel the jobs of these users", repeat=True),
    Option("names", "n", "name", "NAMES", "cancel jobs with these names", repeat=True),
    Option("states", "t", "state", "STATES", "cancel only jobs in these states (PENDING, RUNNING)", repeat=True),
    Option("partitions", "p", "partition", "PARTITIONS", "cancel only jobs in these partitions", repeat=True),
    Option("accounts", "A", "account", "ACCOUNTS", "cancel only jobs charged to these accounts", repeat=True),
    Option("nodelist", "w", "nodelist", "NODES", "cancel only jobs running on these nodes (a hostlist)", repeat=True),
    Option("batch", "b", "batch", help="signal only the batch shell (and its children), not the steps"),
    Option("full", "f", "full", help="signal the batch shell and every step (default: the steps only)"),
    Option("interactive", "i", "interactive", help="ask before each job"),
    Option("me", "", "me", help="cancel my jobs"),
    Option("quiet", "Q", "quiet", help="print no messages (the exit status still tells)"),
    Option("verbose", "v", "verbose", help="say what is done to each job"),
    commandline.CLUSTERS_OPTION,
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = (
    "[-s SIGNAL] [-b|-f] [-u USERS] [-n NAMES] [-t STATES] [-p PARTITIONS] [-A ACCOUNTS] [-w NODES] [-i] [-Q] [-v] "
    "[JOB_ID[_TASKS][.STEP]...]"
)
CANCELLABLE_STATES = {"PENDING": "PENDING", "PD": "PENDING", "RUNNING": "RUNNING", "R": "RUNNING",
                      "SUSPENDED": "SUSPENDED", "S": "SUSPENDED"}  # fmt: skip

SIGNALS = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "USR1": 10, "USR2": 12, "ALRM": 14, "TERM": 15,
    "CONT": 18, "STOP": 19, "TSTP": 20,
}  # fmt: skip


class UnknownSignal(Exception):
    """-s 0 or a name no signal has: Slurm's own line, `Unknown job signal: X`, exit 1."""


def parse_signal(text: str) -> int:
    """Signal name (KILL, SIGKILL) or number -> number; KILL means a plain cancel (0), as in Slurm."""
    value = text.strip().upper()
    if value.isascii() and value.isdigit() and int(value) == 0:
        raise UnknownSignal(text)  # Slurm refuses 0 (it is no signal), as kill -0 would only probe
    number = units.bounded_int(value, 64) or 0
    if not number:
        number = SIGNALS.get(value.removeprefix("SIG"), 0)
        if not number:
            known = ", ".join(SIGNALS)
            raise CliError(f"invalid signal '{text}': use a number from 1 to 64 or a name ({known})")
    return 0 if number == 9 else number


def parse_targets(items: list[str]) -> list[tuple[int, str]]:
    """Job arguments -> (job id, array tasks): 12 -> (12, ""), 12_3 -> (12, "3"), 12_[1-3,7] -> (12, "1-3,7")."""
    from spur_hpc import model

    targets: list[tuple[int, str]] = []
    for item in items:
        if "." in item:  # N.M: a step (main cancels those through CancelJob's step_id)
            continue
        base, underscore, tasks = item.strip().partition("_")
        if not underscore:
            targets.extend((job_id, "") for job_id in commandline.parse_job_ids([item]))
            continue
        job_id = commandline.parse_job_id(base)
        task_text = tasks[1:-1] if tasks.startswith("[") and tasks.endswith("]") else tasks
        try:
            ids = model.parse_array_ranges(task_text, "array tasks")
        except model.InvalidValue as exc:
            raise CliError(f"invalid job id '{item}': {exc}") from None
        targets.append((job_id, model.format_array_ranges(ids)))
    return targets


def _filters(values: dict[str, Any], user: str | None) -> dict[str, list[str]]:
    """The controller's ListJobs filters of the selectors given (checked before any call)."""
    filters = {
        "users": gather(values["users"]) + ([user] if user else []),
        "names": gather(values["names"]),
        "partitions": gather(values["partitions"]),
        "states": [s.upper() for s in gather(values["states"])],
    }
    for state in filters["states"]:
        if state not in CANCELLABLE_STATES:
            raise CliError(
                f"invalid --state '{state}': only PENDING (PD), RUNNING (R) or SUSPENDED (S) jobs can be cancelled"
            )
    filters["states"] = sorted({CANCELLABLE_STATES[s] for s in filters["states"]})
    return filters


def _targets(client: Any, values: dict[str, Any], job_ids: list[int], user: str | None) -> list[Any]:
    """The Job records the ids and selectors name (-A and -w are matched here: the controller has no such filter);
    [] of ids alone means the ids as given, unlooked-up."""
    from spur_hpc import model

    filters = _filters(values, user)
    accounts = set(gather(values["accounts"]))
    nodes = {n for text in values["nodelist"] for n in model.expand_hostlist(text)}
    if not any(filters.values()) and not accounts and not nodes:
        return []
    reply = client.call("ListJobs", {"job_ids": job_ids, "brief": True, **filters})
    jobs = [j for j in reply.jobs if not accounts or j.spec.account in accounts]
    return sorted((j for j in jobs if not nodes or nodes & set(j.nodes)), key=lambda j: j.job_id)


def _confirm(job: Any, label: str) -> bool:
    """-i: Slurm's question on stdout, the answer from stdin (anything but y/yes skips the job)."""
    name = job.spec.name if job is not None else ""
    part = job.spec.partition if job is not None else ""
    sys.stdout.write(f"Cancel job_id={label} name={name} partition={part} [y/n]? ")
    sys.stdout.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _signal_steps(client: Any, request: dict[str, Any], full: bool) -> bool:
    """A signal without -b: each running srun step of the job gets it, the batch shell too with -f (an array's id
    goes to the controller whole: each running task's batch shell). True when the job has already finished."""
    from spur_hpc import model
    from spur_hpc.cli import jobview, stepview

    job = client.call("GetJob", {"job_id": request["job_id"]})
    if job.array_job_id == job.job_id and job.array_pending:
        return client.call("CancelJob", request, write=True).already_finished
    if jobview.state_name(job) in model.FINISHED_STATES:
        return True
    for step in job.steps:
        if step.step_id != model.BATCH_STEP and stepview.state_name(step.state) == model.RUNNING:
            client.call("CancelJob", {**request, "step_id": step.step_id}, write=True)
    return client.call("CancelJob", request, write=True).already_finished if full else False


def main(argv: list[str], program: str = PROGRAM) -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Cancel jobs or signal them.", OPTIONS):
        return 0
    from spur_hpc.cli import stepview

    steps = [stepview.parse_step_reference(item) for item in positionals if "." in item]
    named = parse_targets(positionals)
    job_ids = [job_id for job_id, tasks in named if not tasks]
    try:
        signal = parse_signal(values["signal"]) if values["signal"] else 0
    except UnknownSignal as exc:
        print(f"Unknown job signal: {exc}", file=sys.stderr)
        return 1
    if values["batch"] and values["full"]:
        raise CliError("-b (--batch) and -f (--full) cannot be combined: -b signals the batch shell only, -f it too")
    selectors = ("users", "names", "states", "partitions", "accounts", "nodelist")
    has_filter = values["me"] or any(values[k] for k in selectors)
    if not named and not steps and not has_filter:
        raise CliError("no job identification provided: give job ids or a filter like -u USER; see --help")
    _filters(values, None)  # a bad --state fails before the controller is looked up

    from spur_hpc.cli import caller
    from spur_hpc.cli.controller import ControllerClient
    from spur_hpc.wire.grpcwire import RpcError

    me = caller.user_name()
    client = ControllerClient()
    if values["clusters"]:
        commandline.resolve_cluster(client, values["clusters"])
    matched = _targets(client, values, job_ids, me if values["me"] else None)
    records = {job.job_id: job for job in matched}
    targets = [(job.job_id, "") for job in matched] if has_filter else [(job_id, "") for job_id in job_ids]
    targets += [(job_id, tasks) for job_id, tasks in named if tasks]  # a filter does not narrow named tasks
    targets += [(job_id, f".{step}") for job_id, step in steps]
    quiet, verbose = values["quiet"], values["verbose"]
    failures = 0
    for index, (job_id, tasks) in enumerate(targets):
        label = f"{job_id}_{tasks}" if tasks.isdigit() else f"{job_id}_[{tasks}]" if tasks else str(job_id)
        request = {"job_id": job_id, "signal": signal, "requested_by": me, "array_tasks": tasks}
        if tasks.startswith("."):  # a step: N.M
            request = {"job_id": job_id, "signal": signal, "requested_by": me, "step_id": tasks[1:]}
            label = f"{job_id}{tasks}"
        if values["interactive"] and not _confirm(records.get(job_id), label):
            continue
        try:
            if signal and not tasks and not values["batch"]:
                finished = _signal_steps(client, request, values["full"])
            else:
                finished = client.call("CancelJob", request, write=True).already_finished
        except RpcError as exc:
            commandline.stop_if_unreachable(exc, f"job {label}", len(targets) - index - 1)
            if exc.code == "NOT_FOUND":  # Slurm 22.05: an id it does not know (any more) is no error here
                continue
            failures += 1
            if not quiet:
                action = "Signal" if signal else "Kill"
                error_line(program, f"{action} job error on job id {label}: {exc.details}")
            continue
        if finished and signal:  # Slurm: a finished job takes no signal (exit 1); a cancel of it is no error
            failures += 1
            if not quiet:
                error_line(program, f"Kill job error on job id {label}: Invalid job id specified")
        elif verbose and not quiet and not finished:  # Slurm's verbose lines
            kind = "step" if tasks.startswith(".") else "job"
            what = f"Signal {signal} to {kind}" if signal else f"Terminating {kind}"
            print(f"{program}: {what} {label}", file=sys.stderr)
    return 1 if failures else 0
