"""A rolling upgrade's progress from its event log: the one status line `spur cluster upgrade` redraws, and what
`spur cluster upgrade --status` prints about a running or interrupted run (plus what a re-run would do next).

The event log is the JSON file spur.cluster's spur_upgrade_log callback rewrites after every step
(docs/upgrading.md describes it); everything here is read from it, nothing is asked of the cluster.
"""

from __future__ import annotations

import calendar
import glob
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spur_hpc.cli.runner import CliError

DONE = ("upgraded", "at_target")
LEFT_OUT = ("skipped_busy", "unreachable")
# A running run rewrites its log at every step; one silent for this long was interrupted (or hangs in a gate).
STALE_SECS = 600


@dataclass
class UpgradeStatus:
    status: str
    phase: str
    target: str
    controllers_done: int
    controllers_total: int
    agents_done: int
    agents_total: int
    batch: int
    batches: int
    left_out: list[str]
    failed: list[str]
    elapsed_s: float
    estimate_s: float | None
    to_do: dict[str, list[str]] = field(default_factory=dict)

    def line(self) -> str:
        """One line: phase, controllers, agents in their batch, left-out nodes, elapsed, what is left."""
        parts = [
            f"{self.phase}",
            f"controllers {self.controllers_done}/{self.controllers_total}",
            f"agents {self.agents_done}/{self.agents_total}"
            + (f" in batch {self.batch} of {self.batches}" if self.batches else ""),
        ]
        if self.left_out:
            parts.append("busy or skipped: " + ", ".join(self.left_out))
        if self.failed:
            parts.append("failed: " + ", ".join(self.failed))
        parts.append(f"elapsed {_secs(self.elapsed_s)}")
        if self.estimate_s is not None and self.status == "running":
            parts.append(f"about {_secs(self.estimate_s)} left")
        return f"upgrade to {self.target} [{self.status}]: " + " | ".join(parts)

    def next_run(self) -> str:
        """What running the playbook again would do, from what this run has left."""
        if self.status == "done":
            return "nothing: every host this run planned is upgraded (a re-run skips hosts on the target)"
        if self.status == "refused":
            return "the same checks again: fix what the refusal names, then run again"
        steps = []
        if self.status == "staged":
            steps.append("find the stage done and go straight to the turns")
        if self.to_do.get("controllers"):
            steps.append("upgrade the controllers " + ", ".join(self.to_do["controllers"]) + " (the leader last)")
        if self.to_do.get("agents"):
            steps.append("upgrade the agents " + ", ".join(self.to_do["agents"]))
        if not steps:
            steps.append("raise the WAL level if it is not, and verify")
        return "a re-run would " + "; then ".join(steps) + "; hosts already on the target are skipped"


def _secs(value: float) -> str:
    value = max(0.0, value)
    return f"{value:.0f} s" if value < 120 else f"{int(value // 60)} min {int(value % 60):02d} s"


def read_log(path: str | os.PathLike) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise CliError(f"cannot read the event log {path} ({exc.strerror})") from None
    except ValueError as exc:
        raise CliError(f"{path} is not an event log (not JSON: {exc})") from None
    if not isinstance(data, dict) or data.get("playbook") != "spur.cluster.rolling_upgrade":
        raise CliError(f"{path} is not the event log of a rolling upgrade (spur.cluster.rolling_upgrade)")
    return data


def newest_log(directory: str = ".") -> str:
    """The newest spur-upgrade-*.json in the directory (where ansible-playbook writes the log by default)."""
    found = sorted(glob.glob(os.path.join(directory, "spur-upgrade-*.json")), key=os.path.getmtime)
    if not found:
        raise CliError(
            f"no spur-upgrade-*.json event log in {os.path.abspath(directory)}; "
            "give its path: spur cluster upgrade --status FILE"
        )
    return found[-1]


def summarize(log: dict[str, Any], now: float | None = None) -> UpgradeStatus:
    """The run's progress as the event log tells it."""
    now = time.time() if now is None else now
    plan = log.get("plan") or {}
    controllers = plan.get("controllers") or {}
    agents = plan.get("agents") or {}
    hosts = {h["host"]: h for h in log.get("hosts") or []}
    outcome = {name: h.get("outcome") for name, h in hosts.items()}
    ctl_planned = list(controllers.get("upgrade") or []) + list(controllers.get("at_target") or [])
    batches = [list(b) for b in agents.get("batches") or []]
    agent_planned = [a for b in batches for a in b] + list(agents.get("at_target") or [])
    ctl_done = [c for c in ctl_planned if outcome.get(c) in DONE]
    agents_done = [a for a in agent_planned if outcome.get(a) in DONE]
    left_out = sorted(h for h, o in outcome.items() if o in LEFT_OUT)
    failed = sorted(h for h, o in outcome.items() if o == "failed")
    finished = set(agents_done) | set(left_out) | set(failed)
    batch = next((i + 1 for i, b in enumerate(batches) if not set(b) <= finished), len(batches))
    events = log.get("events") or []
    status = str(log.get("status") or "running")
    written = _epoch(log.get("written")) or now
    if status == "running" and now - written > STALE_SECS:
        status = "interrupted"
    phase = events[-1]["phase"] if events else "preflight"
    started = _epoch(log.get("started")) or now
    elapsed = (now if status == "running" else written) - started
    to_do = {
        "controllers": [c for c in controllers.get("upgrade") or [] if outcome.get(c) not in DONE],
        "agents": [a for b in batches for a in b if outcome.get(a) not in DONE and a not in left_out],
    }
    return UpgradeStatus(
        status=status,
        phase=phase,
        target=str((log.get("target") or {}).get("release_id") or "?"),
        controllers_done=len(ctl_done),
        controllers_total=len(ctl_planned),
        agents_done=len(agents_done),
        agents_total=len(agent_planned),
        batch=batch if batches else 0,
        batches=len(batches),
        left_out=left_out,
        failed=failed,
        elapsed_s=elapsed,
        estimate_s=_estimate(hosts, to_do, batches, finished),
        to_do=to_do,
    )


def _estimate(hosts: dict, to_do: dict, batches: list[list[str]], finished: set[str]) -> float | None:
    """What is left, from the turns so far: the mean controller turn per controller left, the mean agent turn
    per batch left (a batch's agents take their turns together). None before the first turn ends."""
    turns: dict[str, list[float]] = {"controller": [], "agent": []}
    for h in hosts.values():
        secs = (h.get("detail") or {}).get("secs")
        if h.get("outcome") == "upgraded" and secs is not None:
            turns[h.get("kind", "agent")].append(float(secs))
    if not turns["controller"] and not turns["agent"]:
        return None
    left = 0.0
    if to_do["controllers"]:
        if not turns["controller"]:
            return None
        left += len(to_do["controllers"]) * sum(turns["controller"]) / len(turns["controller"])
    batches_left = sum(1 for b in batches if not set(b) <= finished)
    if batches_left:
        per_turn = turns["agent"] or turns["controller"]
        if not per_turn:
            return None
        left += batches_left * sum(per_turn) / len(per_turn)
    return left if not math.isnan(left) else None


def _epoch(stamp: Any) -> float | None:
    if not stamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def show_status(path: str | None) -> int:
    """spur cluster upgrade --status [LOG]: the status line of that run, and what a re-run would do next."""
    log_path = path or newest_log()
    status = summarize(read_log(log_path))
    print(status.line())
    print(f"next: {status.next_run()}")
    print(f"event log: {Path(log_path).resolve()}")
    return 0 if status.status in ("done", "staged", "running") else 1


class StatusLine:
    """The status line while `spur cluster upgrade` runs: redrawn in place on a terminal, a line per change
    otherwise. Fed by each ansible-runner event; it re-reads the event log, which the callback keeps current."""

    def __init__(self, log_path: str, stream, tty: bool | None = None) -> None:
        self.log_path = log_path
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.last = ""
        # A log older than this run (an earlier run's, at the same path) is not this run's progress.
        self.mtime = time.time() - 1.0

    def refresh(self) -> None:
        try:
            mtime = os.path.getmtime(self.log_path)
        except OSError:
            return  # not written yet (the plan is still running)
        if mtime <= self.mtime and not self.tty or mtime < self.mtime:
            return
        self.mtime = mtime
        try:
            line = summarize(read_log(self.log_path)).line()
        except CliError:
            return  # caught between two writes
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        elif _without_elapsed(line) != _without_elapsed(self.last):
            print(line, file=self.stream, flush=True)
        self.last = line

    def close(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()


def _without_elapsed(line: str) -> str:
    """The line without its clock, so that a line is printed per change of progress, not per second."""
    return " | ".join(p for p in line.split(" | ") if not p.startswith(("elapsed ", "about ")))
