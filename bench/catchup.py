"""Followers catching up, on 3 controllers.

1. Restarted follower, journal intact: stop a follower (SIGTERM), commit a backlog of entries through the
   leader (one job submission per entry), start it again; time from its start until it has applied the
   leader's commit index of that moment, and check that the leader and its term did not change (a
   restarted member must not cause an election).
2. Wiped follower: with the cluster holding N jobs, stop a follower, delete its state directory, start
   it again (it asks its peers, joins with an empty store and receives a snapshot); time from its start
   until it has applied the leader's commit index and answers /readyz 200. Repeated for each follower.

Jobs stay PENDING (no agent). The queue is filled through the released code (group commit and the
incremental scheduler made that fast; before them, the fill ran through two proposed fixes that bench/patched.py
carried and no longer does); --patch runs every controller, fill and catch-ups, with a bench/patched.py
experiment. The fill rate is
recorded per chunk. Usage: python bench/catchup.py [--backlog 50000] [--state 100000] [--wiped-trials 2]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from harness import cleanup_all
import patched
# isort: on

from spur_hpc.proto import slurm_pb2


def fill(cluster, count: int, chunk: int, rates: list[dict], total_before: int, spec) -> None:
    done = 0
    while done < count:
        n = min(chunk, count - done)
        leader = cluster.wait_leader(timeout=30)
        rate = common.submit_many(leader.grpc_addr, n, spec_for=lambda i: spec)
        done += n
        rates.append({"jobs_before": total_before + done - n, "jobs": n, "jobs_per_s": rate})
        print(f"  {total_before + done} jobs submitted ({rate:.0f} jobs/s for the last {n})", flush=True)


RESPAWNS: list[str] = []


def respawn_if_dead(cluster, m) -> None:
    """Start m again when its process has exited at start ("Address already in use": the previous process's
    snapshot writer held its ports until spurctld closed them in that child, and this machine is shared).
    Every respawn is recorded in the results."""
    if m.proc is not None and not m.proc.alive():
        tail = m.proc.log_text().strip().splitlines()[-1:] or [""]
        if len(RESPAWNS) >= 20:
            raise RuntimeError(f"controller {m.index} keeps exiting at start: {tail[0]}")
        RESPAWNS.append(f"controller {m.index}: {tail[0][:200]}")
        print(f"controller {m.index} exited at start ({tail[0][:200]}); starting it again", flush=True)
        time.sleep(0.5)
        cluster.spawn(m)


def wait_applied(m, target: int, timeout: float, ready: bool, cluster=None) -> float | None:
    """Poll m until applied_index >= target (and /readyz 200 when ready); returns the monotonic time, or None
    after timeout (recorded as "not caught up within the deadline"). With cluster, a member whose process
    exited is started again (respawn_if_dead)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster is not None:
            respawn_if_dead(cluster, m)
        try:
            st = m.status()
            if st.get("applied_index", 0) >= target and (not ready or m.probe("/readyz") == 200):
                return time.monotonic()
        except (OSError, AssertionError, ValueError):
            pass
        time.sleep(0.01)
    print(f"controller {m.index} did not catch up with index {target} within {timeout:.0f} s", flush=True)
    return None


def since(t0: float, t1: float | None) -> float | None:
    return None if t1 is None else t1 - t0


def fmt_s(value: float | None, deadline: float) -> str:
    return f"> {deadline:.0f} s (deadline)" if value is None else f"{value:.2f} s"


def profile(folder: str | None, m, name: str, idle: bool = True):
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return common.py_spy_start(m.proc.pid, 60, Path(folder) / name, idle=idle)


def stop_profile(spy) -> None:
    """py-spy writes its file when interrupted (SIGINT)."""
    if spy is not None and spy.poll() is None:
        import signal

        spy.send_signal(signal.SIGINT)
        spy.wait(30)


def restart_all(cluster, patches: list[str], skip=None) -> list[int]:
    """Stop every running member (but skip), then start them all with these patches and wait until they are
    ready (the journal and snapshot files stay); returns the members that were not ready after 300 s."""
    members = [m for m in cluster.members if m is not skip]
    for m in members:
        if m.proc is not None and m.proc.alive():
            m.proc.stop()
    cluster.patches = patches
    for m in members:
        cluster.spawn(m)
    deadline = time.monotonic() + 300
    while not cluster.leaders():
        if time.monotonic() > deadline:
            raise RuntimeError("no leader 300 s after a restart of the controllers")
        for m in members:
            respawn_if_dead(cluster, m)
        time.sleep(0.2)
    late = []
    for m in members:
        while m.probe("/readyz") != 200:
            respawn_if_dead(cluster, m)
            if time.monotonic() > deadline:
                print(f"controller {m.index} not ready 300 s after a restart; going on without it", flush=True)
                late.append(m.index)
                break
            time.sleep(0.1)
    return late


def leader_facts(cluster, timeout: float = 180) -> tuple[object, int, int]:
    leader = cluster.wait_leader(timeout=timeout)
    st = leader.status()
    return leader, st["term"], st["commit_index"]


def idle_cpu(cluster, seconds: float = 5.0) -> dict[str, float]:
    """CPU of each controller over a few idle seconds (1.0 = one core)."""
    leader, _t, _c = leader_facts(cluster)
    time.sleep(2.0)
    cpu0 = {m.index: common.cpu_seconds(m.proc.pid) for m in cluster.members}
    time.sleep(seconds)
    return {
        ("leader" if m is leader else f"follower{m.index}"): (common.cpu_seconds(m.proc.pid) - cpu0[m.index]) / seconds
        for m in cluster.members
    }


def restarted_follower(cluster, opts, spec, fill_patches, rates) -> dict:
    leader, term0, _ = leader_facts(cluster)
    follower = next(m for m in cluster.members if m is not leader)
    follower.proc.stop()
    print(f"follower {follower.index} stopped; committing {opts.backlog} entries", flush=True)
    before = leader.status()["commit_index"]
    fill(cluster, opts.backlog, opts.chunk, rates, 0, spec)
    if fill_patches != opts.patch:
        restart_all(cluster, opts.patch, skip=follower)
    leader2, term1, target = leader_facts(cluster)
    print(f"backlog: {target - before} entries (leader term {term0} -> {term1})", flush=True)
    t0 = time.monotonic()
    # the leader's CPU only (no idle samples): where its time goes while it sends the backlog
    leader_spy = profile(opts.profile, leader2, "catchup-restarted-leader.raw", idle=False)
    cluster.spawn(follower)
    spy = profile(opts.profile, follower, "catchup-restarted.raw")
    t1 = wait_applied(follower, target, opts.deadline, ready=False, cluster=cluster)
    t2 = wait_applied(follower, target, 60, ready=True, cluster=cluster) if t1 is not None else None
    stop_profile(spy)
    stop_profile(leader_spy)
    time.sleep(3.0)
    leader3, term2, _ = leader_facts(cluster)
    out = {
        "backlog_entries": target - before,
        "caught_up_s": since(t0, t1),
        "ready_s": since(t0, t2),
        "term_before": term1,
        "term_after": term2,
        "leader_unchanged": leader3 is leader2,
        "terms_while_filling_and_restarting": [term0, term1],
    }
    print(
        f"restarted follower caught up in {fmt_s(out['caught_up_s'], opts.deadline)} (ready "
        f"{fmt_s(out['ready_s'], opts.deadline)}), term {term1} -> {term2}",
        flush=True,
    )
    return out


def wiped_trial(cluster, opts, trial: int) -> dict:
    leader, _term, _c = leader_facts(cluster)
    victims = [m for m in cluster.members if m is not leader]
    victim = victims[trial % len(victims)]
    victim.proc.stop()
    shutil.rmtree(victim.state_dir)
    leader, term1, target = leader_facts(cluster)
    jobs = leader.status().get("jobs")
    dump = leader.state_dir / "raft.dump"
    dump_bytes = dump.stat().st_size if dump.exists() else 0
    t0 = time.monotonic()
    cluster.spawn(victim)
    spy = profile(opts.profile, victim, f"catchup-wiped{trial + 1}.raw")
    t1 = wait_applied(victim, target, opts.deadline, ready=False, cluster=cluster)
    t2 = wait_applied(victim, target, 60, ready=True, cluster=cluster) if t1 is not None else None
    stop_profile(spy)
    time.sleep(3.0)
    leader2, term2, _ = leader_facts(cluster)
    out = {
        "jobs": jobs,
        "leader_dump_bytes": dump_bytes,
        "caught_up_s": since(t0, t1),
        "ready_s": since(t0, t2),
        "term_before": term1,
        "term_after": term2,
        "leader_unchanged": leader2 is leader,
    }
    print(
        f"wiped follower {victim.index} ({jobs} jobs, snapshot {dump_bytes / 1e6:.1f} MB): "
        f"applied in {fmt_s(out['caught_up_s'], opts.deadline)}, "
        f"ready in {fmt_s(out['ready_s'], opts.deadline)}, term {term1} -> {term2}",
        flush=True,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backlog", type=int, default=50000, help="entries committed while the follower is down")
    parser.add_argument("--state", type=int, default=100000, help="jobs in the state for the wiped follower")
    parser.add_argument("--wiped-trials", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=300, help="give up waiting for a catch-up after this")
    parser.add_argument("--chunk", type=int, default=10000, help="fill in chunks of this many jobs")
    parser.add_argument(
        "--env",
        choices=["none", "typical"],
        default="none",
        help="environment of each job: none (small jobs, about 30 bytes of state each) or typical "
        "(bench/common.py TYPICAL_ENV, 1.4 KB, as sbatch sends)",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="py-spy the restarted follower and each wiped one from its start (idle included), 60 s at most",
    )
    common.add_set_option(parser)
    patched.add_patch_option(parser)
    parser.add_argument(
        "--fill-unpatched", action="store_true", help="the default now (kept for the runs docs/benchmarks.md records)"
    )
    opts = parser.parse_args()
    fill_patches = opts.patch
    rates: list[dict] = []
    spec = slurm_pb2.JobSpec(
        name="fill",
        script="#!/bin/sh\ntrue\n",
        user="root",
        work_dir="/tmp",
        environment=common.TYPICAL_ENV if opts.env == "typical" else {},
    )
    restarted: dict = {}
    wiped: list[dict] = []
    cpu_full: dict[str, float] = {}
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = patched.cluster(
            Path(tmp),
            3,
            ip_base=171,
            name="bench",
            extra_controller=common.controller_extra(opts),
            patches=fill_patches,
        )
        try:
            cluster.start()
            try:
                restarted = restarted_follower(cluster, opts, spec, fill_patches, rates)
            except Exception as exc:  # a cluster that misbehaves is a result too: record it and go on
                errors.append(f"restarted follower: {type(exc).__name__}: {exc}")
                print(errors[-1], flush=True)
            try:
                have = opts.backlog + 1
                if fill_patches != opts.patch or errors:
                    late = restart_all(cluster, fill_patches)  # every member, the restarted one included
                    if late:
                        errors.append(f"members {late} not ready after the restart before filling")
                if opts.state > have:
                    fill(cluster, opts.state - have, opts.chunk, rates, have, spec)
                if fill_patches != opts.patch:
                    late = restart_all(cluster, opts.patch)
                    if late:
                        errors.append(f"members {late} not ready 300 s after a restart with the released code")
                cpu_full = idle_cpu(cluster)
                print(f"idle CPU with {opts.state} jobs queued: {cpu_full}", flush=True)
                for trial in range(opts.wiped_trials):
                    wiped.append(wiped_trial(cluster, opts, trial))
            except Exception as exc:
                errors.append(f"wiped follower: {type(exc).__name__}: {exc}")
                print(errors[-1], flush=True)
        finally:
            cluster.stop()
            cleanup_all()
    ready = [w["ready_s"] for w in wiped]
    worst_wiped = None if not wiped or None in ready else max(ready)
    rows = [
        common.row(
            "catchup_restarted",
            f"restarted follower, journal intact, {restarted.get('backlog_entries', opts.backlog):,}-entry backlog",
            [
                common.check(
                    "caught up", restarted.get("caught_up_s"), "<=", 2.0, "s", missing=f"> {opts.deadline:.0f} s"
                ),
                common.check(
                    "term change",
                    restarted["term_after"] - restarted["term_before"] if restarted else None,
                    "<=",
                    0,
                    "",
                ),
            ],
            detail=(
                f"not caught up within {opts.deadline:.0f} s; leader term {restarted['term_before']} -> "
                f"{restarted['term_after']} meanwhile"
                if restarted and restarted.get("caught_up_s") is None
                else f"/readyz 200 after {fmt_s(restarted['ready_s'], opts.deadline)}; leader term "
                f"{restarted['term_before']} -> {restarted['term_after']}"
                if restarted
                else "; ".join(errors)
            ),
        ),
        common.row(
            "catchup_wiped",
            f"wiped follower, {wiped[0]['jobs']:,} jobs of state" if wiped else f"wiped follower, {opts.state:,} jobs",
            [common.check("caught up (worst)", worst_wiped, "<=", 10.0, "s", missing=f"> {opts.deadline:.0f} s")],
            detail="; ".join(
                [
                    f"trial {i + 1}: applied {fmt_s(w['caught_up_s'], opts.deadline)}, ready "
                    f"{fmt_s(w['ready_s'], opts.deadline)}, term {w['term_before']}->{w['term_after']}, "
                    f"snapshot {w['leader_dump_bytes'] / 1e6:.1f} MB"
                    for i, w in enumerate(wiped)
                ]
                + [e for e in errors if e.startswith("wiped") or e.startswith("members")]
            ),
        ),
    ]
    if RESPAWNS:
        for r in rows:
            r["detail"] += f"; {len(RESPAWNS)} controller start(s) repeated (port taken at start, see respawns)"
    result = {
        "restarted": restarted,
        "wiped": wiped,
        "errors": errors,
        "fill_rates": rates,
        "fill_patches": fill_patches,
        "job_environment": opts.env,
        "idle_cpu_cores_full_state": cpu_full,
        "respawns": RESPAWNS,
        "controller_settings": opts.set,
        "controller_patches": opts.patch,
        "rows": rows,
    }
    path = common.record("catchup", result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
