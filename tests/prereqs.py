"""What a test needs from the machine (root, munged, PostgreSQL, setpriv, systemd-nspawn, Ansible tools...).

Locally a missing prerequisite skips the test and says how to install it. Under CI=true it fails the test
instead: a CI run that lost one of them must not pass by skipping what it was meant to prove.

    require(shutil.which("munged") is not None, "munged is not installed", "apt-get install munge")
    @needs(os.geteuid() == 0, "not running as root", "run the tests as root")   # a mark: tests, modules, params
"""

from __future__ import annotations

import os
import shutil

import pytest

MARK = "prereq"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require(condition: object, what: str, how_to_install: str) -> None:
    """Go on when condition holds; else skip (locally) or fail (CI=true) with one line: what is missing, how to fix."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"missing prerequisite under CI=true: {what} ({how_to_install})", pytrace=False)
    pytest.skip(f"{what} ({how_to_install})")


def needs(condition: object, what: str, how_to_install: str) -> pytest.MarkDecorator:
    """require() as a mark, checked as the test sets up (tests/conftest.py): for a test, a module's pytestmark or a
    pytest.param."""
    return getattr(pytest.mark, MARK)(bool(condition), what, how_to_install)


def check_marks(item: pytest.Item) -> None:
    for mark in item.iter_markers(MARK):
        require(*mark.args)


# The prerequisites more than one test file needs, named once.
def needs_root() -> pytest.MarkDecorator:
    return needs(os.geteuid() == 0, "not running as root", "run the tests as root, as .ci/run does")


def needs_tier2_hosts() -> pytest.MarkDecorator:
    """Tier 2 boots systemd-nspawn hosts in network namespaces (tools/testhosts)."""
    missing = [tool for tool in ("systemd-nspawn", "ip") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        return needs(False, "tier 2 boots systemd-nspawn hosts in network namespaces: not running as root",
                     "run the tests as root, as .ci/run does")
    return needs(not missing, f"tier 2 needs {' and '.join(missing)}, not installed",
                 "apt-get install systemd-container iproute2")


def require_tool(name: str, package: str) -> str:
    """The path of a command on PATH, or skip/fail saying which package has it."""
    path = shutil.which(name)
    require(path is not None, f"{name} is not installed", f"apt-get install {package}")
    assert path is not None
    return path
