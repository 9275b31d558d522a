"""squeue: jobs in the queue, in Slurm's layout (default "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R") and order
(sorted by partition, state and priority, as Slurm's -S "P,t,-p")."""

from __future__ import annotations

import sys
import time

from spur_hpc import model
from spur_hpc.cli import commandline, jobview, slurmjson
from spur_hpc.cli.options import Option, gather, parse
from spur_hpc.cli.runner import CliError
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "squeue"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"  # --start: pending jobs by expected start
DEFAULT_SORT, START_SORT = "P,t,-p", "S"
# Every job state Slurm's -t takes, in the order its error message lists them, with its compact code. Spur's
# jobs are never in most of them; asking for one is not an error, it matches nothing.
SLURM_JOB_STATES = {
    "PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETED": "CD", "CANCELLED": "CA", "FAILED": "F",
    "TIMEOUT": "TO", "NODE_FAIL": "NF", "PREEMPTED": "PR", "BOOT_FAIL": "BF", "DEADLINE": "DL",
    "OUT_OF_MEMORY": "OOM", "COMPLETING": "CG", "CONFIGURING": "CF", "RESIZING": "RS", "RESV_DEL_HOLD": "RD",
    "REQUEUED": "RQ", "REQUEUE_FED": "RF", "REQUEUE_HOLD": "RH", "REVOKED": "RV", "SIGNALING": "SI",
    "SPECIAL_EXIT": "SE", "STAGE_OUT": "SO", "STOPPED": "ST",
}  # fmt: skip
OPTIONS = [
    Option("noheader", "h", "noheader", help="print no header line"),
    Option(
        "format",
        "o",
        "format",
        "FORMAT",
        help=f"columns as % codes (default \"{jobview.SQUEUE_DEFAULT_FORMAT}\"); 'json': Spur's own JSON",
    ),
    Option("jobs", "j", "jobs", "IDS", "only these job ids (comma-separated; a finished one needs -t)", repeat=True),
    Option("users", "u", "user", "USERS", "only jobs of these users (comma-separated)", repeat=True),
    Option("me", "", "me", help="only my jobs"),
    Option("states", "t", "states", "STATES", "only jobs in these states (PD,R,CD,... or names; 'all')", repeat=True),
    Option("partitions", "p", "partition", "PARTITIONS", "only jobs in these partitions", repeat=True),
    Option("names", "n", "name", "NAMES", "only jobs with these names", repeat=True),
    Option("accounts", "A", "account", "ACCOUNTS", "only jobs charged to these accounts", repeat=True),
    Option("long", "l", "long", help="long format (state names and time limits), under the date"),
    Option("sort", "S", "sort", "KEYS", f"sort by these format letters, '-' for descending (default {DEFAULT_SORT})"),
    Option("start", "", "start", help="pending jobs with their expected start times"),
    Option("array", "r", "array", help="each pending task of an array on a line of its own"),
    Option("Format", "O", "Format", "FIELDS", "columns by name: JobID,State:.10,Name:\\x1f (type[:[.][size][suffix]])"),
    commandline.CLUSTERS_OPTION,
    Option("noconvert", "", "noconvert", help="accepted for compatibility (sizes are shown in megabytes)"),
    Option("all", "a", "all", help="jobs of hidden partitions too"),
    Option("json", "", "json", "VERSION", help=slurmjson.JSON_OPTION_HELP, optional=True),
    Option("yaml", "", "yaml", "VERSION", help=slurmjson.YAML_OPTION_HELP, optional=True),
    Option("steps", "s", "steps", "STEPS", "job steps instead of jobs (optionally only N.M,...)", optional=True),
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-h] [-j IDS] [-u USERS] [-t STATES] [-p PARTITIONS] [-n NAMES] [-o FORMAT] [-l] [-S KEYS] [--json]"

_CODE_TO_STATE = {code: name for name, code in jobview.STATE_CODES.items()}
_SLURM_CODE_TO_STATE = {code: name for name, code in SLURM_JOB_STATES.items()}


class SlurmError(CliError):
    """A failure Slurm reports in its own words: these stderr lines as they are, no `squeue: error:` prefix."""

    def __init__(self, *lines: str) -> None:
        super().__init__(lines[0])
        self.lines = lines


def parse_states(items: list[str]) -> list[str] | None:
    """sacct -s values -> the state names of Spur's jobs (None: every state)."""
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


def parse_squeue_states(items: list[str]) -> list[str] | None:
    """squeue -t values -> state names, any Slurm knows (None: every state); a bad one is Slurm's two lines."""
    states: list[str] = []
    for item in items:
        upper = item.upper()
        if upper == "ALL":
            return None
        name = _SLURM_CODE_TO_STATE.get(upper, upper)
        if name not in SLURM_JOB_STATES:
            raise SlurmError(
                f"{PROGRAM}: error: Invalid job state specified: {item}",
                f"{PROGRAM}: error: Valid job states include: {','.join(SLURM_JOB_STATES)}",
                "",  # Slurm's message ends in a newline of its own
            )
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
    states = parse_squeue_states(gather(values["states"])) if values["states"] else []
    if not states and states is not None and values.get("start"):
        states = ["PENDING"]  # --start shows the jobs still waiting to start
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
        known = set(jobview.STATE_CODES)
        server_states = sorted({"RUNNING" if s == "COMPLETING" else s for s in states} & known)
        request["states"] = server_states or ["JOB_STATE_UNKNOWN"]  # no record is ever UNKNOWN: none match
        request["include_finished"] = any(s in model.FINISHED_STATES for s in states)
        return request, states
    # default: what is still in the queue. Jobs asked for by id are fetched finished or not, so that an id the
    # controller does not know is told from a job that has ended (which, as in Slurm, is not shown).
    request["include_finished"] = bool(job_ids)
    return request, [name for name in SLURM_JOB_STATES if name not in model.FINISHED_STATES]


_INFINITE = 0xFFFFFFFF  # Slurm's INFINITE: an unlimited time sorts after every limit


def _start_for_sort(job: Any, now: float) -> int:
    """Slurm's start time as its sort reads it: whole seconds; never started is `now + 100`; a pending job's
    past estimate is `now`."""
    if not job.start_time:
        return int(now) + 100
    if jobview.state_name(job) == "PENDING" and job.start_time < now:
        return int(now)
    return int(job.start_time)


def _time_left(job: Any, now: float) -> int:
    limit = job.spec.time_limit_secs
    return _INFINITE if not limit else int(limit - jobview.elapsed_seconds(job, now))


def _id_for_sort(job: Any) -> tuple[int, int]:
    """%i's order: an array's records by the array's id, then task id (the pending rest after its tasks)."""
    if not job.array_job_id:
        return job.job_id, 0
    return job.array_job_id, _INFINITE - 1 if job.array_pending else job.array_task_id


# -S letters -> the value Slurm's squeue sorts on (letters its sort.c ignores map to None; others are refused).
SORT_KEYS: dict[str, Any] = {
    "B": lambda job, now: job.nodes[0] if job.nodes else "",
    "C": lambda job, now: jobview.cpu_count(job),
    "d": lambda job, now: 0,
    "D": lambda job, now: jobview.node_count(job),
    "e": lambda job, now: int(job.end_time),
    "g": lambda job, now: jobview.group_name(job.spec.gid),
    "G": lambda job, now: job.spec.gid,
    "H": lambda job, now: 0, "I": lambda job, now: 0, "J": lambda job, now: 0, "z": lambda job, now: 0,
    "i": lambda job, now: _id_for_sort(job),
    "j": lambda job, now: job.spec.name,
    "l": lambda job, now: job.spec.time_limit_secs or _INFINITE,
    "L": _time_left,
    "m": lambda job, now: job.spec.memory_mb,
    "M": lambda job, now: int(jobview.elapsed_seconds(job, now)),
    "N": lambda job, now: sorted(job.nodes)[:1],
    "p": lambda job, now: job.priority, "Q": lambda job, now: job.priority,
    "P": lambda job, now: jobview.partition(job),
    "S": _start_for_sort,
    "t": lambda job, now: jobview.STATE_CODES.get(name := jobview.state_name(job), name[:2]),
    "T": lambda job, now: jobview.state_name(job),
    "u": lambda job, now: job.spec.user or str(job.spec.uid),
    "U": lambda job, now: job.spec.uid,
    "v": lambda job, now: "",
    "V": lambda job, now: int(job.submit_time),
    "c": None, "f": None, "h": None, "n": None, "O": None, "b": None,
}  # fmt: skip


def parse_sort(text: str) -> list[tuple[str, bool]]:
    """-S "P,t,-p" -> [(letter, descending)], checked before any call (an unknown letter is Slurm's error)."""
    keys: list[tuple[str, bool]] = []
    for item in text.split(","):
        item = item.strip()
        descending = item.startswith("-")
        for letter in item.lstrip("+-"):
            if letter not in SORT_KEYS:
                raise SlurmError(f"{PROGRAM}: error: Invalid sort specification: {letter}")
            keys.append((letter, descending))
    return keys


def sort_jobs(jobs: list[Any], keys: list[tuple[str, bool]], now: float) -> list[Any]:
    """Slurm's order: the latest start first, then each sort key from the last to the first, every sort stable
    (jobs that compare equal keep the order before it: for ties, the order the controller listed them in)."""
    jobs = sorted(jobs, key=lambda job: _start_for_sort(job, now), reverse=True)
    for letter, descending in reversed(keys):
        value = SORT_KEYS[letter]
        if value is not None:
            jobs.sort(key=lambda job: value(job, now), reverse=descending)
    return jobs


def listed_order(jobs: list[Any], job_ids: list[int]) -> list[Any]:
    """The records in the order Slurm's controller answers: as created (by job id), except that asking for one
    array by its id answers its records newest first (they hang off the array's id that way)."""
    jobs = sorted(jobs, key=lambda job: job.job_id)
    if len(job_ids) == 1 and any(job.array_job_id == job_ids[0] for job in jobs):
        jobs.reverse()
    return jobs


def show_steps(client: Any, request: dict[str, Any], values: dict[str, Any]) -> int:
    """squeue -s: the running steps of the selected jobs (N.batch and N.0, N.1, ...), or of those named."""
    from spur_hpc.cli import stepview

    wanted = None
    if isinstance(values["steps"], str):
        wanted = {stepview.parse_step_reference(part) for part in gather([values["steps"]])}
        request["job_ids"] = sorted({job_id for job_id, _step in wanted} | set(request["job_ids"]))
    request["states"], request["brief"] = ["RUNNING"], True
    jobs = sorted(client.call("ListJobs", request).jobs, key=lambda job: job.job_id)
    pairs = sorted(stepview.running_steps(jobs), key=stepview.step_order)
    if wanted is not None:
        pairs = [(job, step) for job, step in pairs if (job.job_id, step.step_id) in wanted]
    commandline.print_lines(stepview.squeue_step_lines(pairs, not values["noheader"], time.time()))
    return 0


def hidden_partitions(client: Any) -> set[str]:
    """The partitions whose jobs squeue leaves out without -a (Hidden=YES; none from an older controller)."""
    from spur_hpc.cli.controller import list_partitions

    reply = list_partitions(client)
    return {p.name for p in reply.partitions if p.hidden} if reply is not None else set()


def main(argv: list[str], program: str = PROGRAM) -> int:
    try:
        return list_jobs(argv, program)
    except SlurmError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return exc.exit_code


def list_jobs(argv: list[str], program: str = PROGRAM) -> int:
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
    slurm_yaml = slurmjson.layout(values)
    as_json = slurm_yaml is not None or commandline.wants_json(values["format"])
    # the columns and Slurm's --json never show a script or an environment; -o json shows the whole job
    request["brief"] = not as_json or slurm_yaml is not None
    if slurm_yaml is not None and not values["states"]:  # 22.05's --json lists every job the controller holds
        request["include_finished"], shown_states = True, None
    elif as_json and request["job_ids"] and not values["states"]:  # Spur's own -o json: the jobs asked for, ended too
        shown_states = None
    format_text = values["format"] or (
        START_FORMAT if values["start"] else LONG_FORMAT if values["long"] else jobview.SQUEUE_DEFAULT_FORMAT
    )
    sort_keys = parse_sort(values["sort"] or (START_SORT if values["start"] else DEFAULT_SORT))
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
    if len(request["job_ids"]) == 1 and not reply.jobs:  # Slurm asks for one id alone, and that fails
        raise SlurmError("slurm_load_jobs error: Invalid job id specified")
    now = time.time()
    jobs = listed_order(list(reply.jobs), request["job_ids"])
    if not (values["all"] or values["partitions"] or request["job_ids"]):  # Slurm: -a, -p or -j shows them
        hidden = hidden_partitions(client)
        jobs = [job for job in jobs if job.spec.partition not in hidden] if hidden else jobs
    if shown_states is not None:
        shown = set(shown_states)
        jobs = [job for job in jobs if jobview.state_name(job) in shown]
    accounts = set(gather(values["accounts"]))
    if accounts:
        jobs = [job for job in jobs if job.spec.account in accounts]
    jobs = sort_jobs(jobs, sort_keys, now)
    if not as_json and (values["array"] or any(tasks is not None for tasks in selection.values())):
        jobs = jobview.expand_array_rows(jobs)
    if selection:
        jobs = [job for job in jobs if selected(job, selection)]
    if slurm_yaml is not None:
        slurmjson.print_document(slurmjson.jobs_document(jobs, slurmjson.cluster_name(client)), slurm_yaml)
        return 0
    if as_json:
        commandline.print_json({"jobs": [protocodec.to_jsonable(job, "Job") for job in jobs]})
        return 0
    header = not values["noheader"]
    if header and values["long"]:
        from spur_hpc.cli import nodeview

        print(nodeview.date_line(now))
    if cluster:
        print(f"CLUSTER: {cluster}")  # Slurm names each cluster it lists
    if fields_text:
        commandline.print_lines(jobview.format_fields_lines(jobs, fields_text, header, now, program))
        return 0
    commandline.print_lines(jobview.squeue_lines(jobs, format_text, header, now, program))
    return 0
