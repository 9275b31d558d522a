"""Fixtures of the Molecule and role tests: one release per session, and an isolated Ansible environment."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from playbook_runs import ansible_env, build_release, require_tools, scratch_hosts


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One release for every scenario of the session (spur-release build, as an administrator does)."""
    require_tools(("community.general", "community.docker"))
    return build_release("0.1.0", tmp_path_factory.mktemp("molecule-release") / "release")


@pytest.fixture
def molecule_env(tmp_path: Path, release: Path):
    """Environment for one `molecule test`: scratch HOME, the collection path, short host paths."""
    with scratch_hosts("spm") as short:
        yield ansible_env(
            tmp_path,
            SPUR_RELEASE_SRC=str(release),
            SPUR_LOCAL_ROOT=str(short / "h"),
            # A loopback block of this run's own, clear of the demo (127.0.1.x) and of leftovers of other runs.
            SPUR_LOCAL_NET=f"127.0.{2 + os.getpid() % 200}",
            SPUR_TESTHOSTS_DIR=str(short / "t"),
            SPUR_TESTHOSTS_PREFIX=f"sp{secrets.token_hex(2)}",
        )
