"""spur cluster upgrade's status line and --status, read from a rolling upgrade's event log (cli/upgradeprogress.py)."""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from spur_hpc.cli import upgradeprogress
from spur_hpc.cli.runner import CliError

STARTED = 1_700_000_000.0


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def event_log(status: str = "running", outcomes: dict[str, tuple[str, float]] | None = None, written: float = 60):
    """Three controllers, four agents in batches of two; outcomes: host -> (outcome, turn secs)."""
    outcomes = outcomes or {}
    return {
        "playbook": "spur.cluster.rolling_upgrade",
        "status": status,
        "started": stamp(STARTED),
        "written": stamp(STARTED + written),
        "target": {"release_id": "0.2.0-abc"},
        "plan": {
            "controllers": {"upgrade": ["ctl-0", "ctl-1", "ctl-2"], "at_target": []},
            "agents": {"batches": [["node-0", "node-1"], ["node-2", "node-3"]], "at_target": []},
        },
        "hosts": [
            {"host": h, "kind": "controller" if h.startswith("ctl") else "agent", "outcome": o, "detail": {"secs": s}}
            for h, (o, s) in outcomes.items()
        ],
        "events": [{"phase": "agents" if any(h.startswith("node") for h in outcomes) else "controllers"}],
    }


def test_the_line_counts_hosts_names_the_batch_and_estimates_from_the_turns_so_far():
    log = event_log(
        outcomes={
            "ctl-0": ("upgraded", 10),
            "ctl-1": ("upgraded", 10),
            "ctl-2": ("upgraded", 10),
            "node-0": ("upgraded", 4),
            "node-1": ("skipped_busy", 0),
        }
    )
    status = upgradeprogress.summarize(log, now=STARTED + 42)
    line = status.line()
    assert "[running]: agents | controllers 3/3 | agents 1/4 in batch 2 of 2" in line, line
    assert "busy or skipped: node-1" in line and "elapsed 42 s" in line
    assert "about 4 s left" in line  # one batch left at the one agent turn seen (4 s)
    assert status.next_run().startswith("a re-run would upgrade the agents node-2, node-3")


def test_an_interrupted_run_says_what_a_re_run_does_next():
    log = event_log(outcomes={"ctl-0": ("upgraded", 10)}, written=60)
    status = upgradeprogress.summarize(log, now=STARTED + 60 + upgradeprogress.STALE_SECS + 1)
    assert status.status == "interrupted" and "controllers 1/3" in status.line()
    assert "upgrade the controllers ctl-1, ctl-2 (the leader last); then upgrade the agents" in status.next_run()
    done = upgradeprogress.summarize(event_log(status="done"), now=STARTED + 100)
    assert done.next_run().startswith("nothing")


def test_status_reads_the_newest_log_here_and_refuses_what_is_not_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CliError, match="no spur-upgrade-"):
        upgradeprogress.show_status(None)
    (tmp_path / "spur-upgrade-1.json").write_text(json.dumps(event_log(status="done")))
    assert upgradeprogress.show_status(None) == 0
    out = capsys.readouterr().out
    assert "upgrade to 0.2.0-abc [done]" in out and "next: nothing" in out
    (tmp_path / "other.json").write_text(json.dumps({"playbook": "deploy"}))
    with pytest.raises(CliError, match="not the event log of a rolling upgrade"):
        upgradeprogress.show_status(str(tmp_path / "other.json"))


def test_the_line_is_printed_once_per_change_when_not_a_terminal(tmp_path):
    path = tmp_path / "log.json"
    out = io.StringIO()
    path.write_text(json.dumps(event_log(status="done")))
    os.utime(path, (time.time() - 60, time.time() - 60))
    line = upgradeprogress.StatusLine(str(path), out, tty=False)
    line.refresh()  # an earlier run's log at the same path: nothing
    path.write_text(json.dumps(event_log(outcomes={"ctl-0": ("upgraded", 5)})))
    line.refresh()
    line.mtime = 0.0  # the same content rewritten: no new line
    line.refresh()
    path.write_text(json.dumps(event_log(outcomes={"ctl-0": ("upgraded", 5), "ctl-1": ("upgraded", 5)})))
    line.mtime = 0.0
    line.refresh()
    printed = out.getvalue().splitlines()
    assert len(printed) == 2 and "controllers 1/3" in printed[0] and "controllers 2/3" in printed[1], printed
    tty = io.StringIO()
    redrawn = upgradeprogress.StatusLine(str(path), tty, tty=True)
    redrawn.refresh()
    redrawn.close()
    assert tty.getvalue().startswith("\r\033[K") and tty.getvalue().endswith("\n")
