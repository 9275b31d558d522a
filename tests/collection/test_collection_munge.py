"""spur.cluster on a cluster that requires MUNGE: a module on the managed host's plain Python (no release, no
grpcio; see collection_helpers.bare_python) gets its credential from the host's munged through libmunge, and
the controllers accept it as root; a bare claim is refused. Real munged, real controllers, real spurd."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from agents import AgentProc, cleanup
from harness import wait_until
from prereqs import needs

pytestmark = [
    pytest.mark.slow,
    needs(shutil.which("munged") is not None, "munged is not installed", "apt-get install munge"),
]


@pytest.fixture
def munge_socket():
    home = Path(tempfile.mkdtemp(prefix="spur-munge-"))
    home.chmod(0o755)  # munged refuses a socket in a directory that not everyone may enter
    key, sock = home / "munge.key", home / "munge.socket"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    proc = subprocess.Popen(
        ["munged", "-F", f"--key-file={key}", f"--socket={sock}", f"--pid-file={home}/pid", f"--seed-file={home}/seed"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until(sock.exists, 10, "munged to create its socket")
    yield str(sock)
    proc.terminate()
    proc.wait(10)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def secured(make_cluster, munge_socket, tmp_path):
    section = f'[auth]\ntype = "munge"\nmunge_socket = "{munge_socket}"\nadmins = ["root"]\n'
    cluster = make_cluster(1, extra_sections=section)
    agent = AgentProc(tmp_path / "agent", cluster.hosts, extra="\n" + section).start()
    yield cluster, agent
    agent.stop()
    cleanup()


def test_a_module_on_plain_python_drains_with_a_munge_credential_and_a_bare_claim_is_refused(
    secured, munge_socket, playbook
):
    cluster, agent = secured
    conn = {"controllers": [m.probe_url for m in cluster.members], "timeout": 5, "name": agent.name}
    drain = {**conn, "state": "drained", "reason": "munge test", "munge_socket": munge_socket}
    results = playbook(
        [
            {"spur.cluster.spur_node": {**drain, "auth_type": "none"}, "register": "claim", "failed_when": False},
            {"spur.cluster.spur_node": {**drain, "auth_type": "munge"}, "register": "munge"},
            {"spur.cluster.spur_node": {**drain, "auth_type": "auto"}, "register": "auto"},
        ]
    )
    assert "requires a MUNGE credential" in results["claim"]["msg"], results["claim"]
    assert results["munge"]["changed"] is True and results["munge"]["node"]["state"] in ("DRAINED", "DRAINING")
    assert results["auto"]["changed"] is False  # auto finds the socket: MUNGE again, and the drain is there
