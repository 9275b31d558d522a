"""Run every benchmark (each at least twice by default), keep the better run of each row with the range
over the runs, and print the table.

Each benchmark writes bench/results/<name>.json (bench/common.py). Here each one runs --runs times; the
file left behind holds the better run (per row, by the row's first check) plus, for every check, the range
over all runs and every run's rows. The machine may be shared with other work, so single runs are noisy.

  python bench/run_all.py                     # all but the Slurm comparison, 2 runs each
  python bench/run_all.py --only submit cli   # some of them
  python bench/run_all.py --slurm             # the Slurm comparison too (bench/slurm_peer.py)
  python bench/run_all.py --table             # print the table of the results already recorded
  python bench/run_all.py --table --markdown  # the same as a Markdown table (docs/benchmarks.md)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# isort: off
import common
# isort: on

# name, arguments, deadline of one run (s)
BENCHES: list[tuple[str, list[str], int]] = [
    ("submit", [], 600),
    ("commit", [], 300),
    ("idle", [], 300),
    ("plan", [], 600),
    ("limits", [], 600),
    ("cli", [], 900),
    ("squeue", [], 1800),
    ("heartbeats", [], 900),
    ("failover", ["--trials", "20"], 1200),
    ("catchup", [], 5400),
    ("membership", [], 2400),
    ("agent_restart", ["--restarts", "20"], 1200),
    ("release_install", ["--installs", "5"], 1800),
    ("upgrade", [], 3600),
    ("upgrade_many", ["--agents", "100"], 5400),
]
SLURM = ("slurm_peer", [], 3600)
# Benchmarks that run once whatever --runs says (one run of bench/upgrade.py deploys a cluster and upgrades it
# twice with the real playbooks: 19 minutes in the recorded run, on 2 shared cores).
MAX_RUNS = {"upgrade": 1, "upgrade_many": 1}

# Rows of the table that no recorded run covers yet: (key, label, why). Every row is measured now.
NOT_MEASURED: list[tuple[str, str, str]] = []
ORDER = [name for name, _a, _t in BENCHES] + [SLURM[0]]


def better(c: dict, a: float | None, b: float | None) -> bool:
    """True when value a is better than b for check c."""
    if a is None:
        return False
    if b is None:
        return True
    return a < b if c["better"] == "lower" else a > b


def merge(bodies: list[dict]) -> dict:
    """Best run per row (first check decides), every check with its range over the runs."""
    best_body = bodies[0]
    rows_by_key: dict[str, list[dict]] = {}
    for body in bodies:
        for r in body["results"].get("rows", []):
            rows_by_key.setdefault(r["key"], []).append(r)
    merged_rows = []
    for candidates in rows_by_key.values():
        best = candidates[0]
        for r in candidates[1:]:
            if better(r["checks"][0], r["checks"][0]["value"], best["checks"][0]["value"]):
                best = r
        out = json.loads(json.dumps(best))
        for i, c in enumerate(out["checks"]):
            values = [r["checks"][i]["value"] for r in candidates if i < len(r["checks"])]
            values = [v for v in values if v is not None]
            if values:
                c["range"] = [min(values), max(values)]
        out["runs"] = len(candidates)
        merged_rows.append(out)
    # the body of the run that gave the first row's best value carries the details
    if merged_rows:
        first = merged_rows[0]
        for body in bodies:
            rows = body["results"].get("rows", [])
            if rows and rows[0]["checks"][0]["value"] == first["checks"][0]["value"]:
                best_body = body
                break
    merged = json.loads(json.dumps(best_body))
    merged["results"]["rows"] = merged_rows
    merged["runs"] = [
        {"when": b["when"], "loadavg": b["machine"].get("loadavg_at_record"), "rows": b["results"].get("rows", [])}
        for b in bodies
    ]
    return merged


def kill_leftovers(scratch: str) -> list[int]:
    """Processes whose command line names this run's scratch directory (controllers, agents, Slurm daemons
    a benchmark failed to stop): TERM, then KILL. Only ever processes of this run: the path is unique."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if scratch.encode() in cmdline:
                found.append(int(entry))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in found:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM and found:
            time.sleep(5)
    return found


def run_once(name: str, args: list[str], deadline: int) -> int | str:
    """One run of bench/<name>.py with its temporary files in a scratch directory of its own; on timeout it
    gets SIGTERM (its `finally:` stops what it started), then SIGKILL; leftovers are killed either way."""
    scratch = tempfile.mkdtemp(prefix=f"spur-bench-{name}-")
    os.chmod(scratch, 0o755)  # bench/slurm_peer.py runs commands as the user nobody below it
    env = dict(os.environ, TMPDIR=scratch)
    proc = subprocess.Popen([sys.executable, str(common.ROOT / "bench" / f"{name}.py"), *args], env=env)
    try:
        rc: int | str = proc.wait(deadline)
    except subprocess.TimeoutExpired:
        rc = "timeout"
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        left = kill_leftovers(scratch)
        if left:
            print(f"===== {name}: killed {len(left)} leftover process(es) of this run: {left}", flush=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return rc


def run_bench(name: str, args: list[str], deadline: int, runs: int) -> bool:
    path = common.RESULTS / f"{name}.json"
    bodies = []
    runs = min(runs, MAX_RUNS.get(name, runs))
    for k in range(runs):
        print(f"===== {name} run {k + 1} of {runs}: bench/{name}.py {' '.join(args)}", flush=True)
        t0 = time.monotonic()
        rc = run_once(name, args, deadline)
        print(f"===== {name} run {k + 1}: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
        if rc != 0:
            continue
        bodies.append(json.loads(path.read_text()))
    if not bodies:
        return False
    merged = merge(bodies)
    path.write_text(json.dumps(merged, indent=2) + "\n")
    return True


def load_rows() -> list[tuple[str, dict]]:
    out = []
    for name in ORDER:
        path = common.RESULTS / f"{name}.json"
        if path.exists():
            body = json.loads(path.read_text())
            for r in body["results"].get("rows", []):
                out.append((body["when"], r))
    return out


def print_sources() -> None:
    """Where each result comes from: when, the machine's load, the commit, the command (Markdown)."""
    print("\n| result file | recorded (UTC) | runs | load 1/5/15 min (start -> end) | CPUs | commit | command |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in ORDER:
        path = common.RESULTS / f"{name}.json"
        if not path.exists():
            continue
        body = json.loads(path.read_text())
        m = body["machine"]
        src = m.get("source") or {}
        commit = src.get("commit") or "?"
        if src.get("daemons_dirty"):
            commit += " (daemons/ modified)"
        load = f"{m.get('loadavg_at_start', '?')} -> {m.get('loadavg_at_record', '?')}"
        runs = body.get("runs") or [{"when": body["when"]}]
        print(
            f"| bench/results/{name}.json | {', '.join(r['when'] for r in runs)} | {len(runs)} | {load} | "
            f"{m.get('cpus')} | {commit} | `{body['command']}` |"
        )


def print_table(markdown: bool) -> None:
    rows = load_rows()
    if markdown:
        print("| row | measured (better run) | range over runs | target | verdict |")
        print("| --- | --- | --- | --- | --- |")
        for _when, r in rows:
            measured = "; ".join(f"{c['name']} {common.fmt_check(c)}" for c in r["checks"])
            ranges = "; ".join(
                "1 run"
                if r.get("runs", 1) < 2
                else f"{common.fmt_value(c['range'][0], c['unit'])} .. {common.fmt_value(c['range'][1], c['unit'])}"
                if "range" in c
                else common.fmt_check(c)
                for c in r["checks"]
            )
            targets = "; ".join(common.fmt_target(c) for c in r["checks"])
            verdict = "pass" if r["ok"] else "**miss**"
            if all(c["op"] is None for c in r["checks"]):
                verdict = "(comparison)"
            print(f"| {r['label']} | {measured} | {ranges} | {targets} | {verdict} |")
        for _key, label, text in NOT_MEASURED:
            print(f"| {label} | {text} | | | |")
        print_sources()
        return
    print("\nrow | result")
    for when, r in rows:
        mark = "PASS" if r["ok"] else "MISS"
        if all(c["op"] is None for c in r["checks"]):
            mark = "INFO"
        print(f"{mark}  {r['label']}: {common.describe(r)}  [{when}, {r.get('runs', 1)} run(s)]")
        if r.get("detail"):
            print(f"        {r['detail']}")
    for _key, label, text in NOT_MEASURED:
        print(f"----  {label}: {text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="runs of each benchmark (the better one is kept)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these benchmarks only")
    parser.add_argument("--skip", nargs="+", metavar="NAME", default=[], help="leave these out")
    parser.add_argument("--slurm", action="store_true", help="also run the Slurm comparison (bench/slurm_peer.py)")
    parser.add_argument("--table", action="store_true", help="only print the table of recorded results")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    opts = parser.parse_args()
    if opts.table:
        print_table(opts.markdown)
        return
    chosen = BENCHES + ([SLURM] if opts.slurm or (opts.only and SLURM[0] in opts.only) else [])
    if opts.only:
        unknown = set(opts.only) - {name for name, _a, _t in chosen}
        if unknown:
            raise SystemExit(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: {', '.join(ORDER)}")
        chosen = [b for b in chosen if b[0] in opts.only]
    chosen = [b for b in chosen if b[0] not in opts.skip]
    failed = []
    for name, args, deadline in chosen:
        if not run_bench(name, args, deadline, opts.runs):
            failed.append(name)
    print_table(opts.markdown)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
