"""spur cluster deploy|upgrade|health|teardown -i INVENTORY: the collection's playbooks in one command.

Runs spur.cluster's playbook through ansible-runner, shows live progress per host (which play, which task,
what each host answered), and writes the whole event log as JSON at the end. Extra variables pass through
with -e key=value (repeatable) or -e @file.yml, like ansible-playbook.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spur_hpc.cli import units, upgradeprogress
from spur_hpc.cli.runner import CliError

PLAYBOOKS = {
    "deploy": "deploy.yml",
    "upgrade": "rolling_upgrade.yml",
    "health": "healthcheck.yml",
    "teardown": "teardown.yml",
}
USAGE = """usage: spur cluster {deploy|upgrade|health|teardown} -i INVENTORY [-e KEY=VALUE ...] [--check]
                    [--limit HOSTS] [--log-json FILE]
       spur cluster upgrade --status [EVENT_LOG]

  deploy     spur.cluster.deploy: accounting, controllers, agents, then a verify job
  upgrade    spur.cluster.rolling_upgrade: the release staged everywhere, then controllers one at a time
             (leader last), then agents in batches; one status line shows the progress. --status reads the
             event log of a running or interrupted run (default: the newest spur-upgrade-*.json here)
  health     spur.cluster.healthcheck: read-only; exit 1 when the cluster is unhealthy
  teardown   spur.cluster.teardown: agents, then controllers; state is kept unless -e spur_wipe_state=true
"""
STATUS_OF = {
    "runner_on_ok": "ok",
    "runner_on_failed": "FAILED",
    "runner_on_unreachable": "UNREACHABLE",
    "runner_on_skipped": "skipped",
}


def find_collection() -> tuple[Path, dict[str, str]]:
    """The spur.cluster collection dir, and env vars that make Ansible resolve it."""
    paths = [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(":") if p]
    paths += [str(Path.home() / ".ansible/collections"), "/usr/share/ansible/collections"]
    for base in paths:
        candidate = Path(base) / "ansible_collections" / "spur" / "cluster"
        if (candidate / "playbooks").is_dir():
            return candidate, {}
    source = Path(__file__).resolve().parents[3] / "collection"
    if (source / "galaxy.yml").exists():
        # A source checkout: make ansible_collections/spur/cluster point at it.
        link_root = Path(tempfile.mkdtemp(prefix="spur-collections-"))
        (link_root / "ansible_collections" / "spur").mkdir(parents=True)
        (link_root / "ansible_collections" / "spur" / "cluster").symlink_to(source)
        joined = ":".join(
            [str(link_root)] + [p for p in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(":") if p]
        )
        return source, {"ANSIBLE_COLLECTIONS_PATH": joined}
    raise CliError(
        "the spur.cluster collection is not installed; run: ansible-galaxy collection install spur-cluster-*.tar.gz"
    )


def parse_args(argv: list[str]) -> dict[str, Any]:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE.strip())
        raise SystemExit(0)
    command, rest = argv[0], argv[1:]
    if command not in PLAYBOOKS:
        raise CliError(f"unknown cluster command '{command}': use deploy, upgrade, health or teardown")
    opts: dict[str, Any] = {
        "command": command,
        "inventory": None,
        "extravars": {},
        "check": False,
        "limit": None,
        "log_json": None,
    }
    i = 0
    while i < len(rest):
        arg = rest[i]
        value = rest[i + 1] if i + 1 < len(rest) else None
        if arg in ("-i", "--inventory", "-e", "--extra-vars", "--limit", "-l", "--log-json") and value is None:
            raise CliError(f"{arg} needs a value")
        if arg in ("-i", "--inventory"):
            opts["inventory"] = value
            i += 2
        elif arg in ("-e", "--extra-vars"):
            opts["extravars"].update(_extra(value))
            i += 2
        elif arg in ("-l", "--limit"):
            opts["limit"] = value
            i += 2
        elif arg == "--log-json":
            opts["log_json"] = value
            i += 2
        elif arg in ("-C", "--check"):
            opts["check"] = True
            i += 1
        else:
            raise CliError(f"unknown option '{arg}' for 'spur cluster {command}'; see spur cluster --help")
    if not opts["inventory"]:
        raise CliError(f"spur cluster {command} needs an inventory: -i inventory/hosts.ini")
    if not os.path.exists(opts["inventory"]):
        raise CliError(f"inventory {opts['inventory']} does not exist")
    return opts


def _extra(value: str) -> dict[str, Any]:
    if value.startswith("@"):
        path = value[1:]
        try:
            import yaml

            with open(path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except OSError as exc:
            raise CliError(f"-e {value}: cannot read {path} ({exc.strerror})") from None
        if not isinstance(data, dict):
            raise CliError(f"-e {value}: the file must hold a mapping of variables")
        return data
    if value.lstrip().startswith("{"):
        try:
            data = json.loads(value)
        except ValueError as exc:
            raise CliError(f"-e {value!r}: not valid JSON ({exc})") from None
        return data
    if "=" not in value:
        raise CliError(f"-e {value!r}: expected KEY=VALUE, @file.yml or a JSON object")
    key, raw = value.split("=", 1)
    # ansible-playbook reads key=value pairs as strings; booleans and numbers are what operators mean here
    lowered = raw.lower()
    if lowered in ("true", "yes"):
        return {key: True}
    if lowered in ("false", "no"):
        return {key: False}
    return {key: int(raw) if units.is_number(raw) and len(raw) <= 18 else raw}


class Progress:
    """Prints one line per play, task start and host result, or, given a status line (the upgrade), that line
    and the failures only; keeps every event for the JSON log."""

    def __init__(self, stream=sys.stdout, status_line: upgradeprogress.StatusLine | None = None) -> None:
        self.stream = stream
        self.status_line = status_line
        self.events: list[dict[str, Any]] = []
        self.hosts: dict[str, dict[str, int]] = {}
        self.started = time.monotonic()

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        now = round(time.monotonic() - self.started, 3)
        if self.status_line is not None:
            self.status_line.refresh()
        if self.status_line is not None and kind in ("playbook_on_play_start", "playbook_on_task_start"):
            pass  # the status line says where the run is
        elif kind == "playbook_on_play_start":
            self._say(f"\n[{now:7.1f}s] PLAY {data.get('play', '')}")
        elif kind == "playbook_on_task_start":
            self._say(f"[{now:7.1f}s]   TASK {data.get('task', '')}")
        elif kind in STATUS_OF:
            host = data.get("host", "?")
            status = STATUS_OF[kind]
            result = data.get("res") or {}
            if status == "ok" and result.get("changed"):
                status = "changed"
            counts = self.hosts.setdefault(host, {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 0})
            counts[{"FAILED": "failed", "UNREACHABLE": "unreachable"}.get(status, status)] += 1
            line = f"[{now:7.1f}s]     {status:<11} {host}"
            message = result.get("msg") if status in ("FAILED", "UNREACHABLE") else ""
            if message:
                line += f": {str(message).splitlines()[0][:300]}"
            if status in ("FAILED", "UNREACHABLE") and self.status_line is not None:
                ignored = bool(data.get("ignore_errors")) or "rescue" in str(data.get("task_path", ""))
                if not ignored:
                    self._say(f"\n{line}")
            elif status != "skipped" and self.status_line is None:
                self._say(line)
            self.events.append(
                {
                    "t": now,
                    "event": kind,
                    "host": host,
                    "task": data.get("task", ""),
                    "play": data.get("play", ""),
                    "status": status,
                    "duration": data.get("duration"),
                    "msg": message or None,
                }
            )
        return True

    def _say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


# Hosts `spur cluster upgrade` works on at once (the stage, an agents' batch) unless ANSIBLE_FORKS says otherwise.
UPGRADE_FORKS = 50


def main(argv: list[str], program: str = "spur cluster") -> int:
    if argv[:1] == ["upgrade"] and "--status" in argv:
        rest = [a for a in argv[1:] if a != "--status"]
        if len(rest) > 1 or (rest and rest[0].startswith("-")):
            raise CliError("spur cluster upgrade --status takes at most one event log path, and no other option")
        return upgradeprogress.show_status(rest[0] if rest else None)
    opts = parse_args(argv)
    try:
        import ansible_runner
    except ImportError:
        raise CliError("spur cluster deploy/upgrade/health needs ansible-runner: pip install 'spur-hpc[ops]'") from None
    collection, env = find_collection()
    # ansible-playbook from the same environment as this command (a venv need not be on PATH)
    env["PATH"] = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    playbook = collection / "playbooks" / PLAYBOOKS[opts["command"]]
    if not playbook.exists():
        raise CliError(f"{playbook} does not exist in this collection release")
    status_line = None
    if opts["command"] == "upgrade" and not opts["check"]:
        # The playbook's event log, at a path this command knows, feeds the status line.
        event_log = opts["extravars"].setdefault(
            "spur_upgrade_event_log",
            os.path.abspath(f"spur-upgrade-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"),
        )
        status_line = upgradeprogress.StatusLine(str(event_log), sys.stdout)
    progress = Progress(status_line=status_line)
    cmdline = "--check --diff" if opts["check"] else None
    # Ansible's default of 5 forks would stage a 6th host, and the 6th agent of a batch, only once one of the
    # first five is done. Ansible starts only as many workers as a task has hosts, so a high bound costs a small
    # cluster nothing. ANSIBLE_FORKS still decides when set (the bound is passed as --forks, over ansible.cfg).
    forks = None if os.environ.get("ANSIBLE_FORKS") else UPGRADE_FORKS if opts["command"] == "upgrade" else None
    with tempfile.TemporaryDirectory(prefix="spur-runner-") as private:
        result = ansible_runner.run(
            private_data_dir=private,
            playbook=str(playbook),
            inventory=os.path.abspath(opts["inventory"]),
            extravars=opts["extravars"],
            limit=opts["limit"],
            cmdline=cmdline,
            forks=forks,
            envvars=env,
            event_handler=progress,
            quiet=True,
        )
    if status_line is not None:
        status_line.refresh()
        status_line.close()
    log_path = Path(opts["log_json"] or f"spur-{opts['command']}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    summary = {
        "command": opts["command"],
        "playbook": str(playbook),
        "inventory": opts["inventory"],
        "status": result.status,
        "rc": result.rc,
        "hosts": progress.hosts,
        "total_s": round(time.monotonic() - progress.started, 1),
        "events": progress.events,
    }
    log_path.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\n{'host':<16} {'ok':>4} {'changed':>8} {'failed':>7} {'unreachable':>12}")
    for host, c in sorted(progress.hosts.items()):
        print(f"{host:<16} {c['ok'] + c['changed']:>4} {c['changed']:>8} {c['failed']:>7} {c['unreachable']:>12}")
    print(f"{program} {opts['command']}: {result.status} in {summary['total_s']} s; event log: {log_path}")
    return 0 if result.rc == 0 else 1
