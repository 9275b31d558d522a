"""Fast checks of the spur.cluster roles that need no cluster: argument specs, and how spur.conf is rewritten.

- Every role's meta/argument_specs.yml lists exactly the variables of its defaults/main.yml, with the same
  defaults and a description each (ansible-doc and role argument validation read the spec, the role reads
  the defaults: the two must not drift).
- spur_conf keeps what it does not own: a re-run leaves spur.conf byte for byte as it is, a missing section
  is added, spur_overwrite_conf rewrites only the owned sections, and [x-*] or unknown sections always
  come back verbatim, comments included. A file that is not TOML is refused, not replaced.
- [partitions.NAME] tables (spur_controller_partitions): written with dotted headers that spurctld's own
  loader accepts, a hand-written table kept and a missing one added beside it, the whole [partitions] table
  replaced under overwrite; the changed tables are reported, so a controller reloads instead of restarting.
  The controller role's argument spec refuses unknown keys, and its preflight bad or repeated names.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from playbook_runs import collections_path
from spur_hpc import conf

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "collection" / "roles"
OUR_ROLES = sorted(
    p.name
    for p in ROLES.iterdir()
    if (p / "defaults" / "main.yml").exists() and p.name != "spur_upgrade"  # spur_upgrade has its own checks
)
SECTIONS_SCRIPT = ROLES / "spur_conf" / "files" / "spur_conf_sections.py"


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("role", OUR_ROLES)
def test_argument_specs_mirror_defaults(role: str) -> None:
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml") or {}
    spec = load_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    options = spec["options"]
    assert list(options) == list(defaults), f"{role}: spec and defaults list different variables, or in another order"
    for name, option in options.items():
        assert option.get("description") and "TODO" not in str(option["description"]), f"{role}: {name} undocumented"
        assert option.get("default") == defaults[name], f"{role}: {name} defaults differ"
        literal = defaults[name]
        if not (isinstance(literal, str) and "{{" in literal):
            expected = {bool: "bool", int: "int", list: "list", dict: "dict", str: "str"}[type(literal)]
            assert option["type"] == expected, f"{role}: {name} is a {expected} but the spec says {option['type']}"
        assert name.startswith(role + "_"), f"{role}: {name} lacks the role prefix"
    assert spec.get("short_description")


def load_sections_script():
    spec = importlib.util.spec_from_file_location("spur_conf_sections", SECTIONS_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SITE_CONF = '''# site comment, kept
[cluster]
name = "hpc1"

[controller]
hosts = ["ctl1:6817"]   # edited by hand
note = """
[agent]
this line is inside a string, not a header
"""

[x-site]
owner = "ops" # [x] in a comment
[x-site.sub]
list = [
  "a",
]

[[x-racks]]
name = "r1"

[future]
added_by = "a newer release"
'''


def test_the_sections_script_cuts_at_real_headers_only() -> None:
    script = load_sections_script()
    data = tomllib.loads(SITE_CONF)
    preamble, sections = script.cut(SITE_CONF, set(data))
    assert preamble == "# site comment, kept\n"
    assert [s["name"] for s in sections] == ["cluster", "controller", "x-site", "x-racks", "future"]
    assert preamble + "".join(s["text"] for s in sections) == SITE_CONF
    assert "this line is inside a string" in sections[1]["text"]


def test_the_sections_script_reports_a_missing_file_and_bad_toml(tmp_path: Path) -> None:
    run = lambda path: json.loads(  # noqa: E731
        subprocess.run([sys.executable, str(SECTIONS_SCRIPT), str(path)], capture_output=True, text=True).stdout
    )
    assert run(tmp_path / "none.conf") == {
        "exists": False, "text": "", "preamble": "", "sections": [], "data": {}, "error": None,
    }  # fmt: skip
    bad = tmp_path / "bad.conf"
    bad.write_text("[controller\nhosts = [\n")
    result = run(bad)
    assert result["exists"] and "not valid TOML" in result["error"]


SECTIONS = [
    {"name": "cluster", "settings": {"name": "hpc1"}},
    {"name": "controller", "settings": {"hosts": ["10.0.0.1:6817", "10.0.0.2:6817"], "write_timeout_secs": 5.0,
                                        "unused": None, "flag": True}},
    {"name": "log", "settings": {"level": "info"}},
]  # fmt: skip


# spur_controller_partitions as an inventory gives it: YAML's types, which the role converts to spur.conf's.
PARTITIONS = [
    {"name": "debug", "nodes": "n[1-2]", "default": True, "max_time": 60, "default_time": "0:30:00"},
    {"name": "long", "nodes": "n[1-4]", "max_time": "INFINITE", "max_nodes": "4", "min_nodes": 1, "priority_tier": 2,
     "state": "UP", "hidden": False, "priority_job_factor": None, "preempt_mode": "requeue"},
]  # fmt: skip


# Sections spurctld accepts (SECTIONS has a key it does not know), as a file has them, with partitions written by hand.
CONTROLLER_SECTIONS = [{**s, "settings": {k: v for k, v in s["settings"].items() if k != "flag"}} for s in SECTIONS]
PARTITIONS_CONF = """[cluster]
name = "hpc1"

[controller]
hosts = ["10.0.0.1:6817", "10.0.0.2:6817"]
write_timeout_secs = 5.0

# written by hand
[partitions.debug]
nodes = "n1"   # only n1 for now
[partitions.gpu]
nodes = "g1"

[log]
level = "info"
"""


# The [auth] cases take the controller role's own [auth] entry (its vars/main.yml; the agent and login roles' are
# checked to be the same but for the role's name): an operator's private_data must survive every rewrite.
AUTH_ENTRY = next(s for s in load_yaml(ROLES / "spur_controller" / "vars" / "main.yml")["_spur_controller_sections"]
                  if s["name"] == "auth")  # fmt: skip
AUTH_CONF = """[cluster]
name = "hpc1"

[auth]
type = "none"   # before MUNGE was keyed
private_data = ["jobs", "usage"]
admins = ["root", "@hpc-ops"]
"""
# name -> (the file before, spur_conf_overwrite of each run in turn, the inventory's variables)
AUTH_CASES = {
    "auth.kept": (AUTH_CONF, [True, True], {"spur_auth_type": "munge"}),
    "auth.inventory": (None, [False, True], {"spur_auth_type": "munge", "spur_auth_private_data": ["jobs"]}),
}


# The partition cases take the controller role's own sections of spur_controller_partitions (its vars/main.yml).
WITH_PARTITIONS = "{{ base_sections + _spur_controller_partition_sections }}"
REPORT = "{{ {'written': __spur_conf_written, 'changed': __spur_conf_changed} | to_json }}"


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run spur_conf once per case in one playbook; -> case name -> the file it wrote."""
    tmp = tmp_path_factory.mktemp("spur_conf")
    collections = collections_path(tmp)
    cases = {
        "new": (None, False),
        "kept": (SITE_CONF, False),
        "overwritten": (SITE_CONF, True),
        "bad": ("[controller\n", False),
        "parts.new": (None, False),
        "parts.kept": (PARTITIONS_CONF, False),
        "parts.overwritten": (PARTITIONS_CONF, True),
    }
    for name, (text, _) in cases.items():
        if text is not None:
            (tmp / f"{name}.conf").write_text(text)
    tasks = []
    for name, (_, overwrite) in cases.items():
        path = str(tmp / f"{name}.conf")
        sections = WITH_PARTITIONS if name.startswith("parts.") else SECTIONS
        tasks.append({
            "name": f"case {name}",
            "block": [
                {"ansible.builtin.include_role": {"name": "spur.cluster.spur_conf"},
                 "vars": {"spur_conf_path": path, "spur_conf_sections": sections, "spur_conf_overwrite": overwrite,
                          "spur_conf_python": sys.executable}},
                {"ansible.builtin.copy": {"content": "{{ __spur_conf_content }}", "dest": path, "mode": "0644"}},
                {"ansible.builtin.copy": {"content": REPORT, "dest": path + ".json", "mode": "0644"}},
            ],
            "rescue": [
                {"ansible.builtin.copy": {"content": "{{ ansible_failed_result.msg }}", "dest": path + ".error",
                                          "mode": "0644"}},
            ],
        })  # fmt: skip
    # The converged cases: spur_conf run again on what it wrote must leave it as it is.
    for name, sections in (("kept", SECTIONS), ("parts.kept", WITH_PARTITIONS)):
        tasks.append({
            "ansible.builtin.include_role": {"name": "spur.cluster.spur_conf"},
            "vars": {"spur_conf_path": str(tmp / f"{name}.conf"), "spur_conf_sections": sections,
                     "spur_conf_python": sys.executable},
        })  # fmt: skip
        tasks.append({
            "ansible.builtin.copy": {"content": "{{ __spur_conf_content }}", "dest": str(tmp / f"{name}.again.conf"),
                                     "mode": "0644"},
        })  # fmt: skip
        tasks.append({
            "ansible.builtin.copy": {"content": REPORT, "dest": str(tmp / f"{name}.again.conf.json"), "mode": "0644"},
        })  # fmt: skip
    # The [auth] cases: each run (a deploy, then a rolling upgrade with spur_overwrite_conf) leaves a copy.
    for name, (text, overwrites, inventory) in AUTH_CASES.items():
        path = str(tmp / f"{name}.conf")
        if text is not None:
            Path(path).write_text(text)
        for run, overwrite in enumerate(overwrites, 1):
            tasks.append({"ansible.builtin.include_role": {"name": "spur.cluster.spur_conf"}, "vars": {
                **inventory, "spur_conf_path": path, "spur_conf_sections": [*CONTROLLER_SECTIONS, AUTH_ENTRY],
                "spur_conf_overwrite": overwrite, "spur_conf_python": sys.executable}})  # fmt: skip
            for content, dest in (("{{ __spur_conf_content }}", path), ("{{ __spur_conf_content }}", f"{path}.{run}"),
                                  (REPORT, f"{path}.{run}.json")):  # fmt: skip
                tasks.append({"ansible.builtin.copy": {"content": content, "dest": dest, "mode": "0644"},
                              "vars": inventory})  # fmt: skip
    playbook = tmp / "playbook.yml"
    tasks.insert(0, {"ansible.builtin.include_vars": str(ROLES / "spur_controller" / "vars" / "main.yml")})
    play = {"hosts": "localhost", "gather_facts": False, "tasks": tasks,
            "vars": {"base_sections": CONTROLLER_SECTIONS, "spur_controller_partitions": PARTITIONS}}  # fmt: skip
    playbook.write_text(yaml.safe_dump([play]))
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_HOME=str(tmp / "ansible-home"),
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_FORCE_COLOR="0",
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    runs = [f"{name}.conf.{run}" for name, (_, overwrites, _) in AUTH_CASES.items() for run in (1, 2)]
    return {name: tmp / f"{name}.conf" for name in [*cases, "kept.again", "parts.kept.again"]} | {
        run.replace(".conf", ""): tmp / run for run in runs
    }


def report(path: Path) -> dict:
    """What spur_conf said of a run: {"written": owned sections written, "changed": tables changed in value}."""
    return json.loads(Path(str(path) + ".json").read_text())


def test_a_new_spur_conf_has_the_owned_sections(merged) -> None:
    text = merged["new"].read_text()
    assert text.startswith("# spur.conf, written by Ansible")
    data = tomllib.loads(text)
    assert data == {
        "cluster": {"name": "hpc1"},
        "controller": {"hosts": ["10.0.0.1:6817", "10.0.0.2:6817"], "write_timeout_secs": 5.0, "flag": True},
        "log": {"level": "info"},
    }


def test_an_existing_spur_conf_is_kept_and_only_gets_what_it_lacks(merged) -> None:
    text = merged["kept"].read_text()
    assert text.startswith(SITE_CONF), "the existing text must come back byte for byte"
    assert tomllib.loads(text[len(SITE_CONF) :]) == {"log": {"level": "info"}}
    assert merged["kept.again"].read_text() == text, "a converged spur.conf must not change on a re-run"


def test_overwrite_rewrites_owned_sections_and_carries_the_others_over(merged) -> None:
    text = merged["overwritten"].read_text()
    data = tomllib.loads(text)
    assert data["controller"] == {"hosts": ["10.0.0.1:6817", "10.0.0.2:6817"], "write_timeout_secs": 5.0, "flag": True}
    assert "edited by hand" not in text
    # Unknown and site-local sections come back verbatim, comments and layout included.
    for verbatim in ('[x-site]\nowner = "ops" # [x] in a comment\n[x-site.sub]\nlist = [\n  "a",\n]\n',
                     '[[x-racks]]\nname = "r1"\n', '[future]\nadded_by = "a newer release"\n'):  # fmt: skip
        assert verbatim in text
    assert text.startswith("# site comment, kept\n")
    assert data["log"] == {"level": "info"}


def test_a_spur_conf_that_is_not_toml_is_refused_and_left_alone(merged) -> None:
    assert merged["bad"].read_text() == "[controller\n"
    error = Path(str(merged["bad"]) + ".error").read_text()
    assert "not valid TOML" in error and "nothing was changed" in error


def test_the_controllers_partitions_are_tables_spurctld_loads(merged) -> None:
    text = merged["parts.new"].read_text()
    assert "\n[partitions.debug]\n" in text and "\n[partitions.long]\n" in text, "dotted headers, not quoted ones"
    loaded = conf.load(str(merged["parts.new"]))  # spurctld's own loader and cross-key checks
    assert [p.name for p in loaded.partitions] == ["debug", "long"]
    debug, long = loaded.partitions
    assert (debug.nodes, debug.default, debug.max_time, debug.default_time) == ("n[1-2]", True, "60", "0:30:00")
    assert (long.max_time, long.max_nodes, long.min_nodes, long.priority_tier) == ("INFINITE", 4, 1, 2)
    assert long.priority_job_factor == 1, "a null key is left out, so spurctld's default holds"
    assert (long.preempt_mode, debug.preempt_mode) == ("requeue", "off")
    assert report(merged["parts.new"])["changed"] == ["cluster", "controller", "log", "partitions"]


def test_hand_written_partitions_are_kept_and_a_missing_one_is_added_beside_them(merged) -> None:
    text = merged["parts.kept"].read_text()
    assert text.startswith(PARTITIONS_CONF[: PARTITIONS_CONF.index("[log]")])
    assert 'nodes = "n1"   # only n1 for now\n' in text and text.index("[partitions.long]") < text.index("[log]")
    assert [p.name for p in conf.load(str(merged["parts.kept"])).partitions] == ["debug", "gpu", "long"]
    # Only [partitions] changed in value: the controllers reload (SIGHUP) rather than restart.
    assert report(merged["parts.kept"]) == {"written": ["partitions.long"], "changed": ["partitions"]}
    assert merged["parts.kept.again"].read_text() == text
    assert report(merged["parts.kept.again"]) == {"written": [], "changed": []}, "converged: nothing reloads"


def test_overwrite_replaces_the_whole_partitions_table(merged) -> None:
    text = merged["parts.overwritten"].read_text()
    data = tomllib.loads(text)
    assert list(data["partitions"]) == ["debug", "long"], "a partition no longer listed is removed"
    assert data["partitions"]["debug"]["nodes"] == "n[1-2]" and "only n1" not in text
    # The other owned sections come out with the values they had: only [partitions] counts as changed.
    assert report(merged["parts.overwritten"])["changed"] == ["partitions"]
    assert report(merged["kept"]) == {"written": ["log"], "changed": ["log"]}


def test_an_operators_auth_section_survives_every_rewrite(merged) -> None:
    """private_data written by hand, and admins, stay through a rewrite of [auth] from the inventory (a rolling
    upgrade with spur_overwrite_conf); the inventory's spur_auth_private_data is written and stays too."""
    first = tomllib.loads(merged["auth.kept.1"].read_text())
    assert first["auth"] == {"type": "munge", "private_data": ["jobs", "usage"], "admins": ["root", "@hpc-ops"]}
    assert merged["auth.kept.2"].read_text() == merged["auth.kept.1"].read_text(), "a second rewrite changes nothing"
    assert report(merged["auth.kept.2"]) == {"written": ["cluster", "controller", "log", "auth"], "changed": []}
    for run in ("auth.inventory.1", "auth.inventory.2"):
        assert tomllib.loads(merged[run].read_text())["auth"] == {"type": "munge", "private_data": ["jobs"]}, run
    assert merged["auth.inventory.2"].read_text() == merged["auth.inventory.1"].read_text()
    assert conf.load(str(merged["auth.inventory.2"])).auth.private_data == ("jobs",), "spurctld's loader reads it"
    for role in ("spur_agent", "spur_login"):  # every role that writes [auth] keeps it alike
        entries = load_yaml(ROLES / role / "vars" / "main.yml")[f"_{role}_sections"]
        entry = next(s for s in entries if s["name"] == "auth")
        assert entry["keep"] is True and entry["settings"] == AUTH_ENTRY["settings"].replace("controller", role[5:])


def test_the_partition_options_are_the_keys_spurctld_reads() -> None:
    """One list of keys: conf.PARTITION_KEYS; the argument spec mirrors it, types included."""
    spec = load_yaml(ROLES / "spur_controller" / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    options = spec["options"]["spur_controller_partitions"]["options"]
    assert list(options) == ["name", *conf.PARTITION_KEYS]
    assert options["name"] == {**options["name"], "type": "str", "required": True}
    for key, known in conf.PARTITION_KEYS.items():
        want = "raw" if known.unlimited else {str: "str", bool: "bool", int: "int"}[known.type]  # raw: 4 or UNLIMITED
        assert options[key]["type"] == want, f"{key}: the spec says {options[key]['type']}, spurctld reads {want}"
        assert options[key].get("choices") == (list(known.choices) if known.choices else None), key


def test_the_controller_role_refuses_bad_partitions_before_it_changes_anything(tmp_path: Path) -> None:
    """The argument spec refuses unknown keys and states, the preflight bad and repeated names: each a message."""
    cases = {
        "key": [{"name": "debug", "maxtime": "60"}],
        "state": [{"name": "debug", "state": "OFF"}],
        "name": [{"name": "a.b", "nodes": "n1"}],
        "twice": [{"name": "debug"}, {"name": "debug"}],
    }
    tasks = [{
        "name": f"case {name}",
        "block": [{"ansible.builtin.include_role": {"name": "spur.cluster.spur_controller"},
                   "vars": {"spur_controller_partitions": partitions}}],
        "rescue": [{"ansible.builtin.copy": {"content": "{{ ansible_failed_result.msg }}",
                                             "dest": str(tmp_path / f"{name}.error"), "mode": "0644"}}],
    } for name, partitions in cases.items()]  # fmt: skip
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "spur_controllers", "gather_facts": False, "tasks": tasks}]))
    inventory = tmp_path / "hosts.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "spur_host_address": "127.0.0.1"}  # fmt: skip
    inventory.write_text(yaml.safe_dump({"all": {"children": {"spur_controllers": {"hosts": {"ctl": host}}}}}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_path(tmp_path)), ANSIBLE_HOME=str(tmp_path / "h"))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    errors = {name: (tmp_path / f"{name}.error").read_text() for name in cases}
    assert "maxtime" in errors["key"] and "spur_controller_partitions" in errors["key"]
    assert "OFF" in errors["state"] and "UP, DOWN, DRAIN, INACTIVE" in errors["state"]
    assert errors["name"] == 'spur_controller_partitions: bad name "a.b"; use letters, digits, - and _ (at most 63)'
    assert errors["twice"] == "spur_controller_partitions: debug listed twice; give each partition one entry"


@pytest.mark.parametrize("role", OUR_ROLES)
def test_every_role_variable_is_in_the_deployment_guide(role: str) -> None:
    guide = (REPO / "docs" / "deployment.md").read_text()
    defaults = load_yaml(ROLES / role / "defaults" / "main.yml") or {}
    missing = [name for name in defaults if f"`{name}`" not in guide]
    assert not missing, f"docs/deployment.md does not describe {', '.join(missing)}"


@pytest.mark.parametrize("inventory", ["hosts.example.ini", "hosts.ha.example.ini", "local.yml"])
def test_the_example_inventories_describe_clusters_spur_can_run(inventory: str, tmp_path: Path) -> None:
    """The topology role needs no connection: it computes every address from the inventory alone."""
    collections = collections_path(tmp_path)
    out = tmp_path / "topology.json"
    playbook = tmp_path / "topology.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "spur_controllers", "gather_facts": False,
        "tasks": [
            {"ansible.builtin.import_role": {"name": "spur.cluster.spur_topology"}},
            {"ansible.builtin.copy": {"content": "{{ __spur_topology | to_json }}", "dest": str(out), "mode": "0644"},
             "delegate_to": "localhost", "run_once": True,
             "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        ],
    }]))  # fmt: skip
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_HOME=str(tmp_path / "h"))
    ansible_playbook = str(Path(sys.executable).parent / "ansible-playbook")
    done = subprocess.run(
        [ansible_playbook, "-i", str(REPO / "inventory" / inventory), str(playbook)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    topology = json.loads(out.read_text())
    assert len(topology["controllers"]) in (1, 3, 5)
    assert topology["agents"] and len(set(topology["agent_nodes"])) == len(topology["agents"])
    assert all(c["raft"].endswith(":6821") and c["probe"].endswith(":6822") for c in topology["controllers"])
