"""Unit tests of the spur.cluster module spur_release.

Main() with injected arguments, asserting on the JSON it returns. Probes are real HTTP servers on 127.0.0.1
(collection_fakes.ProbeServer); the gRPC side is FakeController (the fixtures are in conftest.py).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

from ansible_collections.spur.cluster.plugins.module_utils import spur_release
from ansible_collections.spur.cluster.plugins.modules import spur_release as spur_release_module
from collection_helpers import run_module

# ------------------------------------------------------------------ spur_release


def fake_release(root: Path, version: str, build: str, max_level: int = 2) -> Path:
    """A release directory as far as the module looks at it: release.json and a wheel with wal.py."""
    root.mkdir(parents=True)
    wheel = f"spur_hpc-{version}-py3-none-any.whl"
    with zipfile.ZipFile(root / wheel, "w") as archive:
        archive.writestr("spur_hpc/controller/wal.py", f"MAX_WAL_LEVEL = {max_level}\n")
    (root / "release.json").write_text(json.dumps({"version": version, "build": build, "wheel": wheel}))
    return root


def fake_installer(prefix: Path):
    """Does what the release's installer does to PREFIX (links and markers), without building a venv."""

    def link(name: str, release_id: str) -> None:
        tmp = prefix / f".{name}.tmp"
        os.symlink(f"releases/{release_id}", tmp)
        os.replace(tmp, prefix / name)

    def runner(self, action, release):
        current = spur_release.link_target(str(prefix / "current"))
        if action == "install":
            target = prefix / "releases" / release["release_id"]
            if current == release["release_id"]:
                return {"ok": True, "changed": False}
            target.mkdir(parents=True, exist_ok=True)
            (target / spur_release.MARKER).write_text("{}")
            link("current", release["release_id"])
            if current:
                link("previous", current)
            return {"ok": True, "changed": True}
        previous = spur_release.link_target(str(prefix / "previous"))
        link("current", previous)
        link("previous", current)
        return {"ok": True, "changed": True}

    return runner


def test_release_install_four_times_then_roll_back(tmp_path, monkeypatch):
    prefix = tmp_path / "opt"
    monkeypatch.setattr(spur_release.ReleaseInstall, "run_installer", fake_installer(prefix))
    a = fake_release(tmp_path / "a", "1.0.0", "aaa")
    b = fake_release(tmp_path / "b", "1.1.0", "bbb", max_level=3)
    for src in (a, b):
        args = dict(src=str(src), prefix=str(prefix))
        runs = [run_module(spur_release_module, args, check_mode=c, diff=True) for c in (True, False, True, False)]
        assert [r["changed"] for r in runs] == [True, True, False, False], runs
        assert runs[0]["current"] == runs[1]["current"] == runs[3]["current"]
    assert runs[1]["release_id"] == "1.1.0-bbb" and runs[1]["max_wal_level"] == 3
    assert runs[1]["previous"] == "1.0.0-aaa" and runs[1]["diff"]["before"]["current"] == "1.0.0-aaa"
    back = dict(src=str(b), prefix=str(prefix), state="rolled_back")
    runs = [run_module(spur_release_module, back, check_mode=c) for c in (True, False, True, False)]
    assert [r["changed"] for r in runs] == [True, True, False, False]
    assert runs[0]["current"] == "1.0.0-aaa" and runs[3]["current"] == "1.0.0-aaa"
    assert runs[3]["previous"] == "1.1.0-bbb"


def test_release_refusals(tmp_path, monkeypatch):
    prefix = tmp_path / "opt"
    monkeypatch.setattr(spur_release.ReleaseInstall, "run_installer", fake_installer(prefix))
    a = fake_release(tmp_path / "a", "1.0.0", "aaa")
    run_module(spur_release_module, dict(src=str(a), prefix=str(prefix)))
    result = run_module(spur_release_module, dict(src=str(a), prefix=str(prefix), state="rolled_back"))
    assert result["failed"] and "no complete previous release" in result["msg"]
    result = run_module(spur_release_module, dict(src=str(tmp_path), prefix=str(prefix)))
    assert result["failed"] and "is not a release directory" in result["msg"] and "src" in result["msg"]
    result = run_module(spur_release_module, dict(release="1.0.0-aaa", prefix=str(prefix)))
    assert result["failed"] and "src" in result["msg"]  # state=current needs src
    result = run_module(spur_release_module, dict(src=str(a), prefix="relative/path"))
    assert result["failed"] and "absolute" in result["msg"]
