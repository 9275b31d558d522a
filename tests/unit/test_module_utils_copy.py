"""module_utils keeps generated copies of daemon modules (tools/gen_module_utils.py): a drift fails here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "gen_module_utils.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_module_utils", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("source", "target"), _generator().COPIES)
def test_the_module_utils_copy_is_what_the_source_generates(source: str, target: str) -> None:
    copy = (ROOT / target).read_text(encoding="utf-8")
    assert copy == _generator().render(source), f"{target} drifted from {source}; run python tools/gen_module_utils.py"
    assert f"Generated from {source}" in copy.splitlines()[3]


def test_check_exits_1_and_names_the_copy_that_drifted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator()
    source, target = gen.COPIES[0]
    fake_root = tmp_path
    for path in (path for row in gen.COPIES for path in row):  # every row, so that only the edited one drifts
        (fake_root / path).parent.mkdir(parents=True, exist_ok=True)
        (fake_root / path).write_text((ROOT / path).read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(gen, "ROOT", fake_root)
    assert gen.main(["--check"]) == 0
    (fake_root / target).write_text((fake_root / target).read_text() + "HAND_EDIT = 1\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    [line] = gen.drifted()
    assert line == f"{target} differs from {source}; run python tools/gen_module_utils.py and commit the copy"


def test_the_command_line_check_passes_on_the_tree() -> None:
    result = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_source_import_the_collection_has_no_copy_of_is_refused(tmp_path: Path, monkeypatch) -> None:
    gen = _generator()
    (tmp_path / "daemons/spur_hpc").mkdir(parents=True)
    (tmp_path / "daemons/spur_hpc/model.py").write_text("from spur_hpc.conf import load\n", encoding="utf-8")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    with pytest.raises(gen.GenerationError, match=r"model.py:1: imports spur_hpc.conf \(load\)"):
        gen.render("daemons/spur_hpc/model.py")


def test_code_newer_than_python_3_8_is_refused(tmp_path: Path, monkeypatch) -> None:
    gen = _generator()
    (tmp_path / "daemons/spur_hpc").mkdir(parents=True)
    (tmp_path / "daemons/spur_hpc/model.py").write_text("match 1:\n    case 1:\n        pass\n", encoding="utf-8")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    with pytest.raises(gen.GenerationError, match="not Python 3.8 syntax"):
        gen.render("daemons/spur_hpc/model.py")
