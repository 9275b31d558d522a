"""spur.cluster.rolling_upgrade through its Molecule scenario, run the way a user runs it: `molecule test`.

upgrade_local (tier 1, `make test`): the embedded default (inventory/local.yml: three controllers, three agents as host
aliases on 127.0.x.N under supervisord) deployed at release A, then upgraded by the playbook in every mode; the
scenario's side_effect.yml lists the cases and checks what an operator would see after each. Here, afterwards,
the event logs the runs wrote are read again for what matters most (the leader last, nothing lost) and for the
time the two complete 3+3 upgrades took, waiting on gates and doing work, which the test prints.

upgrade_systemd (tier 2, `make test`; needs root): six systemd-nspawn hosts in network namespaces; an
agent's host crashes before the run (refused, then left out with spur_ignore_unreachable_agents); an in-place
upgrade under systemd with a job on every node, interrupted with Ctrl-C in each phase and run again; a drained
upgrade during which the next node's host crashes and a draining node's network drops, run again. Before the
upgrades it runs the systemd scenario's checks on its deploy (molecule/systemd/verify.yml: MUNGE, enforced
cgroups, the crash and reboot of the leader's host, the leader's controller removed and added back empty while a
job runs), which CI used to run on six hosts booted and deployed for them alone. `tools/molecule.sh systemd` still
runs that scenario by itself.

The releases are built once per session from this tree: A 0.1.0, B 0.2.0, C 0.3.0, D 0.4.0.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections import Counter
from pathlib import Path

import pytest

from playbook_runs import ansible_env, build_release, require_tools, run_molecule, scratch_hosts
from prereqs import needs_tier2_hosts
from upgrade_events import assert_leader_last, assert_short_agent_turns

# A deadline, not a bound on how long it may take: 1406 s in CI, over 1800 s on a machine loaded by other work.
SCENARIO_TIMEOUT_SECS = 2700
VERSIONS = {"A": "0.1.0", "B": "0.2.0", "C": "0.3.0", "D": "0.4.0"}
PHASE_LINE = re.compile(r"INFO\s+\[(?P<scenario>\w+) > (?P<phase>\w+)\] Executing")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Releases A to D of this tree, built once (spur-release build, as an administrator does)."""
    require_tools()
    base = tmp_path_factory.mktemp("upgrade-releases")
    return {name: build_release(version, base / name) for name, version in VERSIONS.items()}


@pytest.fixture
def upgrade_env(tmp_path: Path, releases: dict[str, Path]):
    """Environment for one `molecule test`: scratch HOME, the collection path, short host paths, the releases."""
    results = tmp_path / "results"
    results.mkdir()
    with scratch_hosts("spu") as short:
        env = ansible_env(
            tmp_path,
            **{f"SPUR_RELEASE_{name}": str(path) for name, path in releases.items()},
            # The release the cluster is deployed at (the systemd scenario's checks put a controller back with it).
            SPUR_RELEASE_SRC=str(releases["A"]),
            SPUR_UPGRADE_RESULTS=str(results),
            SPUR_LOCAL_ROOT=str(short / "h"),
            # A loopback block of this run's own, clear of the demo (127.0.1.x) and of other scenarios.
            SPUR_LOCAL_NET=f"127.{5 + os.getpid() % 50}.{os.getpid() % 250}",
            # Tier 2's test hosts (tools/testhosts): state and network namespaces of this run's own.
            SPUR_TESTHOSTS_DIR=str(short / "t"),
            SPUR_TESTHOSTS_PREFIX=f"su{secrets.token_hex(2)}",
        )
        yield env, results


def event_log(results: Path, case: str) -> dict:
    path = results / f"{case}.json"
    assert path.exists(), f"case {case} wrote no event log ({path}); its output: {results / (case + '.out')}"
    return json.loads(path.read_text())


def every_run_kept_the_leader_last(results: Path) -> None:
    """The leader-last invariant (tests/upgrade_events.py) over the event log of every run of the scenario."""
    checked = 0
    for path in sorted(results.glob("*.json")):
        log = json.loads(path.read_text())
        if log.get("playbook") != "spur.cluster.rolling_upgrade":
            continue  # the timings
        try:
            assert_leader_last(log)
        except AssertionError as exc:
            raise AssertionError(f"case {path.stem}: {exc}") from None
        checked += 1
    assert checked, f"no event log in {results}"


def timing(log: dict) -> dict:
    """Wall time and its split: gates (waiting on the cluster), work (changing it), the rest (probes, Ansible)."""
    phases: dict[str, float] = {}
    for event in log["events"]:
        phases[event["phase"]] = phases.get(event["phase"], 0.0) + event["secs"]
    return {
        "wall_s": round(log["wall_secs"], 1),
        "gates_s": round(log["gate_secs"], 1),
        "work_s": round(log["work_secs"], 1),
        "other_s": round(log["wall_secs"] - log["gate_secs"] - log["work_secs"], 1),
        "by_phase_s": {k: round(v, 1) for k, v in phases.items()},
    }


def test_rolling_upgrade_in_every_mode(upgrade_env, tmp_path: Path) -> None:
    env, results = upgrade_env
    output, wall = run_molecule("upgrade_local", env, tmp_path, SCENARIO_TIMEOUT_SECS)
    # The deploy of release A twice, the second changing nothing; then what the local scenario checks (a node
    # out of service and back, the shared verify with its job) before the upgrades.
    assert "[upgrade_local > idempotence] Executed: Successful" in output
    assert "PLAY [Check that node-2 is out of service]" in output and "ended COMPLETED (exit 0)" in output
    assert "[upgrade_local > side_effect] Executed: Successful" in output
    assert "[upgrade_local > verify] Executed: Successful" in output

    # Every refusal was a refusal before anything happened: no step but the guard rails and the plan.
    for case in ("guard-rails", "guard-downgrade"):
        log = event_log(results, case)
        assert log["status"] == "refused", (case, log["status"])
        assert {e["phase"] for e in log["events"]} <= {"preflight"}, (case, log["events"])
        assert not [e for e in log["events"] if e["kind"] == "work"], case

    # A to B, drained: the leader last; the drain waited for node-0's job; the run stopped at busy node-1.
    stopped = event_log(results, "drained-busy-stop")
    assert stopped["status"] == "failed"
    assert sorted(h["host"] for h in stopped["hosts"] if h["kind"] == "controller" and h["outcome"] == "upgraded") == [
        "ctl-0", "ctl-1", "ctl-2"
    ]
    every_run_kept_the_leader_last(results)
    # The re-runs carried on where it stopped, each host upgraded exactly once over the three runs.
    swaps = [
        e["host"]
        for case in ("drained-busy-stop", "drained-skip-busy", "drained-force-busy")
        for e in event_log(results, case)["events"]
        if e["step"] == "swap"
    ]
    assert sorted(swaps) == ["ctl-0", "ctl-1", "ctl-2", "node-0", "node-1", "node-2"], swaps

    # B to C in place: the leader last, no drain anywhere, every job kept its supervisor: k-0 on its node, the
    # job whose srun step runs on the two others (one supervisor listed per node) and two tasks of an array.
    in_place = event_log(results, "in-place")
    assert in_place["status"] == "done"
    # The leader crashed mid-phase (side_effect.yml): whoever led at its turn still went last (checked above).
    assert len([h for h in in_place["hosts"] if h["kind"] == "controller" and h["outcome"] == "upgraded"]) == 3
    assert not [e for e in in_place["events"] if e["step"] in ("drain", "resume", "down")]
    kept = [job for e in in_place["events"] if e["step"] == "jobs_after" for job in e["detail"]["kept"]]
    before = [job for e in in_place["events"] if e["step"] == "jobs_before" for job in e["detail"]["running_jobs"]]
    assert len(before) == 5 and sorted(map(json.dumps, kept)) == sorted(map(json.dumps, before))
    assert sorted(Counter(job["job_id"] for job in before).values()) == [1, 1, 1, 2], before

    # One agent's turn in place is its switch, restart and gates: at most 12 task results each.
    assert_short_agent_turns(in_place, expected_agents=3)

    # C to D, staged first (story 7): the run a host could not stage stopped before any switch; stage only
    # restarted nothing; the switch found the stage done.
    failed_stage = event_log(results, "stage-fails")
    assert failed_stage["status"] == "failed"
    assert not [e for e in failed_stage["events"] if e["step"] in ("switch", "swap", "turn")]
    assert event_log(results, "stage-only")["status"] == "staged"
    switched = event_log(results, "switch-after-stage")
    assert switched["status"] == "done" and not [e for e in switched["events"] if e["step"] == "staged"]
    assert_short_agent_turns(switched, expected_agents=3)

    # The same release again: nothing swapped.
    again = event_log(results, "again-at-target")
    assert not [e for e in again["events"] if e["step"] == "swap"]

    report = {
        "scenario_wall_s": round(wall),
        "drained_A_to_B_first_run (3 controllers, then stopped at busy node-1)": timing(stopped),
        "drained_skip_run": timing(event_log(results, "drained-skip-busy")),
        "drained_force_run": timing(event_log(results, "drained-force-busy")),
        "in_place_B_to_C (3 controllers + 3 agents, the leader crashed mid-phase)": timing(in_place),
        "again_at_target": timing(again),
        "in_place_C_to_D_after_stage_only (3 controllers + 3 agents, the stage found done)": timing(switched),
    }
    (results / "timings.json").write_text(json.dumps(report, indent=1) + "\n")
    print("\nrolling upgrade timings:\n" + json.dumps(report, indent=1))


@needs_tier2_hosts()
def test_rolling_upgrade_on_systemd_hosts(upgrade_env, tmp_path: Path) -> None:
    env, results = upgrade_env
    output, wall = run_molecule("upgrade_systemd", env, tmp_path, SCENARIO_TIMEOUT_SECS)
    # The deploy of release A twice, the second changing nothing; then what the systemd scenario checks (MUNGE,
    # enforcement, the crash of the leader's host, the leader's controller removed and added back empty while a job
    # runs) before the upgrades.
    assert "[upgrade_systemd > idempotence] Executed: Successful" in output
    assert "Kill -9 the PID 1 of the leader's host" in output
    assert "Wait for the rebooted controller to rejoin" in output
    assert "PLAY [2. Remove each controller, one at a time]" in output
    assert "PLAY [2. Add each new controller, one at a time]" in output
    assert "Check that the job ended with its own exit code" in output
    assert "[upgrade_systemd > side_effect] Executed: Successful" in output
    assert "[upgrade_systemd > verify] Executed: Successful" in output
    refused = event_log(results, "systemd-unreachable-refused")
    assert refused["status"] == "refused" and not [e for e in refused["events"] if e["kind"] == "work"]
    ignored = event_log(results, "systemd-unreachable-ignored")
    every_run_kept_the_leader_last(results)
    in_place = event_log(results, "systemd-in-place")
    assert in_place["status"] == "done"
    # Ctrl-C in each phase: every interrupted run left an event log but the one cut short in the guard rails.
    for phase in ("controllers", "wal", "agents", "verify"):
        assert event_log(results, f"systemd-interrupted-{phase}")["status"] == "running", phase
    # C to D: node-0 went through its network drop; node-1's host crashed mid-install; the re-run finished.
    faults = event_log(results, "systemd-faults")
    assert {h["host"]: h["outcome"] for h in faults["hosts"]}.get("node-0") == "upgraded"
    rerun = event_log(results, "systemd-faults-rerun")
    assert rerun["status"] == "done"
    assert sorted(h["host"] for h in rerun["hosts"] if h["outcome"] == "upgraded") == ["node-1", "node-2"]
    report = {
        "scenario_wall_s": round(wall),
        "drained_A_to_B (3 controllers + 2 agents, node-2's host down)": timing(ignored),
        "in_place_B_to_C (3 controllers + 3 agents, the last of six runs)": timing(in_place),
        "drained_C_to_D (network drop on node-0, node-1's host crashed mid-install)": timing(faults),
        "drained_C_to_D re-run (node-1, node-2)": timing(rerun),
    }
    (results / "timings-systemd.json").write_text(json.dumps(report, indent=1) + "\n")
    print("\nrolling upgrade timings (tier 2):\n" + json.dumps(report, indent=1))
