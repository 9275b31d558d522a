"""Slurm hostlists: node[1-3,7],gpu01 <-> a list of names."""

from __future__ import annotations

from spur_hpc.cli import units
from spur_hpc.cli.runner import CliError

MAX_NAMES = 65536  # more nodes than any cluster has; pn[1-99999999] would build 100 million names first


def _split_name(name: str) -> tuple[str, str]:
    """'node012' -> ('node', '012'); a name without a numeric suffix -> (name, '')."""
    end = len(name)
    start = end
    while start > 0 and name[start - 1] in "0123456789":  # not isdigit(): int() refuses '²'
        start -= 1
    return name[:start], name[start:end]


def compress(names: list[str]) -> str:
    """['n1', 'n2', 'n3', 'n5', 'gpu'] -> 'gpu,n[1-3,5]' (sorted, zero padding kept)."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        prefix, digits = _split_name(name)
        if not digits:
            plain.append(name)
            continue
        width = len(digits) if digits.startswith("0") else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    parts: list[tuple[str, str]] = [(name, name) for name in plain]
    for (prefix, width), numbers in groups.items():
        numbers.sort()
        ranges: list[str] = []
        first = previous = numbers[0]
        for number in numbers[1:] + [None]:  # type: ignore[list-item]
            if number is not None and number == previous + 1:
                previous = number
                continue
            low, high = f"{first:0{width}d}", f"{previous:0{width}d}"
            ranges.append(low if first == previous else f"{low}-{high}")
            if number is not None:
                first = previous = number
        if len(numbers) == 1:
            text = f"{prefix}{ranges[0]}"
        else:
            text = f"{prefix}[{','.join(ranges)}]"
        parts.append((f"{prefix}{numbers[0]:0{width}d}", text))
    return ",".join(text for _key, text in sorted(parts, key=lambda p: _natural_key(p[0])))


def _natural_key(name: str) -> tuple[str, int]:
    prefix, digits = _split_name(name)
    return prefix, int(digits) if digits else -1


def expand(expression: str) -> list[str]:
    """'n[1-3,5],gpu01' -> ['n1', 'n2', 'n3', 'n5', 'gpu01']; a malformed expression raises CliError."""
    names: list[str] = []
    depth = 0
    current = ""
    for char in expression.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                break
        if char == "," and depth == 0:
            names.extend(_expand_one(current, expression, len(names)))
            current = ""
        else:
            current += char
    if depth != 0:
        raise CliError(f"bad hostlist '{expression}': unbalanced brackets; write names like node[1-3],gpu01")
    names.extend(_expand_one(current, expression, len(names)))
    return names


def _expand_one(part: str, expression: str, before: int) -> list[str]:
    """One name or prefix[ranges]suffix; before: how many names the expression gave already (for the cap)."""
    part = part.strip()
    if not part:
        return []
    if "[" not in part:
        _check_count(before + 1, expression)
        return [part]
    prefix, _, rest = part.partition("[")
    body, _, suffix = rest.partition("]")
    if "[" in suffix or "]" in suffix:
        raise CliError(f"bad hostlist '{expression}': one bracket group per name is supported")
    out = []
    for item in body.split(","):
        low, dash, high = item.partition("-")
        start, stop = units.bounded_int(low, units.INT64_MAX), units.bounded_int(high if dash else low, units.INT64_MAX)
        if start is None or stop is None:
            raise CliError(f"bad hostlist '{expression}': '{item}' is not a number or a range like 1-4")
        width = len(low) if low.startswith("0") and len(low) > 1 else 0
        if stop < start:
            raise CliError(f"bad hostlist '{expression}': range {item} runs backwards")
        _check_count(before + len(out) + stop - start + 1, expression)
        out.extend(f"{prefix}{number:0{width}d}{suffix}" for number in range(start, stop + 1))
    return out


def _check_count(count: int, expression: str) -> None:
    if count > MAX_NAMES:
        raise CliError(f"bad hostlist '{expression}': it names more than {MAX_NAMES} nodes, the limit; name fewer")
