"""A release index: a directory or HTTP(S) URL holding index.json and one release directory per release.

index.json:
  {"format": 1, "channels": {"stable": [{"version": "0.2.0", "build": "...", "path": "0.2.0-<build>",
                                          "created": "..."}, ...], "nightly": [...]}}
Entries are in publish order; the last one of a channel is its newest release. `path` is relative to the
index. Fetching copies (or downloads) the files SHA256SUMS lists, then verifies them all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from spur_hpc.release.manifest import (
    RELEASE_FILE,
    SUMS_FILE,
    ReleaseError,
    ReleaseInfo,
    read_checksums,
    verify,
    write_atomically,
)

INDEX_FILE = "index.json"
INDEX_FORMAT = 1
HTTP_TIMEOUT_SECS = 30


def _is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def _base(location: str) -> str:
    """The index's base (directory or URL without index.json)."""
    if location.startswith("file://"):
        location = location[len("file://") :]
    if location.endswith(INDEX_FILE):
        return location[: -len(INDEX_FILE)].rstrip("/") or "/"
    return location.rstrip("/")


def _fetch_bytes(url: str) -> bytes:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_SECS) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise ReleaseError(f"{url}: HTTP {exc.code}; check the index URL") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ReleaseError(f"{url}: cannot download ({reason}); check the index URL and the network") from None


def _read(base: str, relative: str) -> bytes:
    if _is_url(base):
        return _fetch_bytes(f"{base}/{relative}")
    path = Path(base) / relative
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ReleaseError(f"{path}: cannot read ({exc.strerror}); check the index location") from None


def load_index(location: str) -> tuple[dict, str]:
    """-> (index data, base location)."""
    base = _base(location)
    raw = _read(base, INDEX_FILE)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ReleaseError(f"{base}/{INDEX_FILE}: not valid JSON ({exc}); republish the index") from None
    if not isinstance(data, dict) or not isinstance(data.get("channels"), dict):
        raise ReleaseError(f"{base}/{INDEX_FILE}: no 'channels' object; republish the index")
    if data.get("format", 0) > INDEX_FORMAT:
        raise ReleaseError(
            f"{base}/{INDEX_FILE}: index format {data['format']} is newer than this spur reads; "
            "update spur by hand once"
        )
    return data, base


def latest(index: dict, channel: str) -> dict | None:
    entries = index["channels"].get(channel)
    if entries is None:
        known = ", ".join(sorted(index["channels"])) or "none"
        raise ReleaseError(f"the index has no channel {channel!r} (channels: {known}); pass --channel")
    return entries[-1] if entries else None


def fetch_release(base: str, entry: dict, destination: Path) -> ReleaseInfo:
    """Copy or download one release into destination (which must not exist) and verify it."""
    relative = str(entry.get("path", "")).strip("/")
    if not relative or ".." in relative.split("/"):
        raise ReleaseError(f"index entry {entry} has no usable path; republish the index")
    source = f"{base}/{relative}"
    sums_text = _read(source, SUMS_FILE).decode("utf-8", errors="replace")
    files = read_checksums(sums_text, f"{source}/{SUMS_FILE}")
    if RELEASE_FILE not in files:
        raise ReleaseError(f"{source}/{SUMS_FILE} does not list {RELEASE_FILE}; the release is corrupted")
    destination.mkdir(parents=True)
    (destination / SUMS_FILE).write_text(sums_text, encoding="utf-8")
    for rel in files:
        target = destination / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if _is_url(source):
            target.write_bytes(_fetch_bytes(f"{source}/{rel}"))
        else:
            try:
                shutil.copyfile(Path(source) / rel, target)
            except OSError as exc:
                raise ReleaseError(
                    f"{Path(source) / rel}: cannot copy ({exc.strerror}); the release is incomplete"
                ) from None
    return verify(destination)


def publish(release_dir: Path, index_dir: Path, channel: str = "stable") -> tuple[ReleaseInfo, bool]:
    """Copy a verified release into index_dir and list it last in channel; -> (info, changed)."""
    info = verify(release_dir)
    index_dir = Path(index_dir).absolute()
    index_dir.mkdir(parents=True, exist_ok=True)
    index_path = index_dir / INDEX_FILE
    data = load_index(str(index_dir))[0] if index_path.exists() else {"format": INDEX_FORMAT, "channels": {}}
    entries = data["channels"].setdefault(channel, [])
    if entries and entries[-1].get("path") == info.release_id:
        return info, False
    target = index_dir / info.release_id
    if not target.exists():
        staging = Path(tempfile.mkdtemp(prefix=f".{info.release_id}.tmp-", dir=index_dir))
        os.chmod(staging, 0o755)
        try:
            shutil.copytree(release_dir, staging, dirs_exist_ok=True)
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    entries[:] = [e for e in entries if e.get("path") != info.release_id]
    entries.append({"version": info.version, "build": info.build, "path": info.release_id, "created": info.created})
    write_atomically(index_path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
    return info, True
