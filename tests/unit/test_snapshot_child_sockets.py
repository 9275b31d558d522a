"""pysyncobj writes snapshots from a fork()ed child: the child must not keep spurctld's ports after spurctld exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# A daemon that listens on a port, forks a snapshot writer the way pysyncobj does (the child opens and writes its
# file after the fork, slowly), and closes its own socket (it exits); a new daemon then binds the same port while
# the child still runs.
SCRIPT = """
import os, socket, sys, time
if sys.argv[1] == "with-spurctld-handler":
    import spur_hpc.controller.raft  # noqa: F401  (registers the at-fork handler)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 0))
listener.listen()
port = listener.getsockname()[1]
kept = open(sys.argv[2], "w")  # a file the parent had open stays open in the child
pid = os.fork()
if pid == 0:
    with open(sys.argv[2] + ".dump", "w") as dump:
        time.sleep(1.5)
        dump.write("snapshot")
    kept.write("child")
    kept.close()
    os._exit(0)
time.sleep(0.5)  # the daemon stops a while after the snapshot began (the child runs its at-fork handler first)
listener.close()
again = socket.socket()
again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    again.bind(("127.0.0.1", port))
    again.listen()
    print("rebound")
except OSError as exc:
    print("in use:", exc.strerror)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize("mode, expected", [("with-spurctld-handler", "rebound"), ("plain", "in use")])
def test_a_snapshot_child_does_not_hold_the_daemons_ports(tmp_path: Path, mode: str, expected: str) -> None:
    kept = tmp_path / "kept.txt"
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(kept)], capture_output=True, text=True,
                          timeout=60, check=True)  # fmt: skip
    assert done.stdout.startswith(expected), done.stdout + done.stderr
    assert (tmp_path / "kept.txt.dump").read_text() == "snapshot"
    assert kept.read_text() == "child"
