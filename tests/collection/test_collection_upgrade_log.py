"""Unit tests of the spur_upgrade_log callback: a restart whose result gives start_secs becomes two events, the
restart's work and the daemon's start as a gate (`started`), and a step without it stays one event.

The callback is fed results as Ansible would hand them over (host, task with its vars, the module's result)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from ansible_collections.spur.cluster.plugins.callback.spur_upgrade_log import CallbackModule


def _result(host: str, uuid: str, vars_: dict, data: dict) -> SimpleNamespace:
    task = SimpleNamespace(_uuid=uuid, vars=vars_, action="spur.cluster.spur_service_restart",
                           get_name=lambda: "Restart, on the new release, the daemon spurd")
    return SimpleNamespace(_host=SimpleNamespace(get_name=lambda: host), _task=task, _result=data)


def _callback(tmp_path: Path) -> CallbackModule:
    callback = CallbackModule()
    callback.phase = "agents"
    callback._result(_result("ctl-0", "plan", {}, {"ansible_facts": {"__spur_upgrade_run": {
        "log_path": str(tmp_path / "events.json"), "started": 1000.0}}}), "ok")
    return callback


def _run_step(callback: CallbackModule, vars_: dict, data: dict, began: float, ended: float, monkeypatch) -> None:
    host = SimpleNamespace(get_name=lambda: "node-0")
    monkeypatch.setattr("time.time", lambda: began)
    callback.v2_runner_on_start(host, SimpleNamespace(_uuid="restart"))
    monkeypatch.setattr("time.time", lambda: ended)
    callback.v2_runner_on_ok(_result("node-0", "restart", vars_, data))


def test_a_restart_with_start_secs_is_its_work_then_the_started_gate(tmp_path, monkeypatch):
    callback = _callback(tmp_path)
    spec = {"_spur_upgrade_event": {"step": "swap", "kind": "work", "started": "started"}}
    _run_step(callback, spec, {"changed": True, "pid": 42, "stop_secs": 0.3, "start_secs": 0.5}, 1010.0, 1011.0,
              monkeypatch)
    steps = [(e["step"], e["kind"], e["t"], e["secs"]) for e in callback.events]
    assert steps == [("swap", "work", 1010.0, 0.5), ("started", "gate", 1010.5, 0.5)]
    log = json.loads((tmp_path / "events.json").read_text())
    assert log["gate_secs"] == 0.5 and log["work_secs"] == 0.5


def test_a_step_without_start_secs_or_a_failed_restart_stays_one_event(tmp_path, monkeypatch):
    callback = _callback(tmp_path)
    spec = {"_spur_upgrade_event": {"step": "swap", "kind": "work", "started": "started"}}
    _run_step(callback, spec, {"changed": True}, 1010.0, 1011.0, monkeypatch)
    # start_secs longer than the task itself cannot be: the whole task stays the restart's work
    _run_step(callback, spec, {"changed": True, "start_secs": 5.0}, 1020.0, 1021.0, monkeypatch)
    plain = {"_spur_upgrade_event": {"step": "switch", "kind": "work"}}
    _run_step(callback, plain, {"changed": True, "start_secs": 0.2}, 1030.0, 1031.0, monkeypatch)
    assert [(e["step"], e["kind"], e["secs"]) for e in callback.events] == [
        ("swap", "work", 1.0), ("swap", "work", 1.0), ("switch", "work", 1.0)]


def test_a_module_that_lists_its_steps_gives_one_event_each_the_first_with_ansibles_time(tmp_path, monkeypatch):
    callback = _callback(tmp_path)
    spec = {"_spur_upgrade_event": {"step": "swap", "kind": "work", "started": "started", "steps": True}}
    steps = [{"step": "dispatch_hold", "kind": "info", "secs": 0.1}, {"step": "switch", "kind": "work", "secs": 0.25},
             {"step": "swap", "kind": "work", "secs": 0.25}, {"step": "started", "kind": "gate", "secs": 0.5}]
    _run_step(callback, spec, {"changed": True, "steps": steps, "start_secs": 0.5}, 1010.0, 1012.0, monkeypatch)
    assert [(e["step"], e["kind"], e["t"], e["secs"]) for e in callback.events] == [
        ("dispatch_hold", "info", 1010.0, 0.0), ("switch", "work", 1011.0, 0.25), ("swap", "work", 1011.25, 0.25),
        ("started", "gate", 1011.5, 0.5)]
    # Steps longer than the task, or malformed, cannot be split: the task stays the restart and its gate.
    callback.events.clear()
    _run_step(callback, spec, {"changed": True, "steps": [{"step": "switch", "kind": "work", "secs": 9}],
                               "start_secs": 0.5}, 1020.0, 1021.0, monkeypatch)
    _run_step(callback, spec, {"changed": True, "steps": [{"step": "switch"}]}, 1030.0, 1031.0, monkeypatch)
    assert [(e["step"], e["secs"]) for e in callback.events] == [("swap", 0.5), ("started", 0.5), ("swap", 1.0)]
