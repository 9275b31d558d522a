"""The leader-last invariant of a rolling upgrade, read from the event logs spur.cluster.rolling_upgrade writes.

What matters is not the roles in a fixed order (follower, follower, leader): leadership may move while the run goes
on, to a controller already upgraded, and then every controller is a follower at its turn. What matters:
  - no controller was upgraded (restarted) while it led and other controllers were still on the old build: its
    restart could have handed leadership to an old build while an upgraded one could have taken it;
  - the last controller upgraded was the leader at its turn, or the leader then was an upgraded member.
Each controller's turn event (phase controllers, step turn) holds what the run saw when it began: is_leader, leader,
still_to_upgrade (the other controllers not yet on the target).

Used by tests/molecule/test_upgrade.py and, as a command, by the Molecule scenarios' side_effect.yml:
    python3 tests/upgrade_events.py EVENT_LOG.json [...]     (several logs: one upgrade over several runs)
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any


def _native(value: Any) -> Any:
    """Ansible may render a bool or a list as its text ('True', "['ctl-1']"): read it back."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value.strip()) if value.strip() else None
        except (ValueError, SyntaxError):
            return value
    return value


def controller_turns(log: dict) -> list[dict]:
    turns = [e for e in log.get("events", []) if e.get("phase") == "controllers" and e.get("step") == "turn"]
    return sorted(turns, key=lambda e: float(e["t"]))


def leader_last_violations(logs: list[dict]) -> list[str]:
    """One line per breach of the invariant over these logs (one upgrade, possibly over several runs); [] if none."""
    problems = []
    turns = 0
    for log in logs:
        upgraded = {h["host"] for h in log.get("hosts", []) if h["kind"] == "controller" and h["outcome"] == "upgraded"}
        seen = set()
        for turn in controller_turns(log):
            turns += 1
            host, detail = turn["host"], turn.get("detail") or {}
            seen.add(host)
            is_leader = _native(detail.get("is_leader")) is True
            still = list(_native(detail.get("still_to_upgrade")) or [])
            leader = _native(detail.get("leader")) or None
            if is_leader and still:
                problems.append(
                    f"{host} was upgraded while it led (term {detail.get('term')}) and {', '.join(sorted(still))} "
                    "still ran the old build"
                )
            if not still and not is_leader and (leader is None or leader == host):
                problems.append(
                    f"{host}, the last controller on the old build, was upgraded as a follower while no upgraded "
                    f"member led (leader: {leader or 'none'})"
                )
        unexplained = sorted(upgraded - seen)
        if unexplained:
            problems.append(f"controllers upgraded without a turn event in the log: {', '.join(unexplained)}")
    if turns == 0 and any(h["kind"] == "controller" and h["outcome"] == "upgraded" for g in logs for h in g["hosts"]):
        problems.append("no controller turn events in the event logs")
    return problems


def assert_leader_last(*logs: dict) -> None:
    problems = leader_last_violations(list(logs))
    assert not problems, "the leader-last invariant broke: " + "; ".join(problems)


# One agent's turn in the rolling upgrade: its switch, restart and gates, nothing of the deploy roles (issue 19).
MAX_AGENT_TURN_RESULTS = 12
AGENT_PLAY = "Agents, in batches"


def agent_turns(log: dict) -> dict[str, list[str]]:
    """Each agent's task results in the agents' play (the spur_upgrade_log callback counts every result)."""
    turns: dict[str, list[str]] = {}
    for play, hosts in (log.get("task_results") or {}).items():
        if AGENT_PLAY in play:
            for host, results in hosts.items():
                turns.setdefault(host, []).extend(f"{r['task']} ({r['status']})" for r in results)
    return turns


def assert_short_agent_turns(log: dict, expected_agents: int | None = None) -> dict[str, list[str]]:
    """Every agent's turn took at most MAX_AGENT_TURN_RESULTS task results; returns the turns."""
    turns = agent_turns(log)
    assert turns, "the event log counts no agent turn (task_results of the agents' play)"
    if expected_agents is not None:
        assert len(turns) == expected_agents, sorted(turns)
    long = {host: tasks for host, tasks in turns.items() if len(tasks) > MAX_AGENT_TURN_RESULTS}
    assert not long, f"agent turns over {MAX_AGENT_TURN_RESULTS} task results: {json.dumps(long, indent=1)}"
    return turns


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: upgrade_events.py EVENT_LOG.json [...]", file=sys.stderr)
        return 2
    try:
        logs = [json.loads(Path(p).read_text()) for p in argv]
    except (OSError, ValueError) as exc:
        print(f"cannot read an event log: {exc}", file=sys.stderr)
        return 2
    problems = leader_last_violations(logs)
    for problem in problems:
        print(f"leader last broken: {problem}")
    if not problems:
        print(f"leader last: held over {sum(len(controller_turns(g)) for g in logs)} controller turns")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
