"""Pieces every command shares: --help/--usage/--version, job id arguments, JSON and line output."""

from __future__ import annotations

import sys

from spur_hpc.cli.options import Option, help_text
from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

INFO_OPTIONS = [
    Option("help", "", "help", help="show this help and exit"),
    Option("usage", "", "usage", help="show a one-line usage and exit"),
    Option("version", "V", "version", help="show the version and build and exit"),
]


def answer_info_flags(
    program: str, values: dict[str, Any], synopsis: str, description: str, options: list[Option]
) -> bool:
    """Print help, usage or version when asked; True when the command should stop there."""
    if values.get("help"):
        print(help_text(program, synopsis, description, options))
        return True
    if values.get("usage"):
        print(f"Usage: {program} {synopsis}")
        return True
    if values.get("version"):
        from spur_hpc import buildinfo

        print(buildinfo.describe(program))
        return True
    return False


CLUSTERS_OPTION = Option("clusters", "M", "clusters", "NAMES", "this cluster's name or all (Spur has one cluster)")


def resolve_cluster(client: Any, text: str, label: str = "--clusters") -> str:
    """-M/--clusters: this cluster's name or all -> the name; any other name is one line and exit 1."""
    name = client.call("GetClusterInfo").cluster_name
    wanted = [item.strip() for item in text.split(",") if item.strip()]
    if any(item.lower() == "all" or item == name for item in wanted):
        return name
    raise CliError(f"{label} {text}: no such cluster; this cluster is '{name}' (or use all)")


def parse_job_id(text: str, what: str = "job id") -> int:
    from spur_hpc.cli.units import INT64_MAX, bounded_int

    value = bounded_int(text.strip(), INT64_MAX)
    if not value:
        raise CliError(f"invalid {what} '{text}': job ids are positive numbers up to {INT64_MAX}, like 42")
    return value


def parse_job_ids(items: list[str], what: str = "job id") -> list[int]:
    ids: list[int] = []
    for item in items:
        for part in item.split(","):
            if part.strip():
                ids.append(parse_job_id(part, what))
    return ids


def check_one_line(what: str, text: str) -> None:
    """Text that is shown as one cell of a listing (a drain reason, a job name) holds no control characters."""
    from spur_hpc.joblimits import control_character

    char = control_character(text)
    if char:
        raise CliError(f"{what} '{text}' contains a control character ({char}); use plain text")


def stop_if_unreachable(exc: Any, what: str, left: int) -> None:
    """A per-item loop (scancel 1 2 3, a hostlist of nodes) stops when no controller answered after the client's
    whole patience: each further item would wait as long again, and 65,536 of them would take days."""
    if exc.code == "UNAVAILABLE":
        raise CliError(f"{what}: {exc.details}" + (f" ({left} more not tried)" if left else "")) from None


def print_lines(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")


def print_json(value: Any) -> None:
    import json

    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False) + "\n")


def wants_json(format_value: str | None, json_flag: Any = None) -> bool:
    """`-o json` (spur's listings) or --json (Slurm's own flag)."""
    return bool(json_flag) or (format_value or "").strip().lower() == "json"
