"""`make demo`: the whole product on this machine, no root needed.

1. builds two releases of this tree (A = 0.1.0, B = 0.1.1) into .spur-demo/releases/;
2. deploys A to the embedded default (inventory/local.yml: 3 controllers + 3 agents on 127.0.1.N under
   supervisord) with spur.cluster.deploy;
3. submits a job that keeps running through the upgrade;
4. upgrades the cluster in place to B with spur.cluster.rolling_upgrade (spur_in_place_upgrade=true), while a
   watcher polls every daemon's probes to see who went down when;
5. lets the job finish and prints a report (also .spur-demo/report.json): the controller order with the
   leader last, each agent's downtime, the job that survived and its exit code, the total time.

The cluster stays up; `make demo-down` (tools/demo.py down) tears it down. A second `make demo` tears the
previous one down first, so it never needs cleaning by hand.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# $SPUR_DEMO_DIR moves everything the demo writes (the tests run it away from a user's own demo).
DEMO = Path(os.environ.get("SPUR_DEMO_DIR") or ROOT / ".spur-demo")
BIN = Path(sys.executable).parent
INVENTORY = ROOT / "inventory" / "local.yml"
NET = os.environ.get("SPUR_LOCAL_NET", "127.0.1")
CONTROLLERS = {f"ctl-{i}": f"{NET}.{i + 1}" for i in range(3)}
AGENTS = {f"node-{i}": f"{NET}.{11 + i}" for i in range(3)}
CONTROLLER_ADDR = ",".join(f"{ip}:6817" for ip in CONTROLLERS.values())
VERSIONS = {"A": "0.1.0", "B": "0.1.1"}


def step(text: str) -> None:
    print(f"\n==> [{time.strftime('%H:%M:%S')}] {text}", flush=True)


def run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPUR_LOCAL_ROOT=str(DEMO / "hosts"), **kw.pop("env", {}))
    return subprocess.run(argv, cwd=ROOT, env=env, **kw)


def probe(addr: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=0.5) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if path == "/status" else {}
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except (OSError, ValueError):
        return 0, {}


# ------------------------------------------------------------------ releases


def build_releases() -> dict[str, Path]:
    """Build A and B once per tree content: a second demo reuses them when the sources did not change."""
    from spur_hpc.buildinfo import content_hash

    tree = content_hash(ROOT / "daemons" / "spur_hpc")
    out = {}
    for name, version in VERSIONS.items():
        target = DEMO / "releases" / name
        manifest = target / "release.json"
        if manifest.exists() and json.loads(manifest.read_text()).get("build") == tree:
            print(f"release {name} ({version}, build {tree}) is up to date in {target}")
        else:
            shutil.rmtree(target, ignore_errors=True)
            print(f"building release {name}: version {version} -> {target}", flush=True)
            done = run([str(BIN / "spur-release"), "build", "--version", version, "--out", str(target)])
            if done.returncode != 0:
                raise SystemExit(f"demo: building release {name} failed (see above)")
        out[name] = target
    return out


# ------------------------------------------------------------------ the cluster


def playbook(command: str, *extra: str, log: Path | None = None) -> int:
    argv = [str(BIN / "spur"), "cluster", command, "-i", str(INVENTORY), *extra]
    if log is not None:
        argv += ["--log-json", str(log)]
    return run(argv).returncode


def down() -> int:
    if not (DEMO / "hosts").exists():
        print("demo: nothing to tear down")
        return 0
    step("tearing down the demo cluster (spur.cluster.teardown, state wiped)")
    code = playbook("teardown", "-e", "spur_wipe_state=true", log=DEMO / "teardown-events.json")
    if code == 0:
        shutil.rmtree(DEMO / "hosts", ignore_errors=True)
    return code


class Watcher(threading.Thread):
    """Polls every daemon's probes every 100 ms during the upgrade: who was down when, who led, which build."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.samples: dict[str, list[tuple[float, bool, str, str]]] = {h: [] for h in [*CONTROLLERS, *AGENTS]}

    def run(self) -> None:
        while not self.stop.wait(0.1):
            now = time.monotonic()
            for host, ip in CONTROLLERS.items():
                code, status = probe(f"{ip}:6822", "/status")
                self.samples[host].append((now, code == 200, status.get("role", ""), status.get("version", "")))
            for host, ip in AGENTS.items():
                code, status = probe(f"{ip}:6823", "/status")
                ready = code == 200 and bool(status.get("registered"))
                self.samples[host].append((now, ready, "", status.get("version", "")))

    def downtime(self, host: str) -> float:
        total, last_t, last_up = 0.0, None, True
        for t, up, _role, _build in self.samples[host]:
            if last_t is not None and not last_up:
                total += t - last_t
            last_t, last_up = t, up
        return round(total, 2)

    def controller_order(self, target_version: str) -> list[tuple[str, str]]:
        """(host, role just before it went down for the upgrade), in the order they switched to the target.
        Versions, not builds, tell A from B: both are built from the same tree, so their build hashes match."""
        switched = []
        for host in CONTROLLERS:
            role_before, switch_at = "", None
            for t, up, role, version in self.samples[host]:
                if up and version and version != target_version:
                    role_before = role
                if up and version == target_version:
                    switch_at = t
                    break
            if switch_at is not None:
                switched.append((switch_at, host, role_before))
        return [(host, role) for _t, host, role in sorted(switched)]


def sbatch(script: str) -> int:
    env = dict(os.environ, SPUR_CONTROLLER_ADDR=CONTROLLER_ADDR)
    work = DEMO / "work"
    work.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(BIN / "sbatch"), "--parsable", "-J", "survivor", "--wrap", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"demo: sbatch failed: {done.stderr.strip()}")
    return int(done.stdout.strip())


def job_fields(job_id: int) -> dict[str, str]:
    env = dict(os.environ, SPUR_CONTROLLER_ADDR=CONTROLLER_ADDR)
    text = subprocess.run(
        [str(BIN / "scontrol"), "show", "job", str(job_id)], env=env, capture_output=True, text=True
    ).stdout
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def supervisor_of(job_id: int) -> tuple[str, int] | None:
    for host, ip in AGENTS.items():
        _code, status = probe(f"{ip}:6823", "/status")
        for running in status.get("running_jobs", []):
            if running.get("job_id") == job_id:
                return host, int(running.get("supervisor_pid", 0))
    return None


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out after {timeout:.0f} s waiting for {what}")


# ------------------------------------------------------------------ the demo


def up() -> int:
    started = time.monotonic()
    DEMO.mkdir(exist_ok=True)
    down()
    step("building releases A and B of this tree")
    releases = build_releases()

    step("deploying release A to 3 controllers + 3 agents (spur.cluster.deploy, inventory/local.yml)")
    if playbook("deploy", "-e", f"spur_release_src={releases['A']}", log=DEMO / "deploy-events.json") != 0:
        raise SystemExit("demo: deploy failed (see above)")

    step("submitting a job that runs through the upgrade")
    gate = DEMO / "work" / "upgrade-done"
    gate.unlink(missing_ok=True)
    job_id = sbatch(f"while [ ! -e {gate} ]; do sleep 0.5; done; echo survived the upgrade; exit 0")
    host, pid_before = wait_for(lambda: supervisor_of(job_id), 60, f"job {job_id} to start")
    print(f"job {job_id} runs on {host} under supervisor pid {pid_before}")

    step("rolling upgrade to release B, in place (spur.cluster.rolling_upgrade, spur_in_place_upgrade=true)")
    watcher = Watcher()
    watcher.start()
    upgrade_started = time.monotonic()
    code = playbook(
        "upgrade",
        "-e",
        f"spur_release_src={releases['B']}",
        "-e",
        "spur_in_place_upgrade=true",
        "-e",
        f"spur_upgrade_event_log={DEMO / 'upgrade-events.json'}",
        log=DEMO / "upgrade-runner.json",
    )
    upgrade_s = round(time.monotonic() - upgrade_started, 1)
    time.sleep(1.0)
    watcher.stop.set()
    watcher.join()
    if code != 0:
        raise SystemExit("demo: the rolling upgrade failed (see above); the cluster is left as it is")

    after = supervisor_of(job_id)
    survived = after == (host, pid_before) and job_fields(job_id).get("JobState") == "RUNNING"
    step(f"releasing job {job_id} and waiting for its end")
    gate.touch()

    def ended() -> dict[str, str] | None:
        fields = job_fields(job_id)
        return fields if fields.get("JobState") not in ("RUNNING", "PENDING") else None

    fields = wait_for(ended, 60, f"job {job_id} to end")
    exit_code = int(fields.get("ExitCode", "0:0").split(":")[0])
    order = watcher.controller_order(VERSIONS["B"])
    phases, turn = upgrade_split(DEMO / "upgrade-events.json")
    # No leader went down while others still ran A; the last one led, or (leadership having moved during the run)
    # followed a leader already on B: the only other members then. Not "the last was leader" (tests/upgrade_events.py).
    leader_last = (
        len(order) == len(CONTROLLERS)
        and all(role != "leader" for _h, role in order[:-1])
        and order[-1][1] in ("leader", "follower")
    )
    report = {
        "controller_order": [h for h, _role in order],
        "controller_roles": {h: role for h, role in order},
        "leader_last": leader_last,
        "job_id": job_id,
        "job_survived": survived and fields.get("JobState") == "COMPLETED",
        "job_state": fields.get("JobState"),
        "job_exit_code": exit_code,
        "supervisor_pid": pid_before,
        "agent_downtime_s": {h: watcher.downtime(h) for h in AGENTS},
        # An in-place spurd restart takes about 0.3 s and 100 ms polls can miss it: the versions seen prove it.
        "agent_versions_seen": {h: sorted({v for *_, v in watcher.samples[h] if v}) for h in AGENTS},
        "controller_downtime_s": {h: watcher.downtime(h) for h in CONTROLLERS},
        "upgrade_s": upgrade_s,
        # Where the upgrade's time went (from its event log), and one agent's turn as its task results.
        "upgrade_phases_s": phases,
        "agent_turn": turn,
        "total_s": round(time.monotonic() - started, 1),
        "release_a": str(releases["A"]),
        "release_b": str(releases["B"]),
        "event_log": str(DEMO / "upgrade-events.json"),
    }
    (DEMO / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)
    return 0 if report["job_survived"] and leader_last else 1


def upgrade_split(path: Path) -> tuple[dict[str, float], list[str]]:
    """Seconds from the first step of each phase to the first step of the next (the plan, the stage, the
    controllers, the WAL level, the agents, the verification), and the first agent's turn, task by task."""
    try:
        log = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, []
    starts: dict[str, float] = {}
    for event in sorted(log.get("events", []), key=lambda e: e["t"]):
        starts.setdefault(event["phase"], float(event["t"]))
    started = calendar.timegm(time.strptime(log["started"], "%Y-%m-%dT%H:%M:%SZ"))
    ends = sorted(starts.items(), key=lambda item: item[1])
    phases = {}
    for (phase, begin), nxt in zip(ends, [*ends[1:], ("end", started + float(log["wall_secs"]))], strict=True):
        phases[phase] = round(nxt[1] - (started if phase == "preflight" else begin), 1)
    turns = [hosts for play, hosts in (log.get("task_results") or {}).items() if "Agents, in batches" in play]
    first = next(iter(turns[0].values()), []) if turns else []
    return phases, [f"{r['task'].split(' : ', 1)[-1]} ({r['status']}, {r['secs']:.1f} s)" for r in first]


def print_report(r: dict) -> None:
    print("\n================ Spur demo report ================")
    order = ", ".join(f"{h} ({r['controller_roles'][h]})" for h in r["controller_order"])
    print(f"controllers upgraded in order: {order}")
    print(f"leader upgraded last:          {'yes' if r['leader_last'] else 'NO'}")
    for host, secs in r["agent_downtime_s"].items():
        print(f"agent {host} downtime:         {secs:.1f} s")
    print(
        f"job {r['job_id']}:                        {'survived' if r['job_survived'] else 'DID NOT SURVIVE'} "
        f"(same supervisor pid {r['supervisor_pid']}), ended {r['job_state']} with exit code {r['job_exit_code']}"
    )
    print(f"rolling upgrade took:          {r['upgrade_s']} s; whole demo {r['total_s']} s")
    if r["upgrade_phases_s"]:
        split = ", ".join(f"{phase} {secs:.1f} s" for phase, secs in r["upgrade_phases_s"].items())
        print(f"  of which:                    {split}")
    if r["agent_turn"]:
        print(f"one agent's turn ({len(r['agent_turn'])} task results):")
        for task in r["agent_turn"]:
            print(f"    {task}")
    print(f"report: {DEMO / 'report.json'}")
    print("\nThe cluster stays up. Try:")
    print(f"  export SPUR_CONTROLLER_ADDR={CONTROLLER_ADDR} PATH={BIN}:$PATH")
    print("  sinfo; sbatch --wrap 'hostname'; squeue -t all; spur cluster status")
    print(f"  curl -s http://{CONTROLLERS['ctl-0']}:6822/status")
    print("Stop it with: make demo-down")


if __name__ == "__main__":
    sys.exit(up() if sys.argv[1:] == ["up"] else down())
