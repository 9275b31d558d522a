"""Fixtures of the Molecule and role tests: one release per session, and an isolated Ansible environment."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def require_tools() -> None:
    """Molecule and the collections the scenarios use must be installed; say how when they are not."""
    missing = [tool for tool in ("molecule", "ansible-playbook", "spur-release") if not (VENV_BIN / tool).exists()]
    probe = subprocess.run(
        [sys.executable, "-c", "import ansible_collections.community.general, ansible_collections.community.docker"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        missing.append("the community.general and community.docker collections")
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing from {VENV_BIN.parent}; install them with "
            f"{VENV_BIN / 'pip'} install 'ansible>=12,<13' molecule molecule-plugins",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One release for every scenario of the session (spur-release build, as an administrator does)."""
    require_tools()
    out = tmp_path_factory.mktemp("molecule-release") / "release"
    subprocess.run(
        [str(VENV_BIN / "spur-release"), "build", "--version", "0.1.0", "--source", str(REPO), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


@pytest.fixture
def molecule_env(tmp_path: Path, release: Path):
    """Environment for one `molecule test`: scratch HOME, the collection path, short host paths."""
    collections = tmp_path / "collections" / "ansible_collections" / "spur"
    collections.mkdir(parents=True)
    (collections / "cluster").symlink_to(REPO / "collection")
    home = tmp_path / "home"
    home.mkdir()
    # Unix sockets live under each host's tree (supervisord's, one per running job): keep that path short.
    short = Path(f"/tmp/spm-{secrets.token_hex(3)}")
    short.mkdir()
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        ANSIBLE_HOME=str(home / ".ansible"),
        ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"),
        ANSIBLE_FORCE_COLOR="0",
        PY_COLORS="0",
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        SPUR_RELEASE_SRC=str(release),
        SPUR_LOCAL_ROOT=str(short / "h"),
        # A loopback block of this run's own, clear of the demo (127.0.1.x) and of leftovers of other runs.
        SPUR_LOCAL_NET=f"127.0.{2 + os.getpid() % 200}",
        SPUR_TESTHOSTS_DIR=str(short / "t"),
        SPUR_TESTHOSTS_PREFIX=f"sp{secrets.token_hex(2)}",
    )
    env.pop("ANSIBLE_CONFIG", None)
    yield env
    # A scenario stopped before its destroy leaves test hosts whose roots are overlays over "/": stop them and
    # unmount first, or the rmtree below walks this machine's whole file system through them.
    subprocess.run([sys.executable, str(REPO / "tools" / "testhosts" / "testhosts.py"), "--dir", str(short / "t"),
                    "destroy"], capture_output=True, timeout=300, check=False)
    shutil.rmtree(short, ignore_errors=True)
