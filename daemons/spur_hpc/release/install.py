"""Install a release into a prefix, switch between releases atomically, roll back.

Layout under PREFIX (every path an option; tests use temporary directories):
  releases/<version>-<build>/   one venv per release; spur-release.json inside marks it complete
  current -> releases/<id>      the active release (a relative symlink, replaced by rename)
  previous -> releases/<id>     the release before it, kept for rollback
  bin/<command> -> PREFIX/current/bin/<command>   (or --bin-dir)
  .lock                         serialises installs and rollbacks

The release directory is verified before anything on disk changes. The venv is built at its final path
(venvs embed their path) and only counts once its marker is written; a failure removes it, and a failure
after the switch switches back. Installing the build that is already current changes nothing: the
release id is the version plus the content hash, so the content decides, not the version string alone.
"""

from __future__ import annotations

import base64
import csv
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spur_hpc.release import processes
from spur_hpc.release.manifest import (
    SUMS_FILE,
    WHEELS_DIR,
    ReleaseError,
    ReleaseInfo,
    read_checksums,
    verify,
    write_atomically,
)

MARKER = "spur-release.json"
DEFAULT_PREFIX = "/opt/spur"
# How long an install waits for another one into the same prefix (hosts sharing it over NFS install at once).
LOCK_WAIT_SECS = 600.0


@dataclass(frozen=True)
class InstallResult:
    release_id: str
    changed: bool
    previous: str | None
    message: str


def releases_dir(prefix: Path) -> Path:
    return prefix / "releases"


def link_target(link: Path) -> str | None:
    """Release id a PREFIX/current or PREFIX/previous link points at, None when absent."""
    try:
        return Path(os.readlink(link)).name
    except (FileNotFoundError, OSError):
        return None


def installed_info(prefix: Path, release_id: str) -> ReleaseInfo | None:
    """The release's info when its venv is complete (marker written), else None."""
    marker = releases_dir(prefix) / release_id / MARKER
    try:
        return ReleaseInfo.from_json(marker.read_text(encoding="utf-8"), str(marker))
    except (OSError, ReleaseError):
        return None


def switch_link(link: Path, release_id: str) -> None:
    """Point link at releases/<id> atomically: a new symlink under a temporary name, renamed over the old."""
    temp = link.with_name(f".{link.name}.tmp-{os.getpid()}")
    if temp.is_symlink() or temp.exists():
        temp.unlink()
    os.symlink(f"releases/{release_id}", temp)
    os.replace(temp, link)
    _fsync_dir(link.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def prefix_lock(prefix: Path, wait: float = LOCK_WAIT_SECS, log: Callable[[str], None] = print) -> Iterator[None]:
    """Hold PREFIX/.lock; wait up to `wait` seconds for another install (hosts sharing one prefix over NFS)."""
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as handle:
        deadline = time.monotonic() + wait
        said = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ReleaseError(
                        f"another spur-release is still installing into {prefix} after {wait:.0f} s; "
                        "wait for it to finish"
                    ) from None
                if not said:
                    log(f"waiting for another spur-release installing into {prefix}")
                    said = True
                time.sleep(0.2)
        yield


def _check_python(python: str, info: ReleaseInfo) -> None:
    result = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ReleaseError(f"cannot run {python}; pass --python with a Python {info.python} interpreter")
    found = result.stdout.strip()
    if found != info.python:
        raise ReleaseError(
            f"release {info.release_id} was built for Python {info.python} but {python} is {found}; "
            f"pass --python with a Python {info.python} interpreter or build the release on this host"
        )


def _check_links(bin_dir: Path, prefix: Path, commands: tuple[str, ...]) -> None:
    """Refuse (before any change) to replace a command in bin_dir that is not our own link."""
    for command in commands:
        path = bin_dir / command
        if (path.exists() or path.is_symlink()) and not path.is_symlink():
            raise ReleaseError(f"{path} exists and is not a link into {prefix}; move it away or pass another --bin-dir")


def _link_commands(bin_dir: Path, prefix: Path, commands: tuple[str, ...]) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for command in commands:
        target = str(prefix / "current" / "bin" / command)
        path = bin_dir / command
        if path.is_symlink() and os.readlink(path) == target:
            continue
        temp = path.with_name(f".{command}.tmp-{os.getpid()}")
        if temp.is_symlink() or temp.exists():
            temp.unlink()
        os.symlink(target, temp)
        os.replace(temp, path)


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        raise ReleaseError(f"{what} failed (exit {result.returncode}): {tail}")


def _bundled_pip() -> str | None:
    """The pip wheel this interpreter's ensurepip carries (Debian keeps it in /usr/share/python-wheels), or None.

    pip runs from its wheel, so a release's venv is made without pip and filled by that pip: seeding pip into
    every venv (ensurepip) took most of an install's time, six times over when a rolling upgrade stages six
    hosts of one machine at once.
    """
    try:
        import ensurepip

        places = [Path(ensurepip.__file__).parent / "_bundled"]
    except ImportError:
        places = []
    places.append(Path("/usr/share/python-wheels"))
    for place in places:
        found = sorted(place.glob("pip-*-py3-none-any.whl")) if place.is_dir() else []
        if found:
            return str(found[-1])
    return None


def _wheel_sums(release_dir: Path) -> dict[str, str]:
    """File name -> sha256 of each dependency wheel of a verified release (from its SHA256SUMS)."""
    sums = read_checksums((release_dir / SUMS_FILE).read_text(), str(release_dir / SUMS_FILE))
    return {rel.rsplit("/", 1)[1]: digest for rel, digest in sums.items() if rel.startswith(f"{WHEELS_DIR}/")}


def _venv_identity(venv: Path) -> tuple[str, str] | None:
    """(home, version) from a venv's pyvenv.cfg: the base interpreter its compiled packages were installed for."""
    try:
        lines = (venv / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return None
    cfg = {key.strip(): value.strip() for key, _, value in (line.partition("=") for line in lines)}
    return (cfg.get("home", ""), cfg.get("version", cfg.get("version_info", "")))


def _site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python*/site-packages"))
    return found[0] if len(found) == 1 else None


def _dist_key(name: str, version: str) -> tuple[str, str]:
    return (re.sub(r"[-_.]+", "-", name).lower(), version)


def _copy_dist(record: Path, source: Path, target: Path) -> bool:
    """Copy one installed distribution (the files its RECORD lists, each checked against the hash RECORD gives)
    from site-packages source to target; False, with nothing left behind, when it cannot be copied whole."""
    rows = list(csv.reader(io.StringIO(record.read_text())))
    paths = [row[0] for row in rows if row]
    if any(Path(rel).is_absolute() or ".." in Path(rel).parts for rel in paths):
        return False  # files outside site-packages (scripts): their shebangs name the other venv
    copied: list[Path] = []
    try:
        for row in rows:
            if not row:
                continue
            rel, digest = row[0], row[1] if len(row) > 1 else ""
            data = (source / rel).read_bytes()
            if digest:
                algorithm, _, expected = digest.partition("=")
                actual = base64.urlsafe_b64encode(hashlib.new(algorithm, data).digest()).rstrip(b"=").decode()
                if actual != expected:
                    raise ValueError(f"{source / rel} differs from its RECORD")
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            copied.append(dest)
            shutil.copystat(source / rel, dest)  # the mtime a .pyc was compiled against
    except (OSError, ValueError):
        for dest in copied:
            dest.unlink(missing_ok=True)
        return False
    return True


def _reuse_installed_dependencies(
    prefix: Path, target: Path, wheels: dict[str, str], log: Callable[[str], None]
) -> list[str]:
    """Copy into the new venv at target each dependency a complete release of the same prefix installed from the
    very same wheel file (same name and sha256) for the same base interpreter; pip then finds them installed and
    unpacks only the rest. A release's dependencies seldom change, and unpacking and compiling them (grpcio,
    cryptography, protobuf, psycopg) was most of an install's time, once per host when a rolling upgrade stages
    many hosts of one machine. -> the wheel files reused."""
    identity, site = _venv_identity(target), _site_packages(target)
    if identity is None or site is None:
        return []
    current = link_target(prefix / "current")
    # The running release first, then the others by name.
    others = sorted(
        (p.name for p in releases_dir(prefix).iterdir() if p.is_dir() and p != target),
        key=lambda release_id: (release_id != current, release_id),
    )
    reused: list[str] = []
    for release_id in others:
        venv = releases_dir(prefix) / release_id
        try:
            built_from = json.loads((venv / MARKER).read_text()).get("wheels", {})
        except (OSError, ValueError):
            continue  # incomplete, or installed before its marker listed wheels
        source = _site_packages(venv)
        if not isinstance(built_from, dict) or source is None or _venv_identity(venv) != identity:
            continue
        installed = {}
        for dist_info in source.glob("*.dist-info"):
            name, _, version = dist_info.name[: -len(".dist-info")].partition("-")
            installed[_dist_key(name, version)] = dist_info
        for wheel, digest in wheels.items():
            if wheel in reused or built_from.get(wheel) != digest:
                continue
            name, version = wheel.split("-")[:2]
            dist_info = installed.get(_dist_key(name, version))
            if dist_info is not None and _copy_dist(dist_info / "RECORD", source, site):
                reused.append(wheel)
    if reused:
        log(f"reused {len(reused)} of {len(wheels)} dependency wheels already installed in {releases_dir(prefix)}")
    return reused


def _build_venv(
    release_dir: Path, info: ReleaseInfo, target: Path, python: str, prefix: Path, log: Callable[[str], None]
) -> None:
    pip_wheel = _bundled_pip()
    venv = [python, "-m", "venv", *(["--without-pip"] if pip_wheel else []), str(target)]
    _run(venv, f"creating the venv {target}")
    wheels = _wheel_sums(release_dir)
    _reuse_installed_dependencies(prefix, target, wheels, log)
    venv_python = str(target / "bin" / "python")
    _run(
        [
            venv_python,
            *([f"{pip_wheel}/pip"] if pip_wheel else ["-m", "pip"]),
            "--disable-pip-version-check",
            "--no-input",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            str(release_dir / WHEELS_DIR),
            str(release_dir / info.wheel),
        ],
        f"installing {info.wheel} into {target}",
    )
    check = subprocess.run(
        [venv_python, "-c", "from spur_hpc import buildinfo; print(buildinfo.version(), buildinfo.build())"],
        capture_output=True,
        text=True,
        check=False,
    )
    reported = check.stdout.split()
    if check.returncode != 0 or reported != [info.version, info.build]:
        raise ReleaseError(
            f"the installed release reports {' '.join(reported) or check.stderr.strip()[-200:]} "
            f"instead of {info.version} {info.build}; the wheel is broken, rebuild the release"
        )
    missing = [c for c in info.commands if not (target / "bin" / c).exists()]
    if missing:
        raise ReleaseError(f"the installed release lacks the commands {', '.join(missing)}; rebuild the release")
    record = json.loads(info.to_json())
    record["installed"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record["wheels"] = wheels  # what a later release may reuse from this venv (_reuse_installed_dependencies)
    write_atomically(target / MARKER, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())


def install_release(
    release_dir: Path,
    prefix: Path = Path(DEFAULT_PREFIX),
    bin_dir: Path | None = None,
    python: str | None = None,
    log: Callable[[str], None] = print,
) -> InstallResult:
    release_dir, prefix = Path(release_dir).resolve(), Path(prefix).absolute()
    bin_dir = Path(bin_dir).absolute() if bin_dir else prefix / "bin"
    python = python or _base_python()
    info = verify(release_dir)  # before anything changes on disk
    _check_python(python, info)
    _check_links(bin_dir, prefix, info.commands)
    with prefix_lock(prefix, log=log):
        current = link_target(prefix / "current")
        if current == info.release_id and installed_info(prefix, current) is not None:
            _link_commands(bin_dir, prefix, info.commands)
            return InstallResult(
                info.release_id, False, current, f"release {info.release_id} is already current; nothing to do"
            )
        target = releases_dir(prefix) / info.release_id
        fresh = _build_if_missing(release_dir, info, prefix, target, python, log, "installing")
        switch_link(prefix / "current", info.release_id)
        try:
            _link_commands(bin_dir, prefix, info.commands)
        except OSError as exc:
            _undo_switch(prefix, current, info.release_id if fresh else None)
            raise ReleaseError(
                f"linking commands into {bin_dir} failed ({exc.strerror}); switched back to {current or 'nothing'}"
            ) from None
        if current and current != info.release_id:
            switch_link(prefix / "previous", current)
        _prune(prefix, log)
    return InstallResult(
        info.release_id,
        True,
        current,
        f"switched {prefix}/current to {info.release_id}" + (f" (previous: {current})" if current else ""),
    )


def _build_if_missing(
    release_dir: Path, info: ReleaseInfo, prefix: Path, target: Path, python: str, log: Callable[[str], None], verb: str
) -> bool:
    """Build the release's venv at target unless the prefix already holds it complete; True when built.
    Called under the prefix lock; an interrupted earlier build is removed first, a failed one removed after."""
    if installed_info(prefix, info.release_id) is not None:
        return False
    if target.exists():
        shutil.rmtree(target)  # the remains of an interrupted install
    releases_dir(prefix).mkdir(parents=True, exist_ok=True)
    log(f"{verb} {info.release_id} into {target}")
    try:
        _build_venv(release_dir, info, target, python, prefix, log)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return True


def stage_release(
    release_dir: Path,
    prefix: Path = Path(DEFAULT_PREFIX),
    python: str | None = None,
    log: Callable[[str], None] = print,
) -> InstallResult:
    """Install a release beside the running one without switching to it (a rolling upgrade's first phase).

    Nothing that runs is touched: no link changes and nothing is pruned. A release already complete in the
    prefix is a no-op; either way every command of the staged venv must answer --version with its build.
    """
    release_dir, prefix = Path(release_dir).resolve(), Path(prefix).absolute()
    python = python or _base_python()
    info = verify(release_dir)
    _check_python(python, info)
    target = releases_dir(prefix) / info.release_id
    with prefix_lock(prefix, log=log):
        # What the switch would prune, pruned now (never current, previous, this one or a release in use), so
        # that the switch in the daemon's turn only moves links.
        _prune(prefix, log, keep=info.release_id)
        fresh = _build_if_missing(release_dir, info, prefix, target, python, log, "staging")
    check_commands(target, info)
    message = f"staged {info.release_id} in {target}" if fresh else f"release {info.release_id} is already staged"
    return InstallResult(info.release_id, fresh, link_target(prefix / "current"), message)


def switch_release(
    prefix: Path, release_id: str, bin_dir: Path | None = None, log: Callable[[str], None] = print
) -> InstallResult:
    """Make a staged (complete) release current: only the links move, nothing is built, verified or pruned.

    The release was verified and checked when it was staged (stage_release); its marker says it is complete.
    """
    prefix = Path(prefix).absolute()
    bin_dir = Path(bin_dir).absolute() if bin_dir else prefix / "bin"
    info = installed_info(prefix, release_id)
    if info is None:
        raise ReleaseError(f"{release_id} is not staged in {prefix}: stage it first (spur-release install, or stage)")
    _check_links(bin_dir, prefix, info.commands)
    with prefix_lock(prefix, log=log):
        current = link_target(prefix / "current")
        if current == release_id:
            _link_commands(bin_dir, prefix, info.commands)
            return InstallResult(release_id, False, current, f"release {release_id} is already current; nothing to do")
        switch_link(prefix / "current", release_id)
        try:
            _link_commands(bin_dir, prefix, info.commands)
        except OSError as exc:
            _undo_switch(prefix, current, None)
            raise ReleaseError(
                f"linking commands into {bin_dir} failed ({exc.strerror}); switched back to {current or 'nothing'}"
            ) from None
        if current:
            switch_link(prefix / "previous", current)
    return InstallResult(
        release_id,
        True,
        current,
        f"switched {prefix}/current to {release_id}" + (f" (previous: {current})" if current else ""),
    )


def check_commands(target: Path, info: ReleaseInfo) -> None:
    """Every command of an installed release answers --version with the release's version and build."""
    expected = f"{info.version} (build {info.build})"
    # All at once: each is a Python start-up, and a release has a dozen commands.
    running = {
        command: subprocess.Popen(
            [str(target / "bin" / command), "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for command in info.commands
    }
    wrong = []
    for command, process in running.items():
        try:
            out, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            out = "no answer within 60 s"
        if process.returncode != 0 or expected not in out:
            wrong.append(f"{command} ({(out.strip().splitlines() or ['no output'])[-1][:120]})")
    if wrong:
        raise ReleaseError(
            f"commands of {target} do not report {expected} with --version: {'; '.join(wrong)}; rebuild the release"
        )


def _undo_switch(prefix: Path, previous: str | None, remove: str | None) -> None:
    if previous:
        switch_link(prefix / "current", previous)
    else:
        (prefix / "current").unlink(missing_ok=True)
    if remove:
        shutil.rmtree(releases_dir(prefix) / remove, ignore_errors=True)


def _base_python() -> str:
    """The interpreter venvs are made from: the base of the running venv when there is one."""
    return getattr(sys, "_base_executable", None) or sys.executable


def _prune(prefix: Path, log: Callable[[str], None], keep: str | None = None) -> None:
    """Remove releases other than current, previous (and keep), except those a running process still uses."""
    protected = {link_target(prefix / "current"), link_target(prefix / "previous"), keep}
    if not releases_dir(prefix).is_dir():
        return
    in_use = processes.releases_in_use(prefix)
    for entry in sorted(releases_dir(prefix).iterdir()):
        if entry.name in protected or not entry.is_dir():
            continue
        if entry.name in in_use:
            log(f"keeping {entry.name}: used by pid {', '.join(str(p) for p in in_use[entry.name])}")
            continue
        shutil.rmtree(entry, ignore_errors=True)
        log(f"removed old release {entry.name}")


def rollback(prefix: Path = Path(DEFAULT_PREFIX), log: Callable[[str], None] = print) -> tuple[str, str]:
    """Make the previous release current again; -> (from, to)."""
    prefix = Path(prefix).absolute()
    with prefix_lock(prefix, log=log):
        current = link_target(prefix / "current")
        previous = link_target(prefix / "previous")
        if not previous or installed_info(prefix, previous) is None:
            raise ReleaseError(f"{prefix} has no previous release to roll back to (current: {current or 'none'})")
        switch_link(prefix / "current", previous)
        if current:
            switch_link(prefix / "previous", current)
    log(f"rolled back {prefix}/current from {current} to {previous}")
    return current or "", previous


def status(prefix: Path = Path(DEFAULT_PREFIX)) -> dict[str, object]:
    prefix = Path(prefix).absolute()
    releases = []
    if releases_dir(prefix).is_dir():
        for entry in sorted(releases_dir(prefix).iterdir()):
            info = installed_info(prefix, entry.name)
            releases.append(
                {
                    "id": entry.name,
                    "complete": info is not None,
                    "version": info.version if info else "",
                    "build": info.build if info else "",
                }
            )
    return {
        "prefix": str(prefix),
        "current": link_target(prefix / "current"),
        "previous": link_target(prefix / "previous"),
        "releases": releases,
    }
