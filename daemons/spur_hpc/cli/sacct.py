"""sacct: job accounting records in Slurm's layout.

Where records come from is cli.jobhistory's business (accounting database, or the controller's job list
when accounting is off); the formatting in cli.acctview does not care.
"""

from __future__ import annotations

import sys
import time

from spur_hpc.cli import acctview, commandline, jobhistory, slurmjson, squeue, units
from spur_hpc.cli.options import Option, gather, parse
from spur_hpc.cli.runner import CliError
from spur_hpc.wire import protocodec

PROGRAM = "sacct"
BRIEF_FIELDS = "JobID,State,ExitCode"
LONG_FIELDS = (
    "JobID,JobName,User,Partition,Account,AllocCPUS,NNodes,NodeList,State,ExitCode,Submit,Start,End,Elapsed,"
    "Timelimit,ReqMem,WorkDir"
)
OPTIONS = [
    Option("jobs", "j", "jobs", "IDS", f"only these jobs: {jobhistory.JOB_REFERENCE_FORMS}", repeat=True),
    Option(
        "users",
        "u",
        "user",
        "USERS",
        "only jobs of these users (default: your own, or everyone's for root)",
        repeat=True,
    ),
    Option("allusers", "a", "allusers", help="jobs of every user"),
    Option("start", "S", "starttime", "TIME", f"window start ({units.TIME_POINT_FORMS}); default midnight"),
    Option("end", "E", "endtime", "TIME", "window end; default now"),
    Option(
        "states",
        "s",
        "state",
        "STATES",
        "only jobs in these states during the window (CD,F,CA,TO,NF,R,PD,RQ)",
        repeat=True,
    ),
    Option("names", "", "name", "NAMES", "only jobs with these names", repeat=True),
    Option("partitions", "r", "partition", "PARTITIONS", "only jobs in these partitions", repeat=True),
    Option("clusters", "M", "clusters", "CLUSTERS", "this cluster's name, or all (every cluster in the database)"),
    Option(
        "format", "o", "format", "FIELDS", f"fields to print (default {acctview.DEFAULT_FIELDS}); 'json': Spur's JSON"
    ),
    Option("brief", "b", "brief", help=f"fields {BRIEF_FIELDS}"),
    Option("long", "l", "long", help="many fields"),
    Option("noheader", "n", "noheader", help="print no header lines"),
    Option("parsable", "p", "parsable", help="fields separated by '|', one after the last"),
    Option("parsable2", "P", "parsable2", help="fields separated by '|', none after the last"),
    Option("delimiter", "", "delimiter", "CHARS", "the separator of --parsable and --parsable2 instead of '|'"),
    Option("units", "", "units", "UNIT", "memory in this unit: K, M, G, T or P"),
    Option("noconvert", "", "noconvert", help="memory in M as recorded, not in the largest unit that keeps it whole"),
    Option("duplicates", "D", "duplicates", help="every record of a job id, a requeued job's earlier runs included"),
    Option("allocations", "X", "allocations", help="jobs only, without their steps (N.batch, N.0, ...)"),
    Option("helpformat", "e", "helpformat", help="list the fields --format accepts"),
    Option("json", "", "json", "VERSION", help=slurmjson.JSON_OPTION_HELP, optional=True),
    Option("yaml", "", "yaml", "VERSION", help=slurmjson.YAML_OPTION_HELP, optional=True),
    Option("help", "h", "help", help="show this help and exit"),
    Option("usage", "", "usage", help="show a one-line usage and exit"),
    Option("version", "V", "version", help="show the version and build and exit"),
]
SYNOPSIS = (
    "[-j IDS] [-u USERS | -a] [-S TIME] [-E TIME] [-s STATES] [--name NAMES] [-M CLUSTERS] [-X] [--format FIELDS] "
    "[-n] [-p | -P] [--delimiter CHARS] [--units UNIT | --noconvert] [-D] [--json]"
)
DESCRIPTION = (
    "Show accounting records of jobs.\n"
    "Records come from the accounting database through the controller (JobHistory). On a cluster without\n"
    "accounting sacct says so and exits 1, as Slurm does.\n"
    "Each job is followed by its steps (N.batch, N.0, ...) unless -X is given; array tasks show as N_T."
)


REQUEUED = "REQUEUED"  # a state of accounting records only: a requeued job's earlier run (sacct -s RQ)


def parse_states(items: list[str]) -> list[str] | None:
    """-s values: the job states (squeue.parse_states) and RQ/REQUEUED; None: every state."""
    requeued = [item for item in items if item.upper() in ("RQ", REQUEUED)]
    states = squeue.parse_states([item for item in items if item not in requeued])
    return None if states is None else states + [REQUEUED] * bool(requeued)


def build_query(values: dict, now: float, all_clusters: bool = False) -> jobhistory.HistoryQuery:
    users = gather(values["users"])
    if not users and not values["allusers"]:
        from spur_hpc.cli import caller

        me = caller.user_name()
        if me != "root":
            users = [me]
    states = parse_states(gather(values["states"])) if values["states"] else []
    start = units.parse_time_point(values["start"], "--starttime", now) if values["start"] else None
    end = units.parse_time_point(values["end"], "--endtime", now) if values["end"] else None
    if start is not None and end is not None and end < start:
        raise CliError(f"--endtime {values['end']} is before --starttime {values['start']}; swap them")
    return jobhistory.HistoryQuery(
        selectors=jobhistory.parse_job_references(values["jobs"]),
        users=users,
        states=[s for s in (states or []) if s != "COMPLETING"],
        names=gather(values["names"]),
        partitions=gather(values["partitions"]),
        start=start,
        end=end,
        all_clusters=all_clusters,
    )


ACCOUNTING_DISABLED = "Slurm accounting storage is disabled"  # Slurm's words, on stderr, exit 1


def memory_units(text: str | None, noconvert: bool = False) -> str:
    if text is None:
        return acctview.NO_CONVERT if noconvert else ""
    unit = text.strip().upper()
    if len(unit) != 1 or unit not in acctview.MEMORY_UNITS:
        raise CliError(f"invalid --units value '{text}': use one of {', '.join(acctview.MEMORY_UNITS)}")
    return unit


def wants_all_clusters(client, text: str | None) -> bool:
    """-M/--clusters: 'all' reads every cluster's records in the database; otherwise it must name this one."""
    if text is None:
        return False
    wanted = [item.strip() for item in text.split(",") if item.strip()]
    if any(item.lower() == "all" for item in wanted):
        return True
    name = client.call("GetClusterInfo").cluster_name
    if name in wanted:
        return False
    raise CliError(f"--clusters {text}: no such cluster; this cluster is '{name}' (or use all)")


def main(argv: list[str], program: str = PROGRAM) -> int:
    values, positionals = parse(program, OPTIONS, argv)
    if commandline.answer_info_flags(program, values, SYNOPSIS, DESCRIPTION, OPTIONS):
        return 0
    if values["helpformat"]:
        commandline.print_lines(acctview.field_list())
        return 0
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; sacct takes options only (job ids go in -j)")
    slurm_yaml = slurmjson.layout(values)
    as_json = slurm_yaml is not None or commandline.wants_json(values["format"])
    fields_text = values["format"] or (
        BRIEF_FIELDS if values["brief"] else LONG_FIELDS if values["long"] else acctview.DEFAULT_FIELDS
    )
    fields = [] if as_json else acctview.parse_fields(fields_text)
    units_text = memory_units(values["units"], bool(values["noconvert"]))
    delimiter = values["delimiter"] if values["delimiter"] is not None else "|"
    if not delimiter:
        raise CliError("--delimiter is empty; give the characters that separate the fields, like --delimiter=,")
    now = time.time()
    try:
        query = build_query(values, now)
    except jobhistory.BadArrayElement as exc:
        print(f"{program}: fatal: Bad job array element specified: {exc.job_id}", file=sys.stderr)
        return 1

    from spur_hpc.cli.controller import ControllerClient

    client = ControllerClient()
    query.all_clusters = wants_all_clusters(client, values["clusters"])
    try:
        jobs = jobhistory.select_jobs(client, query, now)
    except jobhistory.AccountingDisabled:
        print(ACCOUNTING_DISABLED, file=sys.stderr)
        return 1
    if not values["duplicates"]:
        jobs = jobhistory.latest_records(jobs)
    if slurm_yaml is not None:
        records = [job for job in jobs if any(query.wants_line(job, step) for step in (None, *job.steps))]
        cluster = slurmjson.cluster_name(client)
        slurmjson.print_document(slurmjson.accounting_document(records, now, cluster), slurm_yaml)
        return 0
    if as_json:
        commandline.print_json({"jobs": [protocodec.to_jsonable(job, "Job") for job in jobs]})
        return 0
    lines = [
        line
        for line in acctview.lines_of(jobs, bool(values["allocations"]), units_text)
        if query.wants_line(line.job, line.step)
    ]
    parsable = "parsable2" if values["parsable2"] else "parsable" if values["parsable"] else ""
    commandline.print_lines(acctview.sacct_lines(lines, fields, now, not values["noheader"], parsable, delimiter))
    return 0
