"""scontrol: show nodes and jobs as Key=Value records, update node state, hold and release jobs, ping."""

from __future__ import annotations

import time

from spur_hpc import model
from spur_hpc.cli import commandline, jobview, nodeview
from spur_hpc.cli.options import Option, parse
from spur_hpc.cli.runner import CliError, error_line
from spur_hpc.wire import protocodec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "scontrol"
OPTIONS = [
    Option("oneliner", "o", "oneliner", help="print each record on one line"),
    Option("quiet", "Q", "quiet", help="print no warnings"),
    Option("details", "d", "details", help="accepted for compatibility"),
    Option("json", "", "json", help="print shown records as JSON"),
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
  requeue JOB_ID[,...] / requeuehold JOB_ID[,...]   put jobs back in the queue (held with requeuehold)
  show config                                       the settings clients read (MinJobAge, MaxArraySize, ...)
  show partition[s] [NAME]                          partitions as Key=Value records (from the nodes)
  ping                                              which controllers answer, and which one leads
  version                                           this command's version and build"""

UPDATE_STATES = {"DRAIN": "DRAINED", "DOWN": "DOWN", "RESUME": "IDLE", "IDLE": "IDLE", "UNDRAIN": "IDLE"}


def _print_records(records: list[list[str]], oneliner: bool) -> None:
    out = []
    for lines in records:
        if oneliner:
            out.append(" ".join(line.strip() for line in lines))
        else:
            out.extend(lines)
            out.append("")
    commandline.print_lines(out)


def show(client: Any, args: list[str], values: dict[str, Any]) -> int:
    if not args:
        raise CliError("show needs what to show: node, nodes, job or jobs (like: scontrol show job 42)")
    what, rest = args[0].lower(), args[1:]
    if what in ("config", "conf", "configuration"):
        from spur_hpc.cli import jobcontrol

        commandline.print_lines(jobcontrol.config_lines(client))
        return 0
    if what in ("partition", "partitions", "part", "partitionname"):
        records = nodeview.partition_records(list(client.call("ListNodes").nodes))
        if rest:
            records = [r for r in records if r[0] == f"PartitionName={rest[0]}"]
            if not records:
                raise CliError(f"Partition {rest[0]} not found")
        if not records:
            print("No partitions in the system")
            return 0
        _print_records(records, values["oneliner"])
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
                    raise CliError(f"Node {rest[0]} not found") from None
                raise
        else:
            nodes = list(client.call("ListNodes").nodes)
            if not nodes and not values["json"]:
                print("No nodes in the system")
                return 0
        if values["json"]:
            commandline.print_json({"nodes": [protocodec.to_jsonable(n, "Node") for n in nodes]})
        else:
            _print_records([nodeview.show_node_lines(n) for n in nodes], values["oneliner"])
        return 0
    if what in ("job", "jobs", "jobid"):
        if rest:
            job_id = commandline.parse_job_id(rest[0])
            try:
                jobs = [client.call("GetJob", {"job_id": job_id})]
            except RpcError as exc:
                if exc.code == "NOT_FOUND":
                    raise CliError(f"Invalid job id specified: {job_id}") from None
                raise
            if jobs[0].array_job_id == job_id:  # an array's id: every record of it, as Slurm shows them
                records = client.call("ListJobs", {"job_ids": [job_id], "include_finished": True}).jobs
                jobs += sorted((r for r in records if r.job_id != job_id), key=lambda r: r.array_task_id)
        else:
            jobs = sorted(client.call("ListJobs", {"include_finished": True}).jobs, key=lambda j: j.job_id)
            if not jobs and not values["json"]:
                print("No jobs in the system")
                return 0
        if values["json"]:
            commandline.print_json({"jobs": [protocodec.to_jsonable(j, "Job") for j in jobs]})
        else:
            now = time.time()
            _print_records([jobview.show_job_lines(j, now) for j in jobs], values["oneliner"])
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
    if state is None:
        raise CliError(f"invalid node state '{state_text}': use DRAIN, RESUME (IDLE, UNDRAIN) or DOWN")
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


def hold_or_release(client: Any, command: str, args: list[str]) -> int:
    if not args:
        raise CliError(f"{command} needs job ids, like: scontrol {command} 42")
    job_ids = commandline.parse_job_ids(args)
    method = "HoldJob" if command == "hold" else "ReleaseJob"
    if not client.has_method(method):
        raise CliError(
            f"this release's controller API has no {method} (slurm.proto lacks it), so jobs cannot be "
            f"{'held' if command == 'hold' else 'released'} yet; nothing was changed"
        )
    from spur_hpc.cli import caller
    from spur_hpc.wire.grpcwire import RpcError

    me = caller.user_name()
    failures = 0
    for index, job_id in enumerate(job_ids):
        try:
            client.call(method, {"job_id": job_id, "requested_by": me}, write=True)
        except RpcError as exc:
            commandline.stop_if_unreachable(exc, f"job {job_id}", len(job_ids) - index - 1)
            failures += 1
            detail = "Invalid job id specified" if exc.code == "NOT_FOUND" else exc.details
            error_line(PROGRAM, f"job {job_id}: {detail}")
    return 1 if failures else 0


def ping(client: Any) -> int:
    from spur_hpc.wire.grpcwire import RpcError

    leader_up = False
    for address in client.addresses:
        try:
            reply = client.call_one(address, "Ping")
        except RpcError:
            print(f"Slurmctld at {address} is DOWN")
            continue
        kind = "primary" if reply.role == "leader" else "backup"
        leader_up = leader_up or reply.role == "leader"
        print(f"Slurmctld({kind}) at {address} is UP. Version={reply.version} Build={reply.build}")
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
        if jobcontrol.is_job_update(args):
            jobcontrol.parse_job_update(args)
        else:
            parse_node_update(args)
    elif command not in ("show", "hold", "release", "requeue", "requeuehold", "ping"):
        raise CliError(
            f"unknown command '{positionals[0]}': use show, update, hold, release, requeue, requeuehold, ping "
            "or version"
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
    if command in ("hold", "release"):
        return hold_or_release(client, command, args)
    return ping(client)
