"""sprio: the pending jobs' multifactor priorities and their factors, as Slurm 22.05's sprio prints them.

The controller (ListPriorities) sends each pending job's factors in [0, 1] and the weights; sprio prints each
factor times its weight (%.0f), or the factor itself with -n (%.7f), and PRIORITY as their sum less nice (as
Slurm's get_priority_from_factors). A format is Slurm's: `%[.][WIDTH]LETTER` with literal text between, `.` right-
justifies, a value is cut to WIDTH (tests/golden/slurm-22.05-priority holds real sprio's output).
"""

from __future__ import annotations

import os
import sys

from spur_hpc.cli import commandline
from spur_hpc.cli.options import Option, UsageError, gather, getopt_lines, parse
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "sprio"
OPTIONS = [
    Option("jobs", "j", "jobs", "JOBS", "show these jobs (comma-separated ids)", repeat=True, optional=True),
    Option("users", "u", "user", "USERS", "show the jobs of these users (and a USER column)", repeat=True),
    Option("long", "l", "long", help="every factor, the user and nice"),
    Option("norm", "n", "norm", help="the factors themselves (0 to 1), not times their weights"),
    Option("format", "o", "format", "FORMAT", "Slurm's sprio format: %i %r %u %Y %S %A %B %F %J %P %Q %N %T %c"),
    Option("weights", "w", "weights", help="show the configured weights"),
    Option("noheader", "h", "noheader", help="print no header line"),
    Option("partitions", "p", "partition", "PARTITIONS", "show only jobs of these partitions", repeat=True),
    commandline.CLUSTERS_OPTION,
    *commandline.INFO_OPTIONS,
]
SYNOPSIS = "[-j JOBS] [-u USERS] [-p PARTITIONS] [-l] [-n] [-w] [-h] [-o FORMAT]"
# Slurm's words under priority/basic (sprio.c), and exit 1.
BASIC = (
    "You are not running a supported priority plugin\n(priority/basic).\nOnly 'priority/multifactor' is supported.\n"
)
NO_MATCH = "Unable to find jobs matching user/id(s) specified"
MAX_PRIORITY = 0xFFFFFFFF
# letter -> (header, the factor's name in the reply, its weight's name); lower case is the -n (normalised) form.
FACTOR_LETTERS = {
    "A": ("AGE", "age", "age"),
    "B": ("ASSOC", "assoc_factor", "assoc"),
    "F": ("FAIRSHARE", "fairshare", "fairshare"),
    "J": ("JOBSIZE", "job_size", "job_size"),
    "P": ("PARTITION", "partition_factor", "partition"),
    "Q": ("QOS", "qos_factor", "qos"),
}
HEADERS = {"i": "JOBID", "r": "PARTITION", "u": "USER", "Y": "PRIORITY", "y": "PRIORITY", "S": "SITE",
           "N": "NICE", "T": "TRES", "t": "TRES", "c": "CLUSTER"}  # fmt: skip
LONG = "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T"
LONG_NORM = "%.15i %9r %.8u %10y %10a %10b %10f %10j %10p %10q %20t"


def default_format(weights: Any, norm: bool, long: bool, user: bool) -> str:
    """sprio's own choice (opts.c): -l shows every factor; otherwise the job, its partition (and user with -u),
    the priority (and SITE unless -n), then each factor whose weight is not 0."""
    if long:
        return LONG_NORM if norm else LONG
    parts = ["%.15i", "%9r"] + (["%.8u"] if user else [])
    parts += ["%10y"] if norm else ["%.10Y", "%.10S"]
    for letter, (_header, _factor, weight) in FACTOR_LETTERS.items():
        if getattr(weights, weight, 0):
            parts.append(f"%10{letter.lower()}" if norm else f"%.10{letter}")
    return " ".join(parts)


def parse_format(text: str) -> list[tuple[str, str, int, bool]]:
    """A format -> [(literal before, letter, width, right-justified)]; the text after the last field is a
    final item with letter ''. An unknown letter is Slurm's error line on stderr, and the field is left out."""
    items: list[tuple[str, str, int, bool]] = []
    literal, i = "", 0
    while i < len(text):
        if text[i] != "%":
            literal += text[i]
            i += 1
            continue
        i += 1
        right = i < len(text) and text[i] == "."
        i += right
        digits = ""
        while i < len(text) and text[i].isdigit():
            digits += text[i]
            i += 1
        if i >= len(text):
            break
        letter = text[i]
        i += 1
        if letter not in HEADERS and letter.upper() not in FACTOR_LETTERS:
            print(f"sprio: error: Invalid job format specification: {letter}", file=sys.stderr)
            continue
        items.append((literal, letter, min(int(digits or 0), 4096), right))
        literal = ""
    items.append((literal, "", 0, False))
    return items


def cell(text: str, width: int, right: bool) -> str:
    """print.c's _print_str: cut to WIDTH, then right-justified or padded on the right."""
    if not width:
        return text
    text = text[:width]
    return text.rjust(width) if right else text.ljust(width)


def job_priority(job: Any, weights: Any) -> float:
    """print.c's get_priority_from_factors: the weighted factors less nice, at least 1."""
    total = sum(getattr(job, factor) * getattr(weights, weight) for _h, factor, weight in FACTOR_LETTERS.values())
    return max(1.0, total - job.nice)


def value(letter: str, job: Any, weights: Any, cluster: str) -> str:
    """One field of one job; job None is the -w weights row."""
    if letter.upper() in FACTOR_LETTERS:
        _header, factor, weight = FACTOR_LETTERS[letter.upper()]
        w = getattr(weights, weight)
        if job is None:
            return f"{w:.0f}"
        return f"{getattr(job, factor) * w:.0f}" if letter.isupper() else f"{getattr(job, factor) if w else 0.0:.7f}"
    if job is None:
        return {"i": "Weights", "S": "1"}.get(letter, "")
    if letter == "i":
        return str(job.job_id)
    if letter == "r":
        return job.partition
    if letter == "u":
        return job.user
    if letter == "Y":
        return str(int(job_priority(job, weights)))
    if letter == "y":
        return f"{job_priority(job, weights) / MAX_PRIORITY:16.14f}"
    if letter == "S":
        return "0"
    if letter == "N":
        return str(job.nice)
    if letter == "c":
        return cluster
    return ""  # TRES: Spur has no TRES weights


def heading(letter: str) -> str:
    return FACTOR_LETTERS[letter.upper()][0] if letter.upper() in FACTOR_LETTERS else HEADERS[letter]


def render(items: list[tuple[str, str, int, bool]], job: Any, weights: Any, cluster: str, header: bool) -> str:
    out = []
    for literal, letter, width, right in items:
        out.append(literal)
        if letter:
            text = heading(letter) if header else value(letter, job, weights, cluster)
            out.append(cell(text, width, right))
    return "".join(out)


def main(argv: list[str], program: str = PROGRAM) -> int:
    try:
        values, positionals = parse(program, OPTIONS, argv)
    except UsageError as exc:  # getopt's two lines, as Slurm's sprio prints them
        invoked = sys.argv[0] if sys.argv and os.path.basename(sys.argv[0]) == program else program
        sys.stderr.write(getopt_lines(invoked, program, exc))
        return 1
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Show pending jobs' priority factors.", OPTIONS):
        return 0
    jobs_given = [j for j in values["jobs"] if j is not True]
    if values["jobs"] and not jobs_given and positionals:  # `-j 3,4`: as Slurm's, -j takes the next argument
        jobs_given.append(positionals.pop(0))
    if positionals:
        raise CliError(f"unexpected argument '{positionals[0]}'; sprio takes options only (jobs go in -j)")
    job_ids = commandline.parse_job_ids(gather(jobs_given))
    users = gather(values["users"])
    partitions = set(gather(values["partitions"]))

    from spur_hpc.cli.controller import ControllerClient

    client = ControllerClient()
    if values["clusters"]:
        commandline.resolve_cluster(client, values["clusters"])
    reply = client.call("ListPriorities", {"job_ids": job_ids, "users": users})
    if reply.priority_type != "multifactor":
        sys.stderr.write(BASIC)
        return 1
    weights = reply.weights
    fmt = values["format"] or default_format(weights, bool(values["norm"]), bool(values["long"]), bool(users))
    items = parse_format(fmt)
    cluster = client.call("GetClusterInfo").cluster_name if any(i[1] == "c" for i in items) else ""
    jobs = [j for j in reply.jobs if not partitions or j.partition in partitions]
    if (job_ids or users) and not jobs and not values["weights"]:
        print(NO_MATCH)
        return 0
    lines = [] if values["noheader"] else [render(items, None, weights, cluster, True)]
    if values["weights"]:
        lines.append(render(items, None, weights, cluster, False))
    else:
        lines += [render(items, job, weights, cluster, False) for job in sorted(jobs, key=lambda j: j.job_id)]
    commandline.print_lines(lines)
    return 0
