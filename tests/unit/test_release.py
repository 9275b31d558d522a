"""Release format, verification, switching and the index, on small hand-made releases (no pip, no venvs).

tests/integration/test_release_install.py builds and installs real releases.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from functools import partial
from pathlib import Path

import pytest

from spur_hpc.release import build, index, install, manifest, processes, selfupdate
from spur_hpc.release.manifest import ReleaseError, ReleaseInfo


def make_plain_wheel(directory: Path, version: str = "0.1.0") -> Path:
    """A minimal wheel as setuptools would write it (no VERSION/BUILD_ID yet)."""
    path = directory / f"spur_hpc-{version}-py3-none-any.whl"
    info = f"spur_hpc-{version}.dist-info"
    files = {
        "spur_hpc/__init__.py": b'__version__ = "0.1.0"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: spur-hpc\nVersion: {version}\nRequires-Python: >=3.11\n"
        'Requires-Dist: grpcio>=1\nRequires-Dist: pytest; extra == "test"\n'.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/RECORD": b"",
    }
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def make_release(directory: Path, version: str = "0.1.0", build_id: str = "b1") -> Path:
    directory.mkdir(parents=True)
    scratch = directory.parent / f"scratch-{version}-{build_id}"
    scratch.mkdir()
    wheel = build.restamp_wheel(make_plain_wheel(scratch), directory, version, build_id)
    (directory / manifest.WHEELS_DIR).mkdir()
    (directory / manifest.WHEELS_DIR / "dep-1.0-py3-none-any.whl").write_bytes(b"not really a wheel")
    info = ReleaseInfo(
        version=version,
        build=build_id,
        wheel=wheel.name,
        wheel_sha256=manifest.sha256_file(wheel),
        requires_python=">=3.11",
        python="3.11",
        platform="linux-x86_64",
        created="2024-05-01T00:00:00Z",
    )
    (directory / manifest.RELEASE_FILE).write_text(info.to_json())
    manifest.write_checksums(directory)
    return directory


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under root with what it is: enough to prove nothing changed."""
    if not root.exists():
        return {}
    out = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        link = os.readlink(path) if path.is_symlink() else ""
        out[str(path.relative_to(root))] = (stat.st_mode, stat.st_size, stat.st_mtime_ns, link)
    return out


# ---------------------------------------------------------------- wheel and verification


def test_restamped_wheel_carries_version_build_and_a_valid_record(tmp_path: Path) -> None:
    plain = make_plain_wheel(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    wheel = build.restamp_wheel(plain, out, "0.2.0", "abc123")
    assert wheel.name == "spur_hpc-0.2.0-py3-none-any.whl"
    assert manifest.wheel_stamps(wheel) == ("0.2.0", "abc123")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert names[-1] == "spur_hpc-0.2.0.dist-info/RECORD"
        assert "Version: 0.2.0" in archive.read("spur_hpc-0.2.0.dist-info/METADATA").decode()
        for line in archive.read(names[-1]).decode().splitlines():
            path, digest, size = line.split(",")
            if path == names[-1]:
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)
    again = tmp_path / "again"
    again.mkdir()
    assert build.restamp_wheel(plain, again, "0.2.0", "abc123").read_bytes() == wheel.read_bytes()  # reproducible


def test_requirements_skip_extras(tmp_path: Path) -> None:
    assert build.wheel_requirements(make_plain_wheel(tmp_path)) == (["grpcio>=1"], ">=3.11")


def test_a_good_release_verifies(tmp_path: Path) -> None:
    info = manifest.verify(make_release(tmp_path / "rel"))
    assert info.release_id == "0.1.0-b1"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: _flip_byte(next(d.glob("*.whl"))), "checksum mismatch"),
        (lambda d: _flip_byte(d / "wheels" / "dep-1.0-py3-none-any.whl"), "checksum mismatch"),
        (lambda d: _rewrite(d / "SHA256SUMS", lambda t: t.replace(t[:8], "00000000", 1)), "checksum mismatch"),
        (lambda d: _rewrite(d / "SHA256SUMS", lambda t: "garbage\n" + t), "line 1 is malformed"),
        (lambda d: _rewrite(d / "SHA256SUMS", lambda t: t + "0" * 64 + "  ../etc/passwd\n"), "outside the release"),
        (lambda d: (d / "SHA256SUMS").unlink(), "has no SHA256SUMS"),
        (lambda d: (d / "wheels" / "dep-1.0-py3-none-any.whl").unlink(), "are missing"),
        (lambda d: (d / "extra.txt").write_text("x"), "not listed in SHA256SUMS"),
        (lambda d: _rewrite(d / "SHA256SUMS", lambda t: ""), "is empty"),
    ],
)
def test_damaged_releases_are_refused(tmp_path: Path, damage, message: str) -> None:
    release = make_release(tmp_path / "rel")
    damage(release)
    with pytest.raises(ReleaseError, match=message):
        manifest.verify(release)


def test_release_json_that_disagrees_with_the_wheel_is_refused(tmp_path: Path) -> None:
    release = make_release(tmp_path / "rel")
    _rewrite(release / "release.json", lambda t: t.replace('"build": "b1"', '"build": "b2"'))
    manifest.write_checksums(release)  # consistent sums, inconsistent content
    with pytest.raises(ReleaseError, match="reports version 0.1.0 build b1 but release.json says 0.1.0 build b2"):
        manifest.verify(release)


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _rewrite(path: Path, change) -> None:
    path.write_text(change(path.read_text()))


# ---------------------------------------------------------------- install refusals, switching, rollback


def test_a_corrupted_release_changes_nothing_on_disk(tmp_path: Path) -> None:
    release = make_release(tmp_path / "rel")
    _flip_byte(next(release.glob("*.whl")))
    prefix = tmp_path / "prefix"
    with pytest.raises(ReleaseError, match="checksum mismatch"):
        install.install_release(release, prefix, python=sys.executable, log=lambda _m: None)
    assert not prefix.exists()


def test_a_foreign_command_in_bin_dir_is_refused_before_any_change(tmp_path: Path) -> None:
    release = make_release(tmp_path / "rel")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho the site's own squeue\n")
    prefix = tmp_path / "prefix"
    with pytest.raises(ReleaseError, match="squeue exists and is not a link"):
        install.install_release(release, prefix, bin_dir=bin_dir, python=sys.executable, log=lambda _m: None)
    assert not prefix.exists()


def fake_installed(prefix: Path, release_id: str) -> None:
    """A release directory that counts as complete (its marker written), without a venv."""
    version, build_id = release_id.split("-", 1)
    target = prefix / "releases" / release_id
    (target / "bin").mkdir(parents=True)
    info = ReleaseInfo(
        version=version,
        build=build_id,
        wheel="w.whl",
        wheel_sha256="0" * 64,
        requires_python=">=3.11",
        python="3.11",
        platform="",
        created="",
    )
    (target / install.MARKER).write_text(info.to_json())


def test_switch_rollback_and_status(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    for release_id in ("0.1.0-a", "0.2.0-b"):
        fake_installed(prefix, release_id)
    install.switch_link(prefix / "current", "0.1.0-a")
    install.switch_link(prefix / "current", "0.2.0-b")
    install.switch_link(prefix / "previous", "0.1.0-a")
    assert os.readlink(prefix / "current") == "releases/0.2.0-b"  # relative: the prefix can move
    assert install.rollback(prefix, log=lambda _m: None) == ("0.2.0-b", "0.1.0-a")
    state = install.status(prefix)
    assert (state["current"], state["previous"]) == ("0.1.0-a", "0.2.0-b")
    assert [r["id"] for r in state["releases"]] == ["0.1.0-a", "0.2.0-b"]
    assert not [p for p in prefix.iterdir() if ".tmp-" in p.name]


def test_switch_to_a_staged_release_moves_only_the_links(tmp_path: Path) -> None:
    prefix, bin_dir = tmp_path / "prefix", tmp_path / "bin"
    for release_id in ("0.1.0-a", "0.2.0-b"):
        fake_installed(prefix, release_id)
    quiet = lambda _m: None  # noqa: E731
    with pytest.raises(ReleaseError, match="0.3.0-c is not staged"):
        install.switch_release(prefix, "0.3.0-c", bin_dir, log=quiet)
    assert install.switch_release(prefix, "0.1.0-a", bin_dir, log=quiet).changed
    done = install.switch_release(prefix, "0.2.0-b", bin_dir, log=quiet)
    assert done.changed and done.previous == "0.1.0-a"
    assert (install.link_target(prefix / "current"), install.link_target(prefix / "previous")) == ("0.2.0-b", "0.1.0-a")
    assert os.readlink(bin_dir / "spurd") == str(prefix / "current" / "bin" / "spurd")
    assert not install.switch_release(prefix, "0.2.0-b", bin_dir, log=quiet).changed
    assert sorted(p.name for p in (prefix / "releases").iterdir()) == ["0.1.0-a", "0.2.0-b"]  # nothing pruned


def test_a_staged_release_is_checked_command_by_command(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    fake_installed(prefix, "0.2.0-b")
    target = prefix / "releases" / "0.2.0-b"
    info = install.installed_info(prefix, "0.2.0-b")
    for command in info.commands:
        script = target / "bin" / command
        script.write_text(f"#!/bin/sh\necho '{command} 0.2.0 (build b)'\n")
        script.chmod(0o755)
    install.check_commands(target, info)
    (target / "bin" / "spurstepd").write_text("#!/bin/sh\necho 'usage: spurstepd --session S' >&2; exit 2\n")
    with pytest.raises(ReleaseError, match=r"do not report 0.2.0 \(build b\) with --version: spurstepd \(usage"):
        install.check_commands(target, info)


def test_rollback_without_a_previous_release_is_refused(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    fake_installed(prefix, "0.1.0-a")
    install.switch_link(prefix / "current", "0.1.0-a")
    with pytest.raises(ReleaseError, match="no previous release to roll back to"):
        install.rollback(prefix)


def test_prune_keeps_current_previous_and_releases_in_use(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    for release_id in ("0.1.0-a", "0.2.0-b", "0.3.0-c", "0.4.0-d"):
        fake_installed(prefix, release_id)
    install.switch_link(prefix / "current", "0.4.0-d")
    install.switch_link(prefix / "previous", "0.3.0-c")
    script = prefix / "releases" / "0.1.0-a" / "bin" / "spurd"
    script.write_text("import time\ntime.sleep(30)\n")
    daemon = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 10
        while "0.1.0-a" not in processes.releases_in_use(prefix) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes.daemons_running(prefix) == [("spurd", daemon.pid, "0.1.0-a")]
        advice = processes.restart_advice(prefix, "0.4.0-d")
        assert advice == [f"restart spurd (pid {daemon.pid} still runs 0.1.0-a) to run 0.4.0-d"]
        install._prune(prefix, log=lambda _m: None)
    finally:
        daemon.kill()
        daemon.wait()
    assert sorted(p.name for p in (prefix / "releases").iterdir()) == ["0.1.0-a", "0.3.0-c", "0.4.0-d"]


# ---------------------------------------------------------------- index and update checks


def test_publish_and_check(tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    first = make_release(tmp_path / "a", "0.1.0", "b1")
    second = make_release(tmp_path / "b", "0.2.0", "b2")
    assert index.publish(first, index_dir)[1] is True
    assert index.publish(first, index_dir)[1] is False  # already the newest: nothing to do
    index.publish(second, index_dir)
    data = json.loads((index_dir / "index.json").read_text())
    assert [e["path"] for e in data["channels"]["stable"]] == ["0.1.0-b1", "0.2.0-b2"]

    up_to_date = selfupdate.check(str(index_dir), "stable", ("0.2.0", "b2"))
    assert not up_to_date.update_available
    assert up_to_date.describe() == ["spur 0.2.0 (build b2) is up to date on channel stable"]
    behind = selfupdate.check(str(index_dir / "index.json"), "stable", ("0.1.0", "b1"))
    assert behind.describe() == [
        "update available: 0.1.0 (build b1) -> 0.2.0 (build b2)",
        "Run `spur self-update` to install.",
    ]
    with pytest.raises(ReleaseError, match="no channel 'nightly'"):
        selfupdate.check(str(index_dir), "nightly", ("0.1.0", "b1"))


def test_fetch_over_http_verifies_what_it_downloads(tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    index.publish(make_release(tmp_path / "a", "0.1.0", "b1"), index_dir)
    handler = partial(_QuietHandler, directory=str(index_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        data, base = index.load_index(url)
        info = index.fetch_release(base, index.latest(data, "stable"), tmp_path / "download")
        assert info.release_id == "0.1.0-b1"
        _flip_byte(index_dir / "0.1.0-b1" / "wheels" / "dep-1.0-py3-none-any.whl")
        with pytest.raises(ReleaseError, match="checksum mismatch"):
            index.fetch_release(base, index.latest(data, "stable"), tmp_path / "download2")
        with pytest.raises(ReleaseError, match="HTTP 404"):
            index.load_index(url + "/nowhere")
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # keep test output clean
        pass


def test_an_install_waits_for_another_one_into_the_same_prefix(tmp_path: Path) -> None:
    """Hosts sharing one prefix (NFS) install at once: the second waits for the first, then finds it current."""
    import fcntl

    prefix = tmp_path / "opt" / "spur"
    prefix.mkdir(parents=True)
    other = open(prefix / ".lock", "w")  # another installer (a separate open file: flock blocks us)
    fcntl.flock(other, fcntl.LOCK_EX)
    said: list[str] = []
    with pytest.raises(ReleaseError, match="still installing into .* after 0 s"):
        with install.prefix_lock(prefix, wait=0.3, log=said.append):
            pass
    threading.Timer(0.5, other.close).start()  # closing the file drops its lock
    with install.prefix_lock(prefix, wait=30, log=said.append):
        assert other.closed, "the lock was taken while the other installer still held it"
    assert said and "waiting for another spur-release" in said[0]


# ---------------------------------------------------------------- [update]: the index cache and the check at start


def two_releases_published(tmp_path: Path) -> Path:
    index_dir = tmp_path / "index"
    index.publish(make_release(tmp_path / "a", "0.1.0", "b1"), index_dir)
    index.publish(make_release(tmp_path / "b", "0.2.0", "b2"), index_dir)
    return index_dir


def test_the_index_is_read_again_only_after_an_hour(tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    index.publish(make_release(tmp_path / "a", "0.1.0", "b1"), index_dir)
    cache = str(tmp_path / "cache")
    newest = lambda data: index.latest(data, "stable")["path"]  # noqa: E731
    assert newest(selfupdate.cached_index(str(index_dir), cache, now=1000.0)[0]) == "0.1.0-b1"
    index.publish(make_release(tmp_path / "b", "0.2.0", "b2"), index_dir)
    assert newest(selfupdate.cached_index(str(index_dir), cache, now=1000.0 + 3599)[0]) == "0.1.0-b1"
    assert newest(selfupdate.cached_index(str(index_dir), cache, now=1000.0 + 3600)[0]) == "0.2.0-b2"
    # another index has a cache file of its own; a cache that cannot be written only costs a fresh read
    (tmp_path / "not-a-dir").write_text("")
    assert newest(selfupdate.cached_index(str(index_dir), str(tmp_path / "not-a-dir"))[0]) == "0.2.0-b2"


def update_settings(tmp_path: Path, **keys) -> object:
    from spur_hpc import conf

    body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in {"cache_dir": str(tmp_path / "cache"), **keys}.items())
    return conf.parse("[update]\n" + body).update


def test_spurctld_logs_one_line_at_start_when_an_update_exists(tmp_path: Path, caplog) -> None:
    import logging

    index_dir = two_releases_published(tmp_path)
    log = logging.getLogger("test.update")
    with caplog.at_level(logging.INFO, logger="test.update"):
        selfupdate.startup_check(update_settings(tmp_path, index=str(index_dir)), ("0.1.0", "b1"), log)
        selfupdate.startup_check(update_settings(tmp_path, index=str(index_dir)), ("0.2.0", "b2"), log)
        selfupdate.startup_check(update_settings(tmp_path, index=str(tmp_path / "gone")), ("0.2.0", "b2"), log)
        selfupdate.startup_check(
            update_settings(tmp_path, index=str(index_dir), check_on_startup=False), ("0", "x"), log
        )
        selfupdate.startup_check(update_settings(tmp_path), ("0", "x"), log)  # no index: nothing to ask
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert (
        lines[0][0] == "WARNING"
        and "update available on channel stable: 0.1.0 (build b1) -> 0.2.0 (build b2)" in lines[0][1]
    )
    assert "spur self-update" in lines[0][1]
    assert lines[1] == ("INFO", "[update] spur 0.2.0 (build b2) is up to date on channel stable")
    assert lines[2][0] == "WARNING" and "could not check" in lines[2][1] and "cannot read" in lines[2][1]
    assert len(lines) == 3
    nightly = update_settings(tmp_path, index=str(index_dir), channel="nightly")
    with caplog.at_level(logging.INFO, logger="test.update"):
        selfupdate.startup_check(nightly, ("0.2.0", "b2"), log)
    assert "no channel 'nightly'" in caplog.records[-1].getMessage()


def test_auto_update_installs_beside_the_running_release_and_restarts_nothing(tmp_path: Path, caplog, monkeypatch):
    import logging

    index_dir = two_releases_published(tmp_path)
    calls = []

    def self_update(location, channel, prefix, log=print):
        calls.append((location, channel, prefix))
        return install.InstallResult("0.2.0-b2", True, "0.1.0-b1", f"installed 0.2.0-b2 in {prefix}")

    monkeypatch.setattr(selfupdate, "self_update", self_update)
    monkeypatch.setattr(selfupdate.processes, "restart_advice", lambda *a: pytest.fail("nothing is restarted"))
    settings = update_settings(tmp_path, index=str(index_dir), auto_update=True)
    log = logging.getLogger("test.update")
    with caplog.at_level(logging.INFO, logger="test.update"):
        selfupdate.startup_check(settings, ("0.1.0", "b1"), log, prefix=tmp_path / "opt")
        selfupdate.startup_check(settings, ("0.1.0", "b1"), log)  # not run from PREFIX/releases/<id>
    assert calls == [(str(index_dir), "stable", tmp_path / "opt")]
    messages = [r.getMessage() for r in caplog.records]
    assert any("auto_update: installed 0.2.0-b2" in m and "nothing was restarted" in m for m in messages)
    assert "auto_update installs only into an installed release" in messages[-1]


def test_spur_version_check_and_self_update_read_the_index_of_update(tmp_path: Path, monkeypatch, capsys) -> None:
    from spur_hpc.cli import spur

    index_dir = two_releases_published(tmp_path)
    spur_conf = tmp_path / "spur.conf"
    spur_conf.write_text(f'[update]\nindex = "{index_dir}"\ncache_dir = "{tmp_path / "cache"}"\n')
    monkeypatch.setenv("SPUR_CONF", str(spur_conf))
    monkeypatch.delenv(selfupdate.INDEX_ENV, raising=False)
    assert spur.main(["version", "--check"]) == 0
    out = capsys.readouterr().out
    assert "-> 0.2.0 (build b2)" in out or "is up to date on channel stable" in out
    assert spur.main(["version", "--check", "--nightly"]) == 1
    assert "no channel 'nightly'" in capsys.readouterr().err
    spur_conf.write_text("")
    assert spur.main(["version", "--check"]) == 1
    assert "set [update] index in spur.conf" in capsys.readouterr().err
