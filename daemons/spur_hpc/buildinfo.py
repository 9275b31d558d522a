"""Which build this process runs: the version plus a content hash of the installed package.

A release writes the hash into the BUILD_ID file at build time; a source checkout computes it from the
files themselves, so two trees with the same content report the same build.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib

from spur_hpc import __version__

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
BUILD_FILE = PACKAGE_DIR / "BUILD_ID"
VERSION_FILE = PACKAGE_DIR / "VERSION"


def content_hash(root: pathlib.Path = PACKAGE_DIR) -> str:
    """sha256 over the relative paths and bytes of the package's source files, first 12 hex digits."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".proto") or "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


@functools.cache
def version() -> str:
    # A release may be built with another version than the tree's (upgrade tests build A and B).
    if VERSION_FILE.exists():
        return VERSION_FILE.read_text().strip()
    return __version__


@functools.cache
def build() -> str:
    if BUILD_FILE.exists():
        return BUILD_FILE.read_text().strip()
    return content_hash()


def describe(program: str) -> str:
    return f"{program} {version()} (build {build()})"
