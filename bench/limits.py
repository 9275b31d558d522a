"""What association and QOS limits ([accounting] enforce = ["limits"]) cost one plan of 10,000 pending jobs.

In one process, over the real state machine and the leader's JobIndex: 100 nodes of 100 CPUs, 100 users in 10
accounts, 10,000 one-CPU jobs pending. "start_all": every job fits and starts in one plan, planned with limits off
and with limits on (QOS normal and every account with limits that are not reached, so each job is checked and
charged), off and on in turn so that a shared machine's load weighs on both alike; the two plans must decide the
same. "all_held": each user already runs one job and QOS normal has MaxJobsPerUser=1, so the plan looks at every
pending job and each waits with QOSMaxJobsPerUserLimit.

  python bench/limits.py [--pending 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time

import common  # puts tests/ on sys.path; the results file
from spur_hpc.controller import limits, wal
from spur_hpc.controller.associations import assoc_key, new_account, new_assoc, new_user
from spur_hpc.controller.scheduler import JobIndex, plan_starts
from spur_hpc.controller.state import ClusterState

NODES, CPUS, USERS, ACCOUNTS = 100, 100, 100, 10


def spec(user: int) -> dict:
    return {
        "name": "p", "script": "true", "user": f"u{user}", "uid": 1000 + user, "gid": 1, "work_dir": "/tmp",
        "nodes": 1, "tasks": 1, "cpus_per_task": 1, "memory_mb": 0, "time_limit_secs": 600,
        "partition": "default", "account": f"a{user % ACCOUNTS}", "qos": "normal",
    }  # fmt: skip


def cluster(pending: int, running_per_user: int) -> tuple[ClusterState, JobIndex]:
    s, index = ClusterState(), JobIndex()

    def apply(op, **kw):
        record = wal.make_record(op, **kw)
        result = s.apply(record)
        index.note(s, record, result)
        assert result["ok"], result
        return result

    apply("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=5)
    for n in range(NODES):
        apply("node_register", name=f"n{n:03d}", address=f"n{n}:1", cpus=CPUS, memory_mb=100_000, version="1",
              build="b", partition="default", running=[], time=1.0)  # fmt: skip
    puts = []
    for a in range(ACCOUNTS):
        puts.append({"kind": "account", "key": f"a{a}", "row": new_account(f"a{a}", "root")})
        row = new_assoc(10 + a, "c", f"a{a}", parent="root", grp_jobs=1_000_000, grp_tres={"cpu": 1_000_000})
        puts.append({"kind": "assoc", "key": assoc_key(f"a{a}"), "row": row})
    for u in range(USERS):
        account = f"a{u % ACCOUNTS}"
        puts.append({"kind": "user", "key": f"u{u}", "row": new_user(f"u{u}", account)})
        row = new_assoc(100 + u, "c", account, f"u{u}", parent=account, max_jobs=1_000_000)
        puts.append({"kind": "assoc", "key": assoc_key(account, f"u{u}"), "row": row})
    apply("assoc_apply", puts=puts, deletes=[])
    for u in range(USERS):
        for _ in range(running_per_user):
            job_id = apply("job_submit", spec=spec(u), key="", time=1.0)["job_id"]
            apply("job_start", job_id=job_id, nodes=[f"n{u % NODES:03d}"], attempt=1, time=2.0)
    for j in range(pending):
        apply("job_submit", spec=spec(j % USERS), key="", time=3.0)
    index.sync(s)
    return s, index


def plan_once(s: ClusterState, index: JobIndex, enforce: set[str]) -> tuple[float, list]:
    limits.configure(enforce)
    t0 = time.perf_counter()
    plans = plan_starts(s, 10.0, index)
    return time.perf_counter() - t0, plans


def measure(pending: int, repeat: int) -> dict:
    """Off and on in turn, `repeat` times each: a shared machine's load then weighs on both alike."""
    s, index = cluster(pending, 0)
    off, on = [], []
    for _ in range(repeat):
        cost_off, plans_off = plan_once(s, index, set())
        cost_on, plans_on = plan_once(s, index, {"limits"})
        assert plans_on == plans_off and len(plans_on) == pending, "limits not reached: the same plan"
        off.append(cost_off)
        on.append(cost_on)
    s, index = cluster(pending, 1)
    s.assoc["qos"]["normal"]["max_jobs_per_user"] = 1  # set in place: a benchmark, not a replicated change
    held = []
    for _ in range(repeat):
        cost, plans = plan_once(s, index, {"limits"})
        assert plans == []
        held.append(cost)
    limits.configure(set())
    return {
        "start_all_off": common.summary(off),
        "start_all_on": common.summary(on),
        "all_held_on": common.summary(held),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=10_000, help="pending jobs")
    parser.add_argument("--repeat", type=int, default=5, help="plans measured per case")
    opts = parser.parse_args()
    r = measure(opts.pending, opts.repeat)
    off, on, held = (r[k]["median"] for k in ("start_all_off", "start_all_on", "all_held_on"))
    print(f"{opts.pending} pending, all start: {off * 1000:.0f} ms limits off, {on * 1000:.0f} ms limits on "
          f"({on / off:.2f}x); all over QOS MaxJobsPerUser: {held * 1000:.0f} ms", flush=True)  # fmt: skip
    rows = [
        common.row(
            "plan_with_limits",
            f"one plan starting {opts.pending:,} jobs, limits on vs off",
            [common.check("ratio", on / off, "<=", 2.0, "x")],
            detail=(
                f"off {off * 1000:.0f} ms, on {on * 1000:.0f} ms; every job over a limit: {held * 1000:.0f} ms "
                f"({held / opts.pending * 1e6:.1f} us per job)"
            ),
        )
    ]
    path = common.record("limits", {"pending": opts.pending, "repeat": opts.repeat, "cases": r, "rows": rows})
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
