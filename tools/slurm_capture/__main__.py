"""Capture Slurm's output: `.venv/bin/python -m tools.slurm_capture capture|capture-json [--out DIR] [--no-install]`.

Starts Debian's Slurm 22.05 (installed with apt-get when missing) as a four-node peer with slurmdbd and MariaDB on
127.0.0.1, runs tools/slurm_capture/session.py against it and writes one JSON per command (and session.json) to
tests/golden/slurm-22.05/. tests/integration/test_slurm_replay.py replays the same session on Spur. capture-json
runs tools/slurm_capture/json_session.py (--json, as root and as nobody) into tests/golden/slurm-22.05-json/,
replayed by tests/integration/test_slurm_json_replay.py. capture-priority runs priority_session.py (sprio and
sshare under priority/multifactor) into tests/golden/slurm-22.05-priority/. capture-accounts runs
accounts_session.py (sacctmgr) into tests/golden/slurm-22.05-accounts/, replayed by test_sacctmgr_replay.py.
capture-limits runs limits_session.py (AccountingStorageEnforce=limits) into tests/golden/slurm-22.05-limits/,
checked by tests/integration/test_limits_cluster.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from tools.slurm_capture import accounts_session, json_session, limits_session, priority_session, session
from tools.slurm_capture.peer import (
    ACCOUNTING_PACKAGES,
    SLURM_BIN,
    SLURM_PACKAGES,
    PeerShape,
    SlurmPeer,
    ensure_packages,
)
from tools.slurm_capture.runner import Side, WaitTimedOut, run_session

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "slurm-22.05"
GOLDEN_JSON = ROOT / "tests" / "golden" / "slurm-22.05-json"
GOLDEN_PRIORITY = ROOT / "tests" / "golden" / "slurm-22.05-priority"
GOLDEN_ACCOUNTS = ROOT / "tests" / "golden" / "slurm-22.05-accounts"
GOLDEN_LIMITS = ROOT / "tests" / "golden" / "slurm-22.05-limits"


def capture(
    out: Path,
    allow_install: bool,
    run=run_session,
    files: dict[str, str] = session.FILES,
    shape: PeerShape | None = None,
) -> int:
    packages = ensure_packages(allow_install, SLURM_PACKAGES + ACCOUNTING_PACKAGES)
    with tempfile.TemporaryDirectory(prefix="spur-slurm-capture-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        work = root / "work"
        work.mkdir()
        for name, text in files.items():
            (work / name).write_text(text)
            (work / name).chmod(0o755)
        shape = shape or PeerShape(
            session.CLUSTER, session.NODES, session.slurm_node_lines(), "SlurmdParameters=config_overrides", True
        )
        peer = SlurmPeer(root / "slurm", shape)
        try:
            t0 = time.monotonic()
            peer.start()
            print(f"slurm up in {time.monotonic() - t0:.1f} s", flush=True)
            env = {k: v for k, v in peer.env().items() if not k.startswith(("SPUR_", "SBATCH_", "SRUN_", "SALLOC_"))}
            env = {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
            side = Side(SLURM_BIN, env, work)
            t0 = time.monotonic()
            try:
                results = run(side)
            except WaitTimedOut as exc:
                print(f"the session did not reach the states it was written for: {exc}", file=sys.stderr)
                print(peer.logs(), file=sys.stderr)
                return 1
            print(f"{len(results)} commands in {time.monotonic() - t0:.0f} s", flush=True)
            version = side.run("sinfo -V").stdout.decode().split()[-1]
        finally:
            peer.stop()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("[0-9][0-9][0-9]-*.json"):
        old.unlink()
    for r in results:
        (out / f"{r['capture']}.json").write_text(json.dumps(r, indent=1, ensure_ascii=False) + "\n")
    meta = {
        "slurm_version": version,
        "packages": packages,
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hostname": socket.gethostname(),
        "kernel": f"{os.uname().release} {os.uname().version}",
        "scratch": str(root),
        "work": str(work),
        "cluster": shape.cluster_name,
        "slurm_conf_nodes": shape.node_lines,
        "slurm_conf_extra": shape.extra_conf,
        "jobs": side.jobs,
        "wait_secs": side.waits,
        "captures": len(results),
    }
    (out / "session.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(results)} captures of Slurm {version} to {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.slurm_capture", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="run the session on Debian's Slurm and write the captures")
    cap.add_argument("--out", type=Path, default=GOLDEN, help=f"where the captures go (default {GOLDEN})")
    cap.add_argument("--no-install", action="store_true", help="never run apt-get; fail when a package is missing")
    js = sub.add_parser("capture-json", help="run the --json session on Debian's Slurm and write its captures")
    js.add_argument("--out", type=Path, default=GOLDEN_JSON, help=f"where the captures go (default {GOLDEN_JSON})")
    js.add_argument("--no-install", action="store_true", help="never run apt-get; fail when a package is missing")
    pr = sub.add_parser("capture-priority", help="run the sprio/sshare session (multifactor, slurmdbd)")
    pr.add_argument("--out", type=Path, default=GOLDEN_PRIORITY, help=f"where the captures go ({GOLDEN_PRIORITY})")
    pr.add_argument("--no-install", action="store_true", help="never run apt-get; fail when a package is missing")
    ac = sub.add_parser("capture-accounts", help="run the sacctmgr session (slurmdbd)")
    ac.add_argument("--out", type=Path, default=GOLDEN_ACCOUNTS, help=f"where the captures go ({GOLDEN_ACCOUNTS})")
    ac.add_argument("--no-install", action="store_true", help="never run apt-get; fail when a package is missing")
    li = sub.add_parser("capture-limits", help="run the limits session (AccountingStorageEnforce=limits, slurmdbd)")
    li.add_argument("--out", type=Path, default=GOLDEN_LIMITS, help=f"where the captures go ({GOLDEN_LIMITS})")
    li.add_argument("--no-install", action="store_true", help="never run apt-get; fail when a package is missing")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error(f"{opts.command} runs Slurm's daemons as root (SlurmUser=root): run it as root")
    if opts.command == "capture-priority":
        p = priority_session
        shape = PeerShape(p.CLUSTER, p.NODES, p.node_lines(), p.SLURM_CONF, True)
        return capture(opts.out, not opts.no_install, p.run_priority_session, p.FILES, shape)
    if opts.command == "capture-accounts":
        a = accounts_session
        shape = PeerShape(a.CLUSTER, a.NODES, a.node_lines(), a.SLURM_CONF, True)
        return capture(opts.out, not opts.no_install, a.run_accounts_session, a.FILES, shape)
    if opts.command == "capture-limits":
        lm = limits_session
        shape = PeerShape(lm.CLUSTER, lm.NODES, lm.node_lines(), lm.SLURM_CONF, True)
        return capture(opts.out, not opts.no_install, lm.run_limits_session, lm.FILES, shape)
    if opts.command == "capture-json":
        return capture(opts.out, not opts.no_install, json_session.run_json_session, json_session.FILES)
    return capture(opts.out, not opts.no_install)


if __name__ == "__main__":
    sys.exit(main())
