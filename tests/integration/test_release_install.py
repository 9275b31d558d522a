"""Real releases of this tree: build two (0.1.0 and 0.2.0), install, reinstall, upgrade, roll back, refuse
corrupted copies, self-update from an index. Every path is under a temporary directory.

Building the wheelhouse is the slow part, so one pair of releases serves the whole session; the second is
built offline from the first one's wheelhouse.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spur_hpc.cli import spur
from spur_hpc.release import build, index, install, manifest
from spur_hpc.release.manifest import ReleaseError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("releases")
    first = root / "spur-0.1.0"
    second = root / "spur-0.2.0"
    build.build_release(REPO, first, version="0.1.0", log=lambda _m: None)
    build.build_release(
        REPO, second, version="0.2.0", no_index=True, find_links=[str(first / "wheels")], log=lambda _m: None
    )
    return {"0.1.0": first, "0.2.0": second}


def quiet(_message: str) -> None:
    pass


def reported_version(prefix: Path, command: str = "squeue") -> str:
    result = subprocess.run([str(prefix / "bin" / command), "--version"], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def tree(root: Path) -> dict[str, tuple]:
    out = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        stat = path.lstat()
        out[str(path.relative_to(root))] = (
            stat.st_mode,
            stat.st_size,
            stat.st_mtime_ns,
            os.readlink(path) if path.is_symlink() else "",
        )
    return out


def test_the_release_directory(releases: dict[str, Path]) -> None:
    first = releases["0.1.0"]
    names = sorted(p.name for p in first.iterdir())
    assert names == ["SHA256SUMS", "release.json", "spur_hpc-0.1.0-py3-none-any.whl", "wheels"]
    wheels = {p.name.split("-")[0].lower() for p in (first / "wheels").iterdir()}
    assert {"grpcio", "protobuf", "pysyncobj", "cryptography", "psycopg", "prometheus_client"} <= wheels
    one, two = (manifest.verify(releases[v]) for v in ("0.1.0", "0.2.0"))
    assert (one.version, two.version) == ("0.1.0", "0.2.0")
    assert one.release_id != two.release_id


def test_install_reinstall_upgrade_rollback(releases: dict[str, Path], tmp_path: Path) -> None:
    prefix = tmp_path / "opt-spur"
    first = install.install_release(releases["0.1.0"], prefix, log=quiet)
    assert first.changed and (prefix / "current").resolve().name == first.release_id
    assert reported_version(prefix).startswith("squeue 0.1.0 (build ")
    assert reported_version(prefix, "spur").startswith("spur 0.1.0")
    before = tree(prefix / "releases")

    again = install.install_release(releases["0.1.0"], prefix, log=quiet)
    assert not again.changed and "already current" in again.message
    assert tree(prefix / "releases") == before

    second = install.install_release(releases["0.2.0"], prefix, log=quiet)
    assert second.changed and second.previous == first.release_id
    assert reported_version(prefix).startswith("squeue 0.2.0")
    assert os.readlink(prefix / "previous") == f"releases/{first.release_id}"

    assert install.rollback(prefix, log=quiet) == (second.release_id, first.release_id)
    assert reported_version(prefix).startswith("squeue 0.1.0")
    # switching back needs no reinstall: the release directory is still complete
    third = install.install_release(releases["0.2.0"], prefix, log=quiet)
    assert third.changed and reported_version(prefix).startswith("squeue 0.2.0")


@pytest.mark.parametrize("what", ["wheel", "checksums"])
def test_corrupted_copies_are_refused_and_nothing_changes(releases, tmp_path: Path, what: str) -> None:
    prefix = tmp_path / "opt-spur"
    install.install_release(releases["0.1.0"], prefix, log=quiet)
    before = tree(prefix)
    damaged = tmp_path / "damaged"
    shutil.copytree(releases["0.2.0"], damaged)
    if what == "wheel":
        wheel = next(damaged.glob("*.whl"))
        data = bytearray(wheel.read_bytes())
        data[100] ^= 0x01
        wheel.write_bytes(bytes(data))
    else:
        sums = damaged / "SHA256SUMS"
        sums.write_text(sums.read_text().replace("0", "1", 1))
    with pytest.raises(ReleaseError, match="checksum mismatch"):
        install.install_release(damaged, prefix, log=quiet)
    assert tree(prefix) == before
    with pytest.raises(ReleaseError):
        install.install_release(damaged, tmp_path / "fresh", log=quiet)
    assert not (tmp_path / "fresh").exists()


def test_self_update_from_an_index(releases, tmp_path: Path, capsys, monkeypatch) -> None:
    index_dir = tmp_path / "index"
    index.publish(releases["0.1.0"], index_dir)
    prefix = tmp_path / "opt-spur"
    install.install_release(releases["0.1.0"], prefix, log=quiet)
    args = ["--index", str(index_dir), "--prefix", str(prefix)]
    assert spur.main(["self-update", *args]) == 0
    assert "already runs" in capsys.readouterr().out

    index.publish(releases["0.2.0"], index_dir)
    monkeypatch.setenv("SPUR_RELEASE_INDEX", str(index_dir))
    assert spur.main(["version", "--check"]) == 0
    assert "update available" in capsys.readouterr().out  # this checkout is neither published build

    assert spur.main(["self-update", "--prefix", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert "Updated spur to 0.2.0-" in out and "Note: " in out
    assert reported_version(prefix).startswith("squeue 0.2.0")

    # a corrupted newest release: refused, the prefix stays on what it runs
    install.rollback(prefix, log=quiet)
    wheel = next((index_dir / (prefix / "previous").resolve().name).glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:-10])
    before = tree(prefix)
    assert spur.main(["self-update", "--prefix", str(prefix)]) == 1
    assert "self-update failed, nothing changed" in capsys.readouterr().err
    assert tree(prefix) == before


def site_packages(prefix: Path, release_id: str) -> Path:
    return next((prefix / "releases" / release_id).glob("lib/python*/site-packages"))


def test_a_new_release_reuses_the_dependencies_installed_from_the_same_wheels(releases, tmp_path: Path) -> None:
    prefix = tmp_path / "opt-spur"
    first = install.install_release(releases["0.1.0"], prefix, log=quiet)
    old = site_packages(prefix, first.release_id)
    # A file of grpcio in the running release no longer matches its RECORD: grpcio comes from its wheel again.
    tampered = next((old / "grpc").glob("_channel.py"))
    tampered.write_text(tampered.read_text() + "\n# edited\n")
    # The running release says it was built from another protobuf wheel: protobuf is not reused either.
    marker = prefix / "releases" / first.release_id / install.MARKER
    record = json.loads(marker.read_text())
    protobuf = next(w for w in record["wheels"] if w.startswith("protobuf-"))
    record["wheels"][protobuf] = "0" * 64
    marker.write_text(json.dumps(record))

    said: list[str] = []
    staged = install.stage_release(releases["0.2.0"], prefix, log=said.append)
    assert staged.changed
    wheels = sorted(p.name for p in (releases["0.2.0"] / "wheels").iterdir())
    reused = [line for line in said if line.startswith("reused ")]
    # Every dependency but grpcio, protobuf and the two whose console scripts name the old venv (they are
    # installed by pip again).
    assert reused == [
        f"reused {len(wheels) - 4} of {len(wheels)} dependency wheels already installed in {prefix}/releases"
    ]
    new = site_packages(prefix, staged.release_id)
    assert "# edited" not in (new / "grpc" / "_channel.py").read_text()
    assert (new / "cryptography" / "__init__.py").read_bytes() == (old / "cryptography" / "__init__.py").read_bytes()
    python = prefix / "releases" / staged.release_id / "bin" / "python"
    check = subprocess.run(
        [str(python), "-c", "import grpc, google.protobuf, cryptography.fernet, psycopg, pysyncobj; print('ok')"],
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "ok", check.stderr
    # pip, asked about the new venv, finds every dependency complete and consistent.
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "check"], capture_output=True, text=True
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr


def test_the_collection_stages_beside_the_running_release_then_switches_to_it(releases, tmp_path: Path) -> None:
    """spur.cluster's spur_release (and spur_daemon_swap's switch) with the real installer: state staged
    installs beside the current release and moves nothing; state current then only moves the links, run by the
    staged release's own interpreter."""
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.spur.cluster.plugins.module_utils.spur_release import ReleaseInstall

    prefix = tmp_path / "opt-spur"
    first = install.install_release(releases["0.1.0"], prefix, log=quiet)
    params = dict(src=str(releases["0.2.0"]), prefix=str(prefix), bin_dir=None, python=None, release=None)
    staged = ReleaseInstall(dict(params, state="staged")).run()
    assert staged["changed"] and staged["current"] == first.release_id
    assert reported_version(prefix).startswith("squeue 0.1.0")
    switched = ReleaseInstall(dict(params, state="current")).run()
    assert switched["changed"] and switched["current"] == staged["release_id"]
    assert switched["previous"] == first.release_id
    assert reported_version(prefix).startswith("squeue 0.2.0")
    again = ReleaseInstall(dict(params, state="current")).run()
    assert not again["changed"]
