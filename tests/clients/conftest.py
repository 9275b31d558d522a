"""The real-client tier: submitit, dask-jobqueue and snakemake with its SLURM executor plugin, installed from
PyPI at the pins of constraints.txt and used unchanged, against 3 controllers and 2 agents on loopback with
accounting in a real PostgreSQL (sacct answers from it; submitit and snakemake poll sacct).

- `.venv-clients/HASH` at the repo root holds the clients, built once per content of constraints.txt (HASH
  is its hash, with the packages asked for and the Python version) with `pip install -c constraints.txt`; a
  rerun reuses it. The clients run in their own
  interpreter, as a user's would; Spur's venv never sees them.
- `slurm_site` is the cluster as the clients see it: a bin/ directory first on PATH holding Slurm's command
  names (shim.py, one copy each), which log every call and run Spur's command of that name from Spur's venv
  with the cluster's client config. Jobs inherit that PATH (sbatch exports the environment), so srun and
  scontrol inside a job go through the same shims.
- Every client run has a hard deadline (a status poll that fails can make a client wait for ever); a failed
  test prints the command lines Spur refused or never answered, with Spur's answer.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import pg
from agents import AgentProc
from harness import BIN, ControllerCluster

pg_server, pg_database = pg.pg_server, pg.pg_database  # fixtures, bound by name

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONSTRAINTS = HERE / "constraints.txt"
CLIENT_VENV = REPO / ".venv-clients"
CLIENT_PACKAGES = ("submitit", "dask-jobqueue", "distributed", "snakemake", "snakemake-executor-plugin-slurm")
# every Slurm command Spur installs: a client must never reach Debian's by falling through PATH
SLURM_COMMANDS = (
    "sbatch", "srun", "salloc", "squeue", "sacct", "scancel", "scontrol", "sinfo", "sacctmgr", "sshare", "sprio",
)  # fmt: skip
VENV_BUILD_SECS = 900
AGENTS = 2


def constraints_hash() -> str:
    """What the venv depends on: the pins, the packages asked for, and the Python that runs them."""
    key = CONSTRAINTS.read_bytes() + repr((CLIENT_PACKAGES, sys.version_info[:3])).encode()
    return hashlib.sha256(key).hexdigest()[:16]


def build_client_venv() -> Path:
    """The clients' Python, in .venv-clients/HASH: built only when what it depends on changed. Each hash has
    a directory of its own, so a rebuild never pulls a venv from under a test session that still runs it."""
    root = CLIENT_VENV / constraints_hash()
    python, stamp = root / "bin" / "python", root / ".complete"
    CLIENT_VENV.mkdir(exist_ok=True)
    with open(CLIENT_VENV / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes at once build it once
        if stamp.exists() and python.exists():
            return python
        for old in CLIENT_VENV.iterdir():  # venvs of other pins, and a build that was interrupted
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            elif old.name != lock.name.rsplit("/", 1)[-1]:
                old.unlink()
        base = getattr(sys, "_base_executable", sys.executable)
        steps = [
            [base, "-m", "venv", str(root)],
            [str(python), "-m", "pip", "install", "--quiet", "-c", str(CONSTRAINTS), *CLIENT_PACKAGES],
        ]
        deadline = time.monotonic() + VENV_BUILD_SECS
        for argv in steps:
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic())
                )
            except subprocess.TimeoutExpired:
                pytest.fail(f"building {root} took over {VENV_BUILD_SECS} s at: {' '.join(argv)}", False)
            if done.returncode != 0:
                shutil.rmtree(root, ignore_errors=True)
                pytest.fail(
                    f"building {root} failed at: {' '.join(argv)} (exit {done.returncode})\n"
                    f"{done.stdout[-3000:]}{done.stderr[-5000:]}",
                    False,
                )
        stamp.touch()
        return python


@pytest.fixture(scope="session")
def client_python() -> Path:
    return build_client_venv()


def spur_entry_points() -> dict[str, str]:
    """The console scripts pyproject.toml declares now (a command another part adds shows up at once)."""
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["project"]["scripts"]


def write_shims(bin_dir: Path, conf: Path, call_log: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    template = (HERE / "shim.py").read_text()
    entries = spur_entry_points()
    for name in SLURM_COMMANDS:
        text = (
            template.replace("@NAME@", name)
            .replace("@ENTRY@", entries.get(name, ""))
            .replace("@SPUR_PYTHON@", sys.executable)
            .replace("@SPUR_CONF@", str(conf))
            .replace("@CALL_LOG@", str(call_log))
        )
        path = bin_dir / name
        path.write_text(f"#!{sys.executable} -I\n{text}")
        path.chmod(0o755)


def accounting_section(url: str, password_file: str) -> str:
    return f'[accounting]\ndatabase_url = "{url}"\npassword_file = "{password_file}"\n'


def shown(argv: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(a) for a in argv)


@dataclass
class SlurmSite:
    """The cluster, the clients' environment and the log of every Slurm command they ran."""

    cluster: ControllerCluster
    agents: list[AgentProc]
    root: Path
    work: Path
    bin_dir: Path
    call_log: Path
    conf: Path
    client_python: Path
    env: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------ running things

    def client(self, argv: list[str], timeout: float, what: str) -> subprocess.CompletedProcess:
        """Run the clients' Python with argv in the work dir; past the deadline its whole process group is
        killed and the test fails saying so (with the client's output and the calls it made)."""
        proc = subprocess.Popen(
            [str(self.client_python), *argv],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(
                f"{what} did not finish within {timeout:.0f} s (killed): it hangs on what Spur answered.\n"
                f"--- its stdout (tail)\n{out[-6000:]}\n--- its stderr (tail)\n{err[-10000:]}\n"
                f"--- Slurm calls that failed or never returned\n{self.refusals_text()}"
            ) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def driver(self, script: str, *args: str, timeout: float, what: str) -> dict:
        """Run drivers/SCRIPT ARGS with the clients' Python; its last `RESULT <json>` line is the answer."""
        done = self.client([str(HERE / "drivers" / script), *args], timeout, what)
        results = [line[len("RESULT ") :] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not results:
            raise AssertionError(
                f"{what} failed (exit {done.returncode}, {'no' if not results else 'a'} RESULT line)\n"
                f"--- its stdout (tail)\n{done.stdout[-6000:]}\n--- its stderr (tail)\n{done.stderr[-10000:]}\n"
                f"--- Slurm calls that failed or never returned\n{self.refusals_text()}"
            )
        return json.loads(results[-1])

    def spur(self, *argv: str) -> subprocess.CompletedProcess:
        """Spur's own command, for the test's checks (not logged among the clients' calls)."""
        env = dict(os.environ, SPUR_CONF=str(self.conf))
        env.pop("SPUR_CONTROLLER_ADDR", None)
        return subprocess.run(
            [str(BIN / argv[0]), *argv[1:]], cwd=self.work, env=env, capture_output=True, text=True, timeout=60
        )

    # ------------------------------------------------------------ the call log

    def calls(self) -> list[dict]:
        """One dict per call, in start order: argv, cwd, job, rc (None: never returned), stdout, stderr."""
        merged: dict[str, dict] = {}
        try:
            lines = self.call_log.read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            call = merged.setdefault(entry["id"], {"rc": None, "stdout": "", "stderr": ""})
            call.update({k: v for k, v in entry.items() if k not in ("event", "time")})
        return list(merged.values())

    def calls_of(self, name: str) -> list[dict]:
        return [c for c in self.calls() if c.get("argv", [""])[0] == name]

    def refused(self) -> list[dict]:
        return [c for c in self.calls() if c["rc"] != 0]

    def refusals_text(self) -> str:
        lines = []
        for c in self.refused():
            where = f" (in job {c['job']})" if c.get("job") else ""
            answer = "never returned" if c["rc"] is None else f"exit {c['rc']}"
            lines.append(f"$ {shown(c.get('argv', []))}{where}\n  -> {answer}: {c['stderr'].strip()[:1500]}")
        return "\n".join(lines) or "(none)"

    def calls_text(self) -> str:
        lines = []
        for c in self.calls():
            rc = "running" if c["rc"] is None else c["rc"]
            lines.append(f"[{rc}] {shown(c.get('argv', []))}")
            if c["rc"] == 0 and c["stderr"].strip():  # warnings: accepted, perhaps not honoured
                lines.append(f"    stderr: {c['stderr'].strip()[:500]}")
        return "\n".join(lines) or "(none)"

    def job_states(self, job_ids: list[str]) -> dict[str, str]:
        """State of each job (`N` or `N_t`) from squeue, which still lists finished jobs for a while."""
        listed = self.spur("squeue", "-h", "-t", "all", "-o", "%i %T").stdout.split("\n")
        states = dict(line.split(" ", 1) for line in listed if " " in line)
        return {j: states.get(j, "") for j in job_ids}


@pytest.fixture
def slurm_site(make_cluster, pg_database, pg_server, client_python, tmp_path) -> SlurmSite:
    cluster = make_cluster(3, extra_sections=accounting_section(pg_database.url, pg_server.password_file))
    agents = [AgentProc(tmp_path / f"agent{i}", cluster.hosts, cpus=4).start() for i in range(AGENTS)]
    conf = cluster.client_conf()
    root = tmp_path / "site"
    work, home = root / "work", root / "home"
    for path in (work, home):
        path.mkdir(parents=True)
    bin_dir, call_log = root / "bin", root / "calls.jsonl"
    write_shims(bin_dir, conf, call_log)
    user = pwd.getpwuid(os.getuid()).pw_name
    env = {
        "PATH": f"{bin_dir}:{client_python.parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "USER": user,
        "LOGNAME": user,
        "LANG": "C.UTF-8",
        "SPUR_CONF": str(conf),
        "PYTHONUNBUFFERED": "1",
    }
    return SlurmSite(cluster, agents, root, work, bin_dir, call_log, conf, client_python, env)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    site = item.funcargs.get("slurm_site") if hasattr(item, "funcargs") else None
    if report.when != "call" or not isinstance(site, SlurmSite):
        return
    report.sections.append(("Slurm calls Spur refused or never answered", site.refusals_text()))
    report.sections.append(("every Slurm call the clients made", site.calls_text()))
    if report.failed:
        for agent in site.agents:
            report.sections.append((f"spurd log ({agent.name}, tail)", agent.log_text()[-4000:]))
