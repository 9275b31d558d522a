"""What may differ between a capture and its replay, replaced by the same text on both sides: times, dates,
durations, paths, host names, versions, process ids, and job ids when the two sides numbered jobs differently.

Replacements keep the width of what they replace where a column could depend on it (durations, dates)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ISO_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\b")
CTIME = re.compile(
    r"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d \d{4}\b"
)
# Not after ExitCode= (N:SIG); exit codes in sacct's ExitCode column cannot be told from durations and are masked.
DURATION = re.compile(r"(?<!ExitCode=)(?<![\d:.])(\d+-)?(\d+:)?\d+:\d\d(?![\d:])")
SESSION_ID = re.compile(r"(AllocNode:Sid=[^:\s]+:)\d+")
MEASURED = re.compile(r"\b(CPULoad|FreeMem)=[^\s]+")  # the machine's load and free memory at that instant
PORT = re.compile(r"\b(\w*Port\s*=\s*)\d+")  # ports are picked free on each run
DIGIT = re.compile(r"\d")


@dataclass
class Context:
    """What one side's outputs contain that the other's cannot: its paths, host name, version, job ids."""

    paths: dict[str, str] = field(default_factory=dict)  # absolute path -> stand-in
    hostname: str = ""
    kernel: str = ""  # `uname -r` and `uname -v`, as scontrol show node prints them in OS=
    versions: list[str] = field(default_factory=list)
    job_ids: dict[int, int] = field(default_factory=dict)  # this side's id -> the capture's id (when different)


def _mask(m: re.Match) -> str:
    return DIGIT.sub("0", m.group(0))


def normalise(text: str, ctx: Context) -> str:
    for path, stand_in in sorted(ctx.paths.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, stand_in)
    text = ISO_TIME.sub("YYYY-MM-DDTHH:MM:SS", text)
    text = CTIME.sub("Ddd Mmm DD HH:MM:SS YYYY", text)
    text = DURATION.sub(_mask, text)
    text = SESSION_ID.sub(r"\g<1>0", text)
    text = MEASURED.sub(r"\g<1>=N", text)
    text = PORT.sub(r"\g<1>PORT", text)
    if ctx.kernel:
        text = text.replace(ctx.kernel, "KERNEL")
    if ctx.hostname:
        text = re.sub(rf"\b{re.escape(ctx.hostname)}\b", "HOST", text)
    for version in ctx.versions:
        text = re.sub(rf"(?<![\d.]){re.escape(version)}(?![\d.])", "VERSION", text)
    moved = {a: b for a, b in ctx.job_ids.items() if a != b}
    if moved:
        text = re.sub(r"(?<![\w.:-])\d+(?![\dA-Za-z:-])", lambda m: str(moved.get(int(m.group(0)), m.group(0))), text)
    return text
