"""Fixtures of the Molecule tests: one release per session (the upgrade scenarios build theirs in test_upgrade.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from playbook_runs import build_release, require_tools


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One release for every scenario of the session (spur-release build, as an administrator does)."""
    require_tools(("community.general", "community.docker"))
    return build_release("0.1.0", tmp_path_factory.mktemp("molecule-release") / "release")
