"""Helpers for the spur.cluster tests: the import path, in-process module runs, real ansible-playbook runs.

ansible-playbook runs the modules on a managed-host Python with nothing installed (bare_python(): a venv of the
base interpreter without pip, grpcio or spur-hpc), as on a host before its first release: a module that needs
more than the standard library fails there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"
VENV_BIN = Path(sys.executable).parent

# The modules import ansible_collections.spur.cluster...: give Python (and Ansible) a tree where that resolves.
COLLECTIONS_ROOT = Path(tempfile.mkdtemp(prefix="spur-collections-"))
(COLLECTIONS_ROOT / "ansible_collections" / "spur").mkdir(parents=True)
(COLLECTIONS_ROOT / "ansible_collections" / "spur" / "cluster").symlink_to(COLLECTION)
sys.path.insert(0, str(COLLECTIONS_ROOT))


class AnsibleExitJson(Exception):
    """exit_json was called: the module's result is in .result."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", "exit_json"))
        self.result = result


class AnsibleFailJson(Exception):
    """fail_json was called: the module's result (with msg) is in .result."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", "fail_json"))
        self.result = result


def _exit_json(self, **kwargs: Any) -> None:
    kwargs.setdefault("changed", False)
    kwargs["warnings"] = list(getattr(self, "_spur_test_warnings", []))
    raise AnsibleExitJson(kwargs)


def _fail_json(self, msg: str, **kwargs: Any) -> None:
    kwargs["failed"] = True
    kwargs["msg"] = msg
    kwargs["warnings"] = list(getattr(self, "_spur_test_warnings", []))
    raise AnsibleFailJson(kwargs)


def _warn(self, warning: str) -> None:
    if not hasattr(self, "_spur_test_warnings"):
        self._spur_test_warnings = []
    self._spur_test_warnings.append(warning)


def run_module(module: Any, args: dict[str, Any], check_mode: bool = False, diff: bool = False) -> dict[str, Any]:
    """Call module.main() with args injected the standard way; -> its result, with failed=True on fail_json."""
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args

    full = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    with (
        patch_module_args(full),
        mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json),
        mock.patch.object(basic.AnsibleModule, "warn", _warn),
    ):
        try:
            module.main()
        except AnsibleExitJson as done:
            return done.result
        except AnsibleFailJson as failed:
            return failed.result
    raise AssertionError(f"{module.__name__}.main() returned without exit_json or fail_json")


def bare_python() -> Path:
    """A Python with the standard library only (made once per test session), for the modules' side."""
    python = COLLECTIONS_ROOT / "bare-python" / "bin" / "python"
    if not python.exists():
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(python.parent.parent)], check=True, timeout=120
        )
    return python


def ansible_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS_ROOT),
        ANSIBLE_HOME=str(home / ".ansible"),
        ANSIBLE_LOCAL_TEMP=str(home / "tmp"),
        ANSIBLE_REMOTE_TEMP=str(home / "remote-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_PYTHON_INTERPRETER=str(bare_python()),
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
    )
    env.pop("ANSIBLE_CONFIG", None)
    return env


def run_playbook(
    tmp_path: Path, tasks: list[dict[str, Any]], timeout: float = 300, module_defaults: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run tasks on localhost with the real ansible-playbook; -> every registered result by its name."""
    results = tmp_path / "results.json"
    names = [t["register"] for t in tasks if "register" in t]
    dump = {
        "name": "Write the registered results",
        "ansible.builtin.copy": {
            "content": "{{ {" + ", ".join(f"'{n}': {n}" for n in names) + "} | to_nice_json }}",
            "dest": str(results),
            "mode": "0644",
        },
    }
    play: list[dict[str, Any]] = [
        {"name": "spur.cluster test", "hosts": "localhost", "gather_facts": False, "tasks": [*tasks, dump]}
    ]
    if module_defaults:
        play[0]["module_defaults"] = module_defaults
    playbook = tmp_path / "playbook.json"
    playbook.write_text(json.dumps(play))
    home = tmp_path / "ansible-home"
    home.mkdir(exist_ok=True)
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)],
        env=ansible_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"ansible-playbook failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    return json.loads(results.read_text())
