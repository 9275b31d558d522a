"""Which running processes use which installed release (read from /proc, Linux only).

A daemon started as PREFIX/current/bin/spurd keeps the code it loaded when `current` moves on, so its
command line alone does not tell its release: the shared libraries it mapped (grpc, protobuf) do, because
they live in the release's own venv.
"""

from __future__ import annotations

import os
from pathlib import Path

DAEMONS_TO_RESTART = ("spurctld", "spurd")  # spurstepd supervisors finish with their jobs; never restart them


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _release_of(pid: str, releases_prefix: str) -> str | None:
    for text in (_read(f"/proc/{pid}/cmdline").replace("\0", " "), _read(f"/proc/{pid}/maps")):
        at = text.find(releases_prefix)
        if at >= 0:
            rest = text[at + len(releases_prefix) :]
            return rest.split("/", 1)[0]
    return None


def _processes() -> list[str]:
    try:
        return [entry for entry in os.listdir("/proc") if entry.isdigit() and entry != str(os.getpid())]
    except OSError:
        return []


def releases_in_use(prefix: Path) -> dict[str, list[int]]:
    """release id -> pids of processes running code from PREFIX/releases/<id>."""
    releases_prefix = str(Path(prefix).absolute() / "releases") + "/"
    users: dict[str, list[int]] = {}
    for pid in _processes():
        release = _release_of(pid, releases_prefix)
        if release:
            users.setdefault(release, []).append(int(pid))
    return users


def daemons_running(prefix: Path) -> list[tuple[str, int, str]]:
    """(daemon name, pid, release id) of every spurctld/spurd/spurstepd running from this prefix."""
    releases_prefix = str(Path(prefix).absolute() / "releases") + "/"
    found = []
    for pid in _processes():
        argv = _read(f"/proc/{pid}/cmdline").split("\0")
        names = [os.path.basename(arg) for arg in argv[:3]]
        daemon = next((n for n in names if n in ("spurctld", "spurd", "spurstepd")), None)
        if daemon is None:
            continue
        release = _release_of(pid, releases_prefix)
        if release:
            found.append((daemon, int(pid), release))
    return sorted(found)


def restart_advice(prefix: Path, new_release: str) -> list[str]:
    """Lines telling which daemons still run another release and must be restarted to run new_release."""
    stale = [(name, pid, rel) for name, pid, rel in daemons_running(prefix) if rel != new_release]
    restart = [(name, pid, rel) for name, pid, rel in stale if name in DAEMONS_TO_RESTART]
    lines = []
    if restart:
        for name, pid, release in restart:
            lines.append(f"restart {name} (pid {pid} still runs {release}) to run {new_release}")
    else:
        lines.append(
            "no spurctld or spurd from this prefix is running here; restart them where they run "
            "(one controller at a time, the leader last)"
        )
    supervisors = [pid for name, pid, _rel in stale if name == "spurstepd"]
    if supervisors:
        lines.append(
            f"{len(supervisors)} spurstepd supervisor(s) keep running their jobs on the old release; "
            "they exit with their jobs, do not restart them"
        )
    return lines
