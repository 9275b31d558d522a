"""The spur.cluster Molecule scenarios, run the way a user runs them: `molecule test -s NAME`.

- systemd (tier 2): six systemd-nspawn hosts in network namespaces with real systemd, including the crash
  and reboot of the leader's host, then the leader's controller removed and added back empty with
  remove_controllers.yml and add_controllers.yml while a job runs; needs root (tools/testhosts/testhosts.py).

Each scenario deploys with spur.cluster.deploy, runs it again and requires zero changes, checks the cluster
with the info modules (one leader, every node IDLE, a job COMPLETED) and destroys everything. Molecule runs
with a scratch HOME and ANSIBLE_HOME, and a collection path where ansible_collections/spur/cluster is this
checkout's collection/. The release is built once per session.

The local scenario (tier 1, inventory/local.yml under supervisord) is not run here: its checks (the deploy's
idempotence, a node out and back, the shared verify) run inside upgrade_local (tests/molecule/test_upgrade.py) on
that scenario's own deploy, which saved CI a whole tier-1 deploy and teardown. `tools/molecule.sh local` still runs
it, and `tools/molecule.sh local converge` keeps a tier-1 cluster up to work on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playbook_runs import run_molecule
from prereqs import needs_tier2_hosts

SCENARIO_TIMEOUT_SECS = 900
# The phases' run times as profile_tasks prints them at the end of each playbook.
PHASE_LINE = re.compile(r"INFO\s+\[(?P<scenario>\w+) > (?P<phase>\w+)\] Executing")
TOTAL_LINE = re.compile(r"\(\d+:\d\d:\d\d\.\d+\)\s+(?P<total>\d+:\d\d:\d\d\.\d+) \*+$")

pytestmark = pytest.mark.slow


def phase_times(output: str) -> dict[str, str]:
    """{phase: total run time} from Molecule's output, for the report (converge is the deploy)."""
    times, phase = {}, None
    for line in output.splitlines():
        started = PHASE_LINE.search(line)
        if started:
            phase = started.group("phase")
            continue
        total = TOTAL_LINE.search(line)
        if total and phase:
            times[phase] = total.group("total")
    return times


def run_scenario(name: str, env: dict[str, str], tmp_path: Path) -> str:
    output, secs = run_molecule(name, env, tmp_path, SCENARIO_TIMEOUT_SECS)
    print(f"\nmolecule {name}: {secs:.0f} s in all; phases {phase_times(output)}")
    return output


@needs_tier2_hosts()
def test_systemd_scenario_survives_the_crash_of_the_leaders_host(molecule_env, tmp_path: Path) -> None:
    output = run_scenario("systemd", molecule_env, tmp_path)
    assert "[systemd > idempotence] Executed: Successful" in output
    assert "Kill -9 the PID 1 of the leader's host" in output
    assert "Wait for the rebooted controller to rejoin" in output
    # Issue 23: remove_controllers.yml took the leader's controller out, add_controllers.yml put it back empty.
    assert "PLAY [2. Remove each controller, one at a time]" in output
    assert "PLAY [2. Add each new controller, one at a time]" in output
    assert "Check that the job ended with its own exit code" in output
