"""The collection as a product: it builds and installs, ansible-lint (production) and ansible-test sanity pass,
and docs/modules.md is what the modules' own documentation says."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from collection_helpers import COLLECTION, REPO, VENV_BIN, ansible_env
from prereqs import require

MODULES = sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py"))
PLAYBOOKS = sorted(p.stem for p in (COLLECTION / "playbooks").glob("*.yml"))


def declared_dependencies() -> dict[str, str]:
    import yaml

    return dict(yaml.safe_load((COLLECTION / "galaxy.yml").read_text()).get("dependencies") or {})


def link_dependencies(collections: Path) -> None:
    """Put galaxy.yml's dependencies, and nothing else, into a collections directory: what `ansible-galaxy
    collection install` fetches for a user (offline here, so linked from the venv's ansible package)."""
    import ansible_collections

    for fqcn in declared_dependencies():
        namespace, name = fqcn.split(".")
        found = [
            Path(p) / namespace / name for p in ansible_collections.__path__ if (Path(p) / namespace / name).is_dir()
        ]
        require(bool(found), f"{fqcn} (a dependency in galaxy.yml) is not installed", "pip install 'ansible>=12,<13'")
        (collections / "ansible_collections" / namespace).mkdir(parents=True, exist_ok=True)
        (collections / "ansible_collections" / namespace / name).symlink_to(found[0])


def only(collections: Path) -> dict[str, str]:
    """Environment in which Ansible sees the collections under `collections` and ansible-core's, nothing else."""
    return {"ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false"}


def test_every_collection_the_content_uses_is_declared():
    import re

    allowed = {"spur.cluster", "ansible.builtin", *declared_dependencies()}
    used: dict[str, str] = {}
    for path in sorted(COLLECTION.rglob("*.yml")) + sorted(COLLECTION.rglob("*.j2")):
        if "tests" in path.relative_to(COLLECTION).parts or "changelogs" in path.parts:
            continue
        for match in re.finditer(r"\b([a-z_]+)\.([a-z_]+)\.[a-z_]+\b", path.read_text()):
            fqcn = f"{match[1]}.{match[2]}"
            if fqcn not in allowed and match[1] in ("community", "ansible", "kubernetes", "containers", "amazon"):
                used.setdefault(fqcn, str(path.relative_to(COLLECTION)))
    assert not used, f"collections used but not in galaxy.yml's dependencies: {used}"


def run(argv: list[str], tmp_path: Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    env = ansible_env(tmp_path / "home")
    env.update(kw.pop("env", {}))
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def test_collection_builds_and_installs(tmp_path):
    out = tmp_path / "dist"
    built = run(
        [str(VENV_BIN / "ansible-galaxy"), "collection", "build", str(COLLECTION), "--output-path", str(out)], tmp_path
    )
    assert built.returncode == 0, built.stderr
    (artifact,) = out.glob("spur-cluster-*.tar.gz")
    with tarfile.open(artifact) as tar:
        members = set(tar.getnames())
    assert {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "README.md", "COPYING"} <= members
    assert {f"plugins/modules/{m}.py" for m in MODULES} <= members
    assert "plugins/doc_fragments/connection.py" in members
    assert not any(".ansible-lint" in m or "__pycache__" in m or m.startswith("tests/output") for m in members)

    # Installed as a user does, beside ansible-core and the dependencies galaxy.yml declares, and nothing else
    # (not the test tree, where spur.cluster is "installed" already, nor the venv's ansible package).
    dest = tmp_path / "installed"
    install = [str(VENV_BIN / "ansible-galaxy"), "collection", "install", str(artifact), "-p", str(dest), "--offline"]
    missing = run(install, tmp_path, env=only(dest))
    for fqcn in declared_dependencies():  # offline, the declared dependency must be there first: it is declared
        assert missing.returncode != 0 and fqcn in missing.stdout + missing.stderr, missing.stdout + missing.stderr
    link_dependencies(dest)
    installed = run(install, tmp_path, env=only(dest))
    assert installed.returncode == 0, installed.stderr
    root = dest / "ansible_collections" / "spur" / "cluster"
    assert (root / "plugins" / "modules" / "spur_node.py").is_file()

    # Every playbook resolves every module, role and action it names there (a missing collection fails here).
    for playbook in PLAYBOOKS:
        checked = run(
            [
                str(VENV_BIN / "ansible-playbook"),
                "--syntax-check",
                f"spur.cluster.{playbook}",
                "-i",
                str(REPO / "inventory" / "local.yml"),
            ],
            tmp_path,
            env=only(dest),
        )
        assert checked.returncode == 0, f"{playbook}: {checked.stdout[-2000:]}{checked.stderr[-2000:]}"

    listed = run(
        [str(VENV_BIN / "ansible-doc"), "-t", "module", "-l", "spur.cluster"],
        tmp_path,
        env=only(dest),
    )
    assert listed.returncode == 0, listed.stderr
    assert {f"spur.cluster.{m}" for m in MODULES} <= {line.split()[0] for line in listed.stdout.splitlines() if line}

    # the installed copy runs: a probe of nothing answers with reachable false, not a failure
    adhoc = run(
        [
            str(VENV_BIN / "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-m",
            "spur.cluster.spur_controller_info",
            "-a",
            "controllers=127.0.0.1:9 timeout=1",
        ],
        tmp_path,
        env=only(dest),
    )
    assert adhoc.returncode == 0, adhoc.stdout + adhoc.stderr
    assert '"one_leader": false' in adhoc.stdout and '"reachable": false' in adhoc.stdout


def test_ansible_lint_production_profile(tmp_path):
    lint = shutil.which("ansible-lint", path=str(VENV_BIN))
    require(lint is not None, "ansible-lint is not installed in the venv", "pip install -e '.[test]' installs it")
    # With spur.cluster (this tree) and galaxy.yml's dependencies only, as a user who installed the collection.
    collections = tmp_path / "collections"
    (collections / "ansible_collections" / "spur").mkdir(parents=True)
    (collections / "ansible_collections" / "spur" / "cluster").symlink_to(COLLECTION)
    link_dependencies(collections)
    env = {"HOME": str(tmp_path), "ANSIBLE_HOME": str(tmp_path / ".ansible"), **only(collections)}
    proc = run([lint, "--offline", "--nocolor"], tmp_path, cwd=COLLECTION, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stderr + proc.stdout


def sanity_unavailable(scratch: Path) -> str | None:
    """Why tools/ansible_sanity.sh cannot run here, or None."""
    if not (VENV_BIN / "ansible-test").exists():
        return "ansible-test is not installed (ansible-core is a test extra: pip install -e '.[test]')"
    if shutil.which("git") is None:
        return "git is not installed, and ansible-test needs the collection inside a git work tree"
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(scratch), "pip==24.2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        return "no Python package index answers, and ansible-test installs each sanity test's tools with pip"
    return None


@pytest.mark.slow
def test_ansible_test_sanity_passes_with_empty_ignore_files(tmp_path):
    ignores = sorted((COLLECTION / "tests" / "sanity").glob("ignore-*.txt"))
    assert ignores and all(p.read_text() == "" for p in ignores), "the sanity ignore files must stay empty"
    why = sanity_unavailable(tmp_path / "pip-probe")
    require(not why, why or "", "see tools/ansible_sanity.sh")
    proc = subprocess.run(
        ["bash", str(REPO / "tools" / "ansible_sanity.sh")],
        capture_output=True,
        text=True,
        timeout=1500,
        env=dict(os.environ, TMPDIR=str(tmp_path), SPUR_VENV=str(VENV_BIN.parent)),
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-8000:]
    for test in ("validate-modules", "pylint", "import", "pep8", "yamllint", "ansible-doc", "changelog"):
        assert f'Running sanity test "{test}"' in proc.stdout + proc.stderr


def test_docs_modules_md_matches_the_modules():
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_module_docs.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    text = (REPO / "docs" / "modules.md").read_text()
    for module in MODULES:
        assert f"## spur.cluster.{module}" in text


def test_examples_use_fully_qualified_names():
    import ast

    import yaml

    for module in MODULES:
        tree = ast.parse((COLLECTION / "plugins" / "modules" / f"{module}.py").read_text())
        docs = {
            t.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
        }
        assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, module
        for task in yaml.safe_load(docs["EXAMPLES"]):
            actions = [k for k in task if "." in k]
            assert actions and all(a.startswith(("spur.cluster.", "ansible.builtin.")) for a in actions), (module, task)


def checkout_env(tmp_path: Path) -> dict[str, str]:
    """A user's shell in a checkout: no ANSIBLE_COLLECTIONS_PATH, so the repository's ansible.cfg says where
    spur.cluster is (collections/ansible_collections/spur/cluster, a link to collection/)."""
    env = ansible_env(tmp_path / "home")
    env.pop("ANSIBLE_COLLECTIONS_PATH")
    return env


def test_the_playbooks_run_from_a_checkout_as_the_docs_write_them(tmp_path):
    inventory = ["-i", "inventory/local.yml"]
    for playbook in ("playbooks/deploy.yml", "playbooks/rolling_upgrade.yml", "spur.cluster.rolling_upgrade"):
        argv = [str(VENV_BIN / "ansible-playbook"), "--syntax-check", playbook, *inventory]
        checked = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, cwd=REPO, env=checkout_env(tmp_path)
        )
        assert checked.returncode == 0, f"{playbook}: {checked.stdout[-2000:]}{checked.stderr[-2000:]}"
    assert str(REPO / "collections" / "ansible_collections" / "spur" / "cluster") in checked.stdout, checked.stdout


def test_a_relative_spur_release_src_is_relative_to_the_current_directory(tmp_path):
    here = tmp_path / "here"
    (here / "rel").mkdir(parents=True)
    (here / "rel" / "release.json").write_text('{"version": "9.9.9", "build": "b"}')
    play = tmp_path / "elsewhere" / "play.yml"  # the playbook (and the role) live somewhere else
    play.parent.mkdir()
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.import_role: {name: spur.cluster.spur_install, tasks_from: preflight.yml}\n"
        "    - ansible.builtin.debug:\n"
        "        msg: 'source={{ __spur_install_source }} version={{ __spur_install_manifest.version }}'\n"
    )
    argv = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        "-c",
        "local",
        str(play),
        "-e",
        "spur_release_src=rel",
    ]
    ran = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=here, env=ansible_env(tmp_path / "home")
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert f"source={here / 'rel'} version=9.9.9" in ran.stdout
