"""scancel: cancel jobs or send them a signal.

Exit status as Slurm's: 1 when the controller refuses any cancel (unknown job, not allowed), 0 otherwise;
a job that already finished is not a failure. -Q hides the messages, never the status.
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
    Option("me", "", "me", help="cancel my jobs"),
    Option("quiet", "Q", "quiet", help="print no messages (the exit status still tells)"),
    Option("verbose", "v", "verbose", help="say what is done to each job"),
    commandline.CLUSTERS_OPTION,
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-s SIGNAL] [-u USERS] [-n NAMES] [-t STATES] [-p PARTITIONS] [-Q] [-v] [JOB_ID[_TASKS]...]"

SIGNALS = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "USR1": 10, "USR2": 12, "ALRM": 14, "TERM": 15,
    "CONT": 18, "STOP": 19, "TSTP": 20,
}  # fmt: skip


def parse_signal(text: str) -> int:
    """Signal name (KILL, SIGKILL) or number -> number; KILL means a plain cancel (0), as in Slurm."""
    value = text.strip().upper()
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


def _targets(client: Any, values: dict[str, Any], job_ids: list[int], user: str | None) -> list[int]:
    filters = {
        "users": gather(values["users"]) + ([user] if user else []),
        "names": gather(values["names"]),
        "partitions": gather(values["partitions"]),
        "states": [s.upper() for s in gather(values["states"])],
    }
    for state in filters["states"]:
        if state not in ("PENDING", "RUNNING", "PD", "R"):
            raise CliError(f"invalid --state '{state}': only PENDING (PD) or RUNNING (R) jobs can be cancelled")
    filters["states"] = ["PENDING" if s in ("PENDING", "PD") else "RUNNING" for s in filters["states"]]
    if not any(filters.values()):
        return job_ids
    reply = client.call("ListJobs", {"job_ids": job_ids, "brief": True, **filters})
    return sorted(job.job_id for job in reply.jobs)


def main(argv: list[str], program: str = PROGRAM) -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Cancel jobs or signal them.", OPTIONS):
        return 0
    from spur_hpc.cli import stepview

    steps = [stepview.parse_step_reference(item) for item in positionals if "." in item]
    named = parse_targets(positionals)
    job_ids = [job_id for job_id, tasks in named if not tasks]
    signal = parse_signal(values["signal"]) if values["signal"] else 0
    has_filter = values["me"] or any(values[k] for k in ("users", "names", "states", "partitions"))
    if not named and not steps and not has_filter:
        raise CliError("no job identification provided: give job ids or a filter like -u USER; see --help")

    from spur_hpc.cli import caller
    from spur_hpc.cli.controller import ControllerClient
    from spur_hpc.wire.grpcwire import RpcError

    me = caller.user_name()
    client = ControllerClient()
    if values["clusters"]:
        commandline.resolve_cluster(client, values["clusters"])
    targets = [(job_id, "") for job_id in _targets(client, values, job_ids, me if values["me"] else None)]
    targets += [(job_id, tasks) for job_id, tasks in named if tasks]  # a filter does not narrow named tasks
    targets += [(job_id, f".{step}") for job_id, step in steps]
    quiet, verbose = values["quiet"], values["verbose"]
    failures = 0
    for index, (job_id, tasks) in enumerate(targets):
        request = {"job_id": job_id, "signal": signal, "requested_by": me, "array_tasks": tasks}
        label = f"{job_id}_{tasks}" if tasks.isdigit() else f"{job_id}_[{tasks}]" if tasks else str(job_id)
        if tasks.startswith("."):  # a step: N.M
            request = {"job_id": job_id, "signal": signal, "requested_by": me, "step_id": tasks[1:]}
            label = f"{job_id}{tasks}"
        try:
            reply = client.call("CancelJob", request, write=True)
        except RpcError as exc:
            commandline.stop_if_unreachable(exc, f"job {label}", len(targets) - index - 1)
            failures += 1
            if not quiet:
                reason = "Invalid job id specified" if exc.code == "NOT_FOUND" else exc.details
                action = "Signal" if signal else "Kill"
                error_line(program, f"{action} job error on job id {label}: {reason}")
            continue
        if quiet:
            continue
        if reply.already_finished:
            from spur_hpc.cli import jobview

            print(f"{program}: job {label} has already finished ({jobview.state_name(reply.job)})", file=sys.stderr)
        elif verbose:
            what = f"Signal {signal} sent to" if signal else "Terminating"
            print(f"{program}: {what} job {label}", file=sys.stderr)
    return 1 if failures else 0
