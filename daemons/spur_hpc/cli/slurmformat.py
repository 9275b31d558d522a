"""Slurm's `-o` format strings: "%.18i %.9P %8j" -> columns with width, justification and truncation.

A specifier is %[.][width]letter: '.' right-justifies, a width pads and truncates, no width prints the
value as it is. Text between specifiers is copied. Each command supplies its letters and titles.
"""

from __future__ import annotations

from spur_hpc.cli import units
from spur_hpc.cli.runner import CliError, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


MAX_WIDTH = 1024  # wider than any screen; %99999999i would pad every cell to gigabytes


def parse_width(digits: str, where: str, low: int = 0) -> int:
    """A column width from a format (squeue -o %20j, sacct JobName%20): low to MAX_WIDTH."""
    width = units.bounded_int(digits, MAX_WIDTH)
    if width is None or width < low:
        raise CliError(f"bad width '{digits}' in {where}: use a width from {low} to {MAX_WIDTH}, like %20")
    return width


class Column:
    __slots__ = ("letter", "width", "right", "literal", "auto_width")

    def __init__(self, letter: str, width: int | None, right: bool, literal: str = "", auto_width: bool = False):
        self.letter = letter
        self.width = width
        self.right = right
        self.literal = literal  # for literal text between specifiers (letter == "")
        self.auto_width = auto_width  # '%#X': as wide as the widest value (sinfo's partition column)


def parse(program: str, text: str, letters: dict[str, Any]) -> list[Column]:
    columns: list[Column] = []
    literal = ""
    i = 0
    while i < len(text):
        char = text[i]
        if char != "%":
            literal += char
            i += 1
            continue
        if i + 1 < len(text) and text[i + 1] == "%":
            literal += "%"
            i += 2
            continue
        if literal:
            columns.append(Column("", None, False, literal))
            literal = ""
        i += 1
        right = auto = False
        if i < len(text) and text[i] == ".":
            right = True
            i += 1
        if i < len(text) and text[i] == "#":
            auto = True
            i += 1
        digits = ""
        while i < len(text) and text[i] in "0123456789":
            digits += text[i]
            i += 1
        if i >= len(text):
            raise CliError(f"format '{text}' ends inside a specifier; write it like %.18i")
        letter = text[i]
        i += 1
        if letter not in letters:
            known = "".join(sorted(letters))
            raise CliError(f"unknown format specifier %{letter} in '{text}'; {program} knows %[{known}]")
        width = parse_width(digits, f"format '{text}'") if digits else None
        columns.append(Column(letter, width, right, auto_width=auto))
    if literal:
        columns.append(Column("", None, False, literal))
    return columns


DEFAULT_FIELD_WIDTH = 20  # a -O field without :size


def parse_fields(
    program: str, text: str, fields: dict[str, tuple[str, str]], separator: str = " "
) -> tuple[list[Column], dict[str, str]]:
    """squeue/sinfo -O 'JobID:\x1f,State:.10,Name': each item type[:[.][size][suffix]], type one of fields
    (lower-case name -> (title, key)). No ':size': 20 wide; an empty size: as wide as the value; the suffix is
    copied after the value (Open OnDemand splits on it), else `separator` follows a sized column (squeue's
    columns touch: its -O widths include the space). -> (columns keyed by key, titles by key)."""
    columns: list[Column] = []
    titles: dict[str, str] = {}
    for item in text.split(","):
        name, colon, spec = item.partition(":")
        if not name.strip() and not colon:
            continue  # an empty item (OOD's leading comma)
        key_name = name.strip().lower()
        if key_name not in fields:
            raise CliError(f"unknown -O field '{name}'; {program} knows {', '.join(sorted(fields))}")
        title, key = fields[key_name]
        titles[key] = title
        right = spec.startswith(".")
        spec = spec[1:] if right else spec
        digits = spec[: len(spec) - len(spec.lstrip("0123456789"))]
        suffix = spec[len(digits) :]
        width = parse_width(digits, f"-O field '{item}'") if digits else None
        if not colon:
            width = DEFAULT_FIELD_WIDTH
        columns.append(Column(key, width or None, right))
        if suffix:
            columns.append(Column("", None, False, suffix))
        elif separator and (not colon or width):
            columns.append(Column("", None, False, separator))
    return columns, titles


def print_field(value: str, width: int, right: bool) -> str:
    """Slurm's print_fields (sacct, sacctmgr, sshare): padded to width, a longer value cut to width-1 and a '+'."""
    if len(value) > width:
        value = value[: width - 1] + "+"
    return value.rjust(width) if right else value.ljust(width)


def fit(value: str, width: int | None, right: bool) -> str:
    if width is None:
        return value
    value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


def render(
    columns: list[Column],
    rows: list[Any],
    getters: Mapping[str, Callable[[Any], str]],
    titles: dict[str, str],
    header: bool = True,
    strip: bool = True,
) -> list[str]:
    """Lines of output (header first when asked); getters[letter](row) gives a cell's text, shown with its
    control characters escaped (a job name with a newline would forge a row); the format's own text is kept.
    strip=False keeps the spaces that end a line (squeue pads its last column as Slurm's does).
    Built a column at a time (one getter, one width for every row), each line by one %-format whose
    conversions pad and cut the cells (%18.18s, %-9.9s): squeue lists 10,000 jobs through here."""
    cells: list[list[str]] = []
    specs: list[str] = []  # the line's %-format, a conversion per column
    widths: list[int | None] = []
    for column in columns:
        if not column.letter:
            specs.append(column.literal.replace("%", "%%"))
            widths.append(None)
            continue
        values = [text if text.isprintable() else printable(text) for text in map(getters[column.letter], rows)]
        width = column.width
        if column.auto_width:
            width = max([len(titles[column.letter]), column.width or 0] + [len(value) for value in values])
        specs.append("%s" if width is None else f"%{'' if column.right else '-'}{width}.{width}s")
        cells.append(values)
        widths.append(width)
    line_format = "".join(specs)
    if cells:
        lines = [line_format % row for row in zip(*cells, strict=True)]
    else:
        lines = [line_format % ()] * len(rows)
    if header:
        titles_line = "".join(
            fit(titles[c.letter], widths[i], c.right) if c.letter else c.literal for i, c in enumerate(columns)
        )
        lines.insert(0, titles_line)
    # not str.isspace: \x1f, a delimiter Open OnDemand splits on, is "space" to it
    return [line.rstrip(" ") for line in lines] if strip else lines
