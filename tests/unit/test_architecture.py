"""The import rules of docs/architecture.md, checked on every .py of daemons/spur_hpc and collection/plugins.

The rules are the doc's three tables (parts, never, exceptions), read from the doc itself: the page and this
test cannot disagree. Every import counts, at module level or inside a function, as do importlib.import_module
calls with a literal name.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
TREES = ("daemons/spur_hpc", "collection/plugins")
ALL_OF_SPUR = "spur_hpc"  # in the never table: every part held under daemons/spur_hpc/
# Import names of the two trees, as file paths.
ROOTS = {"spur_hpc": "daemons/spur_hpc", "ansible_collections.spur.cluster": "collection"}


@dataclass
class Rules:
    holds: dict[str, str] = field(default_factory=dict)  # path (a directory ends with /) -> part
    allowed: dict[str, set[str]] = field(default_factory=dict)
    never: dict[str, set[str]] = field(default_factory=dict)
    exceptions: dict[str, set[str]] = field(default_factory=dict)


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def table(text: str, marker: str) -> list[list[str]]:
    """The rows (cells) of the markdown table right after <!-- architecture: MARKER ... -->."""
    found = re.search(rf"<!-- architecture: {marker}\b[^\n]*-->\n((?:\|[^\n]*\n)+)", text)
    assert found, f"docs/architecture.md has no table after '<!-- architecture: {marker} ...-->'"
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in found.group(1).splitlines()]
    return rows[2:]  # header and --- line


def read_rules() -> Rules:
    text = DOC.read_text()
    rules = Rules()
    for part_cell, holds, _what, may in table(text, "parts"):
        (part,) = names(part_cell)
        for path in names(holds):
            rules.holds[path] = part
        rules.allowed[part] = set(names(may))
    spur_parts = {p for path, p in rules.holds.items() if path.startswith(ROOTS["spur_hpc"] + "/")}
    for target, kind in ((rules.never, "never"), (rules.exceptions, "exceptions")):
        for part_cell, what, _why in table(text, kind):
            for part in names(part_cell):
                for name in names(what):
                    target.setdefault(part, set()).update(spur_parts if name == ALL_OF_SPUR else {name})
    return rules


RULES = read_rules()


def part_of_path(rel: str) -> str | None:
    """The part holding a repository path (a file or a package directory): the longest matching row."""
    best = None
    for path, part in RULES.holds.items():
        if (rel == path or (path.endswith("/") and (rel + "/").startswith(path))) and (
            best is None or len(path) > len(best[0])
        ):
            best = (path, part)
    return best[1] if best else None


def module_path(module: str) -> str | None:
    """The repository path of an importable name of either tree, '' for a name there that is no file, None for
    the names of other trees."""
    for prefix, root in ROOTS.items():
        if module == prefix or module.startswith(prefix + "."):
            rel = root + module[len(prefix) :].replace(".", "/")
            if (REPO / rel / "__init__.py").is_file():
                return rel + "/__init__.py"  # importing a package runs its __init__.py
            if (REPO / (rel + ".py")).is_file():
                return rel + ".py"
            return ""  # inside a tree, but nothing there
    return None


def imported_modules(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, module) for every import in the file; 'from a import b' gives a.b when b is a module, else a."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if module_path(sub) else base))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                arg = arg.values[0]  # f"spur_hpc.cli.{name}": the literal part names the package
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((node.lineno, arg.value.rstrip(".")))
    return found


def package_of(rel: str) -> str:
    for prefix, root in ROOTS.items():
        if rel.startswith(root + "/"):
            dotted = prefix + "." + rel[len(root) + 1 : -3].replace("/", ".")
            return dotted.rsplit(".", 1)[0] if not dotted.endswith("__init__") else dotted[: -len(".__init__")]
    raise AssertionError(rel)


def python_files() -> list[str]:
    return sorted(
        str(p.relative_to(REPO)) for tree in TREES for p in (REPO / tree).rglob("*.py") if "__pycache__" not in p.parts
    )


def edges() -> tuple[dict[tuple[str, str], list[str]], list[str]]:
    """{(importer part, imported part): ['file:line', ...]} across parts, and the problems found on the way."""
    found: dict[tuple[str, str], list[str]] = {}
    problems = []
    for rel in python_files():
        src = part_of_path(rel)
        if src is None:
            problems.append(f"{rel}: no row of docs/architecture.md's parts table holds it; add one")
            continue
        tree = ast.parse((REPO / rel).read_text(), rel)
        for line, module in imported_modules(tree, package_of(rel)):
            path = module_path(module)
            if path is None:
                continue  # the standard library, Ansible or another third party
            dst = part_of_path(path) if path else None
            if dst is None:
                problems.append(f"{rel}:{line} imports {module}, which no row of the parts table holds")
            elif dst != src and f"{rel}:{line}" not in found.get((src, dst), []):  # once per line
                found.setdefault((src, dst), []).append(f"{rel}:{line}")
    return found, problems


EDGES, PROBLEMS = edges()


def test_every_file_and_every_import_belongs_to_a_part_of_the_table():
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_the_tables_agree_with_each_other():
    parts = set(RULES.allowed)
    named = {p for table_ in (RULES.allowed, RULES.never, RULES.exceptions) for k, v in table_.items() for p in {k, *v}}
    assert named <= parts, f"docs/architecture.md names parts that have no row: {sorted(named - parts)}"
    for part, forbidden in RULES.never.items():
        both = RULES.allowed[part] & forbidden
        assert not both, f"{part} may import {sorted(both)} in the parts table, which the never table forbids"
    for part, excepted in RULES.exceptions.items():
        unruled = excepted - RULES.never.get(part, set())
        assert not unruled, f"exception {part} -> {sorted(unruled)} breaks no never rule: list it under may import"


@pytest.mark.parametrize("part", sorted(RULES.allowed))
def test_a_part_imports_only_what_its_row_allows(part):
    allowed = RULES.allowed[part] | RULES.exceptions.get(part, set())
    wrong = [
        f"{part} -> {dst} ({', '.join(where)})"
        for (src, dst), where in EDGES.items()
        if src == part and dst not in allowed
    ]
    assert not wrong, "imports docs/architecture.md does not allow:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "part, forbidden",
    sorted((p, d) for p, ds in RULES.never.items() for d in ds if d not in RULES.exceptions.get(p, set())),
)
def test_a_dependency_that_must_never_exist_does_not(part, forbidden):
    where = EDGES.get((part, forbidden))
    assert not where, f"{part} must never import {forbidden}, and does: {', '.join(where)}"


def test_every_known_exception_still_exists_or_its_row_goes():
    gone = [
        f"{part} -> {imported}"
        for part, ds in RULES.exceptions.items()
        for imported in ds
        if (part, imported) not in EDGES
    ]
    assert not gone, (
        f"no longer imported: {', '.join(sorted(gone))}; remove them from docs/architecture.md's known exceptions"
    )


# What collection/plugins may import besides the standard library: the modules run on the managed host's Python.
COLLECTION_MAY_IMPORT = ("ansible", "ansible_collections.spur.cluster")


def outside_the_standard_library_and_ansible(rel: str) -> list[str]:
    tree = ast.parse((REPO / rel).read_text(), rel)
    return [
        f"{rel}:{line} imports {module}"
        for line, module in imported_modules(tree, package_of(rel))
        if module.split(".")[0] not in sys.stdlib_module_names
        and not any(module == name or module.startswith(name + ".") for name in COLLECTION_MAY_IMPORT)
    ]


def test_the_collection_imports_only_the_standard_library_ansible_and_itself():
    """No grpcio, protobuf or spur_hpc, not even in a try/except ImportError: a module that needs them fails on a
    host without a Spur release, and the copies generated from the daemons (tools/gen_module_utils.py) must not
    bring one in either."""
    wrong = [
        line
        for rel in python_files()
        if rel.startswith("collection/")
        for line in outside_the_standard_library_and_ansible(rel)
    ]
    assert not wrong, "collection/plugins runs on the managed host's own Python:\n" + "\n".join(wrong)


def test_imports_inside_functions_and_import_module_calls_count(tmp_path):
    source = "def f():\n    from spur_hpc.controller import state\n    importlib.import_module(f'spur_hpc.agent.{x}')\n"
    modules = [m for _, m in imported_modules(ast.parse(source), "spur_hpc.cli")]
    assert [part_of_path(module_path(m)) for m in modules] == ["controller", "agent"]
