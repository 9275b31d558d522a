"""`make demo`: a whole Spur cluster on this machine's loopback, no root needed.

Today it starts three controllers on 127.0.1.1-3 (gRPC :6817, Raft :6821, probes :6822), waits for one
leader and prints each member's /status. `make demo-down` stops them. Everything lives in .spur-demo/.
A second `make demo` stops the old cluster first, so it never needs cleaning by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / ".spur-demo"
BIN = Path(sys.executable).parent
CONTROLLERS = [f"127.0.1.{i}" for i in (1, 2, 3)]


def conf_text(ip: str) -> str:
    peers = ", ".join(f'"{c}:6821"' for c in CONTROLLERS)
    hosts = ", ".join(f'"{c}:6817"' for c in CONTROLLERS)
    return f"""[cluster]
name = "demo"

[controller]
hosts = [{hosts}]
listen_addr = "{ip}:6817"
raft_addr = "{ip}:6821"
peers = [{peers}]
probe_addr = "{ip}:6822"
state_dir = "{DEMO}/{ip}/state"
raft_secret_file = "{DEMO}/raft.secret"
"""


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def down() -> None:
    pids_file = DEMO / "pids.json"
    if not pids_file.exists():
        print("demo: nothing running")
        return
    pids = json.loads(pids_file.read_text())
    for name, pid in pids.items():
        try:
            os.kill(pid, signal.SIGTERM)
            print(f"demo: stopped {name} (pid {pid})")
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    for pid in pids.values():
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
                time.sleep(0.1)
            except ProcessLookupError:
                break
    pids_file.unlink()


def up() -> int:
    down()
    DEMO.mkdir(exist_ok=True)
    secret = DEMO / "raft.secret"
    if not secret.exists():
        secret.write_text(os.urandom(16).hex() + "\n")
    secret.chmod(0o600)
    pids = {}
    for ip in CONTROLLERS:
        home = DEMO / ip
        home.mkdir(parents=True, exist_ok=True)
        (home / "spur.conf").write_text(conf_text(ip))
        log = open(home / "spurctld.log", "ab")
        proc = subprocess.Popen(
            [str(BIN / "spurctld"), "--conf", str(home / "spur.conf")],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pids[f"spurctld@{ip}"] = proc.pid
        print(f"demo: started spurctld on {ip} (pid {proc.pid}, log {home / 'spurctld.log'})")
    (DEMO / "pids.json").write_text(json.dumps(pids, indent=1))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        leaders = [ip for ip in CONTROLLERS if get(f"http://{ip}:6822/metrics/nodes")[0] == 200]
        if len(leaders) == 1:
            break
        time.sleep(0.2)
    else:
        print("demo: no leader within 30 s; see the logs above", file=sys.stderr)
        return 1
    for ip in CONTROLLERS:
        code, body = get(f"http://{ip}:6822/status")
        status = json.loads(body) if code == 200 else {}
        print(
            f"\n{ip}:6822/status -> role={status.get('role')} term={status.get('term')} "
            f"cluster_id={status.get('cluster_id')}"
        )
        print(body)
    print("The cluster stays up. Try: curl -s http://127.0.1.1:6822/status ; stop it with: make demo-down")
    return 0


if __name__ == "__main__":
    sys.exit(up() if sys.argv[1:] == ["up"] else down() or 0)
