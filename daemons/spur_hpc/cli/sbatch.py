"""sbatch: submit a batch script. Options come from #SBATCH lines first, then the command line (which wins).

The job runs as the caller (user, uid, gid), in -D or the current directory, with the caller's environment
(Slurm's --export=ALL). Each submission carries a fresh idempotency key, reused on every retry of the call,
so a retry after a lost answer returns the first job instead of creating a second.
"""

from __future__ import annotations

import os
import sys

from spur_hpc import joblimits
from spur_hpc.cli import commandline, jobopts, units
from spur_hpc.cli.options import usage_error
from spur_hpc.cli.runner import CliError, submit_failure

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "sbatch"
OPTIONS = jobopts.options_for(PROGRAM)
SYNOPSIS = "[OPTIONS] SCRIPT [ARGS...] | sbatch [OPTIONS] --wrap COMMAND | sbatch [OPTIONS] < SCRIPT"


def wrap_script(command: str) -> str:
    return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n"


def directive_options(script: str, source: str) -> jobopts.JobOptions:
    """Options of the #SBATCH lines before the first command (Slurm stops reading them there). Every option
    is allowed there; a bad one names its line."""
    merged = jobopts.JobOptions(PROGRAM)
    for number, line in enumerate(script.splitlines()[1:], start=2):
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            import shlex  # here: its re and enum are 4 ms a script without #SBATCH lines (--wrap) does not need

            try:
                words = shlex.split(stripped[len("#SBATCH") :], comments=True)
            except ValueError as exc:
                raise CliError(f"{source} line {number}: cannot read '{stripped}' ({exc})") from None
            try:
                parsed, extra = jobopts.parse_job_options(PROGRAM, words, None)
                parsed.spec_fields()  # a bad value names this line
            except CliError as exc:
                raise CliError(f"{source} line {number}: {exc}") from None
            if extra:
                raise CliError(f"{source} line {number}: unexpected '{extra[0]}' in '{stripped}'")
            merged.update(parsed)
        elif stripped and not stripped.startswith("#"):
            break
    return merged


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes in the environment arrive as surrogates
        return False
    return True


def environment_to_export(spec_text: str | None, environ: dict[str, str]) -> dict[str, str]:
    """--export: ALL (default), NONE, or names and NAME=value pairs. Variables that are not UTF-8 are left out
    (protobuf strings must be UTF-8), with a warning."""
    env = _select_environment(spec_text, environ)
    for key in [k for k, v in env.items() if not (_utf8(k) and _utf8(v))]:
        print(f"{PROGRAM}: warning: not passing {key!r}: it is not UTF-8 text", file=sys.stderr)
        del env[key]
    return env


def _select_environment(spec_text: str | None, environ: dict[str, str]) -> dict[str, str]:
    if not spec_text or spec_text.upper() == "ALL":
        return dict(environ)
    env: dict[str, str] = {}
    for item in spec_text.split(","):
        item = item.strip()
        if not item:
            continue
        if item.upper() == "ALL":
            env.update(environ)
        elif item.upper() == "NONE":
            continue
        elif "=" in item:
            key, _, value = item.partition("=")
            env[key] = value
        elif item in environ:
            env[item] = environ[item]
    return env


def read_script(wrap: str | None, positionals: list[str]) -> tuple[str, str, str]:
    """-> (script text, where it came from, default job name)."""
    if wrap is not None:
        if positionals:
            raise usage_error(
                PROGRAM, f"script arguments are not allowed with --wrap (got '{positionals[0]}'); put them in COMMAND"
            )
        return wrap_script(wrap), "--wrap", "wrap"
    if positionals:
        path = positionals[0]
        try:
            with open(path, "rb") as fh:
                import stat

                mode = os.fstat(fh.fileno()).st_mode
                if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a pipe is fine: sbatch <(make_script)
                    kind = "a directory" if stat.S_ISDIR(mode) else "a device or socket"
                    raise CliError(f"batch script {path} is {kind}, not a file; name a script file")
                return _read_bounded(fh, path), path, os.path.basename(path)
        except OSError as exc:
            raise CliError(f"cannot read batch script {path}: {exc.strerror}") from None
    if sys.stdin is None or sys.stdin.isatty():
        raise usage_error(PROGRAM, "no batch script given: name a script file, use --wrap COMMAND, or pipe a script in")
    return _read_bounded(getattr(sys.stdin, "buffer", sys.stdin), "standard input"), "standard input", "sbatch"


def _read_bounded(stream: Any, source: str) -> str:
    """At most one byte past the limit is read: `sbatch < /dev/zero` stops at once instead of filling memory."""
    data = stream.read(joblimits.MAX_SCRIPT_BYTES + 1)
    if len(data) > joblimits.MAX_SCRIPT_BYTES:
        raise CliError(
            f"batch script {source} is larger than {joblimits.MAX_SCRIPT_BYTES} bytes, the limit; "
            "keep data in files the script reads"
        )
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"batch script {source} is not UTF-8 text; convert it (iconv -t UTF-8)") from None


def check_script(script: str, source: str) -> None:
    if not script.startswith("#!"):
        raise CliError(
            f"{source} does not look like a batch script: its first line must start with #! and an interpreter, "
            "like #!/bin/bash"
        )
    if "\r\n" in script:
        raise CliError(f"{source} has DOS line breaks (\\r\\n); convert it with dos2unix")
    if "\0" in script:
        raise CliError(f"{source} contains NUL bytes; submit a text script")


def build_spec(
    options: jobopts.JobOptions, script: str, default_name: str, environ: dict[str, str], argv: list[str]
) -> dict[str, Any]:
    from spur_hpc.cli import caller

    fields = options.spec_fields()
    environment = environment_to_export(options.get("export"), environ)
    environment.setdefault("SLURM_SUBMIT_DIR", os.getcwd())
    environment.setdefault("SLURM_SUBMIT_HOST", caller.host_name())
    problem = joblimits.environment_problem(environment)
    if problem:
        raise CliError(f"{problem}; pass less with --export (like --export=NONE,PATH,HOME)")
    problem = _argv_problem(argv)
    if problem:
        raise CliError(problem)
    spec: dict[str, Any] = {
        "name": default_name,
        "script": script,
        "user": caller.user_name(),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "work_dir": os.getcwd(),
        "stdout_path": "",
        "stderr_path": "",
        "nodes": 1,
        "tasks": 1,
        "cpus_per_task": 1,
        "memory_mb": 0,
        "time_limit_secs": 0,
        "environment": environment,
        "partition": "",
        "account": "",
        "argv": list(argv),
        "submit_host": os.uname().nodename,  # gethostname() without the socket module's import
        "alloc_sid": os.getsid(0),  # scontrol show job's AllocNode:Sid
    }
    spec.update({key: value for key, value in fields.items() if value is not None})
    spec["name"] = spec["name"] or default_name
    return spec


MAX_SCRIPT_ARGS = 4096  # arguments of one batch script: far above any real use; each counts into the spec size


def _argv_problem(argv: list[str]) -> str:
    if len(argv) > MAX_SCRIPT_ARGS:
        return f"{len(argv)} script arguments, more than the limit of {MAX_SCRIPT_ARGS}; pass them in a file"
    for arg in argv:
        if not _utf8(arg):
            return f"script argument {arg!r} is not UTF-8 text"
    return ""


_ONE_LINE_OPTIONS = {"name": "--job-name", "partition": "--partition", "account": "--account", "user": "user name"}


def check_one_line_fields(spec: dict[str, Any]) -> None:
    """The controller refuses these too; saying it here names the option."""
    for key in joblimits.ONE_LINE_FIELDS:
        commandline.check_one_line(_ONE_LINE_OPTIONS.get(key, key), spec[key])


def main(argv: list[str], program: str = PROGRAM) -> int:
    command_line, positionals = jobopts.parse_job_options(PROGRAM, argv, dict(os.environ), shown_as=program)
    if commandline.answer_info_flags(
        program, command_line.values, SYNOPSIS, "Submit a batch job.", jobopts.help_options(PROGRAM)
    ):
        if command_line.get("help"):
            print(jobopts.help_footer(PROGRAM))
        return 0
    script, source, default_name = read_script(command_line.get("wrap"), positionals)
    check_script(script, source)
    options = directive_options(script, source)
    options.update(command_line)  # the command line and the input variables win over #SBATCH lines
    spec = build_spec(options, script, default_name, dict(os.environ), positionals[1:])
    if source not in ("--wrap", "standard input"):
        spec["command"] = os.path.abspath(source)  # squeue %o and scontrol's Command= show where the script was
    check_one_line_fields(spec)
    if options.given("chdir") and not os.path.isdir(spec["work_dir"]):
        raise CliError(f"--chdir {options.get('chdir')}: no such directory here; create it or give an existing one")
    quiet = bool(options.get("quiet"))
    if not quiet:
        options.print_warnings()

    from spur_hpc.cli.controller import ControllerClient
    from spur_hpc.wire.grpcwire import RpcError

    client = ControllerClient()
    cluster = ""
    if options.given("clusters"):
        cluster = commandline.resolve_cluster(client, str(options.get("clusters")), options.label("clusters"))
        spec["cluster_name"] = cluster
    test_only = bool(options.get("test_only"))
    request = {"spec": spec, "idempotency_key": os.urandom(16).hex(), "test_only": test_only}
    try:
        reply = client.call("SubmitJob", request, write=True)
    except RpcError as exc:
        what = "Job submission test failed" if test_only else "Batch job submission failed"
        raise submit_failure(program, what, exc) from None
    if test_only:
        print(test_only_line(program, reply, spec), file=sys.stderr)
    elif options.get("parsable"):
        print(f"{reply.job_id};{cluster}" if cluster else reply.job_id)
    elif not quiet:
        print(f"Submitted batch job {reply.job_id}" + (f" on cluster {cluster}" if cluster else ""))
    if options.get("wait") and not test_only:
        sys.stdout.flush()
        return wait_for(client, reply.job_id)
    return 0


def wait_for(client: Any, job_id: int) -> int:
    """sbatch -W: poll until the job (each record of an array) has finished -> the largest exit code, or 1 for
    a job that ended without one (cancelled, timed out, node failure)."""
    import time

    from spur_hpc import model
    from spur_hpc.cli import jobview

    pause = 0.25
    while True:
        records = list(client.call("ListJobs", {"job_ids": [job_id], "include_finished": True, "brief": True}).jobs)
        states = [jobview.state_name(job) for job in records]
        if records and all(state in model.FINISHED_STATES for state in states):
            failed = any(state != "COMPLETED" for state in states)
            return max(job.exit_code for job in records) or (1 if failed else 0)
        if not records:
            raise CliError(f"job {job_id} is no longer known to the controller; see sacct -j {job_id}")
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def test_only_line(program: str, reply: Any, spec: dict[str, Any]) -> str:
    """Slurm's words for --test-only (sbatch prints them on stderr)."""
    from spur_hpc.model import compress_hostlist

    when = units.format_timestamp(reply.start_estimate, unknown="Unknown")
    processors = spec["tasks"] * spec["cpus_per_task"]
    nodes = compress_hostlist(list(reply.nodes)) if reply.nodes else "(null)"
    partition = spec["partition"] or "(default)"
    return (
        f"{program}: Job {reply.job_id} to start at {when} using {processors} processors on nodes {nodes} "
        f"in partition {partition}"
    )
