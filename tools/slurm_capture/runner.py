"""Runs the session on one side (Slurm's commands or Spur's) and returns what each command printed."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.slurm_capture.session import SESSION, Run, Wait, capture_names_of

COMMAND_TIMEOUT_SECS = 60
JOB_ID = re.compile(r"(\d+)")
PLACEHOLDER = re.compile(r"\{([a-z0-9_]+)\}")


class WaitTimedOut(RuntimeError):
    pass


@dataclass
class Side:
    """Where a side's commands are (bin_dir/sbatch ...), their environment and working directory."""

    bin_dir: Path
    env: dict[str, str]
    work: Path
    jobs: dict[str, int | None] = field(default_factory=dict)  # Run.job name -> the id that side printed
    waits: dict[str, float] = field(default_factory=dict)  # Wait.what -> seconds it took (None: timed out)
    log: list[str] = field(default_factory=list)

    def resolve(self, cmd: str) -> str:
        def job_id(m: re.Match) -> str:
            value = self.jobs.get(m.group(1))
            return str(value) if value is not None else "0"

        return PLACEHOLDER.sub(job_id, cmd)

    def run(self, cmd: str) -> subprocess.CompletedProcess:
        argv = shlex.split(self.resolve(cmd))
        argv[0] = str(self.bin_dir / argv[0])
        return subprocess.run(
            argv, cwd=self.work, env=self.env, capture_output=True, timeout=COMMAND_TIMEOUT_SECS, check=False
        )


def wait(side: Side, step: Wait, timeout: float) -> bool:
    until = re.compile(step.until) if step.until else None
    absent = re.compile(step.absent) if step.absent else None
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    while True:
        out = side.run(step.cmd).stdout.decode(errors="replace")
        if (until is None or until.search(out)) and (absent is None or not absent.search(out)):
            side.waits[step.what] = round(time.monotonic() - t0, 2)
            return True
        if time.monotonic() > deadline:
            side.log.append(f"wait for {step.what!r} timed out after {timeout:.0f} s; last output: {out[-300:]!r}")
            return False
        time.sleep(0.3)


READ_ONLY = re.compile(r"^(squeue|sinfo|sacct|scontrol (-o )?(show|ping))\b")


def run_as_user(side: Side, cmd: str) -> subprocess.CompletedProcess:
    """One command on `side`; `as:USER:CMD` runs CMD as USER (setpriv, the user's own group)."""
    if not cmd.startswith("as:"):
        return side.run(cmd)
    _, user, rest = cmd.split(":", 2)
    argv = shlex.split(side.resolve(rest))
    argv[0] = str(side.bin_dir / argv[0])
    prefix = ["setpriv", f"--reuid={user}", "--init-groups", f"--regid={'nogroup' if user == 'nobody' else user}"]
    return subprocess.run(prefix + argv, cwd=side.work, env=side.env, capture_output=True, timeout=COMMAND_TIMEOUT_SECS)


def run_steps(side: Side, steps: list, wait_timeout=None, strict: bool = True, after_read=None, run=None) -> list[dict]:
    """Every Run of a session's steps on `side`, in order. wait_timeout(step) gives each Wait's patience; with strict,
    a Wait that times out raises (a capture must see the states it was written for). after_read(result) is
    called right after each command that changes nothing (squeue, sinfo, sacct, scontrol show). run(side, cmd)
    runs one command (side.run unless given)."""
    names = iter(capture_names_of(steps))
    results = []
    started = time.monotonic()
    for step in steps:
        if isinstance(step, Wait):
            timeout = wait_timeout(step) if wait_timeout else step.timeout
            if not wait(side, step, timeout) and strict:
                raise WaitTimedOut(side.log[-1])
            continue
        assert isinstance(step, Run)
        resolved = side.resolve(step.cmd)
        secs = round(time.monotonic() - started, 2)  # when it ran in the session (a job's time limit runs meanwhile)
        proc = run(side, step.cmd) if run is not None else side.run(step.cmd)
        stdout = proc.stdout.decode(errors="surrogateescape")
        if step.job is not None:
            m = JOB_ID.search(stdout) if proc.returncode == 0 else None
            side.jobs[step.job] = int(m.group(1)) if m else None
        results.append(
            {
                "capture": next(names),
                "cmd": step.cmd,
                "resolved": resolved,
                "rc": proc.returncode,
                "stdout": stdout,
                "stderr": proc.stderr.decode(errors="surrogateescape"),
                "secs": secs,
            }
        )
        if after_read is not None and READ_ONLY.match(step.cmd):
            after_read(results[-1])
    return results


def run_session(side: Side, wait_timeout=None, strict: bool = True, after_read=None) -> list[dict]:
    """The main session (session.SESSION) on `side`: run_steps."""
    return run_steps(side, SESSION, wait_timeout, strict, after_read)
