# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event log of spur.cluster.rolling_upgrade, written from the task results as they arrive.

The runbook's tasks do not write the log themselves (that was a quarter of its tasks): a task that is a step
of the log names it in its vars, and this callback turns its result into an event.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: spur_upgrade_log
type: aggregate
short_description: Write the JSON event log of spur.cluster.rolling_upgrade
version_added: 1.1.0
description:
  - Turns the results of the rolling upgrade's tasks into its event log (docs/upgrading.md describes it) and
    writes the log on the control node after every step, so an interrupted run leaves one.
  - A task is a step of the log when its vars hold C(_spur_upgrade_event) (C(step), C(kind), C(phase) when it
    is not the one the play's vars name in C(_spur_upgrade_phase), C(since=run) for a step timed from the
    start of the run, and C(started=STEP) for a restart whose result gives C(start_secs), whose last seconds
    (the daemon's own start until its probe answers) become a gate event STEP of their own, C(steps=true) for
    a module whose result lists the steps it did with their kinds and seconds, each becoming an event); the
    step's detail is the C(__spur_upgrade_detail) fact the task sets, or else the module's result. The step's
    time is the task's own on that host. The facts C(__spur_upgrade_run) (the plan, the log's path),
    C(__spur_upgrade_outcome) (how a host came out) and C(__spur_upgrade_status) are read from C(set_fact) results.
  - Every task result of every host is counted per play, so the log shows what one host's turn cost.
  - Loaded without configuration by C(playbooks/callback_plugins/spur_upgrade_log.py) next to the playbook; it
    does nothing in a playbook that never sets C(__spur_upgrade_run).
author:
  - Spur contributors (!UNKNOWN)
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

# Keys of a module result that say nothing about the step.
_NOISE = frozenset(
    ("invocation", "changed", "failed", "attempts", "skipped", "skip_reason", "false_condition", "stdout_lines",
     "stderr_lines", "diff", "warnings", "deprecations", "ansible_facts", "_ansible_no_log", "retries")
)


def _plain(value):
    """Task vars and results as plain JSON values (Ansible may hand over its own str and dict subclasses)."""
    return json.loads(json.dumps(value, default=str))


def _step_list(value, secs: float) -> bool:
    """A module's list of steps, each with step, kind and secs, that fits in the task's secs."""
    if not isinstance(value, list) or not value:
        return False
    try:
        return all(str(p["step"]) and p["kind"] in ("info", "work", "gate") and float(p["secs"]) >= 0
                   for p in value) and sum(float(p["secs"]) for p in value) <= secs + 0.01
    except (KeyError, TypeError, ValueError):
        return False


def _covered(events: list, kind: str) -> float:
    """Seconds of the run that steps of this kind took: hosts of a batch (or of the stage) that wait or work at
    the same time count once, so gates, work and the rest add up to the wall time."""
    total, end = 0.0, None
    for begin, finish in sorted((e["t"], e["t"] + e["secs"]) for e in events if e["kind"] == kind):
        if end is None or begin > end:
            total += finish - begin
            end = finish
        elif finish > end:
            total += finish - end
            end = finish
    return round(total, 3)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "spur.cluster.spur_upgrade_log"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.run: dict = {}
        self.status = "running"
        self.events: list[dict] = []
        self.outcomes: dict[str, dict] = {}
        self.task_results: dict[str, dict[str, list[dict]]] = {}
        self.started: dict[tuple[str, str], float] = {}
        self.play = ""
        self.phase = ""

    # ---------------------------------------------------------------- Ansible's calls

    def v2_playbook_on_play_start(self, play) -> None:
        self.play = play.get_name()
        # A play of the runbook names its phase in its vars; a step may name another.
        self.phase = str((play.vars or {}).get("_spur_upgrade_phase", ""))

    def v2_runner_on_start(self, host, task) -> None:
        self.started[(host.get_name(), task._uuid)] = time.time()

    def v2_runner_on_ok(self, result) -> None:
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result) -> None:
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result) -> None:
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats) -> None:
        self._write()

    # ---------------------------------------------------------------- the log

    def _result(self, result, status: str) -> None:
        host = result._host.get_name()
        task = result._task
        now = time.time()
        began = self.started.pop((host, task._uuid), now)
        data = result._result or {}
        facts = data.get("ansible_facts") or {}
        changed = False
        if "__spur_upgrade_run" in facts:
            self.run = _plain(facts["__spur_upgrade_run"])
            changed = True
        if not self.run:
            return  # not the rolling upgrade (or before its plan)
        self.task_results.setdefault(self.play, {}).setdefault(host, []).append(
            {"task": task.get_name(), "action": task.action, "status": status, "secs": round(now - began, 3)}
        )
        if "__spur_upgrade_outcome" in facts:
            outcome = _plain(facts["__spur_upgrade_outcome"])
            self.outcomes[outcome.get("host", host)] = outcome
            changed = True
        if "__spur_upgrade_status" in facts:
            self.status = str(facts["__spur_upgrade_status"])
            changed = True
        spec = (task.vars or {}).get("_spur_upgrade_event")
        if spec and status not in ("skipped", "unreachable"):
            detail = facts.get("__spur_upgrade_detail")
            if detail is None:
                detail = {k: v for k, v in data.items() if k not in _NOISE and not k.startswith("_ansible")}
            spec = _plain(spec)
            if spec.get("since") == "run":  # a step that took since the run began (the guard rails)
                began = float(self.run.get("started") or began)
            steps = [(spec.get("step", ""), spec.get("kind", "info"), began, now)]
            # A restart (spur_service_restart) is work until the new process is spawned, then the daemon's own
            # start until its probe answers: that part is the gate spec["started"] names.
            waited = data.get("start_secs") if spec.get("started") and status == "ok" else None
            if isinstance(waited, (int, float)) and 0 <= waited <= now - began:
                steps = [(steps[0][0], steps[0][1], began, now - waited), (spec["started"], "gate", now - waited, now)]
            # A module that does several steps in one call (spur_daemon_swap) lists them with their seconds: each
            # becomes an event, the first one also carrying Ansible's own time for the task.
            if spec.get("steps") and status == "ok" and _step_list(data.get("steps"), now - began):
                steps = []
                until = now
                for part in reversed(data["steps"]):
                    since = until - float(part["secs"])
                    steps.insert(0, [str(part["step"]), str(part["kind"]), since, until])
                    until = since
                steps[0][2] = began
            for step, kind, since, until in steps:
                self.events.append(
                    {
                        "t": round(since, 3),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since)),
                        "host": host,
                        "phase": spec.get("phase", self.phase),
                        "step": step,
                        "kind": kind,
                        "secs": round(until - since, 3) if kind != "info" else 0.0,
                        "detail": _plain(detail),
                    }
                )
            changed = True
        if changed:
            self._write()

    def _write(self) -> None:
        run = self.run
        path = run.get("log_path")
        if not path or str(run.get("check_mode")).lower() == "true":
            return
        now = time.time()
        started = float(run.get("started") or now)
        events = sorted(self.events, key=lambda e: e["t"])
        log = {
            "playbook": "spur.cluster.rolling_upgrade",
            "status": self.status,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "wall_secs": round(now - started, 3),
            "gate_secs": _covered(events, "gate"),
            "work_secs": _covered(events, "work"),
            "target": run.get("target"),
            "mode": run.get("mode"),
            "batch_size": run.get("batch_size"),
            "canary": run.get("canary"),
            "stage_only": run.get("stage_only"),
            "cluster_wal_level_before": run.get("cluster_wal_level"),
            "plan": {"controllers": run.get("controllers") or {}, "agents": run.get("agents") or {}},
            "nodes_before": run.get("nodes_before") or {},
            "hosts": sorted(self.outcomes.values(), key=lambda o: float(o.get("t") or 0)),
            "events": events,
            "task_results": self.task_results,
        }
        tmp = "%s.tmp%d" % (path, os.getpid())
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(log, fh, indent=1)
                fh.write("\n")
            os.replace(tmp, path)
        except OSError as exc:
            self._display.warning("spur_upgrade_log: cannot write the event log %s: %s" % (path, exc))
