"""tests/prereqs.py: a missing prerequisite skips a test locally and fails it under CI=true, in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

SAMPLE = '''
import pytest
from prereqs import needs, require

pytestmark = needs(True, "never missing", "nothing to do")


def test_call():
    require(False, "frobd is not installed", "apt-get install frob")


@needs(False, "not running as a frob", "become a frob")
def test_mark():
    pass


@pytest.mark.parametrize("kind", ["plain", pytest.param("frob", marks=needs(False, "no frob here", "get one"))])
def test_param(kind):
    pass
'''


def run_sample(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(TESTS)
    # tests/conftest.py as a plugin: the sample sits outside tests/ so that pytest does not collect it there.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-rsf", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_locally_a_missing_prerequisite_skips_and_says_how_to_install_it(tmp_path: Path) -> None:
    proc = run_sample(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 3 skipped" in proc.stdout, proc.stdout
    assert "frobd is not installed (apt-get install frob)" in proc.stdout
    assert "not running as a frob (become a frob)" in proc.stdout
    assert "no frob here (get one)" in proc.stdout


@pytest.mark.parametrize("ci", ["true", "TRUE", "1"])
def test_under_ci_a_missing_prerequisite_fails_the_run(tmp_path: Path, ci: str) -> None:
    proc = run_sample(tmp_path, ci)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # In the test's body a failure, in a mark (checked at setup) an error: either fails the run.
    assert "1 failed, 1 passed, 2 errors" in proc.stdout, proc.stdout
    assert "missing prerequisite under CI=true: frobd is not installed (apt-get install frob)" in proc.stdout
    assert "missing prerequisite under CI=true: not running as a frob (become a frob)" in proc.stdout
    assert "Traceback" not in proc.stdout


def test_ci_false_is_local(tmp_path: Path) -> None:
    assert "1 passed, 3 skipped" in run_sample(tmp_path, "false").stdout
