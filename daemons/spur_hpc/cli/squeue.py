"""squeue: jobs in the queue, in Slurm's layout (default "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R")."""

from __future__ import annotations

import time

from spur_hpc import model
from spur_hpc.cli import commandline, jobview
from spur_hpc.cli.options import Option, gather, parse
from spur_hpc.cli.runner import CliError
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "squeue"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
OPTIONS = [
    Option("noheader", "h", "noheader", help="print no header line"),
    Option(
        "format",
        "o",
        "format",
        "FORMAT",
        help=f"columns as % codes (default \"{jobview.SQUEUE_DEFAULT_FORMAT}\"); 'json' prints JSON",
    ),
    Option("jobs", "j", "jobs", "IDS", "only these job ids (comma-separated); finished jobs included", repeat=True),
    Option("users", "u", "user", "USERS", "only jobs of these users (comma-separated)", repeat=True),
    Option("me", "", "me", help="only my jobs"),
    Option("states", "t", "states", "STATES", "only jobs in these states (PD,R,CD,... or names; 'all')", repeat=True),
    Option("partitions", "p", "partition", "PARTITIONS", "only jobs in these partitions", repeat=True),
    Option("names", "n", "name", "NAMES", "only jobs with these names", repeat=True),
    Option("long", "l", "long", help="long format (state names and time limits)"),
    Option("array", "r", "array", help="each pending task of an array on a line of its own"),
    Option("Format", "O", "Format", "FIELDS", "columns by name: JobID,State:.10,Name:\\x1f (type[:[.][size][suffix]])"),
    commandline.CLUSTERS_OPTION,
    Option("noconvert", "", "noconvert", help="accepted for compatibility (sizes are shown in megabytes)"),
    Option("all", "a", "all", help="accepted for compatibility (every partition is shown)"),
    Option("json", "", "json", help="print the jobs as JSON"),
    Option("steps", "s", "steps", "STEPS", "job steps instead of jobs (optionally only N.M,...)", optional=True),
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-h] [-j IDS] [-u USERS] [-t STATES] [-p PARTITIONS] [-n NAMES] [-o FORMAT] [-l] [--json]"

_CODE_TO_STATE = {code: name for name, code in jobview.STATE_CODES.items()}


def parse_states(items: list[str]) -> list[str] | None:
    """-t values -> state names (None: every state)."""
    states: list[str] = []
    for item in items:
        upper = item.upper()
        if upper == "ALL":
            return None
        name = _CODE_TO_STATE.get(upper, upper)
        if name not in jobview.STATE_CODES or name == "JOB_STATE_UNKNOWN":
            known = ", ".join(f"{code} ({n})" for n, code in jobview.STATE_CODES.items() if n != "JOB_STATE_UNKNOWN")
            raise CliError(f"invalid job state '{item}': use one of {known}, or all")
        states.append(name)
    return states


def split_job_list(items: list[str]) -> list[str]:
    """-j 12,13_[1,3],14_2 -> ['12', '13_[1,3]', '14_2'] (commas inside brackets belong to the task list)."""
    out: list[str] = []
    for item in items:
        depth, current = 0, ""
        for char in item:
            depth += {"[": 1, "]": -1}.get(char, 0)
            if char == "," and depth <= 0:
                out.append(current)
                current = ""
            else:
                current += char
        out.append(current)
    return [part.strip() for part in out if part.strip()]


def parse_job_selection(items: list[str]) -> tuple[list[int], dict[int, set[int] | None]]:
    """-j values -> (job ids to ask for, {id: the array task ids asked for, or None for all of it})."""
    selection: dict[int, set[int] | None] = {}
    for part in split_job_list(items):
        base, underscore, tasks = part.partition("_")
        job_id = commandline.parse_job_id(base)
        if not underscore:
            selection[job_id] = None
            continue
        task_text = tasks[1:-1] if tasks.startswith("[") and tasks.endswith("]") else tasks
        try:
            wanted = set(model.parse_array_ranges(task_text, "-j"))
        except model.InvalidValue as exc:
            raise CliError(f"invalid job id '{part}': {exc}") from None
        if job_id not in selection or selection[job_id] is not None:
            selection[job_id] = (selection.get(job_id) or set()) | wanted
    return sorted(selection), selection


def selected(job: Any, selection: dict[int, set[int] | None]) -> bool:
    """Whether a record (or a task row) is one -j asked for."""
    for job_id in (job.job_id, job.array_job_id):
        if job_id in selection:
            tasks = selection[job_id]
            if tasks is None:
                return True
            if job.array_job_id == job_id and not job.array_pending and job.array_task_id in tasks:
                return True
    return False


def job_query(values: dict[str, Any], user: str | None = None) -> tuple[dict[str, Any], list[str] | None]:
    """Options -> (ListJobsRequest fields, states to show or None for all)."""
    job_ids, _selection = parse_job_selection(values["jobs"])
    states = parse_states(gather(values["states"])) if values["states"] else []
    users = gather(values["users"]) + ([user] if user else [])
    request: dict[str, Any] = {
        "job_ids": job_ids,
        "users": users,
        "partitions": gather(values["partitions"]),
        "names": gather(values["names"]),
    }
    if states is None:
        request["include_finished"] = True
        return request, None
    if states:
        server_states = sorted({"RUNNING" if s == "COMPLETING" else s for s in states})
        request["states"] = server_states
        request["include_finished"] = any(s in model.FINISHED_STATES for s in states)
        return request, states
    # default: what is still in the queue, plus any job asked for by id (finished ones too, like Slurm's
    # MinJobAge window)
    request["include_finished"] = bool(job_ids)
    return request, None if job_ids else ["PENDING", "RUNNING", "COMPLETING"]


def show_steps(client: Any, request: dict[str, Any], values: dict[str, Any]) -> int:
    """squeue -s: the running steps of the selected jobs (N.batch and N.0, N.1, ...), or of those named."""
    from spur_hpc.cli import stepview

    wanted = None
    if isinstance(values["steps"], str):
        wanted = {stepview.parse_step_reference(part) for part in gather([values["steps"]])}
        request["job_ids"] = sorted({job_id for job_id, _step in wanted} | set(request["job_ids"]))
    request["states"], request["brief"] = ["RUNNING"], True
    jobs = sorted(client.call("ListJobs", request).jobs, key=lambda job: job.job_id)
    pairs = stepview.running_steps(jobs)
    if wanted is not None:
        pairs = [(job, step) for job, step in pairs if (job.job_id, step.step_id) in wanted]
    commandline.print_lines(stepview.squeue_step_lines(pairs, not values["noheader"], time.time()))
    return 0


def main(argv: list[str], program: str = PROGRAM) -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Show jobs in the queue.", OPTIONS):
        return 0
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; squeue takes options only (job ids go in -j)")
    user = None
    if values["me"]:
        from spur_hpc.cli import caller

        user = caller.user_name()
    request, shown_states = job_query(values, user)
    _job_ids, selection = parse_job_selection(values["jobs"])
    as_json = commandline.wants_json(values["format"], values["json"])
    request["brief"] = not as_json  # the columns never show a script or an environment; --json shows the whole job
    format_text = values["format"] or (LONG_FORMAT if values["long"] else jobview.SQUEUE_DEFAULT_FORMAT)
    fields_text = values["Format"]
    if fields_text:
        jobview.format_fields_lines([], fields_text, False, 0.0, program)  # a bad -O fails before any call
    elif not as_json:
        jobview.squeue_lines([], format_text, False, 0.0, program)  # a bad -o fails before any call

    from spur_hpc.cli.controller import ControllerClient

    if values["steps"]:
        return show_steps(ControllerClient(), request, values)
    client = ControllerClient()
    cluster = commandline.resolve_cluster(client, values["clusters"]) if values["clusters"] else ""
    reply = client.call("ListJobs", request)
    jobs = sorted(reply.jobs, key=lambda job: job.job_id)
    if shown_states is not None:
        jobs = [job for job in jobs if jobview.state_name(job) in shown_states]
    if not as_json and (values["array"] or any(tasks is not None for tasks in selection.values())):
        jobs = jobview.expand_array_rows(jobs)
    if selection:
        jobs = [job for job in jobs if selected(job, selection)]
    if request["job_ids"] and not jobs:
        raise CliError("Invalid job id specified: " + ",".join(str(j) for j in request["job_ids"]))
    if as_json:
        commandline.print_json({"jobs": [protocodec.to_jsonable(job, "Job") for job in jobs]})
        return 0
    header = not values["noheader"]
    if cluster:
        print(f"CLUSTER: {cluster}")  # Slurm names each cluster it lists
    if fields_text:
        commandline.print_lines(jobview.format_fields_lines(jobs, fields_text, header, time.time(), program))
        return 0
    commandline.print_lines(jobview.squeue_lines(jobs, format_text, header, time.time(), program))
    return 0
