"""What the tests that run the playbooks as a user does (Molecule scenarios, the demo) share.

- `require_tools`: molecule, ansible-playbook, spur-release and the collections are installed, or one line on
  how to install them.
- `build_release`: `spur-release build`, as an administrator does.
- `scratch_hosts`: a short directory under /tmp for the hosts' trees (unix socket paths must stay short), and
  afterwards the test hosts destroyed before it is deleted.
- `collections_path` / `ansible_env`: this checkout's collection as spur.cluster; an isolated Ansible
  environment (scratch HOME).
- `run_logged` / `run_molecule`: a command whose output goes to a log file, failing with the log's tail.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
FAILURE_TAIL_LINES = 150


def require_tools(collections: tuple[str, ...] = ("community.general",)) -> None:
    """Molecule and the collections a scenario uses must be installed; say how when they are not."""
    missing = [tool for tool in ("molecule", "ansible-playbook", "spur-release") if not (VENV_BIN / tool).exists()]
    imports = ", ".join(f"ansible_collections.{name}" for name in collections)
    probe = subprocess.run([sys.executable, "-c", f"import {imports}"], capture_output=True, check=False)
    if probe.returncode != 0:
        missing.append(f"the {' and '.join(collections)} collection{'s' if len(collections) > 1 else ''}")
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing from {VENV_BIN.parent}; install them with "
            f"{VENV_BIN / 'pip'} install 'ansible>=12,<13' molecule molecule-plugins",
            pytrace=False,
        )


def build_release(version: str, out: Path) -> Path:
    subprocess.run(
        [str(VENV_BIN / "spur-release"), "build", "--version", version, "--source", str(REPO), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


@contextlib.contextmanager
def scratch_hosts(prefix: str) -> Iterator[Path]:
    """/tmp/<prefix>-<hex>: short, because unix sockets live under each host's tree (one per running job)."""
    short = Path(f"/tmp/{prefix}-{secrets.token_hex(3)}")
    short.mkdir()
    try:
        yield short
    finally:
        # A scenario stopped before its destroy leaves test hosts whose roots are overlays over "/": stop them and
        # unmount first, or the rmtree below walks this machine's whole file system through them.
        subprocess.run(
            [sys.executable, str(REPO / "tools" / "testhosts" / "testhosts.py"), "--dir", str(short / "t"), "destroy"],
            capture_output=True,
            timeout=300,
            check=False,
        )
        shutil.rmtree(short, ignore_errors=True)


def collections_path(tmp_path: Path) -> Path:
    """tmp_path/collections, where ansible_collections/spur/cluster is this checkout's collection/."""
    spur = tmp_path / "collections" / "ansible_collections" / "spur"
    spur.mkdir(parents=True, exist_ok=True)
    if not (spur / "cluster").exists():
        (spur / "cluster").symlink_to(REPO / "collection")
    return tmp_path / "collections"


def ansible_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """os.environ with a scratch HOME, no ANSIBLE_CONFIG, and this checkout's collection as spur.cluster."""
    collections = collections_path(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    env.pop("ANSIBLE_CONFIG", None)
    env.update(
        HOME=str(home),
        ANSIBLE_HOME=str(home / ".ansible"),
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_FORCE_COLOR="0",
        PY_COLORS="0",
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    )
    return env


def run_logged(argv: list[str], log: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run argv from the checkout with stdout and stderr into `log`; (exit code, the whole output)."""
    with open(log, "w") as out:
        try:
            done = subprocess.run(
                argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            # pytest deletes old tmp dirs: the tail of the log is all that survives of a run that hung
            tail = failure_tail(log.read_text(errors="replace"))
            pytest.fail(f"{' '.join(argv[-3:])} ran past {timeout:.0f} s (log: {log})\n{tail}", pytrace=False)
    return done.returncode, log.read_text(errors="replace")


def failure_tail(output: str, lines: int = FAILURE_TAIL_LINES) -> str:
    """The failed tasks and their messages on one line (a CI summary keeps the first line and may cut the
    middle of a long message), then the last `lines` lines of the output."""
    return failures(output) + "\n" + "\n".join(output.splitlines()[-lines:])


def failures(output: str, width: int = 400, most: int = 4) -> str:
    """'failures: TASK [...] -> fatal: [host]: FAILED! => {...} | TASK [...] -> ...', one entry per failed task
    (each cut to `width` characters, at most `most`), or ''. A failure that a block rescued is listed too: the
    text does not say so, and the last entry is usually the one that ended the run; one that Ansible ignored
    (followed by "...ignoring") is not."""
    found: list[str] = []
    task, fatal, task_listed = "", "", ""
    for line in output.splitlines():
        if fatal and line.strip() != "...ignoring" and task_listed != task:
            found.append(f"{task} -> {fatal}"[:width])
            task_listed = task
        fatal = ""
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith("fatal: ["):
            fatal = line
    if fatal and task_listed != task:
        found.append(f"{task} -> {fatal}"[:width])
    if not found:
        return ""
    shown = found if len(found) <= most else found[:1] + ["..."] + found[-(most - 1):]
    return f"failures ({len(found)}): " + " | ".join(shown)


def run_molecule(name: str, env: dict[str, str], tmp_path: Path, timeout: float) -> tuple[str, float]:
    """`molecule test --scenario-name NAME`: (its output, seconds it took); the test fails on a non-zero exit."""
    log = tmp_path / f"molecule-{name}.log"
    started = time.monotonic()
    code, output = run_logged([str(VENV_BIN / "molecule"), "test", "--scenario-name", name], log, env, timeout)
    if code != 0:
        pytest.fail(
            f"molecule test -s {name} exited {code} (full log: {log}) {failure_tail(output)}", pytrace=False
        )
    return output, time.monotonic() - started
