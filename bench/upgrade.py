"""Rolling upgrades of the embedded default cluster while one client keeps submitting jobs.

The cluster is inventory/local.yml (3 controllers + 3 agents, each under its own supervisord, on loopback
addresses $SPUR_LOCAL_NET.N: 127.0.3.N here, clear of the demo's 127.0.1.N and of the Molecule scenarios'
127.5-54.x.N). Steps, each with the real playbooks through ansible-playbook:

1. releases A (0.1.0), B (0.2.0) and C (0.3.0) of this tree with `spur-release build` (kept in
   /tmp/spur-bench-releases/<tree hash>/ and reused while daemons/ does not change);
2. `ansible-playbook spur.cluster.deploy -e spur_release_src=A`;
3. `ansible-playbook spur.cluster.rolling_upgrade -e spur_release_src=B -e spur_in_place_upgrade=true`;
4. `ansible-playbook spur.cluster.rolling_upgrade -e spur_release_src=C` (drained, the default mode);
   each of 3 and 4 after the same run with `-e spur_upgrade_stage_only=true` (the release staged on every host,
   nothing restarted), as a site stages by day and switches at night; --no-stage-first runs each in one go;
5. `ansible-playbook spur.cluster.teardown -e spur_wipe_state=true`, also when a step failed.

During 3 and 4 one client thread submits small `true` jobs one after the other (a pause of --interval
between them) over gRPC. Each submission carries an idempotency key, also the job's name; a call that fails
(any gRPC error, or no answer within 5 s) is retried with the same key, on the leader a follower names or
the next controller, for up to --give-up seconds, after which the submission counts as failed. Latency is from
the first try to the reply. Afterwards every job is listed (finished ones included: the deploy sets
min_job_age_secs high so none is purged meanwhile) and counted per key: more than one job for a key is a
duplicate, none for a key that got a job id is an acknowledged submission lost.

From each run's event log (spur_upgrade_event_log: events of kind gate, work or info, with their secs):

  unavoidable waits = sum of secs of the gate events `started` (a restarted daemon's own start: from its spawn
                      until its probe answers, spurd's /readyz once registered, spurctld's /livez), `healthy`
                      (after a controller's restart: until one leader holds a stable term for
                      spur_upgrade_stable_secs, every member is caught up and the restarted one is ready on the
                      new release; the election is in it) and `registered` (after an agent's restart: until the
                      controllers list it registered at the new release).
  ratio             = wall_secs / unavoidable waits.

Not counted as unavoidable: the work events (release install, config, the restart's stop and spawn),
the other gates (guard rails, draining and DOWN waits, the in-place job check, the verify job) and the time
in no event (Ansible's own task overhead, probes, the plan). A watcher also polls every daemon's probe
every 0.2 s and records how long each was down, as a second view of the restarts.

Usage: python bench/upgrade.py [--interval 0.1] [--net 127.0.3] [--only in-place|drained] [--no-stage-first] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path
# isort: on

import grpc

from spur_hpc import grpcutil
from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc

BIN = Path(sys.executable).parent
INVENTORY = common.ROOT / "inventory" / "local.yml"
VERSIONS = {"A": "0.1.0", "B": "0.2.0", "C": "0.3.0"}
RELEASES = Path("/tmp/spur-bench-releases")
UNAVOIDABLE_STEPS = ("started", "healthy", "registered")
CALL_TIMEOUT_S = 5.0
KEEP_FINISHED = {"spur_conf": {"controller": {"min_job_age_secs": 86400}}}


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ------------------------------------------------------------------ releases


def build_releases() -> tuple[dict[str, Path], float]:
    from spur_hpc.buildinfo import content_hash

    tree = content_hash(common.ROOT / "daemons" / "spur_hpc")
    base = RELEASES / tree
    t0 = time.monotonic()
    out = {}
    for name, version in VERSIONS.items():
        target = base / name
        manifest = target / "release.json"
        if manifest.exists() and json.loads(manifest.read_text()).get("version") == version:
            say(f"release {name} ({version}, build {tree}) reused from {target}")
        else:
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            say(f"building release {name} ({version}) -> {target}")
            argv = [str(BIN / "spur-release"), "build", "--version", version, "--source", str(common.ROOT)]
            done = subprocess.run([*argv, "--out", str(target)], capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise SystemExit(f"spur-release build {name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        out[name] = target
    return out, time.monotonic() - t0


# ------------------------------------------------------------------ the playbooks


class Playbooks:
    """ansible-playbook spur.cluster.<name> on inventory/local.yml, in an environment of this run's own."""

    def __init__(self, root: Path, net: str, inventory: Path = INVENTORY) -> None:
        self.root = root
        self.net = net
        self.inventory = inventory
        collections = root / "c" / "ansible_collections" / "spur"
        collections.mkdir(parents=True)
        (collections / "cluster").symlink_to(common.ROOT / "collection")
        (root / "home").mkdir()
        self.logs = root / "logs"
        self.logs.mkdir()
        env = dict(os.environ)
        env.pop("ANSIBLE_CONFIG", None)
        env.update(
            HOME=str(root / "home"),
            ANSIBLE_HOME=str(root / "home" / ".ansible"),
            ANSIBLE_COLLECTIONS_PATH=str(root / "c"),
            ANSIBLE_FORCE_COLOR="0",
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            # unix sockets live below each host's tree (supervisord's, one per running job): a short path
            SPUR_LOCAL_ROOT=str(root / "h"),
            SPUR_LOCAL_NET=net,
            # each task's time in the log, and the slowest tasks at the end (slowest_tasks below)
            ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
            PROFILE_TASKS_TASK_OUTPUT_LIMIT="25",
        )
        self.env = env

    def run(
        self, name: str, *extra: str, label: str, timeout: float = 1800, profile: Path | None = None
    ) -> tuple[int, float, Path]:
        """One playbook; with `profile`, ansible-playbook and the workers it forks run under py-spy, whose
        collapsed stacks go to that file."""
        log = self.logs / f"{label}.log"
        argv = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), f"spur.cluster.{name}", *extra]
        if profile is not None:
            argv = [str(BIN / "py-spy"), "record", "--subprocesses", "--rate", "100", "--format", "raw",
                    "--nonblocking", "--output", str(profile), "--", *argv]  # fmt: skip
        say(f"{label}: {' '.join(argv[1:])} (output: {log})")
        t0 = time.monotonic()
        with open(log, "w") as out:
            try:
                code = subprocess.run(
                    argv, cwd=common.ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
                ).returncode
            except subprocess.TimeoutExpired:
                code = -1
        wall = time.monotonic() - t0
        say(f"{label}: exit {code} after {wall:.1f} s")
        if code != 0:
            print("\n".join(log.read_text(errors="replace").splitlines()[-40:]), flush=True)
        return code, wall, log

    def controllers(self) -> list[str]:
        return [f"{self.net}.{i}" for i in (1, 2, 3)]

    def agents(self) -> list[str]:
        return [f"{self.net}.{i}" for i in (11, 12, 13)]


def slowest_tasks(log: Path) -> list[list[object]]:
    """The slowest tasks of a run, from profile_tasks' summary after PLAY RECAP: [[task, seconds], ...]."""
    import re

    text = log.read_text(errors="replace") if log.exists() else ""
    summary = text.rpartition("PLAY RECAP")[2]
    line = re.compile(r"^(?P<task>\S.*?) -+ (?P<secs>\d+(?:\.\d+)?)s\s*$")
    return [[m["task"], float(m["secs"])] for m in map(line.match, summary.splitlines()) if m]


def keep_logs(root: Path) -> Path | None:
    """The playbooks' logs outlive the run's tree: moved to a directory of their own under /tmp."""
    logs = root / "logs"
    if not logs.is_dir():
        return None
    kept = Path(tempfile.mkdtemp(prefix="spur-bench-upgrade-logs-", dir="/tmp"))
    for f in logs.iterdir():
        shutil.move(str(f), kept / f.name)
    return kept


def sweep(root: Path) -> list[int]:
    """Processes still running from this run's host trees (a teardown that failed): TERM, then KILL."""
    needle = str(root).encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in found:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if found and sig == signal.SIGTERM:
            time.sleep(3)
    return found


# ------------------------------------------------------------------ the client


class Submitter(threading.Thread):
    """One client submitting `true` jobs one after the other, each retried with its idempotency key."""

    def __init__(self, addresses: list[str], interval: float, give_up: float, prefix: str) -> None:
        super().__init__(daemon=True)
        self.addresses = addresses
        self.interval = interval
        self.give_up = give_up
        self.prefix = prefix
        self.stop = threading.Event()
        self.records: list[dict] = []
        self.errors: dict[str, int] = {}
        self.channels = {a: grpc.insecure_channel(a) for a in addresses}
        self.stubs = {a: slurm_pb2_grpc.SlurmControllerStub(ch) for a, ch in self.channels.items()}
        self.current = addresses[0]
        self.t0 = time.monotonic()

    def submit_one(self) -> dict:
        key = f"{self.prefix}-{uuid.uuid4().hex}"
        spec = slurm_pb2.JobSpec(name=key, script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
        request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=key)
        started = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            address = self.current
            try:
                reply = self.stubs[address].SubmitJob(request, timeout=CALL_TIMEOUT_S)
                return {
                    "key": key,
                    "t": round(started - self.t0, 3),
                    "latency_s": time.monotonic() - started,
                    "attempts": attempts,
                    "job_id": reply.job_id,
                    "duplicate_reply": reply.duplicate,
                }
            except grpc.RpcError as exc:
                code = exc.code().name if exc.code() else "UNKNOWN"
                self.errors[code] = self.errors.get(code, 0) + 1
                hint = grpcutil.leader_hint(exc)
                if hint in self.stubs and hint != address:
                    self.current = hint
                else:
                    self.current = self.addresses[(self.addresses.index(address) + 1) % len(self.addresses)]
            if time.monotonic() - started > self.give_up:
                return {"key": key, "t": round(started - self.t0, 3), "latency_s": None, "attempts": attempts}
            time.sleep(0.1)

    def run(self) -> None:
        while not self.stop.is_set():
            self.records.append(self.submit_one())
            self.stop.wait(self.interval)

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()


def list_jobs(addresses: list[str], prefix: str) -> list:
    """Every job (finished ones too) whose name starts with prefix, from the first controller that answers."""
    for address in addresses * 10:
        with grpc.insecure_channel(address) as ch:
            try:
                reply = slurm_pb2_grpc.SlurmControllerStub(ch).ListJobs(
                    slurm_pb2.ListJobsRequest(include_finished=True), timeout=30
                )
                return [j for j in reply.jobs if j.spec.name.startswith(prefix)]
            except grpc.RpcError:
                time.sleep(1)
    raise RuntimeError("no controller answered ListJobs")


def settle(addresses: list[str], prefix: str, timeout: float) -> list:
    """Wait until no job of this run is PENDING or RUNNING (or timeout); the last listing."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = list_jobs(addresses, prefix)
        live = [j for j in jobs if slurm_pb2.JobState.Name(j.state) in ("PENDING", "RUNNING")]
        if not live or time.monotonic() > deadline:
            return jobs
        time.sleep(2)


def client_report(sub: Submitter, jobs: list) -> dict:
    per_key: dict[str, list[int]] = {}
    states: dict[str, int] = {}
    for j in jobs:
        per_key.setdefault(j.spec.name, []).append(j.job_id)
        name = slurm_pb2.JobState.Name(j.state)
        states[name] = states.get(name, 0) + 1
    ok = [r for r in sub.records if r["latency_s"] is not None]
    failed = [r for r in sub.records if r["latency_s"] is None]
    duplicated = {k: ids for k, ids in per_key.items() if len(ids) > 1}
    lost = [r["key"] for r in ok if r["key"] not in per_key]
    latencies = [r["latency_s"] for r in ok]
    slow = sorted(ok, key=lambda r: -r["latency_s"])[:5]
    return {
        "submissions": len(sub.records),
        "succeeded": len(ok),
        "failed": len(failed),
        "duplicated_keys": len(duplicated),
        "extra_jobs": sum(len(ids) - 1 for ids in duplicated.values()),
        "duplicates": duplicated,
        "acknowledged_but_missing": len(lost),
        "retried": sum(1 for r in ok if r["attempts"] > 1),
        "duplicate_replies": sum(1 for r in ok if r.get("duplicate_reply")),
        "latency_s": common.summary(latencies),
        "max_latency_s": max(latencies) if latencies else None,
        "slowest": slow,
        "rpc_errors": dict(sub.errors),
        "job_states": states,
    }


# ------------------------------------------------------------------ probes


def probe_up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=0.5) as resp:
            body = json.loads(resp.read())
            return resp.status == 200 and (":6822/" in url or bool(body.get("registered")))
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Watcher(threading.Thread):
    """Each daemon's downtime: the time its /status probe did not answer 200 (an agent: or was not registered)."""

    def __init__(self, controllers: list[str], agents: list[str]) -> None:
        super().__init__(daemon=True)
        self.urls = {f"ctl {ip}": f"http://{ip}:6822/status" for ip in controllers}
        self.urls.update({f"agent {ip}": f"http://{ip}:6823/status" for ip in agents})
        self.stop = threading.Event()
        self.down = dict.fromkeys(self.urls, 0.0)
        self.spells = dict.fromkeys(self.urls, 0)

    def run(self) -> None:
        last = time.monotonic()
        was_up = dict.fromkeys(self.urls, True)
        while not self.stop.wait(0.2):
            now = time.monotonic()
            for name, url in self.urls.items():
                up = probe_up(url)
                if not was_up[name]:
                    self.down[name] += now - last
                elif not up:
                    self.spells[name] += 1
                was_up[name] = up
            last = now


# ------------------------------------------------------------------ one upgrade


def event_summary(path: Path) -> dict:
    log = json.loads(path.read_text())
    events = log.get("events", [])
    by_step: dict[str, float] = {}
    for e in events:
        if e.get("kind") in ("gate", "work"):
            key = f"{e['kind']} {e['phase']}/{e['step']}"
            by_step[key] = round(by_step.get(key, 0.0) + float(e["secs"]), 3)
    unavoidable = sum(
        float(e["secs"]) for e in events if e.get("kind") == "gate" and e.get("step") in UNAVOIDABLE_STEPS
    )
    wall = float(log["wall_secs"])
    order = [
        (h["host"], (h.get("detail") or {}).get("role_at_upgrade"))
        for h in sorted(log.get("hosts", []), key=lambda h: h["t"])
        if h.get("kind") == "controller" and h.get("outcome") == "upgraded"
    ]
    return {
        "status": log.get("status"),
        "mode": log.get("mode"),
        "wall_s": wall,
        "gate_s": float(log["gate_secs"]),
        "work_s": float(log["work_secs"]),
        "other_s": round(wall - float(log["gate_secs"]) - float(log["work_secs"]), 3),
        "unavoidable_s": round(unavoidable, 3),
        "ratio": wall / unavoidable if unavoidable > 0 else None,
        "by_step_s": by_step,
        "controller_order": order,
        "hosts": [(h["host"], h.get("outcome")) for h in log.get("hosts", [])],
    }


def upgrade_run(pb: Playbooks, release: Path, in_place: bool, opts, label: str) -> dict:
    event_log = pb.root / f"{label}-events.json"
    extra = ["-e", f"spur_release_src={release}", "-e", f"spur_upgrade_event_log={event_log}"]
    if in_place:
        extra += ["-e", "spur_in_place_upgrade=true"]
    stage: dict | None = None
    if opts.stage_first:
        # As a site would: stage during the day (nothing restarts), switch at night; the ratio is the switch's.
        stage_log = pb.root / f"{label}-stage-events.json"
        stage_extra = [*extra[:2], "-e", f"spur_upgrade_event_log={stage_log}", *extra[4:]]
        code, stage_wall, _log = pb.run(
            "rolling_upgrade", *stage_extra, "-e", "spur_upgrade_stage_only=true", label=f"{label}-stage"
        )
        stage = {"exit_code": code, "playbook_wall_s": round(stage_wall, 3)}
        if stage_log.exists():
            staged = json.loads(stage_log.read_text())
            stage.update(status=staged.get("status"), wall_s=float(staged["wall_secs"]))
        say(f"{label}: stage only, exit {code}, wall {stage.get('wall_s', stage_wall):.1f} s")
    prefix = f"ub{label[:2]}"
    sub = Submitter([f"{ip}:6817" for ip in pb.controllers()], opts.interval, opts.give_up, prefix)
    watcher = Watcher(pb.controllers(), pb.agents())
    sub.start()
    watcher.start()
    time.sleep(2.0)  # the client is in its stride before the run begins
    profile = pb.logs / f"{label}.pyspy" if opts.profile else None
    code, wall, log = pb.run("rolling_upgrade", *extra, label=label, profile=profile)
    time.sleep(2.0)
    sub.stop.set()
    watcher.stop.set()
    sub.join(opts.give_up + 30)
    watcher.join(5)
    sub.close()
    jobs = settle(sub.addresses, prefix, timeout=120)
    out: dict = {
        "label": label,
        "in_place": in_place,
        "release": str(release),
        "exit_code": code,
        "playbook_wall_s": round(wall, 3),
        "playbook_log": str(log),
        "client": client_report(sub, jobs),
        "slowest_tasks": slowest_tasks(log),
        "probe_downtime_s": {k: round(v, 2) for k, v in watcher.down.items()},
        "probe_down_spells": watcher.spells,
        "stage_only_run": stage,
    }
    if profile is not None:
        out["ansible_profile"] = common.profile_summary(profile, top=25)
    if event_log.exists():
        out["events"] = event_summary(event_log)
        keep = common.RESULTS / "upgrade-events"
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(event_log, keep / f"{label}.json")
        copy = keep / f"{label}.json"
        out["event_log_copy"] = str(copy.relative_to(common.ROOT) if copy.is_relative_to(common.ROOT) else copy)
    c = out["client"]
    ev = out.get("events", {})
    say(
        f"{label}: exit {code}, wall {ev.get('wall_s', wall):.1f} s, unavoidable {ev.get('unavoidable_s')} s, "
        f"ratio {ev.get('ratio')}; client: {c['submissions']} submissions, {c['failed']} failed, "
        f"{c['extra_jobs']} duplicated, max latency {c['max_latency_s']} s; job states {c['job_states']}"
    )
    return out


# ------------------------------------------------------------------ rows


# Issue 19's targets for wall / unavoidable waits, per mode (in place restarts only; drained also drains and resumes).
RATIO_TARGETS = {"in place": 2.0, "drained": 3.0}


def ratio_row(run: dict | None, mode: str = "in place") -> dict:
    ev = (run or {}).get("events", {})
    ok_run = run is not None and run["exit_code"] == 0 and ev.get("status") == "done"
    detail = (
        f"wall {ev['wall_s']:.1f} s = gates {ev['gate_s']:.1f} s + work {ev['work_s']:.1f} s + "
        f"other {ev['other_s']:.1f} s; unavoidable (gates {' + '.join(UNAVOIDABLE_STEPS)}) "
        f"{ev['unavoidable_s']:.1f} s; "
        f"status {ev['status']}"
        if ev
        else "no event log"
    )
    if run is not None and not ok_run:
        detail += f"; the playbook exited {run['exit_code']}"
    stage = (run or {}).get("stage_only_run")
    if stage:
        detail += f"; after a stage-only run of {stage.get('wall_s', stage['playbook_wall_s']):.1f} s"
    return common.row(
        "upgrade_ratio" if mode == "in place" else f"upgrade_ratio_{mode}",
        f"rolling upgrade 3+3, {mode}, local tier (wall / unavoidable waits)",
        [
            common.check(
                "ratio", ev.get("ratio") if ok_run else None, "<=", RATIO_TARGETS[mode], "x", missing="run failed"
            ),
            common.check("wall", ev.get("wall_s"), None, None, "s", better="lower"),
        ],
        detail=detail,
    )


def submit_row(run: dict | None, mode: str) -> dict:
    c = (run or {}).get("client", {})
    ev = (run or {}).get("events", {})
    detail = ""
    if c:
        detail = (
            f"{c['submissions']} submissions ({c['retried']} retried, rpc errors {c['rpc_errors'] or 'none'}); "
            f"latency p50 {c['latency_s'].get('median', 0) * 1000:.0f} ms; "
            f"{c['acknowledged_but_missing']} acknowledged but missing; job states {c['job_states']}"
        )
    if ev:
        detail += f"; upgrade wall {ev['wall_s']:.1f} s (status {ev['status']}, ratio {ev['ratio'] or 0:.2f})"
    if run is not None and run["exit_code"] != 0:
        detail += f"; the playbook exited {run['exit_code']}"
    return common.row(
        f"upgrade_submit_{mode.replace('-', '_')}",
        f"submissions during a whole rolling upgrade, 3+3, {mode}",
        [
            common.check("failed", c.get("failed"), "<=", 0, ""),
            common.check("duplicated", c.get("extra_jobs"), "<=", 0, ""),
            common.check("max latency", c.get("max_latency_s"), "<=", 2.0, "s"),
        ],
        detail=detail,
    )


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--net", default="127.0.3", help="loopback block of this run ($SPUR_LOCAL_NET)")
    parser.add_argument("--interval", type=float, default=0.1, help="pause between two submissions (s)")
    parser.add_argument("--give-up", type=float, default=60.0, help="a submission fails after retrying this long")
    parser.add_argument("--only", choices=["in-place", "drained"], help="one upgrade only (B in place, or C drained)")
    parser.add_argument(
        "--record-as",
        default="upgrade",
        metavar="NAME",
        help="write bench/results/NAME.json (a partial or profiling run kept beside the published upgrade.json)",
    )
    parser.add_argument(
        "--no-stage-first",
        dest="stage_first",
        action="store_false",
        help="one run per upgrade, the stage in it (default: a spur_upgrade_stage_only run first, then the switch)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample each upgrade's ansible-playbook and its workers with py-spy (its Python CPU time: where "
        "Ansible's own overhead goes); pair with --record-as, the sampling slows the run",
    )
    opts = parser.parse_args()

    releases, build_s = build_releases()
    root = Path(tempfile.mkdtemp(prefix="sub-", dir="/tmp"))  # short: see Playbooks
    pb = Playbooks(root, opts.net)
    runs: dict[str, dict] = {}
    errors: list[str] = []
    deploy_s = teardown_s = None
    kept = None
    try:
        code, deploy_s, _log = pb.run(
            "deploy", "-e", f"spur_release_src={releases['A']}", "-e", json.dumps(KEEP_FINISHED), label="deploy-A"
        )
        if code != 0:
            raise SystemExit("the deploy of release A failed: nothing measured")
        if opts.only in (None, "in-place"):
            runs["in_place"] = upgrade_run(pb, releases["B"], True, opts, "in-place-A-to-B")
        if opts.only in (None, "drained"):
            target = releases["C"] if opts.only is None else releases["B"]
            runs["drained"] = upgrade_run(pb, target, False, opts, "drained-to-" + target.name)
    except Exception as exc:  # a failed step is reported; the teardown below runs either way
        errors.append(f"{type(exc).__name__}: {exc}")
        say(errors[-1])
    finally:
        code, teardown_s, _log = pb.run("teardown", "-e", "spur_wipe_state=true", label="teardown")
        if code != 0:
            errors.append(f"teardown exited {code}")
        left = sweep(root)
        if left:
            say(f"killed {len(left)} leftover process(es) of this run: {left}")
        kept = keep_logs(root)
        if kept is not None:
            say(f"the playbooks' logs: {kept}")
        shutil.rmtree(root, ignore_errors=True)
    if not runs:
        raise SystemExit(f"no upgrade ran: {'; '.join(errors)}")
    rows = []
    if "in_place" in runs:
        rows += [ratio_row(runs["in_place"]), submit_row(runs["in_place"], "in place")]
    if "drained" in runs:
        rows += [ratio_row(runs["drained"], "drained"), submit_row(runs["drained"], "drained")]
    result = {
        "net": opts.net,
        "interval_s": opts.interval,
        "give_up_s": opts.give_up,
        "unavoidable_definition": "sum of secs of the event log's gate events with step in "
        f"{list(UNAVOIDABLE_STEPS)}; ratio = wall_secs / that",
        "release_build_s": round(build_s, 1),
        "deploy_s": None if deploy_s is None else round(deploy_s, 1),
        "teardown_s": None if teardown_s is None else round(teardown_s, 1),
        "playbook_logs": str(kept) if kept is not None else None,
        "runs": runs,
        "errors": errors,
        "rows": rows,
    }
    path = common.record(opts.record_as, result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
