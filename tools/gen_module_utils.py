#!/usr/bin/env python3
"""Write the copies of daemon modules that the collection's module_utils keep (modules run on the managed
host's Python and cannot import the daemons), or with --check say which copy drifted and exit 1.

Each row of COPIES is (source under daemons/, target under collection/plugins/module_utils/). Imports of
another row's source are rewritten to its copy; any other spur_hpc import is refused, as is code that does
not parse as Python 3.8 (the oldest Python a managed host may run). A .proto source becomes a module holding
its text as one string, TEXT (see the slurm.proto row for why).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = "collection/plugins/module_utils"
COLLECTION_PACKAGE = "ansible_collections.spur.cluster.plugins.module_utils"
OLDEST_PYTHON = (3, 8)

COPIES: list[tuple[str, str]] = [
    ("daemons/spur_hpc/model.py", f"{MODULE_UTILS}/spur_model.py"),
    ("daemons/spur_hpc/auth.py", f"{MODULE_UTILS}/spur_auth.py"),
    ("daemons/spur_hpc/wire/failover.py", f"{MODULE_UTILS}/spur_failover.py"),
    ("daemons/spur_hpc/wire/hpack.py", f"{MODULE_UTILS}/spur_hpack.py"),
    ("daemons/spur_hpc/wire/grpcwire.py", f"{MODULE_UTILS}/spur_grpcwire.py"),
    ("daemons/spur_hpc/wire/protocodec.py", f"{MODULE_UTILS}/spur_protocodec.py"),
    # The .proto text itself, not a layout generated from it: protocodec's parser, the one the CLI runs on
    # every command, reads it at run time as it reads the release's file, so the copy needs no second format,
    # no second generator and no test of its own; a string because Ansible ships only a module's Python
    # imports to the managed host (AnsiballZ), so a file next to module_utils would not be there.
    ("daemons/spur_hpc/proto/slurm.proto", f"{MODULE_UTILS}/spur_slurm_proto.py"),
]

HEADER = """\
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Generated from {source} by tools/gen_module_utils.py: do not edit; change the source and run the tool.
"""


class GenerationError(Exception):
    """A source that cannot be copied as it is; the message names the file and the line."""


def _module_name(path: str) -> str:
    """daemons/spur_hpc/model.py -> spur_hpc.model"""
    return path.removeprefix("daemons/").removesuffix(".py").replace("/", ".")


def _copied_modules() -> dict[str, str]:
    """spur_hpc.model -> spur_model (the copy's name inside module_utils), for every row."""
    return {_module_name(source): Path(target).stem for source, target in COPIES if source.endswith(".py")}


def _rewrite_import(line: str, source: str, number: int, copies: dict[str, str]) -> str:
    found = re.match(r"^(\s*)from (spur_hpc[\w.]*) import (.+)$", line)
    if not found:
        if re.match(r"^\s*import spur_hpc", line):
            raise GenerationError(f"{source}:{number}: write 'from spur_hpc.x import y' so the copy can rewrite it")
        return line
    indent, module, names = found.groups()
    if module in copies:  # from spur_hpc.model import X
        return f"{indent}from {COLLECTION_PACKAGE}.{copies[module]} import {names}"
    parts = [name.strip() for name in names.split(",")]
    if all(f"{module}.{part}" in copies for part in parts):  # from spur_hpc import model
        return "\n".join(f"{indent}from {COLLECTION_PACKAGE} import {copies[f'{module}.{p}']} as {p}" for p in parts)
    raise GenerationError(
        f"{source}:{number}: imports {module} ({names.strip()}), which module_utils has no copy of; "
        "add it to COPIES in tools/gen_module_utils.py or import it elsewhere"
    )


def render_text(source: str, text: str) -> str:
    """A module whose TEXT is the file's text (for files that are not Python, like a .proto)."""
    if '"""' in text or "\\" in text:
        raise GenerationError(f'{source}: holds \'"""\' or a backslash, which the generated string cannot')
    docstring = f'"""The text of {Path(source).name}, for the modules\' copy of wire.protocodec (parse_proto)."""'
    return HEADER.format(source=source) + f'{docstring}\n\nTEXT = """\\\n{text}"""\n'


def render(source: str) -> str:
    """The text of the copy of source (a path relative to the repository)."""
    text = (ROOT / source).read_text(encoding="utf-8")
    if not source.endswith(".py"):
        return render_text(source, text)
    copies = _copied_modules()
    lines = [_rewrite_import(line, source, n, copies) for n, line in enumerate(text.split("\n"), 1)]
    result = HEADER.format(source=source) + "\n".join(lines)
    try:
        ast.parse(result, feature_version=OLDEST_PYTHON)
    except SyntaxError as exc:
        version = ".".join(map(str, OLDEST_PYTHON))
        raise GenerationError(f"{source}:{exc.lineno}: not Python {version} syntax ({exc.msg})") from None
    return result


def drifted() -> list[str]:
    """One line per copy that differs from what its source renders to."""
    lines = []
    for source, target in COPIES:
        path = ROOT / target
        if not path.exists() or path.read_text(encoding="utf-8") != render(source):
            lines.append(f"{target} differs from {source}; run python tools/gen_module_utils.py and commit the copy")
    return lines


def main(argv: list[str]) -> int:
    try:
        if argv == ["--check"]:
            problems = drifted()
            for line in problems:
                print(line, file=sys.stderr)
            return 1 if problems else 0
        if argv:
            print("usage: gen_module_utils.py [--check]", file=sys.stderr)
            return 2
        for source, target in COPIES:
            (ROOT / target).write_text(render(source), encoding="utf-8")
        return 0
    except GenerationError as exc:
        print(f"gen_module_utils: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
