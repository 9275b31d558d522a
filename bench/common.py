"""Shared by the benchmarks: statistics and the results file (machine, versions, command, numbers)."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# $SPUR_BENCH_RESULTS writes the results elsewhere (a smoke run of a benchmark keeps the published ones intact)
RESULTS = Path(os.environ.get("SPUR_BENCH_RESULTS") or ROOT / "bench" / "results")
_LOAD_AT_START = [round(x, 2) for x in os.getloadavg()]


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)  # so that every `finally:` stops what the benchmark started


signal.signal(signal.SIGTERM, _exit_on_sigterm)
sys.path.insert(0, str(ROOT / "tests"))


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]

    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p99": pct(99),
        "min": ordered[0],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def source_state() -> dict[str, object]:
    """The commit measured, and whether daemons/ had uncommitted changes (the tree may be shared)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""

    return {
        "commit": git("rev-parse", "--short=12", "HEAD"),
        "daemons_dirty": bool(git("status", "--porcelain", "daemons")),
    }


def machine() -> dict[str, object]:
    versions = {}
    for dist in ("spur-hpc", "pysyncobj", "grpcio", "protobuf"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        # the machine may be shared: 1, 5 and 15 minute load averages when the benchmark started and ended
        "loadavg_at_start": _LOAD_AT_START,
        "loadavg_at_record": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
        "source": source_state(),
    }


def record(name: str, results: dict[str, object]) -> Path:
    """Write bench/results/<name>.json. A run with changed controller settings or patches is an experiment:
    it goes to bench/results/experiments/<name>.json and its rows say what was changed."""
    changed = list(results.get("controller_settings") or []) + [
        f"patch {p}" for p in results.get("controller_patches") or []
    ]
    folder = RESULTS
    if changed:
        folder = RESULTS / "experiments"
        for r in results.get("rows", []):
            r["label"] += f" [experiment: {', '.join(changed)}]"
    folder.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in "+".join(changed))
    path = folder / (f"{name}--{slug}.json" if changed else f"{name}.json")
    body = {
        "name": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "results": results,
    }
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path


def finish(name: str, result: dict[str, object], opts, rows: list[dict]) -> Path:
    """Record a run (with the controller settings and patches it ran with) and print its rows."""
    result.update(controller_settings=opts.set, controller_patches=opts.patch, rows=rows)
    path = record(name, result)
    print_rows(rows)
    print(f"-> {path}")
    return path


# ---------------------------------------------------------------------------- table rows
# A row of the benchmark table: one or more checks (measured value vs target). The first check is the
# primary one; bench/run_all.py uses it to pick the better of several runs.


def check(
    name: str,
    value: float | None,
    op: str | None,
    target: float | None,
    unit: str,
    better: str | None = None,
    missing: str = "n/a",
) -> dict:
    """op is "<=", ">=" or None (no target: informational); better defaults to the direction op implies;
    missing is what to print when there is no value (like "> 300 s (deadline)")."""
    if op is None:
        ok = True
    else:
        ok = value is not None and (value <= target if op == "<=" else value >= target)
    return {
        "name": name,
        "value": value,
        "op": op,
        "target": target,
        "unit": unit,
        "better": better or ("lower" if op == "<=" else "higher"),
        "ok": ok,
        "missing": missing,
    }


def row(key: str, label: str, checks: list[dict], detail: str = "", **extra: object) -> dict:
    return {"key": key, "label": label, "checks": checks, "ok": all(c["ok"] for c in checks), "detail": detail, **extra}


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "s" and value < 1:
        return f"{value * 1000:.0f} ms"
    if unit == "ms" and value < 100:
        return f"{value:.1f} ms"
    if unit in ("ms",):
        return f"{value:.0f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "%":
        return f"{value:.0f} %"
    if unit == "":
        return f"{value:g}"
    if unit == "x":
        return f"{value:.2f}x"
    if abs(value) >= 100:
        return f"{value:,.0f} {unit}".strip()
    if abs(value) >= 10:
        return f"{value:.1f} {unit}".strip()
    return f"{value:.2f} {unit}".strip()


def fmt_target(c: dict) -> str:
    if c["op"] is None:
        return "no target"
    return f"{c['op']} {fmt_value(c['target'], c['unit'])}"


def fmt_check(c: dict) -> str:
    return c.get("missing", "n/a") if c["value"] is None else fmt_value(c["value"], c["unit"])


def describe(r: dict) -> str:
    parts = []
    for c in r["checks"]:
        text = f"{c['name']} {fmt_check(c)} (target {fmt_target(c)})"
        if "range" in c:
            lo, hi = c["range"]
            text += f" [{fmt_value(lo, c['unit'])} .. {fmt_value(hi, c['unit'])}]"
        parts.append(text)
    return "; ".join(parts)


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        mark = "PASS" if r["ok"] else "MISS"
        print(f"  {mark}  {r['label']}: {describe(r)}" + (f"  ({r['detail']})" if r.get("detail") else ""), flush=True)


def command_env(env: dict[str, str], scratch: Path) -> dict[str, str]:
    """env for timing Spur's commands as an installed release runs them: with their modules' bytecode cached.
    The source tree's __pycache__ is stale for every module changed since it was written, and with
    PYTHONDONTWRITEBYTECODE (set on this machine) each command would compile those again on every run: a cost
    an installed release (pip writes the .pyc files) never pays. So the bytecode goes to a scratch prefix,
    written by the first (warm-up) run."""
    env = dict(env, PYTHONPYCACHEPREFIX=str(scratch / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    return cpu_seconds_of(f"/proc/{pid}/stat")


def cpu_seconds_of(stat_path: str) -> float:
    """utime + stime from a stat file of /proc: a process's (/proc/PID/stat) or one thread's (.../task/TID/stat)."""
    data = Path(stat_path).read_bytes()
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# ---------------------------------------------------------------------------- profiling (py-spy)


def py_spy_start(pid: int, seconds: float, out: Path, rate: int = 200, idle: bool = False, gil: bool = False):
    """Sample pid with py-spy for `seconds` into a collapsed-stack file; returns the Popen (or None when
    py-spy is not installed: .venv/bin/pip install py-spy)."""
    import shutil
    import subprocess

    exe = Path(sys.executable).parent / "py-spy"
    exe_path = str(exe) if exe.exists() else shutil.which("py-spy")
    if not exe_path:
        print("py-spy is not installed (.venv/bin/pip install py-spy): no profile", flush=True)
        return None
    argv = [exe_path, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate),
            "--format", "raw", "--threads", "--nonblocking", "--output", str(out)]  # fmt: skip
    if idle:
        argv.append("--idle")
    if gil:
        argv.append("--gil")  # only the thread holding the GIL: where the process's Python CPU time goes
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile_summary(path: Path, top: int = 12) -> dict[str, object]:
    """The heaviest functions of a py-spy raw (collapsed) file, for the results: by self samples (the frame on
    top of the stack) and by inclusive samples (anywhere on the stack), each as a share of all samples, with
    line numbers dropped ("list_jobs (spur_hpc/controller/service.py)"). Empty when the file is missing."""
    import re

    if not path.exists():
        return {}
    frame_re = re.compile(r"^(.*?) \((.*?)(?::\d+)?\)$")

    def name(frame: str) -> str:
        m = frame_re.match(frame.strip())
        if not m:
            return frame.strip()
        where = m.group(2)
        for marker in ("site-packages/", "/lib/python3"):
            if marker in where:
                where = where.split(marker, 1)[1].lstrip("/")
                break
        if "spur_hpc/" in where:
            where = "spur_hpc/" + where.split("spur_hpc/", 1)[1]
        return f"{m.group(1)} ({where})"

    total = 0
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread ("))]
        if not frames:
            continue
        total += count
        names = [name(f) for f in frames]
        own[names[-1]] = own.get(names[-1], 0) + count
        for n in set(names):
            if not n.endswith(("(threading.py)", "(concurrent/futures/thread.py)")):  # on every thread's stack
                incl[n] = incl.get(n, 0) + count

    def shares(counts: dict[str, int]) -> list[list[object]]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [[n, round(c / total, 3)] for n, c in best] if total else []

    return {"file": str(path), "samples": total, "top_self": shares(own), "top_inclusive": shares(incl)}


# ---------------------------------------------------------------------------- controller settings for experiments


def add_set_option(parser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra [controller] setting for every controller (TOML value), e.g. append_entries_period_ms=5; "
        "the published rows use the defaults",
    )


def controller_extra(opts) -> str:
    lines = []
    for item in opts.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        lines.append(f"{key.strip()} = {value.strip()}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- filling a cluster


def submit_many(address: str, count: int, concurrency: int = 64, spec_for=None, progress_every: int = 0) -> float:
    """Submit `count` jobs to the controller at address with `concurrency` calls in flight (asyncio gRPC);
    spec_for(i) -> JobSpec (default: a `true` job of root that stays PENDING without agents). Returns jobs/s."""
    import asyncio
    import uuid

    import grpc

    from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc

    default = slurm_pb2.JobSpec(name="fill", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
    spec_for = spec_for or (lambda i: default)

    async def run() -> None:
        next_index = 0
        async with grpc.aio.insecure_channel(address) as channel:
            stub = slurm_pb2_grpc.SlurmControllerStub(channel)

            async def worker() -> None:
                nonlocal next_index
                while next_index < count:
                    i = next_index
                    next_index += 1
                    request = slurm_pb2.SubmitJobRequest(spec=spec_for(i), idempotency_key=uuid.uuid4().hex)
                    for attempt in range(20):
                        try:
                            await stub.SubmitJob(request, timeout=30)
                            break
                        except grpc.RpcError:
                            if attempt == 19:
                                raise
                            await asyncio.sleep(0.2)
                    if progress_every and i and i % progress_every == 0:
                        print(f"  submitted {i} of {count}", flush=True)

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    t0 = time.monotonic()
    asyncio.run(run())
    return count / (time.monotonic() - t0)


# ---------------------------------------------------------------------------- a job as sbatch sends it

# sbatch passes the caller's whole environment (--export=ALL, Slurm's default), and the controllers keep it
# with the job. This fixed stand-in for a login shell's environment (35 variables, about 1.5 KB) makes the
# queue of the squeue benchmarks look like one filled by sbatch, the same on every machine.
TYPICAL_ENV = {
    "PATH": "/opt/spur/current/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/home/alice/.local/bin",
    "HOME": "/home/alice",
    "USER": "alice",
    "LOGNAME": "alice",
    "SHELL": "/bin/bash",
    "LANG": "C.UTF-8",
    "TERM": "xterm-256color",
    "PWD": "/home/alice/projects/simulation/run-042",
    "OLDPWD": "/home/alice/projects/simulation",
    "SHLVL": "1",
    "HOSTNAME": "login01",
    "MAIL": "/var/mail/alice",
    "EDITOR": "vim",
    "HISTSIZE": "10000",
    "LS_COLORS": "rs=0:di=01;34:ln=01;36:mh=00:pi=40;33:so=01;35:do=01;35:bd=40;33;01:cd=40;33;01:or=40;31;01:"
    "mi=00:su=37;41:sg=30;43:ca=30;41:tw=30;42:ow=34;42:st=37;44:ex=01;32:*.tar=01;31:*.tgz=01;31:*.zip=01;31",
    "MODULEPATH": "/etc/environment-modules/modules:/usr/share/modules/versions:/usr/share/modules/modulefiles",
    "MODULESHOME": "/usr/share/modules",
    "LOADEDMODULES": "gcc/12.2.0:openmpi/4.1.4:python/3.11",
    "_LMFILES_": "/usr/share/modules/modulefiles/gcc/12.2.0:/usr/share/modules/modulefiles/openmpi/4.1.4:"
    "/usr/share/modules/modulefiles/python/3.11",
    "LD_LIBRARY_PATH": "/opt/openmpi/4.1.4/lib:/opt/gcc/12.2.0/lib64:/usr/local/lib",
    "MANPATH": "/opt/openmpi/4.1.4/share/man:/opt/gcc/12.2.0/share/man:/usr/share/man",
    "CC": "gcc",
    "CXX": "g++",
    "FC": "gfortran",
    "OMP_NUM_THREADS": "1",
    "MPI_HOME": "/opt/openmpi/4.1.4",
    "PYTHONPATH": "/home/alice/projects/simulation/lib",
    "VIRTUAL_ENV": "/home/alice/.venvs/sim",
    "XDG_RUNTIME_DIR": "/run/user/1000",
    "XDG_SESSION_ID": "42",
    "SSH_CONNECTION": "10.0.0.5 51234 10.0.0.10 22",
    "SSH_CLIENT": "10.0.0.5 51234 22",
    "SSH_TTY": "/dev/pts/3",
    "SLURM_SUBMIT_DIR": "/home/alice/projects/simulation/run-042",
    "SLURM_SUBMIT_HOST": "login01",
}
