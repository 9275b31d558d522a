# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Install a release directory on this host, or roll back to the release before it.

The layout (PREFIX/releases/<version>-<build>/, PREFIX/current and PREFIX/previous links, command links) is
owned by spur_hpc.release.install. Rather than copy it, the module runs the installer that ships inside the
release's own wheel, so a release always installs with the code that knows its format; the host needs only
a Python 3.11+. Observing (for check mode and diffs) reads the same files the installer writes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile

from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurError, SpurInvalid, SpurRefused

RELEASE_FILE = "release.json"
MARKER = "spur-release.json"  # written into releases/<id>/ once its venv is complete

# Runs in a child interpreter with the release's wheel first on sys.path; prints one JSON object.
_RUNNER = r"""
import json, sys
from pathlib import Path
args = json.loads(sys.argv[1])
if args["wheel"]:
    sys.path.insert(0, args["wheel"])
from spur_hpc.release import install
from spur_hpc.release.manifest import ReleaseError
quiet = lambda message: None
try:
    if args["action"] == "install":
        done = install.install_release(Path(args["src"]), Path(args["prefix"]),
                                       Path(args["bin_dir"]) if args["bin_dir"] else None,
                                       args["python"] or None, log=quiet)
        out = {"ok": True, "changed": done.changed, "release_id": done.release_id, "message": done.message}
    elif args["action"] == "switch":
        done = install.switch_release(Path(args["prefix"]), args["release_id"],
                                      Path(args["bin_dir"]) if args["bin_dir"] else None, log=quiet)
        out = {"ok": True, "changed": done.changed, "release_id": done.release_id, "message": done.message}
    elif args["action"] == "stage":
        if not hasattr(install, "stage_release"):
            raise ReleaseError("this release's installer cannot stage a release beside the running one; "
                               "build the release from a newer tree")
        done = install.stage_release(Path(args["src"]), Path(args["prefix"]), args["python"] or None, log=quiet)
        out = {"ok": True, "changed": done.changed, "release_id": done.release_id, "message": done.message}
    else:
        old, new = install.rollback(Path(args["prefix"]), log=quiet)
        out = {"ok": True, "changed": True, "message": "rolled back from %s to %s" % (old, new)}
except ReleaseError as exc:
    out = {"ok": False, "error": str(exc)}
print(json.dumps(out))
"""


class SpurReleaseError(SpurError):
    """The release installer refused or failed; its message names the fix."""


def read_release(src: str) -> dict:
    """release.json of a release directory (version, build, wheel, python), plus its id and WAL level."""
    path = os.path.join(src, RELEASE_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise SpurInvalid("%s is not a release directory (%s: %s); build one with spur-release build" % (
            src, path, exc.strerror), override="src") from None
    except ValueError as exc:
        raise SpurInvalid("%s is not valid JSON (%s); build the release again" % (path, exc), override="src") from None
    missing = [k for k in ("version", "build", "wheel") if not data.get(k)]
    if missing:
        raise SpurInvalid("%s lacks %s; build the release again" % (path, ", ".join(missing)), override="src")
    wheel = os.path.join(src, data["wheel"])
    return dict(
        release_id="%s-%s" % (data["version"], data["build"]),
        version=data["version"],
        build=data["build"],
        python=data.get("python"),
        wheel=wheel,
        max_wal_level=wheel_max_wal_level(wheel),
    )


def wheel_max_wal_level(wheel: str) -> int | None:
    """The highest WAL level the release's controllers read (MAX_WAL_LEVEL in its controller/wal.py)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            text = archive.read("spur_hpc/controller/wal.py").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    match = re.search(r"^MAX_WAL_LEVEL\s*=\s*(\d+)", text, re.M)
    return int(match.group(1)) if match else None


def link_target(path: str) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def layout(prefix: str) -> dict:
    """What PREFIX holds: current, previous, and the complete releases."""
    releases = os.path.join(prefix, "releases")
    complete = []
    if os.path.isdir(releases):
        complete = sorted(e for e in os.listdir(releases) if os.path.isfile(os.path.join(releases, e, MARKER)))
    return dict(current=link_target(os.path.join(prefix, "current")),
                previous=link_target(os.path.join(prefix, "previous")), installed=complete)


class ReleaseInstall:
    """spur_release: state current (install src and switch to it), staged (install src beside the running
    release, switch nothing) or rolled_back (leave src for previous)."""

    def __init__(self, params: dict, check_mode: bool = False, diff: bool = False, runner=None) -> None:
        self.params = params
        self.check_mode = check_mode
        self.diff = diff
        self.runner = runner or self.run_installer
        prefix = params["prefix"]
        if not os.path.isabs(prefix):
            raise SpurInvalid("prefix %r must be an absolute path" % prefix, override="prefix")

    def run(self) -> dict:
        params = self.params
        prefix = params["prefix"]
        release = read_release(params["src"]) if params.get("src") else None
        release_id = release["release_id"] if release else params["release"]
        before = layout(prefix)
        if params["state"] == "current":
            changed = before["current"] != release_id or release_id not in before["installed"]
            if not self.check_mode:
                # A staged release (complete in the prefix) was verified when it was staged: only the links move.
                staged = release_id in before["installed"] and self.installer_can("switch_release", release)
                changed = self.runner("switch" if staged else "install", release)["changed"]
        elif params["state"] == "staged":
            changed = release_id not in before["installed"]
            if not self.check_mode:
                changed = self.runner("stage", release)["changed"]
        else:
            changed = before["current"] == release_id
            if changed and not (before["previous"] and before["previous"] in before["installed"]):
                raise SpurRefused("%s has no complete previous release to roll back to from %s" % (
                    prefix, release_id))
            if changed and not self.check_mode:
                self.runner("rollback", release)
        after = layout(prefix)
        if self.check_mode and changed:
            after = self.predict(before, release_id)
        result = dict(changed=changed, release_id=release_id, prefix=prefix, current=after["current"],
                      previous=after["previous"], installed=after["installed"])
        if release:
            result.update(version=release["version"], build=release["build"],
                          max_wal_level=release["max_wal_level"])
        if self.diff:
            result["diff"] = dict(before=dict(current=before["current"], previous=before["previous"]),
                                  after=dict(current=after["current"], previous=after["previous"]))
        return result

    def predict(self, before: dict, release_id: str) -> dict:
        if self.params["state"] == "staged":
            return dict(before, installed=sorted(set(before["installed"]) | {release_id}))
        if self.params["state"] == "current":
            previous = before["current"] if before["current"] not in (None, release_id) else before["previous"]
            installed = sorted(set(before["installed"]) | {release_id})
            return dict(current=release_id, previous=previous, installed=installed)
        return dict(current=before["previous"], previous=before["current"], installed=before["installed"])

    def run_installer(self, action: str, release: dict | None) -> dict:
        """Run the release's own installer (from its wheel) in a child interpreter."""
        params = self.params
        if release is None:
            # Rolling back by id: the installed release's own code does it.
            wheel = os.path.join(params["prefix"], "current", "lib")
            release = dict(wheel=self.installed_site_packages(wheel))
        python = params.get("python") or sys.executable
        wheel = release["wheel"]
        if action == "switch":
            # The staged release's own venv has its installer compiled; from the wheel, zipimport would compile
            # it from source in every call.
            python, wheel = os.path.join(params["prefix"], "releases", release["release_id"], "bin", "python"), None
        args = dict(action=action, wheel=wheel, src=params.get("src"), prefix=params["prefix"],
                    bin_dir=params.get("bin_dir"), python=params.get("python"),
                    release_id=release.get("release_id"))
        try:
            done = subprocess.run([python, "-c", _RUNNER, json.dumps(args)], capture_output=True, text=True,
                                  check=False, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        except OSError as exc:
            raise SpurInvalid("cannot run %s (%s)" % (python, exc.strerror), override="python") from None
        lines = done.stdout.strip().splitlines()
        try:
            out = json.loads(lines[-1]) if lines else None
        except ValueError:
            out = None
        if not isinstance(out, dict):
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise SpurReleaseError("the release installer failed (exit %d): %s" % (done.returncode, tail))
        if not out.get("ok"):
            raise SpurReleaseError(out.get("error") or "the release installer failed")
        return out

    @staticmethod
    def installer_can(function: str, release: dict) -> bool:
        """Whether the installer in the release's wheel has this function (releases built before it do not)."""
        try:
            with zipfile.ZipFile(release["wheel"]) as archive:
                text = archive.read("spur_hpc/release/install.py").decode("utf-8", "replace")
        except (OSError, KeyError, zipfile.BadZipFile):
            return False
        return re.search(r"^def %s\(" % re.escape(function), text, re.M) is not None

    @staticmethod
    def installed_site_packages(lib: str) -> str:
        """site-packages of PREFIX/current (where spur_hpc is installed), for a rollback given by id."""
        try:
            for entry in sorted(os.listdir(lib)):
                candidate = os.path.join(lib, entry, "site-packages")
                if os.path.isdir(os.path.join(candidate, "spur_hpc", "release")):
                    return candidate
        except OSError:
            pass
        raise SpurRefused("%s holds no installed spur_hpc to roll back with; give src instead of release" % lib,
                          override="src")
