"""Shared fixtures: real controller clusters, and their logs printed when a test fails."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from agents import cleanup as kill_agent_leftovers  # noqa: E402
from harness import ControllerCluster, cleanup_all, next_ip_base  # noqa: E402
from prereqs import MARK, check_marks  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARK}(condition, what, how_to_install): tests/prereqs.py")


def pytest_runtest_setup(item):
    check_marks(item)  # a missing prerequisite skips, or fails under CI=true


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for name in ("cluster", "make_cluster"):
            fixture = item.funcargs.get(name)
            clusters = getattr(fixture, "created", [fixture]) if fixture is not None else []
            for c in clusters:
                if isinstance(c, ControllerCluster):
                    report.sections.append((f"controller logs ({c.root})", c.logs()))


@pytest.fixture
def make_cluster(tmp_path):
    """make_cluster(n=3, start=True, **kw) -> ControllerCluster; all are stopped after the test."""

    class Factory:
        created: list[ControllerCluster] = []

        def __call__(self, n: int = 3, start: bool = True, **kw) -> ControllerCluster:
            c = ControllerCluster(tmp_path / f"cluster{len(self.created)}", n=n, ip_base=next_ip_base(n), **kw)
            self.created.append(c)
            if start:
                c.start()
            return c

    factory = Factory()
    factory.created = []
    yield factory
    cleanup_all()  # agents before the controllers they deregister from
    for c in factory.created:
        c.stop()


@pytest.fixture
def cluster(make_cluster):
    """A running 3-controller cluster with one leader."""
    return make_cluster(3)


@pytest.fixture(autouse=True)
def _own_runtime_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's commands keep their leader hint (cli/controller.py) in a runtime dir of the test's own,
    never in the user's, and never one another's."""
    directory = tmp_path_factory.mktemp("runtime")
    directory.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(directory))


@pytest.fixture(autouse=True)
def _no_agent_leftovers():
    """After every test: the supervisors and jobs of the agents it started are gone (they outlive spurd)."""
    yield
    kill_agent_leftovers()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A job's working directory."""
    path = tmp_path / "work"
    path.mkdir()
    return path
