"""spur_install from a release index (spur-release publish), as a directory and over HTTP on 127.0.0.1.

The Molecule scenarios install from a release directory (spur_release_src); these install the same release
from an index into a scratch prefix on this machine, and require a second run to change nothing.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path

import pytest
import yaml

from playbook_runs import collections_path

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def index(release: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("release-index")
    subprocess.run(
        [str(VENV_BIN / "spur-release"), "publish", str(release), "--index", str(directory), "--channel", "stable"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return directory


@pytest.fixture
def served(index: Path):
    """The index over HTTP on 127.0.0.1 (a port of its own), for as long as the test runs."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(index))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def install(location: str, tmp_path: Path) -> list[dict]:
    """Run spur_install twice on this machine; -> the play recap of each run (ok, changed, failed)."""
    collections = collections_path(tmp_path)
    root = tmp_path / "host"
    playbook = tmp_path / "install.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "ansible.builtin.include_role": {"name": "spur.cluster.spur_install"},
                            "vars": {
                                "spur_install_release_index": location,
                                "spur_install_version": "0.1.0",
                                "spur_install_prefix": str(root / "opt" / "spur"),
                                "spur_install_bin_dir": str(root / "bin"),
                                "spur_install_cache_dir": str(root / "cache"),
                                "spur_install_download_dir": str(tmp_path / "downloads"),
                            },
                        }
                    ],
                }
            ]
        )
    )
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
        # The index is on loopback: never through a proxy.
        no_proxy="127.0.0.1",
        NO_PROXY="127.0.0.1",
    )
    recaps = []
    for _ in range(2):
        done = subprocess.run(
            [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
             "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
            capture_output=True, text=True, env=env, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        recaps.append(json.loads(done.stdout)["stats"]["localhost"])
    return recaps


def installed(tmp_path: Path, release: Path) -> dict:
    manifest = json.loads((release / "release.json").read_text())
    record = json.loads((tmp_path / "host" / "opt" / "spur" / "current" / "spur-release.json").read_text())
    assert (record["version"], record["build"]) == (manifest["version"], manifest["build"])
    assert (tmp_path / "host" / "bin" / "spurd").resolve().name == "spurd"
    return record


def test_install_from_an_index_directory(index: Path, release: Path, tmp_path: Path) -> None:
    first, second = install(str(index), tmp_path)
    assert first["changed"] > 0 and second["changed"] == 0
    installed(tmp_path, release)


def test_install_from_an_index_over_http(served: str, release: Path, tmp_path: Path) -> None:
    first, second = install(served, tmp_path)
    assert first["changed"] > 0 and second["changed"] == 0
    record = installed(tmp_path, release)
    # Downloaded once, on the control node, into a directory named after the release.
    assert (tmp_path / "downloads" / f"{record['version']}-{record['build']}" / "release.json").exists()
