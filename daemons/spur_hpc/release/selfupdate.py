"""`spur version --check` and `spur self-update`: compare with a release index, fetch, verify, install.

self-update never restarts a daemon: it swaps PREFIX/current and says which daemons still run the old
release. It is a single-host tool; a cluster upgrades with the rolling_upgrade playbook.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spur_hpc.release import index, install, processes
from spur_hpc.release.manifest import ReleaseError

INDEX_ENV = "SPUR_RELEASE_INDEX"


@dataclass(frozen=True)
class UpdateCheck:
    current: tuple[str, str]  # (version, build)
    latest: dict | None  # index entry
    channel: str

    @property
    def update_available(self) -> bool:
        return self.latest is not None and (self.latest["version"], self.latest["build"]) != self.current

    def describe(self) -> list[str]:
        version, build = self.current
        if self.latest is None:
            return [f"channel {self.channel} lists no release yet; {version} (build {build}) stays"]
        if not self.update_available:
            return [f"spur {version} (build {build}) is up to date on channel {self.channel}"]
        return [
            f"update available: {version} (build {build}) -> {self.latest['version']} (build {self.latest['build']})",
            "Run `spur self-update` to install.",
        ]


def check(location: str, channel: str, current: tuple[str, str]) -> UpdateCheck:
    data, _base = index.load_index(location)
    return UpdateCheck(current=current, latest=index.latest(data, channel), channel=channel)


def detect_prefix() -> Path | None:
    """PREFIX when this interpreter runs from PREFIX/releases/<id> (an installed release), else None."""
    here = Path(sys.prefix).absolute()
    if here.parent.name == "releases":
        return here.parent.parent
    return None


def self_update(
    location: str,
    channel: str,
    prefix: Path,
    bin_dir: Path | None = None,
    python: str | None = None,
    log: Callable[[str], None] = print,
) -> install.InstallResult:
    data, base = index.load_index(location)
    entry = index.latest(data, channel)
    if entry is None:
        raise ReleaseError(f"channel {channel} of {location} lists no release; nothing to install")
    release_id = f"{entry['version']}-{entry['build']}"
    current = install.link_target(Path(prefix) / "current")
    if current == release_id:
        return install.InstallResult(
            release_id,
            False,
            current,
            f"{prefix} already runs {release_id} (latest on channel {channel}); nothing to do",
        )
    download = Path(tempfile.mkdtemp(prefix="spur-update-"))
    try:
        log(f"fetching {release_id} from {base}")
        fetched = index.fetch_release(base, entry, download / "release")
        if fetched.release_id != release_id:
            raise ReleaseError(
                f"the index says {release_id} but the release holds {fetched.release_id}; republish the index"
            )
        result = install.install_release(download / "release", prefix, bin_dir, python, log=log)
    finally:
        shutil.rmtree(download, ignore_errors=True)
    return result


def restart_lines(prefix: Path, release_id: str) -> list[str]:
    return processes.restart_advice(prefix, release_id)
