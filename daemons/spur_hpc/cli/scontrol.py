"""scontrol: show nodes and jobs as Key=Value records, update node state, hold and release jobs, ping."""

from __future__ import annotations

import sys
import time

from spur_hpc import model
from spur_hpc.cli import commandline, jobrecord, jobview, nodeview, slurmjson
from spur_hpc.cli.options import Option, parse
from spur_hpc.cli.runner import CliError, error_line, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "scontrol"
OPTIONS = [
    Option("oneliner", "o", "oneliner", help="print each record on one line"),
    Option("all", "a", "all", help="show partition: hidden partitions too"),
    Option("quiet", "Q", "quiet", help="print no warnings"),
    Option("details", "d", "details", help="show job: add DerivedExitCode"),
    Option("json", "", "json", "VERSION", help=slurmjson.JSON_OPTION_HELP, optional=True),
    Option("yaml", "", "yaml", "VERSION", help=slurmjson.YAML_OPTION_HELP, optional=True),
    commandline.CLUSTERS_OPTION,
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-o] [--json] COMMAND [ARGS]"
DESCRIPTION = """Commands:
  show node[s] [NAME]                               nodes as Key=Value records
  show job[s] [ID]                                  jobs as Key=Value records (finished jobs too)
  show step[s] [ID.STEP]                            job steps as Key=Value records (running jobs' steps)
  update NodeName=NODES State=STATE [Reason=TEXT]   STATE is DRAIN, RESUME (or IDLE, UNDRAIN) or DOWN;
                                                    DRAIN and DOWN need a Reason; NODES may be a hostlist
  update JobId=IDS KEY=VALUE...                     change pending jobs: TimeLimit, Partition, Dependency,
                                                    NumCPUs, NumTasks, Nice, Name (TimeLimit of running ones)
  hold JOB_ID[,JOB_ID...] / release JOB_ID[,...]    keep pending jobs from starting / let them start
  suspend JOB_ID[,...] / resume JOB_ID[,...]        stop running jobs (SIGSTOP; their time limit waits) / go on
  requeue JOB_ID[,...] / requeuehold JOB_ID[,...]   put jobs back in the queue (held with requeuehold)
  show config                                       the settings clients read (MinJobAge, MaxArraySize, ...)
  show partition[s] [NAME]                          partitions as Key=Value records (from the nodes)
  ping                                              which controllers answer, and which one leads
  version                                           this command's version and build"""

SLURM_INVALID_JOB = "Invalid job id specified"  # Slurm's text for ESLURM_INVALID_JOB_ID
UPDATE_STATES = {"DRAIN": "DRAINED", "DOWN": "DOWN", "RESUME": "IDLE", "IDLE": "IDLE", "UNDRAIN": "IDLE"}


class BadInput(Exception):
    """Lines Slurm's scontrol prints on stderr as they are (no `scontrol: error:` prefix), then exit 1."""

    def __init__(self, *lines: str) -> None:
        super().__init__(lines[0])
        self.lines = lines


def _print_records(records: list[list[str]], oneliner: bool) -> None:
    out = []
    for lines in records:
        if oneliner:
            out.append(" ".join(line.strip() for line in lines))
        else:
            out.extend(lines)
            out.append("")
    commandline.print_lines(out)


def _show_partitions_json(client: Any, names: list[str], yaml: bool) -> int:
    """scontrol --json show partition [NAME]: slurmrestd's v0.0.38 partitions[] (22.05's scontrol has no --json)."""
    from spur_hpc.cli import sinfo

    nodes = list(client.call("ListNodes").nodes)
    records = slurmjson.partition_records(nodes, sinfo.list_partitions(client, nodes))
    if names:
        records = [r for r in records if r["name"] == names[0]]
        if not records:
            raise CliError(f"Partition {names[0]} not found")
    slurmjson.print_document(slurmjson.document("partitions", records), yaml)
    return 0


def partition_memory(client: Any, jobs: list[Any]) -> dict[str, int]:
    """The largest node memory of each partition, for the TRES of jobs still waiting without --mem (asked only
    when the records shown have one)."""
    if not any(not j.start_time and not j.spec.memory_mb and not j.spec.mem_per_cpu_mb for j in jobs):
        return {}
    from spur_hpc.cli import sinfo

    nodes = list(client.call("ListNodes").nodes)
    by_name = {n.name: n.resources.memory_mb for n in nodes}
    return {p.name: max((by_name.get(n, 0) for n in p.nodes), default=0) for p in sinfo.list_partitions(client, nodes)}


def show(client: Any, args: list[str], values: dict[str, Any]) -> int:
    if not args:
        raise CliError("show needs what to show: node, nodes, job or jobs (like: scontrol show job 42)")
    what, rest = args[0].lower(), args[1:]
    if what in ("config", "conf", "configuration"):
        from spur_hpc.cli import jobcontrol

        commandline.print_lines([*jobcontrol.config_lines(client), "", *ping_lines(client)[0]])  # as Slurm's
        return 0
    slurm_yaml = slurmjson.layout(values)
    if what in ("partition", "partitions", "part", "partitionname"):
        if slurm_yaml is not None:
            return _show_partitions_json(client, rest, slurm_yaml)
        from spur_hpc.cli import partview, sinfo

        nodes = list(client.call("ListNodes").nodes)
        parts = sinfo.list_partitions(client, nodes)
        if rest:
            parts = [p for p in parts if p.name == rest[0]]
            if not parts:
                print(f"Partition {rest[0]} not found")  # on stdout, as Slurm's scontrol prints it
                return 1
        elif not values["all"]:
            parts = [p for p in parts if not p.hidden]  # a hidden partition shows with -a, or by its name
        if not parts:
            print("No partitions in the system")
            return 0
        by_name = {n.name: n for n in nodes}
        _print_records([partview.show_partition_lines(p, by_name) for p in parts], values["oneliner"])
        return 0
    if len(rest) > 1:
        raise CliError(f"show {what} takes at most one name or id, got {' '.join(rest)}")
    from spur_hpc.wire.grpcwire import RpcError

    if what in ("node", "nodes", "nodename"):
        if rest:
            try:
                nodes = [client.call("GetNode", {"name": rest[0]})]
            except RpcError as exc:
                if exc.code == "NOT_FOUND":
                    print(f"Node {rest[0]} not found")  # on stdout, as Slurm's scontrol prints it
                    return 1
                raise
        else:
            nodes = list(client.call("ListNodes").nodes)
            if not nodes and slurm_yaml is None:
                print("No nodes in the system")
                return 0
        if slurm_yaml is not None:
            slurmjson.print_document(slurmjson.nodes_document(nodes), slurm_yaml)
        else:
            # each record exactly as Slurm ends it (its lines' trailing spaces; -o: one line)
            sys.stdout.write("".join(nodeview.show_node_text(n, bool(values["oneliner"])) for n in nodes))
        return 0
    if what in ("job", "jobs", "jobid"):
        if rest:
            job_id = commandline.parse_job_id(rest[0])
            try:
                jobs = [client.call("GetJob", {"job_id": job_id})]
            except RpcError as exc:
                if exc.code == "NOT_FOUND":
                    print(f"slurm_load_jobs error: {SLURM_INVALID_JOB}", file=sys.stderr)
                    return 1
                raise
            if jobs[0].array_job_id == job_id:  # an array's id: every record of it, the newest task first (Slurm)
                records = client.call("ListJobs", {"job_ids": [job_id], "include_finished": True}).jobs
                jobs += sorted((r for r in records if r.job_id != job_id), key=lambda r: r.job_id, reverse=True)
        else:
            jobs = sorted(client.call("ListJobs", {"include_finished": True}).jobs, key=lambda j: j.job_id)
            if not jobs and slurm_yaml is None:
                print("No jobs in the system")
                return 0
        if slurm_yaml is not None:
            slurmjson.print_document(slurmjson.jobs_document(jobs, slurmjson.cluster_name(client)), slurm_yaml)
        else:
            now = time.time()
            details = values["details"]
            memory = partition_memory(client, jobs)
            records = [
                jobrecord.show_job_lines(j, now, details=details, node_memory_mb=memory.get(jobview.partition(j), 0))
                for j in jobs
            ]
            _print_records(records, values["oneliner"])
        return 0
    if what in ("step", "steps"):
        from spur_hpc.cli import stepview

        if rest:
            job_id, step_id = stepview.parse_step_reference(rest[0])
            try:
                job = client.call("GetJob", {"job_id": job_id})
            except RpcError as exc:
                if exc.code == "NOT_FOUND":
                    raise CliError(f"Invalid job id specified: {job_id}") from None
                raise
            pairs = [(job, step) for step in job.steps if step.step_id == step_id]
            if not pairs:
                raise CliError(f"Invalid job id specified: job {job_id} has no step {step_id}")
        else:
            pairs = stepview.running_steps(list(client.call("ListJobs", {"states": ["RUNNING"], "brief": True}).jobs))
            if not pairs:
                print("No steps in the system")
                return 0
        now = time.time()
        _print_records([stepview.show_step_lines(job, step, now) for job, step in pairs], values["oneliner"])
        return 0
    raise CliError(f"cannot show '{args[0]}': use node, nodes, job, jobs, step, steps or config")


def parse_node_update(args: list[str]) -> tuple[list[str], str, str]:
    """update arguments -> (node names, UpdateNode state name, reason); every mistake is caught before any call."""
    fields: dict[str, str] = {}
    for arg in args:
        key, has_value, value = arg.partition("=")
        if not has_value:
            raise CliError(
                f"invalid update argument '{arg}': write Key=Value, and quote values with spaces "
                '(Reason="disk replaced")'
            )
        key = key.lower()
        if key not in ("nodename", "state", "reason"):
            raise CliError(
                f"updating '{key}' is not supported: use NodeName=NODES State=DRAIN|RESUME|DOWN [Reason=TEXT]"
            )
        fields[key] = value
    if "nodename" not in fields:
        raise CliError("update needs NodeName=NODES (other records cannot be updated yet)")
    if not fields["nodename"].strip():
        raise CliError("NodeName= is empty: name the nodes, like NodeName=node1 or NodeName=node[1-4]")
    names = model.expand_hostlist(fields["nodename"])
    state_text = fields.get("state", "")
    if not state_text:
        raise CliError("update NodeName=... needs State=DRAIN, State=RESUME or State=DOWN")
    state = UPDATE_STATES.get(state_text.upper())
    if state is None:  # Slurm's four lines, naming the states Spur takes
        raise BadInput(
            f"Invalid input: State={state_text}",
            "Request aborted",
            f"Valid states are: {' '.join(UPDATE_STATES)}",
            "Not all states are valid given a node's prior state",
        )
    reason = fields.get("reason", "").strip()
    commandline.check_one_line("Reason", reason)
    if state in ("DRAINED", "DOWN") and not reason:
        raise CliError(f'State={state_text.upper()} needs a reason: add Reason="why" (like Reason="bad disk")')
    return names, state, reason


def update(client: Any, args: list[str]) -> int:
    names, state, reason = parse_node_update(args)
    from spur_hpc.cli import caller
    from spur_hpc.wire.grpcwire import RpcError

    if names == ["ALL"]:
        names = [n.name for n in client.call("ListNodes").nodes]
    me = caller.user_name()
    failures = 0
    for index, name in enumerate(names):
        try:
            client.call("UpdateNode", {"name": name, "state": state, "reason": reason, "set_by": me}, write=True)
        except RpcError as exc:
            commandline.stop_if_unreachable(exc, f"node {name}", len(names) - index - 1)
            failures += 1
            detail = "Invalid node name specified" if exc.code == "NOT_FOUND" else exc.details
            error_line(PROGRAM, f"node {name}: {detail}")
    return 1 if failures else 0


JOB_METHODS = {"hold": "HoldJob", "release": "ReleaseJob", "suspend": "SuspendJob", "resume": "SuspendJob"}


def job_error_text(client: Any, exc: Any, job_id: int) -> str:
    """Slurm's words for why the controller refused a job command: an unknown job, a finished one, no permission,
    else the controller's own line."""
    from spur_hpc.wire.grpcwire import RpcError

    if exc.code == "NOT_FOUND":
        return SLURM_INVALID_JOB
    if exc.code == "PERMISSION_DENIED":
        return "Access/permission denied"
    if exc.code == "FAILED_PRECONDITION":
        try:
            if jobview.state_name(client.call("GetJob", {"job_id": job_id})) in model.FINISHED_STATES:
                return "Job has already finished"
        except RpcError:
            pass
    return exc.details


def job_command(client: Any, command: str, args: list[str]) -> int:
    """hold / release / suspend / resume JOB_ID[,...]: each refusal is Slurm's `TEXT for job N`, and the last one
    is repeated as `slurm_suspend error: TEXT` (Slurm's scontrol reports these commands so)."""
    if not args:
        raise CliError(f"{command} needs job ids, like: scontrol {command} 42")
    job_ids = commandline.parse_job_ids(args)
    method = JOB_METHODS[command]
    if not client.has_method(method):
        raise CliError(f"this release's controller API has no {method} (slurm.proto lacks it); nothing was changed")
    from spur_hpc.cli import caller
    from spur_hpc.wire.grpcwire import RpcError

    me = caller.user_name()
    last_error = ""
    for index, job_id in enumerate(job_ids):
        request: dict[str, Any] = {"job_id": job_id, "requested_by": me}
        if method == "SuspendJob":
            request["resume"] = command == "resume"
        try:
            client.call(method, request, write=True)
        except RpcError as exc:
            commandline.stop_if_unreachable(exc, f"job {job_id}", len(job_ids) - index - 1)
            last_error = job_error_text(client, exc, job_id)
            print(printable(f"{last_error} for job {job_id}"), file=sys.stderr)
    if last_error:
        print(printable(f"slurm_suspend error: {last_error}"), file=sys.stderr)
        return 1
    return 0


def ping_lines(client: Any) -> tuple[list[str], bool]:
    """Slurm's lines: `Slurmctld(primary) at HOST is UP` for the leader, (backup) for the others, each named by
    the host it runs on (the address's host when it does not answer); and whether the leader answered."""
    from spur_hpc.wire.grpcwire import RpcError

    lines, leader_up = [], False
    for address in client.addresses:
        try:
            reply = client.call_one(address, "Ping")
        except RpcError:
            lines.append(f"Slurmctld at {model.address_host(address)} is DOWN")
            continue
        kind = "primary" if reply.role == "leader" else "backup"
        leader_up = leader_up or reply.role == "leader"
        lines.append(f"Slurmctld({kind}) at {reply.hostname or model.address_host(address)} is UP")
    return [printable(line) for line in lines], leader_up


def ping(client: Any) -> int:
    lines, leader_up = ping_lines(client)
    commandline.print_lines(lines)
    return 0 if leader_up else 1


def main(argv: list[str], program: str = PROGRAM) -> int:
    # options may follow the command, as getopt permutes them (Open OnDemand runs `scontrol show part -o -M X`)
    values, positionals = parse(program, OPTIONS, argv)
    if commandline.answer_info_flags(program, values, SYNOPSIS, DESCRIPTION, OPTIONS):
        return 0
    if not positionals:
        raise CliError(
            "no command given: use show, update, hold, release, requeue, requeuehold, ping or version; see --help"
        )
    command, args = positionals[0].lower(), positionals[1:]
    if command == "version":
        from spur_hpc import buildinfo

        print(buildinfo.describe(program))
        return 0
    from spur_hpc.cli import jobcontrol

    if command == "update":  # bad input fails before the controller is looked up
        try:
            if jobcontrol.is_job_update(args):
                jobcontrol.parse_job_update(args)
            else:
                parse_node_update(args)
        except BadInput as exc:
            print("\n".join(printable(line) for line in exc.lines), file=sys.stderr)
            return 1
    elif command not in ("show", "ping", "requeue", "requeuehold", *JOB_METHODS):
        raise CliError(
            f"unknown command '{positionals[0]}': use show, update, hold, release, suspend, resume, requeue, "
            "requeuehold, ping or version"
        )

    from spur_hpc.cli.controller import ControllerClient

    client = ControllerClient()
    if values["clusters"]:
        commandline.resolve_cluster(client, values["clusters"])
    if command == "show":
        return show(client, args, values)
    if command == "update":
        return jobcontrol.update_jobs(client, args) if jobcontrol.is_job_update(args) else update(client, args)
    if command in ("requeue", "requeuehold"):
        return jobcontrol.requeue(client, command, args)
    if command in JOB_METHODS:
        return job_command(client, command, args)
    return ping(client)
