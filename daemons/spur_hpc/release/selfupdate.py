"""`spur version --check`, `spur self-update` and spurctld's check at start ([update] in spur.conf): compare
with a release index, fetch, verify, install.

self-update never restarts a daemon: it swaps PREFIX/current and says which daemons still run the old
release. It is a single-host tool; a cluster upgrades with the rolling_upgrade playbook.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spur_hpc.release import index, install, processes
from spur_hpc.release.manifest import ReleaseError, write_atomically

INDEX_ENV = "SPUR_RELEASE_INDEX"
INDEX_CACHE_SECS = 3600.0  # [update] cache_dir: an index read less than an hour ago is not asked again


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


def check(location: str, channel: str, current: tuple[str, str], cache_dir: str = "") -> UpdateCheck:
    data, _base = cached_index(location, cache_dir) if cache_dir else index.load_index(location)
    return UpdateCheck(current=current, latest=index.latest(data, channel), channel=channel)


def cache_file(cache_dir: str, location: str) -> Path:
    return Path(cache_dir) / f"index-{hashlib.sha256(location.encode()).hexdigest()[:16]}.json"


def cached_index(location: str, cache_dir: str, now: float | None = None) -> tuple[dict, str]:
    """index.load_index through a copy in cache_dir that is used for INDEX_CACHE_SECS. A cache that cannot be
    read or written only means the index is asked again."""
    now = time.time() if now is None else now
    path = cache_file(cache_dir, location)
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        if cached["location"] == location and 0 <= now - float(cached["fetched"]) < INDEX_CACHE_SECS:
            return cached["index"], cached["base"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    data, base = index.load_index(location)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"location": location, "fetched": now, "base": base, "index": data}
        write_atomically(path, json.dumps(entry, sort_keys=True).encode())
    except OSError:
        pass
    return data, base


def startup_check(update: Any, current: tuple[str, str], log: logging.Logger, prefix: Path | None = None) -> None:
    """spurctld at start ([update] of spur.conf): one log line when `channel` of `index` lists another build;
    with auto_update, install it as self-update does (current switched, nothing restarted)."""
    if not update.check_on_startup or not update.index:
        return
    try:
        result = check(update.index, update.channel, current, update.cache_dir)
    except ReleaseError as exc:
        log.warning("[update] could not check %s for a newer release: %s", update.index, exc)
        return
    if not result.update_available:
        log.info("[update] %s", result.describe()[0])
        return
    version, build = current
    latest = f"{result.latest['version']} (build {result.latest['build']})"
    if not update.auto_update:
        log.warning(
            "[update] update available on channel %s: %s (build %s) -> %s; install it with `spur self-update` "
            "on this host or the rolling upgrade for the cluster",
            update.channel,
            version,
            build,
            latest,
        )
        return
    prefix = prefix or detect_prefix()
    if prefix is None:
        log.warning(
            "[update] update available on channel %s: %s; auto_update installs only into an installed release "
            "(PREFIX/releases/<id>) and this spurctld runs from %s: install it by hand",
            update.channel,
            latest,
            sys.prefix,
        )
        return
    try:
        installed = self_update(update.index, update.channel, prefix, log=lambda line: log.info("[update] %s", line))
    except ReleaseError as exc:
        log.warning("[update] auto_update of %s failed, nothing changed: %s", latest, exc)
        return
    log.warning(
        "[update] auto_update: %s; nothing was restarted, every daemon runs its old build until its next restart",
        installed.message,
    )


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
