"""The options of sbatch, srun and salloc: one table, and the parser the three commands share.

Each entry names its short and long forms, whether it takes a value, which commands take it, the input
variables that stand for it, the JobSpec field it sets (with the conversion), and what Spur does with it:
  honoured  - it has Slurm's meaning here;
  recorded  - stored with the job and shown, but nothing acts on it yet (one warning line says so);
  ignored   - accepted so scripts written for Slurm still run, with one warning line naming it;
  refused   - one error line with the reason and what to do instead.
docs/cli.md's option table is generated from this one (tools/gen_cli_docs.py; a test checks the drift).

Precedence, as in Slurm: the command line wins over the input variables, which win over #SBATCH lines.
"""

from __future__ import annotations

import os
import sys

from spur_hpc.cli import units
from spur_hpc.cli.options import Option, parse
from spur_hpc.cli.runner import CliError
from spur_hpc.model import InvalidValue, expand_hostlist, parse_array, parse_dependency

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Converter = Callable[[Any, str], dict[str, Any]]

HONOURED, RECORDED, IGNORED, REFUSED = "honoured", "recorded", "ignored", "refused"
DISPOSITIONS = (HONOURED, RECORDED, IGNORED, REFUSED)
COMMANDS = {"B": "sbatch", "R": "srun", "A": "salloc"}
ENV_PREFIXES = {"SBATCH_": "sbatch", "SALLOC_": "salloc", "SLURM_": "srun", "SRUN_": "srun"}
NICE_LIMIT = 2147483645  # Slurm's NICE_OFFSET - 3: the largest adjustment either way
DEFAULT_NICE = 100  # --nice without a value
DEFAULT_SIGNAL_SECS = 60  # --signal without @secs
MAX_SIGNAL_SECS = 65535  # Slurm keeps the warning time in 16 bits
MAX_TEXT = 4096  # a free-text value (comment, constraint, dependency ...): far above any real one


class JobOption:
    """One row of the table. arg: the metavar ("" for a flag); optional: the value may be left out (then
    const is used); commands: letters of COMMANDS; env: input variable names (SBATCH_* -> sbatch, SALLOC_* ->
    salloc, SLURM_*/SRUN_* -> srun; "sbatch:SLURM_CLUSTERS" names the command explicitly); field: the JobSpec
    field(s) it sets, for the docs; convert: value -> spec fields; per_command: {program: (disposition,
    reason)} where one command differs."""

    __slots__ = (
        "long", "short", "arg", "commands", "disposition", "help", "field", "convert", "reason", "env",
        "optional", "const", "dest", "per_command",
    )  # fmt: skip

    def __init__(
        self,
        long: str,
        short: str,
        arg: str,
        commands: str,
        disposition: str,
        help: str,
        field: str = "",
        convert: Converter | None = None,
        reason: str = "",
        env: tuple[str, ...] = (),
        optional: bool = False,
        const: Any = True,
        dest: str = "",
        per_command: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        self.long = long
        self.short = short
        self.arg = arg
        self.commands = commands
        self.disposition = disposition
        self.help = help
        self.field = field
        self.convert = convert
        self.reason = reason
        self.env = env
        self.optional = optional
        self.const = const
        self.dest = dest or long.replace("-", "_")
        self.per_command = per_command or {}

    def programs(self) -> list[str]:
        return [COMMANDS[letter] for letter in self.commands]

    def disposition_for(self, program: str) -> tuple[str, str]:
        return self.per_command.get(program, (self.disposition, self.reason))

    def env_names(self, program: str) -> list[str]:
        names = []
        for name in self.env:
            owner, colon, bare = name.partition(":")
            if colon:
                if owner == program:
                    names.append(bare)
            elif next((p for prefix, p in ENV_PREFIXES.items() if name.startswith(prefix)), "") == program:
                names.append(name)
        return names

    def option(self) -> Option:
        return Option(self.dest, self.short, self.long, self.arg, self.help, optional=self.optional, const=self.const)


# ------------------------------------------------------------------ conversions: value, label -> spec fields
# label names where the value came from ("--time", "SBATCH_TIMELIMIT"), so an error names what to fix.


def _range_minimum(field: str) -> Converter:
    def convert(value: Any, label: str) -> dict[str, Any]:
        return {field: positive_or_range(str(value), label)}

    return convert


def positive_or_range(text: str, label: str) -> int:
    """N or min-max (Slurm accepts a range; the controller schedules the minimum)."""
    low, dash, high = text.strip().partition("-")
    least = units.bounded_int(low, units.INT32_MAX)
    most = units.bounded_int(high, units.INT32_MAX) if dash else least
    if not least or not most or most < least:
        raise CliError(
            f"invalid {label} value '{text}': use a whole number from 1 to {units.INT32_MAX} or a range min-max, "
            f"like {label} 2"
        )
    return least


def _count(field: str, low: int = 1, high: int = units.INT32_MAX) -> Converter:
    def convert(value: Any, label: str) -> dict[str, Any]:
        return {field: bounded(str(value), label, low, high)}

    return convert


def bounded(text: str, label: str, low: int, high: int) -> int:
    stripped = text.strip()
    negative = stripped.startswith("-") and low < 0
    number = units.bounded_int(stripped[1:] if negative else stripped, max(high, -low))
    if number is not None and negative:
        number = -number
    if number is None or not low <= number <= high:
        raise CliError(f"invalid {label} value '{text}': use a whole number from {low} to {high}")
    return number


def _memory(field: str) -> Converter:
    return lambda value, label: {field: units.parse_memory_mb(str(value), label)}


def _duration(field: str) -> Converter:
    return lambda value, label: {field: units.parse_time_limit(str(value), label)}


def _time_point(field: str) -> Converter:
    return lambda value, label: {field: units.parse_begin_time(str(value), label)}


def _text(field: str) -> Converter:
    def convert(value: Any, label: str) -> dict[str, Any]:
        return {field: one_line_text(str(value), label)}

    return convert


def one_line_text(text: str, label: str) -> str:
    from spur_hpc.joblimits import control_character

    char = control_character(text)
    if char:
        raise CliError(f"{label} '{text}' contains a control character ({char}); use plain text")
    if len(text) > MAX_TEXT:
        raise CliError(f"{label} is {len(text)} characters long; the limit is {MAX_TEXT}")
    return text


def _flag(field: str, value: Any = True) -> Converter:
    return lambda _value, _label: {field: value}


MAX_NODE_FILE_BYTES = 1 << 20  # a node file: far above a list of every node of any cluster


def _hostlist(field: str, from_file: bool = False) -> Converter:
    """A hostlist expression, or (as Slurm reads -w/-x/-F) the name of a file of node names when it has a '/'."""

    def convert(value: Any, label: str) -> dict[str, Any]:
        text = one_line_text(str(value), label)
        if from_file or "/" in text:
            text = _node_file(text, label)
        try:
            expand_hostlist(text)
        except InvalidValue as exc:
            raise CliError(f"{label}: {exc}") from None
        return {field: text}

    return convert


def _node_file(path: str, label: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_NODE_FILE_BYTES + 1)
    except OSError as exc:
        raise CliError(f"{label} {path}: cannot read the node file: {exc.strerror}") from None
    if len(data) > MAX_NODE_FILE_BYTES:
        raise CliError(f"{label} {path}: the node file is larger than {MAX_NODE_FILE_BYTES} bytes")
    names = data.decode("utf-8", "replace").replace(",", " ").split()
    if not names:
        raise CliError(f"{label} {path}: the node file names no nodes")
    return ",".join(dict.fromkeys(names))


def _choice(field: str, choices: tuple[str, ...]) -> Converter:
    def convert(value: Any, label: str) -> dict[str, Any]:
        text = str(value).strip().lower()
        if text not in choices:
            raise CliError(f"invalid {label} value '{value}': use one of {', '.join(choices)}")
        return {field: text}

    return convert


def _yes_no(field: str) -> Converter:
    def convert(value: Any, label: str) -> dict[str, Any]:
        text = str(value).strip().lower()
        if text not in ("yes", "no"):
            raise CliError(f"invalid {label} value '{value}': use yes or no")
        return {field: text == "yes"}

    return convert


MAIL_TYPES = (
    "NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT",
    "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS",
)  # fmt: skip


def _mail_type(value: Any, label: str) -> dict[str, Any]:
    items = [item.strip().upper() for item in str(value).split(",") if item.strip()]
    bad = [item for item in items if item not in MAIL_TYPES]
    if bad or not items:
        raise CliError(f"invalid {label} value '{value}': use a comma-separated list of {', '.join(MAIL_TYPES)}")
    return {"mail_type": ",".join(items)}


def signal_number(text: str, label: str) -> int:
    """A signal by name (USR1, SIGUSR1) or number (10)."""
    import signal as signals

    name = text.strip().upper()
    if name.isdigit():
        number = units.bounded_int(name, 64)
        if number and number in set(signals.valid_signals()):
            return number
    else:
        found = getattr(signals, name if name.startswith("SIG") else "SIG" + name, None)
        if isinstance(found, signals.Signals):
            return int(found)
    raise CliError(f"invalid {label} signal '{text}': use a signal name like USR1 or a number from 1 to 64")


def _signal(value: Any, label: str) -> dict[str, Any]:
    """[B:]SIG[@secs] (R:, a reservation's end, has nothing to act on: no reservations)."""
    text = str(value).strip()
    flags, colon, rest = text.partition(":")
    if not colon:
        flags, rest = "", text
    flags = flags.upper()
    if "R" in flags:
        raise CliError(f"{label} '{text}': R: (signal at the reservation's end) is not supported: Spur has no "
                       "reservations; leave R: out")  # fmt: skip
    if flags.strip("B"):
        raise CliError(f"invalid {label} value '{text}': use [B:]SIGNAL[@SECONDS], like B:USR2@90")
    name, at, secs = rest.partition("@")
    seconds = bounded(secs, f"{label} @seconds", 0, MAX_SIGNAL_SECS) if at else DEFAULT_SIGNAL_SECS
    return {"signal_number": signal_number(name, label), "signal_secs": seconds, "signal_batch_only": "B" in flags}


def _nice(value: Any, label: str) -> dict[str, Any]:
    if value is True:
        return {"nice": DEFAULT_NICE}
    return {"nice": bounded(str(value), label, -NICE_LIMIT, NICE_LIMIT)}


def _exclusive(value: Any, label: str) -> dict[str, Any]:
    if value is not True and str(value).strip().lower() not in ("user", "mcs", "topo"):
        raise CliError(f"invalid {label} value '{value}': use --exclusive alone, or =user or =mcs")
    return {"exclusive": True}


def _gres_like(field: str, typed_count: bool) -> Converter:
    """--gres name[:type][:count][,...]; the --gpus forms [type:]count."""
    item = r"[A-Za-z0-9_./-]+(:[A-Za-z0-9_.-]+)?(:\d+)?" if not typed_count else r"([A-Za-z0-9_.-]+:)?\d+"
    pattern = rf"^{item}(,{item})*$"

    def convert(value: Any, label: str) -> dict[str, Any]:
        import re  # here, not when the option table is built: re and enum are 10 ms every sbatch would pay

        text = one_line_text(str(value).strip(), label)
        if text.lower() in ("none", "") and not typed_count:
            return {field: ""}
        if not re.match(pattern, text):
            form = "NAME[:TYPE][:COUNT][,...], like gpu:2" if not typed_count else "[TYPE:]COUNT, like 2 or a100:2"
            raise CliError(f"invalid {label} value '{text}': use {form}")
        return {field: text}

    return convert


def _model_checked(field: str, check: Callable[[str], Any]) -> Converter:
    """A notation the model reads (the controller checks it again): refused here first, naming the source."""

    def convert(value: Any, label: str) -> dict[str, Any]:
        text = one_line_text(str(value).strip(), label)
        try:
            check(text)
        except InvalidValue as exc:
            raise CliError(str(exc) if label.startswith("--") else f"{label}: {exc}") from None
        return {field: text}

    return convert


def _open_mode(value: Any, label: str) -> dict[str, Any]:
    return _choice("open_mode", ("append", "truncate"))(value, label)


def _chdir(value: Any, label: str) -> dict[str, Any]:
    return {"work_dir": os.path.abspath(one_line_text(str(value), label))}


# ------------------------------------------------------------------ the table


def _o(long: str, short: str, arg: str, commands: str, disposition: str, help: str, **kw: Any) -> JobOption:
    return JobOption(long, short, arg, commands, disposition, help, **kw)


_NO_ACCOUNTING = "Spur keeps no accounting gather data"
_NO_TOPOLOGY = "Spur places by node and CPU count; sockets, cores and threads are not modelled"
_NO_BINDING = "Spur does not bind tasks to CPUs, memory or GPUs"
_NO_POWER = "Spur does not manage node power or frequencies"
_NO_BB = "Spur has no burst buffers; stage data in the script"
_NO_FEATURE_BOOT = "Spur does not reboot nodes"

# fmt: off
OPTIONS: list[JobOption] = [
    # ---- what the job asks for
    _o("account", "A", "NAME", "BRA", HONOURED, "account to charge (shown by squeue and sacct)", field="account",
       convert=_text("account"), env=("SBATCH_ACCOUNT", "SALLOC_ACCOUNT", "SLURM_ACCOUNT")),
    _o("array", "a", "INDEXES", "B", HONOURED, "job array: 0-15, 1,3,7, 0-20:4, with %N to run at most N at once",
       field="array", convert=_model_checked("array", parse_array), env=("SBATCH_ARRAY_INX",)),
    _o("begin", "b", "TIME", "BRA", HONOURED, "start no earlier than TIME (now+60, 16:00, tomorrow, 2026-07-01T08:00)",
       field="begin_time", convert=_time_point("begin_time")),
    _o("chdir", "D", "DIR", "BRA", HONOURED, "working directory of the job (default: the current directory)",
       field="work_dir", convert=_chdir, env=("SLURM_WORKING_DIR", "SLURM_REMOTE_CWD")),
    _o("clusters", "M", "NAMES", "BRA", HONOURED, "this cluster's name or all (there is one cluster)",
       field="cluster_name",
       env=("SBATCH_CLUSTERS", "sbatch:SLURM_CLUSTERS", "SALLOC_CLUSTERS", "salloc:SLURM_CLUSTERS", "SLURM_CLUSTERS")),
    _o("cluster", "", "NAME", "BRA", HONOURED, "the same as --clusters", field="cluster_name", dest="clusters"),
    _o("comment", "", "TEXT", "BRA", HONOURED, "a comment shown by squeue (%k) and scontrol show job", field="comment",
       convert=_text("comment")),
    _o("constraint", "C", "LIST", "BRA", HONOURED, "node features the job needs (& and | as in Slurm)",
       field="constraint", convert=_text("constraint"),
       env=("SBATCH_CONSTRAINT", "SALLOC_CONSTRAINT", "SLURM_CONSTRAINT")),
    _o("cpus-per-task", "c", "N", "BRA", HONOURED, "CPUs per task (default 1)", field="cpus_per_task",
       convert=_range_minimum("cpus_per_task"), env=("SRUN_CPUS_PER_TASK",)),
    _o("deadline", "", "TIME", "BRA", HONOURED, "end the job (state DEADLINE) if it cannot finish before TIME",
       field="deadline", convert=_time_point("deadline")),
    _o("dependency", "d", "LIST", "BRA", HONOURED,
       "start after other jobs: after, afterok, afternotok, afterany, singleton, with :ID:ID and , or ?",
       field="dependency", convert=_model_checked("dependency", parse_dependency), env=("SLURM_DEPENDENCY",)),
    _o("error", "e", "PATH", "BR", HONOURED, "stderr file pattern (default: with stdout)", field="stderr_path",
       convert=_text("stderr_path"), env=("SBATCH_ERROR", "SLURM_STDERRMODE")),
    _o("exclude", "x", "HOSTLIST", "BRA", HONOURED, "nodes the job must not use", field="exclude",
       convert=_hostlist("exclude")),
    _o("exclusive", "", "user|mcs", "BRA", HONOURED, "no other job shares the job's nodes", optional=True,
       field="exclusive", convert=_exclusive, env=("SBATCH_EXCLUSIVE", "SALLOC_EXCLUSIVE", "SLURM_EXCLUSIVE")),
    _o("export", "", "ALL|NONE|VARS", "BR", HONOURED,
       "environment to pass: ALL (default), NONE, or VAR[=value],... (ALL,VAR=value adds to everything)",
       field="environment", env=("SBATCH_EXPORT", "SLURM_EXPORT_ENV", "SRUN_EXPORT_ENV")),
    _o("gpus", "G", "[TYPE:]N", "BRA", HONOURED, "GPUs for the whole job", field="gpus",
       convert=_gres_like("gpus", True), env=("SBATCH_GPUS", "SALLOC_GPUS", "SLURM_GPUS")),
    _o("gpus-per-node", "", "[TYPE:]N", "BRA", HONOURED, "GPUs on each node", field="gpus_per_node",
       convert=_gres_like("gpus_per_node", True),
       env=("SBATCH_GPUS_PER_NODE", "SALLOC_GPUS_PER_NODE", "SLURM_GPUS_PER_NODE")),
    _o("gpus-per-task", "", "[TYPE:]N", "BRA", HONOURED, "GPUs for each task", field="gpus_per_task",
       convert=_gres_like("gpus_per_task", True),
       env=("SBATCH_GPUS_PER_TASK", "SALLOC_GPUS_PER_TASK", "SLURM_GPUS_PER_TASK")),
    _o("gres", "", "LIST", "BRA", HONOURED, "counted resources on each node: NAME[:TYPE][:COUNT],...", field="gres",
       convert=_gres_like("gres", False), env=("SLURM_STEP_GRES", "SBATCH_GRES", "SALLOC_GRES", "SLURM_GRES")),
    _o("hold", "H", "", "BRA", HONOURED, "submit held (JobHeldUser) until scontrol release", field="hold",
       convert=_flag("hold")),
    _o("job-name", "J", "NAME", "BRA", HONOURED, "job name (default: the script's file name)", field="name",
       convert=_text("name"), env=("SBATCH_JOB_NAME", "SLURM_JOB_NAME")),
    _o("kill-on-invalid-dep", "", "yes|no", "B", HONOURED, "cancel the job when its dependency can never be satisfied",
       field="kill_on_invalid_dep", convert=_yes_no("kill_on_invalid_dep")),
    _o("mail-type", "", "TYPES", "BRA", RECORDED, "when to send mail: BEGIN, END, FAIL, ALL, ...", field="mail_type",
       convert=_mail_type, reason="no mail is sent"),
    _o("mail-user", "", "USER", "BRA", RECORDED, "who gets the mail", field="mail_user", convert=_text("mail_user"),
       reason="no mail is sent"),
    _o("mem", "", "SIZE", "BRA", HONOURED, "memory per node: megabytes, or with a K/M/G/T suffix (like 4G)",
       field="memory_mb", convert=_memory("memory_mb"),
       env=("SBATCH_MEM_PER_NODE", "SALLOC_MEM_PER_NODE", "SLURM_MEM_PER_NODE")),
    _o("mem-per-cpu", "", "SIZE", "BRA", HONOURED, "memory per allocated CPU (instead of --mem)",
       field="mem_per_cpu_mb", convert=_memory("mem_per_cpu_mb"),
       env=("SBATCH_MEM_PER_CPU", "SALLOC_MEM_PER_CPU", "SLURM_MEM_PER_CPU")),
    _o("nice", "", "N", "BRA", HONOURED, f"lower the job's priority by N (default {DEFAULT_NICE})", optional=True,
       field="nice", convert=_nice),
    _o("no-requeue", "", "", "B", HONOURED, "never requeue the job (after a node failure or scontrol requeue)",
       field="requeue", convert=_flag("requeue", 2), dest="requeue", const=2, env=("SBATCH_NO_REQUEUE",)),
    _o("requeue", "", "", "B", HONOURED, "the job may be requeued", field="requeue", convert=_flag("requeue", 1),
       const=1, env=("SBATCH_REQUEUE",)),
    _o("nodelist", "w", "HOSTLIST", "BRA", HONOURED, "nodes the job must have", field="nodelist",
       convert=_hostlist("nodelist")),
    _o("nodefile", "F", "FILE", "BRA", HONOURED, "nodes the job must have, read from a file (names separated by "
       "spaces, commas or lines)", field="nodelist", convert=_hostlist("nodelist", from_file=True)),
    _o("nodes", "N", "N[-MAX]", "BRA", HONOURED, "number of nodes (default 1; a range: its minimum)", field="nodes",
       convert=_range_minimum("nodes"), env=("SLURM_NNODES", "SLURM_JOB_NUM_NODES")),
    _o("ntasks", "n", "N", "BRA", HONOURED, "number of tasks (default 1)", field="tasks",
       convert=_range_minimum("tasks"), env=("SLURM_NTASKS", "SLURM_NPROCS")),
    _o("ntasks-per-node", "", "N", "BRA", HONOURED, "tasks on each node", field="ntasks_per_node",
       convert=_count("ntasks_per_node"), env=("SLURM_NTASKS_PER_NODE",)),
    _o("open-mode", "", "append|truncate", "BR", HONOURED,
       "open the output files for appending or truncate them (default)", field="open_mode", convert=_open_mode,
       env=("SBATCH_OPEN_MODE", "SLURM_OPEN_MODE")),
    _o("output", "o", "PATH", "BR", HONOURED,
       "stdout file pattern (default slurm-%j.out, slurm-%A_%a.out for an array)", field="stdout_path",
       convert=_text("stdout_path"), env=("SBATCH_OUTPUT", "SLURM_STDOUTMODE")),
    _o("partition", "p", "NAME", "BRA", HONOURED, "partition (default: the cluster's default)", field="partition",
       convert=_text("partition"), env=("SBATCH_PARTITION", "SALLOC_PARTITION", "SLURM_PARTITION")),
    _o("qos", "q", "NAME", "BRA", HONOURED,
       "quality of service (default: the association's): its limits, priority and preemption (sacctmgr)", field="qos",
       convert=_text("qos"), env=("SBATCH_QOS", "SALLOC_QOS", "SLURM_QOS")),
    _o("signal", "", "[B:]SIG[@SECS]", "BRA", HONOURED,
       f"send SIG that many seconds (default {DEFAULT_SIGNAL_SECS}) before the time limit; B: the batch shell only",
       field="signal_number, signal_secs, signal_batch_only", convert=_signal,
       env=("SBATCH_SIGNAL", "SALLOC_SIGNAL", "SLURM_SIGNAL")),
    _o("time", "t", "TIME", "BRA", HONOURED, f"time limit: {units.TIME_LIMIT_FORMS}", field="time_limit_secs",
       convert=_duration("time_limit_secs"), env=("SBATCH_TIMELIMIT", "SALLOC_TIMELIMIT", "SLURM_TIMELIMIT")),
    _o("time-min", "", "TIME", "BRA", RECORDED, "the least time limit the job accepts", field="time_min_secs",
       convert=_duration("time_min_secs"), reason="the scheduler does not shorten jobs to fit"),
    _o("wckey", "", "NAME", "BRA", RECORDED, "workload characterization key", field="wckey", convert=_text("wckey"),
       reason="Spur keeps no per-wckey accounting yet", env=("SBATCH_WCKEY", "SALLOC_WCKEY", "SLURM_WCKEY")),
    # ---- the command itself
    _o("parsable", "", "", "B", HONOURED, "print only the job id (ID;CLUSTER with --clusters)"),
    _o("quiet", "Q", "", "BRA", HONOURED, "print nothing but errors"),
    _o("test-only", "", "", "BR", HONOURED, "say when and where the job would start, without submitting it",
       per_command={"srun": (REFUSED, "run sbatch --test-only with the same options")}),
    _o("wrap", "", "COMMAND", "B", HONOURED, "submit COMMAND wrapped in a /bin/sh script instead of a script file"),
    _o("verbose", "v", "", "BRA", IGNORED, "more messages", reason="Spur's commands have one level of messages",
       env=("SBATCH_DEBUG", "SALLOC_DEBUG", "SLURM_DEBUG")),
    _o("wait", "W", "", "B", HONOURED, "wait for the job (every task of an array) to end; exit with its exit code",
       env=("SBATCH_WAIT",)),
    _o("wait", "W", "SECS", "R", IGNORED, "end the step SECS after its first task ends",
       reason="a step ends when its last task does", env=("SLURM_WAIT",)),
    # ---- srun's own
    _o("cpu-bind", "", "TYPE", "R", IGNORED, "bind tasks to CPUs", reason=_NO_BINDING, env=("SLURM_CPU_BIND",)),
    _o("jobid", "", "ID", "R", HONOURED, "run the step in this allocation", env=("SLURM_JOB_ID",)),
    _o("kill-on-bad-exit", "K", "0|1", "R", HONOURED, "kill the step when a task exits non-zero", optional=True,
       env=("SLURM_KILL_BAD_EXIT",)),
    _o("label", "l", "", "R", HONOURED, "prefix each output line with its task id", env=("SLURM_LABELIO",)),
    _o("unbuffered", "u", "", "R", HONOURED, "pass output on as it arrives", env=("SLURM_UNBUFFEREDIO",)),
    _o("overlap", "", "", "R", IGNORED, "share the allocation's resources with other steps",
       reason="steps are not given CPUs of their own", env=("SLURM_OVERLAP",)),
    _o("exact", "", "", "R", IGNORED, "give the step only the CPUs it asks for",
       reason="steps are not given CPUs of their own", env=("SLURM_EXACT",)),
    _o("mpi", "", "TYPE", "R", IGNORED, "MPI plugin",
       reason="Spur has no PMI; launch MPI with its own launcher inside the job", env=("SLURM_MPI_TYPE",)),
    _o("input", "i", "MODE", "BR", REFUSED, "stdin of the job or step",
       reason="jobs and steps read no standard input; redirect in the script (< FILE)",
       env=("SBATCH_INPUT", "SLURM_STDINMODE")),
    _o("pty", "", "", "R", REFUSED, "run task 0 in a pseudo-terminal",
       reason="steps have no terminal; use salloc and run the program in its shell"),
    _o("multi-prog", "", "", "R", REFUSED, "a different program per task",
       reason="not implemented; branch on SLURM_PROCID in a wrapper script"),
    _o("relative", "r", "N", "R", REFUSED, "start at the allocation's Nth node",
       reason="not implemented; name the nodes with -w"),
    _o("no-allocate", "Z", "", "R", REFUSED, "run without an allocation",
       reason="only root may do it in Slurm, and Spur always allocates"),
    _o("het-group", "", "EXPR", "R", REFUSED, "heterogeneous job components",
       reason="Spur has no heterogeneous jobs; submit one job per component"),
    _o("disable-status", "X", "", "R", IGNORED, "Ctrl-C without a status report",
       reason="srun prints no status on Ctrl-C", env=("SLURM_DISABLE_STATUS",)),
    _o("quit-on-interrupt", "", "", "R", IGNORED, "end the step at the first Ctrl-C",
       reason="a second Ctrl-C within a second ends the step"),
    _o("preserve-env", "E", "", "R", IGNORED, "keep SLURM_NNODES and SLURM_NTASKS as they are",
       reason="the step's counts come from its own options"),
    _o("threads", "T", "N", "R", IGNORED, "srun's launch threads", reason="srun launches through the controller",
       env=("SLURM_THREADS",)),
    _o("msg-timeout", "", "SECS", "R", IGNORED, "launch message timeout",
       reason="srun's calls have their own deadlines"),
    _o("send-libs", "", "yes|no", "R", IGNORED, "send the executable's libraries with --bcast", optional=True,
       reason="no --bcast", env=("SLURM_SEND_LIBS",)),
    _o("bcast", "", "PATH", "R", REFUSED, "copy the executable to the nodes first", optional=True,
       reason="not implemented; put the program on a shared file system", env=("SLURM_BCAST",)),
    _o("bcast-exclude", "", "PATHS", "R", IGNORED, "library paths --bcast leaves out", reason="no --bcast",
       env=("SLURM_BCAST_EXCLUDE",)),
    _o("compress", "", "TYPE", "R", IGNORED, "compress --bcast files", optional=True, reason="no --bcast",
       env=("SLURM_COMPRESS",)),
    _o("prolog", "", "PATH", "R", REFUSED, "run a program before the step",
       reason="not implemented; run it in the step's command", env=("SLURM_PROLOG",)),
    _o("epilog", "", "PATH", "R", REFUSED, "run a program after the step",
       reason="not implemented; run it after srun returns", env=("SLURM_EPILOG",)),
    _o("task-prolog", "", "PATH", "R", REFUSED, "run a program before each task",
       reason="not implemented; wrap the task's command", env=("SLURM_TASK_PROLOG",)),
    _o("task-epilog", "", "PATH", "R", REFUSED, "run a program after each task",
       reason="not implemented; wrap the task's command", env=("SLURM_TASK_EPILOG",)),
    _o("resv-ports", "", "N", "R", IGNORED, "reserve communication ports", optional=True,
       reason="Spur reserves no ports", env=("SLURM_RESV_PORTS",)),
    _o("slurmd-debug", "", "LEVEL", "R", IGNORED, "step daemon log level", reason="spurstepd logs at its own level",
       env=("srun:SLURMD_DEBUG",)),
    _o("accel-bind", "", "OPTIONS", "R", IGNORED, "bind tasks to accelerators", reason=_NO_BINDING),
    # ---- salloc's own
    _o("bell", "", "", "A", IGNORED, "ring the terminal bell when the allocation is granted",
       reason="salloc does not ring", env=("SALLOC_BELL",)),
    _o("no-bell", "", "", "A", IGNORED, "never ring the bell", reason="salloc does not ring", env=("SALLOC_NO_BELL",)),
    _o("no-shell", "", "", "A", REFUSED, "allocate and exit without running a command",
       reason="not implemented; run salloc with a command (salloc sleep infinity &)"),
    _o("kill-command", "K", "SIGNAL", "A", IGNORED, "signal the command when the allocation ends", optional=True,
       reason="the allocation ends when the command exits", env=("SALLOC_KILL_CMD",)),
    _o("immediate", "I", "SECS", "RA", REFUSED, "give up unless resources are free within SECS", optional=True,
       reason="not implemented; check sinfo first or use --test-only", env=("SALLOC_IMMEDIATE", "SLURM_IMMEDIATE")),
    # ---- identity, priority and site features Spur does not have
    _o("uid", "", "USER", "BRA", REFUSED, "run as another user (root only)",
       reason="jobs run as the user MUNGE names; submit as that user"),
    _o("gid", "", "GROUP", "BRA", REFUSED, "run with another group (root only)",
       reason="jobs run with the caller's group; run newgrp or sg first"),
    _o("priority", "", "VALUE", "BRA", REFUSED, "set the job's priority (operators only)",
       reason="Spur has no priority field; use --nice to lower it"),
    _o("reservation", "", "NAME", "BRA", REFUSED, "run in a reservation", reason="Spur has no reservations",
       env=("SBATCH_RESERVATION", "SALLOC_RESERVATION", "SLURM_RESERVATION")),
    _o("licenses", "L", "LIST", "BRA", REFUSED, "licenses the job needs",
       reason="Spur has no licenses; count them as --gres on the nodes that have them"),
    _o("bb", "", "SPEC", "BRA", REFUSED, "burst buffer", reason=_NO_BB,
       env=("SALLOC_BURST_BUFFER", "SLURM_BURST_BUFFER")),
    _o("bbf", "", "FILE", "BRA", REFUSED, "burst buffer specification file", reason=_NO_BB),
    _o("container-id", "", "ID", "BRA", REFUSED, "an OCI container id", reason="Spur runs no containers"),
    _o("container", "", "PATH", "BRA", REFUSED, "run in an OCI container",
       reason="Spur runs no containers; run the container runtime in the script",
       env=("SBATCH_CONTAINER", "SALLOC_CONTAINER", "SRUN_CONTAINER")),
    _o("x11", "", "all|first|last", "RA", REFUSED, "X11 forwarding", optional=True,
       reason="Spur forwards no X11; use ssh -X to the node"),
    _o("batch", "", "LIST", "B", REFUSED, "features of the node the batch script runs on",
       reason="the batch script runs on the job's first node; use --constraint", env=("SBATCH_BATCH",)),
    _o("cluster-constraint", "", "LIST", "BRA", REFUSED, "cluster features", reason="there is one cluster"),
    _o("export-file", "", "FILE", "B", REFUSED, "environment from a file",
       reason="not implemented; source the file in the script"),
    _o("get-user-env", "", "TIMEOUT", "BA", IGNORED, "load the user's login environment", optional=True,
       reason="the job gets the environment --export passes", env=("SBATCH_GET_USER_ENV",)),
    _o("ignore-pbs", "", "", "B", IGNORED, "ignore #PBS lines", reason="sbatch reads no #PBS lines",
       env=("SBATCH_IGNORE_PBS",)),
    _o("wait-all-nodes", "", "0|1", "BA", IGNORED, "start only when every node has booted",
       reason="Spur's nodes do not boot on demand", env=("SBATCH_WAIT_ALL_NODES", "SALLOC_WAIT_ALL_NODES")),
    # ---- placement details Spur does not model
    _o("contiguous", "", "", "BRA", IGNORED, "nodes next to each other", reason="Spur has no network topology"),
    _o("core-spec", "S", "N", "BRA", IGNORED, "cores kept for the system", reason=_NO_TOPOLOGY,
       env=("SBATCH_CORE_SPEC", "SALLOC_CORE_SPEC", "SLURM_CORE_SPEC")),
    _o("thread-spec", "", "N", "BRA", IGNORED, "threads kept for the system", reason=_NO_TOPOLOGY,
       env=("SBATCH_THREAD_SPEC", "SALLOC_THREAD_SPEC", "SLURM_THREAD_SPEC")),
    _o("cores-per-socket", "", "N", "BRA", IGNORED, "cores per socket", reason=_NO_TOPOLOGY),
    _o("sockets-per-node", "", "N", "BRA", IGNORED, "sockets per node", reason=_NO_TOPOLOGY),
    _o("threads-per-core", "", "N", "BRA", IGNORED, "threads per core", reason=_NO_TOPOLOGY,
       env=("SBATCH_THREADS_PER_CORE", "SALLOC_THREADS_PER_CORE", "SLURM_THREADS_PER_CORE")),
    _o("extra-node-info", "B", "S[:C[:T]]", "BRA", IGNORED, "sockets, cores and threads", reason=_NO_TOPOLOGY),
    _o("ntasks-per-core", "", "N", "BRA", IGNORED, "tasks per core", reason=_NO_TOPOLOGY,
       env=("SLURM_NTASKS_PER_CORE",)),
    _o("ntasks-per-socket", "", "N", "BRA", IGNORED, "tasks per socket", reason=_NO_TOPOLOGY,
       env=("SLURM_NTASKS_PER_SOCKET",)),
    _o("ntasks-per-gpu", "", "N", "BRA", IGNORED, "tasks per GPU", reason="use --gpus-per-task",
       env=("SLURM_NTASKS_PER_GPU",)),
    _o("hint", "", "TYPE", "BRA", IGNORED, "compute- or memory-bound placement hint", reason=_NO_TOPOLOGY,
       env=("SBATCH_HINT", "sbatch:SLURM_HINT", "SALLOC_HINT", "salloc:SLURM_HINT", "SLURM_HINT")),
    _o("distribution", "m", "TYPE", "BRA", IGNORED, "how tasks are laid out over nodes",
       reason="tasks fill each node in turn (block)", env=("SBATCH_DISTRIBUTION", "SLURM_DISTRIBUTION")),
    _o("mem-bind", "", "TYPE", "BRA", IGNORED, "bind memory", reason=_NO_BINDING,
       env=("SBATCH_MEM_BIND", "SALLOC_MEM_BIND", "SLURM_MEM_BIND")),
    _o("gpu-bind", "", "TYPE", "BRA", IGNORED, "bind GPUs to tasks", reason=_NO_BINDING,
       env=("SBATCH_GPU_BIND", "SALLOC_GPU_BIND", "SLURM_GPU_BIND")),
    _o("cpus-per-gpu", "", "N", "BRA", IGNORED, "CPUs for each GPU", reason="ask for CPUs with -c",
       env=("SBATCH_CPUS_PER_GPU", "SALLOC_CPUS_PER_GPU", "SLURM_CPUS_PER_GPU")),
    _o("mem-per-gpu", "", "SIZE", "BRA", IGNORED, "memory for each GPU", reason="ask for memory with --mem",
       env=("SBATCH_MEM_PER_GPU", "SALLOC_MEM_PER_GPU", "SLURM_MEM_PER_GPU")),
    _o("gpus-per-socket", "", "[TYPE:]N", "BRA", IGNORED, "GPUs per socket", reason=_NO_TOPOLOGY),
    _o("gres-flags", "", "FLAGS", "BRA", IGNORED, "gres placement flags", reason=_NO_TOPOLOGY,
       env=("SBATCH_GRES_FLAGS", "SALLOC_GRES_FLAGS", "SLURM_GRES_FLAGS")),
    _o("mincpus", "", "N", "BRA", IGNORED, "at least N CPUs on each node", reason="ask for CPUs with -c and -n"),
    _o("tmp", "", "SIZE", "BRA", IGNORED, "temporary disk per node", reason="Spur does not count disk"),
    _o("oversubscribe", "s", "", "BRA", IGNORED, "share nodes with other jobs",
       reason="jobs share nodes by free CPUs unless --exclusive"),
    _o("overcommit", "O", "", "BRA", IGNORED, "more tasks than CPUs", reason="each task gets its CPUs",
       env=("SBATCH_OVERCOMMIT", "SALLOC_OVERCOMMIT", "SLURM_OVERCOMMIT")),
    _o("spread-job", "", "", "BRA", IGNORED, "spread over as many nodes as possible", reason="ask with -N",
       env=("SBATCH_SPREAD_JOB", "SALLOC_SPREAD_JOB", "SLURM_SPREAD_JOB")),
    _o("use-min-nodes", "", "", "BRA", IGNORED, "prefer the smaller count of a node range",
       reason="a node range always gets its minimum",
       env=("SBATCH_USE_MIN_NODES", "SALLOC_USE_MIN_NODES", "SLURM_USE_MIN_NODES")),
    _o("switches", "", "N[@TIME]", "BRA", IGNORED, "leaf switches", reason="Spur has no network topology",
       env=("SBATCH_REQ_SWITCH", "SALLOC_REQ_SWITCH", "SLURM_REQ_SWITCH")),
    _o("prefer", "", "LIST", "BRA", IGNORED, "features to prefer", reason="use --constraint for features needed"),
    _o("no-kill", "k", "off", "BRA", IGNORED, "keep the job when a node fails", optional=True,
       reason="a failed node ends its job (NODE_FAIL) or requeues it",
       env=("SBATCH_NO_KILL", "SALLOC_NO_KILL", "SLURM_NO_KILL")),
    _o("network", "", "TYPE", "BRA", IGNORED, "network resources", reason="Spur has no network plugins",
       env=("SBATCH_NETWORK", "SALLOC_NETWORK", "SLURM_NETWORK")),
    _o("mcs-label", "", "LABEL", "BRA", IGNORED, "MCS label", reason="Spur has no MCS plugin"),
    _o("delay-boot", "", "MINUTES", "BRA", IGNORED, "wait before rebooting nodes for features", reason=_NO_FEATURE_BOOT,
       env=("SBATCH_DELAY_BOOT", "SALLOC_DELAY_BOOT", "SLURM_DELAY_BOOT")),
    _o("reboot", "", "", "BRA", IGNORED, "reboot the nodes first", reason=_NO_FEATURE_BOOT),
    _o("power", "", "FLAGS", "BRA", IGNORED, "power management", reason=_NO_POWER,
       env=("SBATCH_POWER", "SALLOC_POWER", "SLURM_POWER")),
    _o("cpu-freq", "", "FREQ", "BRA", IGNORED, "CPU frequency", reason=_NO_POWER, env=("SLURM_CPU_FREQ_REQ",)),
    _o("gpu-freq", "", "FREQ", "BRA", IGNORED, "GPU frequency", reason=_NO_POWER,
       env=("SBATCH_GPU_FREQ", "SALLOC_GPU_FREQ", "SLURM_GPU_FREQ")),
    _o("acctg-freq", "", "LIST", "BRA", IGNORED, "accounting sample rate", reason=_NO_ACCOUNTING,
       env=("SBATCH_ACCTG_FREQ", "SALLOC_ACCTG_FREQ", "SLURM_ACCTG_FREQ")),
    _o("profile", "", "TYPES", "BRA", IGNORED, "detailed profiling", reason=_NO_ACCOUNTING,
       env=("SBATCH_PROFILE", "SALLOC_PROFILE", "SLURM_PROFILE")),
    _o("propagate", "", "RLIMITS", "BR", IGNORED, "pass resource limits to the job", optional=True,
       reason="jobs get the limits of the node's spurd"),
    # ---- newer Slurm releases
    _o("tres-per-task", "", "LIST", "BRA", REFUSED, "trackable resources per task",
       reason="ask with -c, --mem-per-cpu and --gpus-per-task"),
    _o("tres-bind", "", "TYPE", "BRA", IGNORED, "bind trackable resources", reason=_NO_BINDING),
    _o("segment", "", "N", "BRA", IGNORED, "node segment size", reason="Spur has no network topology"),
    _o("spread-segments", "", "", "BRA", IGNORED, "spread segments", reason="Spur has no network topology"),
    _o("oom-kill-step", "", "0|1", "BRA", IGNORED, "end the whole step on an out-of-memory kill", optional=True,
       reason="an out-of-memory kill ends the job (OUT_OF_MEMORY)"),
    _o("stepmgr", "", "", "BA", IGNORED, "a step manager on the first node", reason="the controller manages steps"),
    _o("extra", "", "TEXT", "BRA", IGNORED, "node extra-data constraint", reason="use --constraint"),
    _o("external-launcher", "", "", "R", REFUSED, "an external MPI launcher step",
       reason="Spur has no PMI; launch MPI with its own launcher inside the job"),
]
# fmt: on
# --help, --usage and --version are answered by commandline.INFO_OPTIONS (and -h here, as Slurm has it)
INFO = [
    Option("help", "h", "help", help="show this help and exit"),
    Option("usage", "", "usage", help="show a one-line usage and exit"),
    Option("version", "V", "version", help="show the version and build and exit"),
]


def _check_table() -> None:
    """The table's own rules (a test runs this too)."""
    seen: dict[tuple[str, str], str] = {}
    for entry in OPTIONS:
        assert entry.disposition in DISPOSITIONS, entry.long
        assert set(entry.commands) <= set(COMMANDS), entry.long
        for program in entry.programs():
            for name in (f"--{entry.long}", f"-{entry.short}" if entry.short else ""):
                if name:
                    assert (program, name) not in seen, (program, name)
                    seen[(program, name)] = entry.long


def entries_for(program: str) -> list[JobOption]:
    return [entry for entry in OPTIONS if program in entry.programs()]


def help_options(program: str) -> list[Option]:
    """What --help lists: the options Spur honours or records (the ignored and refused ones are in docs/cli.md)."""
    shown = [e for e in entries_for(program) if e.disposition_for(program)[0] in (HONOURED, RECORDED)]
    return [entry.option() for entry in shown] + INFO


def help_footer(program: str) -> str:
    others = [e for e in entries_for(program) if e.disposition_for(program)[0] in (IGNORED, REFUSED)]
    return (
        f"\n{len(others)} more of Slurm's {program} options are accepted with a warning or refused with the reason "
        "(docs/cli.md lists them all)."
    )


def options_for(program: str) -> list[Option]:
    """The Option list options.parse reads (and the help text and the fuzz tests list)."""
    return [entry.option() for entry in entries_for(program)] + INFO


# ------------------------------------------------------------------ the parsed result


EXCLUSIVE_PAIRS = (("mem", "mem_per_cpu"), ("nodelist", "nodefile"))  # dests Slurm refuses together


class JobOptions:
    """Values by dest (None: not given), where each came from, and the entries they belong to."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.entries: dict[str, JobOption] = {}

    def get(self, dest: str, default: Any = None) -> Any:
        value = self.values.get(dest)
        return default if value is None else value

    def given(self, dest: str) -> bool:
        return self.values.get(dest) is not None

    def set(self, entry: JobOption, value: Any, source: str) -> None:
        self.values[entry.dest] = value
        self.sources[entry.dest] = source
        self.entries[entry.dest] = entry

    def drop(self, dest: str) -> None:
        for table in (self.values, self.sources, self.entries):
            table.pop(dest, None)

    def update(self, other: JobOptions) -> None:
        """other's values win (the command line over #SBATCH lines), and so does its choice between options that
        exclude each other (--mem-per-cpu there drops --mem here)."""
        for pair in EXCLUSIVE_PAIRS:
            for mine, theirs in (pair, pair[::-1]):
                if other.given(theirs) and not other.given(mine):
                    self.drop(mine)
        for dest, value in other.values.items():
            if value is not None:
                self.values[dest] = value
                self.sources[dest] = other.sources[dest]
                self.entries[dest] = other.entries[dest]

    def label(self, dest: str) -> str:
        return self.sources.get(dest) or f"--{dest.replace('_', '-')}"

    def warnings(self) -> list[str]:
        """One line for each recorded or ignored option given, in the table's order."""
        lines = []
        for entry in OPTIONS:
            if entry.dest in self.entries and self.entries[entry.dest] is not entry:
                continue
            if not self.given(entry.dest):
                continue
            disposition, reason = entry.disposition_for(self.program)
            if disposition == RECORDED:
                lines.append(f"{self.program}: warning: --{entry.long} is recorded but {reason}")
            elif disposition == IGNORED:
                lines.append(f"{self.program}: warning: --{entry.long} is ignored: {reason}")
        return lines

    def print_warnings(self) -> None:
        for line in self.warnings():
            print(line, file=sys.stderr)

    def spec_fields(self) -> dict[str, Any]:
        """The JobSpec fields the given options set, converted (an error names the option or variable)."""
        fields: dict[str, Any] = {}
        for first, second in EXCLUSIVE_PAIRS:
            if self.given(first) and self.given(second):
                raise CliError(
                    f"{self.label(first)} and {self.label(second)} exclude each other (as in Slurm); give one of them"
                )
        for dest, value in self.values.items():
            entry = self.entries.get(dest)
            if value is None or entry is None or entry.convert is None:
                continue
            if entry.disposition_for(self.program)[0] == IGNORED:
                continue
            fields.update(entry.convert(value, self.label(dest)))
        return fields


def _refuse(program: str, entry: JobOption, source: str) -> None:
    disposition, reason = entry.disposition_for(program)
    if disposition == REFUSED:
        shown = f"--{entry.long}" if source.startswith("-") else f"{source} (--{entry.long})"
        raise CliError(f"{shown} is not supported: {reason}")


def parse_job_options(
    program: str, argv: list[str], environ: dict[str, str] | None = None, shown_as: str = ""
) -> tuple[JobOptions, list[str]]:
    """-> (options, rest). Parsing stops at the first argument that is not an option (the script or the
    command): it and everything after it are rest. Input variables fill what the command line leaves out.
    A refused option is one CliError; values are converted later, by spec_fields(). shown_as: the name usage
    errors give (spur submit runs sbatch's options)."""
    entries = entries_for(program)
    values, rest = parse(shown_as or program, options_for(program), argv, stop_at_positional=True)
    parsed = JobOptions(program)
    for name in ("help", "usage", "version"):
        parsed.values[name] = values.get(name)
    by_dest: dict[str, JobOption] = {}
    for entry in entries:
        by_dest.setdefault(entry.dest, entry)
    for entry in entries:
        value = values.get(entry.dest)
        if value is None or entry.dest in parsed.entries:
            continue
        chosen = entry  # flags that share a dest (--requeue, --no-requeue) are told apart by the value stored
        if not entry.arg and entry.const is not True:
            chosen = next((e for e in entries if e.dest == entry.dest and not e.arg and e.const == value), entry)
        _refuse(program, chosen, "--")
        parsed.set(chosen, value, f"--{chosen.long}" if chosen.long != "cluster" else "--clusters")
    from_command_line = {dest for dest in parsed.entries}
    for entry in entries:
        if parsed.given(entry.dest):
            continue
        if any(entry.dest in pair and (set(pair) - {entry.dest}) & from_command_line for pair in EXCLUSIVE_PAIRS):
            continue  # the command line chose the other of the two (srun --mem in a job with SLURM_MEM_PER_CPU)
        for name in entry.env_names(program):
            if environ and name in environ:
                raw = environ[name]
                _refuse(program, entry, name)
                value = entry.const if not entry.arg or (entry.optional and raw == "") else raw
                parsed.set(entry, value, name)
                break
    for first, second in EXCLUSIVE_PAIRS:  # both from variables (a job's environment): the more specific wins
        if first not in from_command_line and second not in from_command_line and parsed.given(second):
            parsed.drop(first)
    return parsed, rest
