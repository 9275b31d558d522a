"""sbatch: submit a batch script. Options come from #SBATCH lines first, then the command line (which wins).

The job runs as the caller (user, uid, gid), in -D or the current directory, with the caller's environment
(Slurm's --export=ALL). Each submission carries a fresh idempotency key, reused on every retry of the call,
so a retry after a lost answer returns the first job instead of creating a second.
"""

from __future__ import annotations

import os
import sys

from spur_hpc import joblimits
from spur_hpc.cli import commandline, units
from spur_hpc.cli.options import Option, parse, usage_error
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "sbatch"
OPTIONS = [
    Option("job_name", "J", "job-name", "NAME", "job name (default: the script's file name)"),
    Option("nodes", "N", "nodes", "N", "number of nodes (default 1)"),
    Option("ntasks", "n", "ntasks", "N", "number of tasks (default 1)"),
    Option("cpus_per_task", "c", "cpus-per-task", "N", "CPUs per task (default 1)"),
    Option("mem", "", "mem", "SIZE", "memory per node: megabytes, or with a K/M/G/T suffix (like 4G)"),
    Option("time", "t", "time", "TIME", f"time limit: {units.TIME_LIMIT_FORMS}"),
    Option("output", "o", "output", "PATH", "stdout file (default slurm-%j.out in the working directory)"),
    Option("error", "e", "error", "PATH", "stderr file (default: with stdout)"),
    Option("chdir", "D", "chdir", "DIR", "working directory of the job (default: the current directory)"),
    Option("partition", "p", "partition", "NAME", "partition (default: the cluster's default)"),
    Option("account", "A", "account", "NAME", "account to charge"),
    Option("wrap", "", "wrap", "COMMAND", "submit COMMAND wrapped in a /bin/sh script instead of a script file"),
    Option(
        "export",
        "",
        "export",
        "VARS",
        "environment to pass: ALL (default), NONE, or VAR[=value],... (ALL,VAR=value adds to everything)",
    ),
    Option("parsable", "", "parsable", help="print only the job id"),
    Option("quiet", "Q", "quiet", help="print nothing on success"),
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[OPTIONS] SCRIPT | sbatch [OPTIONS] --wrap COMMAND | sbatch [OPTIONS] < SCRIPT"
# options a #SBATCH line may set (the rest only make sense on the command line)
DIRECTIVE_DESTS = frozenset(
    {"job_name", "nodes", "ntasks", "cpus_per_task", "mem", "time", "output", "error", "chdir", "partition",
     "account", "export", "parsable", "quiet"}
)  # fmt: skip


def wrap_script(command: str) -> str:
    return f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{command}\n"


def directive_values(script: str, source: str) -> dict[str, Any]:
    """Options of the #SBATCH lines before the first command (Slurm stops reading them there)."""
    import shlex

    values: dict[str, Any] = {}
    for number, line in enumerate(script.splitlines()[1:], start=2):
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            try:
                words = shlex.split(stripped[len("#SBATCH") :], comments=True)
            except ValueError as exc:
                raise CliError(f"{source} line {number}: cannot read '{stripped}' ({exc})") from None
            try:
                parsed, extra = parse(PROGRAM, [o for o in OPTIONS if o.dest in DIRECTIVE_DESTS], words)
            except CliError as exc:
                raise CliError(f"{source} line {number}: {exc}") from None
            if extra:
                raise CliError(f"{source} line {number}: unexpected '{extra[0]}' in '{stripped}'")
            values.update({k: v for k, v in parsed.items() if v is not None})
        elif stripped and not stripped.startswith("#"):
            break
    return values


def _positive(values: dict[str, Any], dest: str, option: str) -> int:
    text = values.get(dest)
    if text is None:
        return 1
    low, dash, high = str(text).strip().partition("-")  # Slurm accepts min-max; the controller schedules the minimum
    least = units.bounded_int(low, units.INT32_MAX)
    most = units.bounded_int(high, units.INT32_MAX) if dash else least
    if not least or not most or most < least:
        raise CliError(
            f"invalid {option} value '{text}': use a whole number from 1 to {units.INT32_MAX} or a range min-max, "
            f"like {option} 2"
        )
    return least


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


def read_script(values: dict[str, Any], positionals: list[str]) -> tuple[str, str, str]:
    """-> (script text, where it came from, default job name)."""
    if values["wrap"] is not None:
        if positionals:
            raise usage_error(PROGRAM, f"--wrap takes no script file, got '{positionals[0]}'")
        return wrap_script(values["wrap"]), "--wrap", "wrap"
    if positionals:
        path = positionals[0]
        if len(positionals) > 1:
            raise CliError(
                f"script arguments are not supported yet ({' '.join(positionals[1:])}): set them inside the script "
                "or use --wrap 'script.sh arg ...'"
            )
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


def build_spec(values: dict[str, Any], script: str, default_name: str, environ: dict[str, str]) -> dict[str, Any]:
    from spur_hpc.cli import caller

    work_dir = os.path.abspath(values["chdir"]) if values.get("chdir") else os.getcwd()
    memory_mb = units.parse_memory_mb(values["mem"]) if values.get("mem") else 0
    time_limit = units.parse_time_limit(values["time"]) if values.get("time") else 0
    environment = environment_to_export(values.get("export"), environ)
    environment.setdefault("SLURM_SUBMIT_DIR", os.getcwd())
    environment.setdefault("SLURM_SUBMIT_HOST", caller.host_name())
    problem = joblimits.environment_problem(environment)
    if problem:
        raise CliError(f"{problem}; pass less with --export (like --export=NONE,PATH,HOME)")
    return {
        "name": values.get("job_name") or default_name,
        "script": script,
        "user": caller.user_name(),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "work_dir": work_dir,
        "stdout_path": values.get("output") or "",
        "stderr_path": values.get("error") or "",
        "nodes": _positive(values, "nodes", "--nodes"),
        "tasks": _positive(values, "ntasks", "--ntasks"),
        "cpus_per_task": _positive(values, "cpus_per_task", "--cpus-per-task"),
        "memory_mb": memory_mb,
        "time_limit_secs": time_limit,
        "environment": environment,
        "partition": values.get("partition") or "",
        "account": values.get("account") or "",
    }


_ONE_LINE_OPTIONS = {"name": "--job-name", "partition": "--partition", "account": "--account", "user": "user name"}


def check_one_line_fields(spec: dict[str, Any]) -> None:
    """The controller refuses these too; saying it here names the option."""
    for key in joblimits.ONE_LINE_FIELDS:
        commandline.check_one_line(_ONE_LINE_OPTIONS.get(key, key), spec[key])


def main(argv: list[str], program: str = PROGRAM) -> int:
    values, positionals = parse(program, OPTIONS, argv, stop_at_positional=True)
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Submit a batch job.", OPTIONS):
        return 0
    script, source, default_name = read_script(values, positionals)
    check_script(script, source)
    merged = directive_values(script, source)
    merged.update({k: v for k, v in values.items() if v is not None})
    spec = build_spec(merged, script, default_name, dict(os.environ))
    check_one_line_fields(spec)
    if merged.get("chdir") and not os.path.isdir(spec["work_dir"]):
        raise CliError(f"--chdir {merged['chdir']}: no such directory here; create it or give an existing one")

    import uuid

    from spur_hpc.cli.controller import ControllerClient
    from spur_hpc.wire.grpcwire import RpcError

    request = {"spec": spec, "idempotency_key": str(uuid.uuid4())}
    try:
        reply = ControllerClient().call("SubmitJob", request, write=True)
    except RpcError as exc:
        raise CliError(f"Batch job submission failed: {exc.details}") from None
    if merged.get("parsable"):
        print(reply.job_id)
    elif not merged.get("quiet"):
        print(f"Submitted batch job {reply.job_id}")
    return 0
