"""The release directory format and its checks.

A release directory holds:
  spur_hpc-<version>-py3-none-any.whl   the project, with spur_hpc/VERSION and spur_hpc/BUILD_ID inside
  wheels/                               every dependency as a wheel, for hosts without an index
  release.json                          version, build, Python requirement, wheel name and hash, created
  SHA256SUMS                            sha256 of every other file ("<hex>  <relative path>" lines)

Nothing installs from a directory that fails verify(): a changed, missing or extra file, or a wheel whose
VERSION/BUILD_ID disagree with release.json, is refused before anything on disk changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

FORMAT = 1
RELEASE_FILE = "release.json"
SUMS_FILE = "SHA256SUMS"
WHEELS_DIR = "wheels"
# console scripts a release puts on PATH (pyproject.toml's [project.scripts])
COMMANDS = (
    "spur",
    "sbatch",
    "squeue",
    "sinfo",
    "scancel",
    "scontrol",
    "sacct",
    "spurctld",
    "spurd",
    "spurstepd",
    "spur-release",
)
DAEMONS = ("spurctld", "spurd", "spurstepd")
# PEP 440 public versions, the subset a release may use: 1.2, 1.2.3, 1.2.3rc1, 1.2.3.post1, 1.2.3.dev4
VERSION_PATTERN = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


class ReleaseError(Exception):
    """A release that cannot be built, verified, installed or switched to; one line naming the fix."""


@dataclass(frozen=True)
class ReleaseInfo:
    version: str
    build: str
    wheel: str
    wheel_sha256: str
    requires_python: str
    python: str  # major.minor the wheelhouse was built for
    platform: str
    created: str
    commands: tuple[str, ...] = COMMANDS
    name: str = "spur-hpc"
    format: int = FORMAT
    dependencies: tuple[str, ...] = field(default_factory=tuple)

    @property
    def release_id(self) -> str:
        """Directory name under PREFIX/releases: the version plus the content hash."""
        return f"{self.version}-{self.build}"

    def to_json(self) -> str:
        data = asdict(self)
        data["commands"] = list(self.commands)
        data["dependencies"] = list(self.dependencies)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> ReleaseInfo:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReleaseError(f"{source}: not valid JSON ({exc}); rebuild the release") from None
        if not isinstance(data, dict):
            raise ReleaseError(f"{source}: expected a JSON object; rebuild the release")
        if data.get("format", 0) > FORMAT:
            raise ReleaseError(
                f"{source}: release format {data['format']} is newer than this tool reads ({FORMAT}); "
                "install with the spur-release of that release"
            )
        missing = [
            k for k in ("version", "build", "wheel", "wheel_sha256", "requires_python", "python") if k not in data
        ]
        if missing:
            raise ReleaseError(f"{source}: missing {', '.join(missing)}; rebuild the release")
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["commands"] = tuple(values.get("commands") or COMMANDS)
        values["dependencies"] = tuple(values.get("dependencies") or ())
        values.setdefault("platform", "")
        values.setdefault("created", "")
        return cls(**values)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """temp file, fsync, rename: a crash leaves the old file or the new one, never half of one."""
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(temp, path)


def listed_files(directory: Path) -> list[str]:
    """Every regular file under directory except SHA256SUMS, as sorted relative POSIX paths."""
    out = []
    for path in directory.rglob("*"):
        rel = path.relative_to(directory).as_posix()
        if path.is_file() and rel != SUMS_FILE:
            out.append(rel)
    return sorted(out)


def write_checksums(directory: Path) -> None:
    lines = [f"{sha256_file(directory / rel)}  {rel}\n" for rel in listed_files(directory)]
    write_atomically(directory / SUMS_FILE, "".join(lines).encode())


def read_checksums(text: str, source: str) -> dict[str, str]:
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition("  ")
        if not sep or not re.fullmatch(r"[0-9a-f]{64}", digest) or not rel:
            raise ReleaseError(
                f"{source} line {number} is malformed ({line[:60]!r}); the release is corrupted, "
                "fetch or build it again"
            )
        if rel.startswith("/") or ".." in rel.split("/"):
            raise ReleaseError(f"{source} line {number} names a path outside the release ({rel}); refusing it")
        sums[rel] = digest
    if not sums:
        raise ReleaseError(f"{source} is empty; the release is corrupted, fetch or build it again")
    return sums


def verify(directory: Path) -> ReleaseInfo:
    """Check every file against SHA256SUMS and the wheel against release.json; -> the release's info."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ReleaseError(
            f"{directory} is not a release directory (it does not exist); build one with spur-release build"
        )
    sums_path = directory / SUMS_FILE
    if not sums_path.is_file():
        raise ReleaseError(f"{directory} has no {SUMS_FILE}; it is not a complete release, build it again")
    sums = read_checksums(sums_path.read_text(encoding="utf-8", errors="replace"), str(sums_path))
    present = set(listed_files(directory))
    missing = sorted(set(sums) - present)
    if missing:
        raise ReleaseError(
            f"{directory}: {len(missing)} file(s) listed in {SUMS_FILE} are missing "
            f"({', '.join(missing[:3])}); the release is incomplete, fetch or build it again"
        )
    extra = sorted(present - set(sums))
    if extra:
        raise ReleaseError(
            f"{directory}: {', '.join(extra[:3])} not listed in {SUMS_FILE}; remove it or rebuild the release"
        )
    for rel, digest in sums.items():
        if sha256_file(directory / rel) != digest:
            raise ReleaseError(
                f"{directory / rel}: checksum mismatch with {SUMS_FILE}; the file is corrupted, "
                "fetch or build the release again"
            )
    info = read_info(directory)
    wheel = directory / info.wheel
    if not wheel.is_file() or sha256_file(wheel) != info.wheel_sha256:
        raise ReleaseError(f"{wheel}: does not match release.json's wheel_sha256; rebuild the release")
    stamped = wheel_stamps(wheel)
    if stamped != (info.version, info.build):
        raise ReleaseError(
            f"{wheel} reports version {stamped[0]} build {stamped[1]} but release.json says "
            f"{info.version} build {info.build}; rebuild the release"
        )
    return info


def read_info(directory: Path) -> ReleaseInfo:
    path = Path(directory) / RELEASE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReleaseError(f"{path}: cannot read ({exc.strerror}); is this a release directory?") from None
    return ReleaseInfo.from_json(text, str(path))


def wheel_stamps(wheel: Path) -> tuple[str, str]:
    """(VERSION, BUILD_ID) written into the wheel's package."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            version = archive.read("spur_hpc/VERSION").decode().strip()
            build = archive.read("spur_hpc/BUILD_ID").decode().strip()
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise ReleaseError(f"{wheel}: not a Spur release wheel ({exc}); rebuild the release") from None
    return version, build
