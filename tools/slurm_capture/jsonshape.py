"""Compare two JSON documents by structure: the keys at every level and each value's JSON type.

Used by the JSON replay test (Slurm's capture against Spur's output) and the unit tests of cli/slurmjson.py.
Records in the top-level lists (jobs[], nodes[], partitions[]) are paired by a key the caller gives (job id,
node name), so that a field Slurm leaves null for one kind of job (array_task_id of a job that is no array's
task) is compared with the same kind of job. Nested lists are compared element by element when both have the
same length, else each element against Slurm's first; dicts keyed by numbers (job_resources' sockets and
cores) are compared value against value, whatever the numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _numbered(d: dict) -> bool:
    return bool(d) and all(k.isdigit() for k in d)


def differences(slurm: Any, spur: Any, path: str = "$") -> list[str]:
    """Every place where `spur` has another key set or another value type than `slurm` (an empty list when the
    shapes agree). An empty list on either side matches any list (there is nothing to compare)."""
    a, b = json_type(slurm), json_type(spur)
    if a != b:
        return [f"{path}: Slurm has {a} ({_short(slurm)}), Spur {b} ({_short(spur)})"]
    out: list[str] = []
    if a == "object":
        if _numbered(slurm) and _numbered(spur):
            first = next(iter(slurm.values()))
            for key, value in spur.items():
                out += differences(first, value, f"{path}.{key}")
            return out
        missing = [k for k in slurm if k not in spur]
        extra = [k for k in spur if k not in slurm]
        if missing:
            out.append(f"{path}: Spur lacks {', '.join(missing)}")
        if extra:
            out.append(f"{path}: Spur adds {', '.join(extra)}")
        for key in slurm:
            if key in spur:
                out += differences(slurm[key], spur[key], f"{path}.{key}")
    elif a == "array" and slurm and spur:
        for i, value in enumerate(spur):
            peer = slurm[i] if len(slurm) == len(spur) else slurm[0]
            out += differences(peer, value, f"{path}[{i}]")
    return out


def _short(value: Any) -> str:
    import json

    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def record_differences(
    slurm: list[dict], spur: list[dict], key: Callable[[dict], Any], path: str
) -> tuple[list[str], list[Any], list[Any]]:
    """Records paired by key(record): (shape differences of each pair, keys only Slurm has, keys only Spur has)."""
    theirs = {key(r): r for r in slurm}
    ours = {key(r): r for r in spur}
    out = []
    for k, record in ours.items():
        if k in theirs:
            out += differences(theirs[k], record, f"{path}[{k}]")
    return out, [k for k in theirs if k not in ours], [k for k in ours if k not in theirs]
