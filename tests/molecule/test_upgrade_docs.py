"""The rolling upgrade's variables: the role's argument specs mirror its defaults, and docs/upgrading.md documents
every variable an operator passes, with the default the role really uses. Fast: no cluster."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "collection" / "roles" / "spur_upgrade"
DOC = REPO / "docs" / "upgrading.md"
PLAYBOOK = REPO / "collection" / "playbooks" / "rolling_upgrade.yml"
# A role default that reads a run variable: "{{ spur_x | default(D) }}".
READS_RUN_VARIABLE = re.compile(r"^\{\{ (?P<name>spur_[a-z_]+) \| default\((?P<default>[^)]*)\) \}\}$")
# The variables the issue names; they keep their names and meaning.
RUN_VARIABLES = {
    "spur_release_src",
    "spur_rolling_batch_size",
    "spur_drain_wait_secs",
    "spur_ignore_unreachable_agents",
    "spur_skip_busy_agents",
    "spur_force_upgrade_busy_agents",
    "spur_in_place_upgrade",
    "spur_overwrite_conf",
    "spur_controller_upgrade_order",
    "spur_upgrade_canary",
    "spur_upgrade_event_log",
}


def defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def documented() -> dict[str, str]:
    """{variable: default cell} from the variables table of docs/upgrading.md."""
    section = DOC.read_text().split("\n## Variables\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([a-z_]+)` \| ([^|]+) \|", section, re.M)}


def test_argument_specs_mirror_the_defaults():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    values = defaults()
    for entry, spec in specs.items():
        assert set(spec["options"]) == set(values), f"entry point {entry}: {sorted(set(spec['options']) ^ set(values))}"
        for name, option in spec["options"].items():
            assert option["default"] == values[name], (
                f"{entry}: {name} default {option['default']!r} vs {values[name]!r}"
            )
        assert (ROLE / "tasks" / f"{entry}.yml").exists(), f"entry point {entry} has no tasks/{entry}.yml"


def test_every_variable_is_documented_with_its_default():
    table = documented()
    expected = {}
    for name, value in defaults().items():
        if name == "spur_upgrade_python":
            continue  # where the release's Python is: an implementation detail, not an operator's choice
        match = READS_RUN_VARIABLE.match(str(value))
        if match:
            expected[match.group("name")] = match.group("default")
        else:
            expected[name] = value
    missing = sorted((set(expected) | RUN_VARIABLES) - set(table))
    assert not missing, f"docs/upgrading.md does not document {missing}"
    for name, value in expected.items():
        cell = table[name]
        if value in ("", [], None, "[]", "''"):
            continue  # "(leader last)", "./spur-upgrade-<UTC time>.json": described in words
        shown = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
        assert cell.strip("`") == str(shown).strip("'\""), f"{name}: documented default {cell}, the role uses {shown!r}"


def test_the_playbook_header_names_the_run_variables():
    header = PLAYBOOK.read_text().split("\n- name:", 1)[0]
    missing = sorted(v for v in RUN_VARIABLES if v not in header)
    assert not missing, f"the comment at the top of rolling_upgrade.yml does not name {missing}"
