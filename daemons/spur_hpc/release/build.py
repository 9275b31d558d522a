"""Build a release directory from a source tree (see release.manifest for the format).

The project wheel is built from a copy of the tree (so the checkout gets no build/ or egg-info litter),
then rewritten: spur_hpc/VERSION and spur_hpc/BUILD_ID go in, the dist-info takes the release's version,
and every entry gets a fixed timestamp so the same tree and version give the same wheel bytes.
BUILD_ID is buildinfo.content_hash() of the copied package, which is what a source checkout reports too.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from spur_hpc import buildinfo
from spur_hpc.release.manifest import VERSION_PATTERN, WHEELS_DIR, ReleaseError, ReleaseInfo, sha256_file, verify

_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SOURCE_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", "BUILD_ID", "VERSION")


def source_version(source_root: Path) -> str:
    text = (source_root / "daemons" / "spur_hpc" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        raise ReleaseError(f"{source_root}: no __version__ in daemons/spur_hpc/__init__.py; pass --version")
    return match.group(1)


def run_pip(python: str, args: list[str], what: str) -> None:
    command = [python, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = " | ".join(line for line in (result.stderr or result.stdout).strip().splitlines()[-3:])
        raise ReleaseError(f"{what} failed (pip exit {result.returncode}): {tail}")


def copy_source(source_root: Path, destination: Path) -> None:
    if not (source_root / "pyproject.toml").is_file() or not (source_root / "daemons" / "spur_hpc").is_dir():
        raise ReleaseError(
            f"{source_root} is not a spur-hpc source tree (no pyproject.toml and daemons/spur_hpc); pass --source"
        )
    destination.mkdir(parents=True)
    for name in os.listdir(source_root):
        if name == "pyproject.toml" or re.match(r"(README|LICENSE|NOTICE)", name):
            shutil.copy2(source_root / name, destination / name)
    shutil.copytree(source_root / "daemons", destination / "daemons", ignore=_SOURCE_IGNORE)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def restamp_wheel(wheel: Path, out_dir: Path, version: str, build: str) -> Path:
    """Copy of wheel with VERSION/BUILD_ID added and the distribution version set; -> its path."""
    name, old_version, *tags = wheel.name[: -len(".whl")].split("-")
    old_info, new_info = f"{name}-{old_version}.dist-info", f"{name}-{version}.dist-info"
    entries: dict[str, tuple[bytes, int]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for item in archive.infolist():
            if item.is_dir():
                continue
            data = archive.read(item)
            path = item.filename
            if path.startswith(old_info + "/"):
                path = new_info + path[len(old_info) :]
                if path.endswith("/METADATA"):
                    data = re.sub(rb"^Version: .*$", f"Version: {version}".encode(), data, count=1, flags=re.M)
                if path.endswith("/RECORD"):
                    continue
            entries[path] = (data, item.external_attr)
    entries["spur_hpc/VERSION"] = (f"{version}\n".encode(), 0o644 << 16)
    entries["spur_hpc/BUILD_ID"] = (f"{build}\n".encode(), 0o644 << 16)
    record_path = f"{new_info}/RECORD"
    # package files first, dist-info last, RECORD at the very end (the wheel convention)
    order = sorted(entries, key=lambda p: (p.startswith(new_info + "/"), p))
    record = "".join(f"{p},{_record_hash(entries[p][0])},{len(entries[p][0])}\n" for p in order) + f"{record_path},,\n"
    target = out_dir / f"{name}-{version}-{'-'.join(tags)}.whl"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in order + [record_path]:
            data, attributes = entries[path] if path != record_path else (record.encode(), 0o644 << 16)
            info = zipfile.ZipInfo(path, date_time=_ZIP_TIME)
            info.external_attr = attributes
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return target


def wheel_requirements(wheel: Path) -> tuple[list[str], str]:
    """(Requires-Dist without extras, Requires-Python) from the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata_name).decode()
    requirements, requires_python = [], ""
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = line.split(":", 1)[1].strip()
            if "extra ==" not in requirement:
                requirements.append(requirement)
        elif line.startswith("Requires-Python:"):
            requires_python = line.split(":", 1)[1].strip()
    return requirements, requires_python


def build_release(
    source_root: Path,
    out_dir: Path,
    version: str | None = None,
    find_links: list[str] | None = None,
    no_index: bool = False,
    python: str = sys.executable,
    log: Callable[[str], None] = print,
) -> ReleaseInfo:
    source_root, out_dir = Path(source_root).resolve(), Path(out_dir).resolve()
    version = version or source_version(source_root)
    if not VERSION_PATTERN.match(version):
        raise ReleaseError(f"--version {version!r} is not a release version; use numbers like 1.2.3 (or 1.2.3rc1)")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ReleaseError(f"{out_dir} exists and is not empty; remove it or choose another --out")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    index_args = (["--no-index"] if no_index else []) + [
        arg for link in (find_links or []) for arg in ("--find-links", link)
    ]
    with tempfile.TemporaryDirectory(prefix="spur-release-") as scratch_text:
        scratch = Path(scratch_text)
        source = scratch / "source"
        copy_source(source_root, source)
        build = buildinfo.content_hash(source / "daemons" / "spur_hpc")
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
        os.chmod(staging, 0o755)  # mkdtemp makes it private; a release is read by whoever installs it
        try:
            log(f"building spur-hpc {version} (build {build}) from {source_root}")
            built = scratch / "built"
            run_pip(
                python,
                ["wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(built), str(source)],
                "building the project wheel",
            )
            wheel = restamp_wheel(next(built.glob("*.whl")), staging, version, build)
            requirements, requires_python = wheel_requirements(wheel)
            log(f"collecting {len(requirements)} dependencies into {WHEELS_DIR}/")
            (staging / WHEELS_DIR).mkdir()
            run_pip(
                python,
                ["wheel", "--quiet", "--wheel-dir", str(staging / WHEELS_DIR), *index_args, *requirements],
                "building the dependency wheelhouse",
            )
            info = ReleaseInfo(
                version=version,
                build=build,
                wheel=wheel.name,
                wheel_sha256=sha256_file(wheel),
                requires_python=requires_python,
                python=_python_version(python),
                platform=sysconfig.get_platform(),
                created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                dependencies=tuple(requirements),
            )
            (staging / "release.json").write_text(info.to_json(), encoding="utf-8")
            from spur_hpc.release.manifest import write_checksums

            write_checksums(staging)
            verify(staging)
            if out_dir.exists():
                out_dir.rmdir()
            os.replace(staging, out_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    log(f"release {info.release_id} written to {out_dir}")
    return info


def _python_version(python: str) -> str:
    if python == sys.executable:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    result = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ReleaseError(f"cannot run {python}: {result.stderr.strip()[-200:]}; pass an existing --python")
    return result.stdout.strip()
