"""tests/upgrade_events.py: the leader-last invariant over the event logs of rolling upgrades.

The logs below have the shape rolling_upgrade writes (collection/roles/spur_upgrade/tasks/controller.yml): a turn
event when a controller's upgrade begins, and the controller's outcome.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from upgrade_events import assert_leader_last, leader_last_violations

HELPER = Path(__file__).resolve().parents[1] / "upgrade_events.py"
CONTROLLERS = ("ctl-0", "ctl-1", "ctl-2")


def run_log(*turns: tuple[str, bool, str | None]) -> dict:
    """One run's event log: each (host, is_leader, leader at its turn), upgraded in this order."""
    events, hosts, done = [], [], []
    for t, (host, is_leader, leader) in enumerate(turns):
        still = [c for c in CONTROLLERS if c != host and c not in done]
        events.append(
            {
                "t": 100.0 + t,
                "host": host,
                "phase": "controllers",
                "step": "turn",
                "kind": "info",
                "detail": {"role": "leader" if is_leader else "follower", "is_leader": is_leader, "leader": leader,
                           "term": 3 + t, "still_to_upgrade": still},
            }
        )
        hosts.append({"t": 100.5 + t, "host": host, "kind": "controller", "outcome": "upgraded",
                      "detail": {"role_at_upgrade": "leader" if is_leader else "follower"}})
        done.append(host)
    return {"status": "done", "hosts": hosts, "events": events}


def test_the_leader_upgraded_last_holds() -> None:
    assert_leader_last(run_log(("ctl-1", False, "ctl-0"), ("ctl-2", False, "ctl-0"), ("ctl-0", True, "ctl-0")))


def test_leadership_moved_to_an_upgraded_controller_during_a_followers_turn_holds() -> None:
    # What the fresh clone saw: ctl-0 lost the lead to ctl-1 (already upgraded) while ctl-2 was upgraded, so all
    # three were followers at their turn. The playbook did right; roles == [follower, follower, leader] does not.
    log = run_log(("ctl-1", False, "ctl-0"), ("ctl-2", False, "ctl-1"), ("ctl-0", False, "ctl-1"))
    assert [h["detail"]["role_at_upgrade"] for h in log["hosts"]] != ["follower", "follower", "leader"]
    assert leader_last_violations([log]) == []


def test_a_leader_upgraded_while_others_ran_the_old_build_breaks_it() -> None:
    log = run_log(("ctl-0", True, "ctl-0"), ("ctl-1", False, "ctl-2"), ("ctl-2", True, "ctl-2"))
    assert leader_last_violations([log]) == [
        "ctl-0 was upgraded while it led (term 3) and ctl-1, ctl-2 still ran the old build"
    ]
    with pytest.raises(AssertionError, match="the leader-last invariant broke: ctl-0 was upgraded while it led"):
        assert_leader_last(log)


def test_the_last_controller_upgraded_as_a_follower_with_no_upgraded_leader_breaks_it() -> None:
    log = run_log(("ctl-1", False, "ctl-0"), ("ctl-2", False, "ctl-0"), ("ctl-0", False, None))
    assert leader_last_violations([log]) == [
        "ctl-0, the last controller on the old build, was upgraded as a follower while no upgraded member led "
        "(leader: none)"
    ]


def test_one_upgrade_over_several_runs_and_values_rendered_as_text() -> None:
    first = run_log(("ctl-1", False, "ctl-0"))  # interrupted after one controller
    second = run_log(("ctl-2", False, "ctl-0"), ("ctl-0", True, "ctl-0"))
    second["events"][0]["detail"]["still_to_upgrade"] = "['ctl-0']"
    second["events"][1]["detail"].update(is_leader="True", still_to_upgrade="[]")
    assert leader_last_violations([first, second]) == []


def test_an_upgraded_controller_without_its_turn_event_breaks_it() -> None:
    log = run_log(("ctl-1", False, "ctl-0"), ("ctl-2", False, "ctl-0"), ("ctl-0", True, "ctl-0"))
    log["events"] = log["events"][:2]
    assert leader_last_violations([log]) == ["controllers upgraded without a turn event in the log: ctl-0"]


def test_the_command_prints_one_line_per_breach_and_exits_1(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    moved = run_log(("ctl-1", False, "ctl-0"), ("ctl-2", False, "ctl-1"), ("ctl-0", False, "ctl-1"))
    good.write_text(json.dumps(moved))
    bad.write_text(json.dumps(run_log(("ctl-0", True, "ctl-0"), ("ctl-1", False, "ctl-2"), ("ctl-2", True, "ctl-2"))))
    ok = subprocess.run([sys.executable, str(HELPER), str(good)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout == "leader last: held over 3 controller turns\n", ok
    broken = subprocess.run([sys.executable, str(HELPER), str(bad)], capture_output=True, text=True, timeout=60)
    assert broken.returncode == 1 and broken.stdout.count("\n") == 1 and "Traceback" not in broken.stderr, broken
    assert broken.stdout.startswith("leader last broken: ctl-0 was upgraded while it led"), broken.stdout
    missing = subprocess.run([sys.executable, str(HELPER), str(tmp_path / "nope.json")], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.startswith("cannot read an event log:"), missing
