"""Experiments only: run spurctld with a proposed fix applied in memory, to measure what the fix would buy
before anyone changes daemons/. The published rows never use this (results record any patch in
"controller_patches").

  python bench/patched.py PATCH[,PATCH...] --conf spur.conf     # spurctld with the patches applied
  python bench/patched.py --help                                 # this text

The benchmarks that take --patch (submit, cli, squeue, heartbeats, catchup) start their controllers this way.

Patches:
  journal-sync-per-message  the journal is synced once before each message this controller sends, instead of
                            once per entry (raft.py DurableJournal.add): an entry is still on disk before any
                            acknowledgement or AppendEntries that carries it leaves the process.
  leader-scans              the leader's periodic whole-queue scans are skipped when they cannot find anything:
                            plan_starts (leader.py) returns at once when no schedulable node has a free CPU,
                            LeaderDuties._follow_up_running (a scan of every job for cancels and time limits)
                            runs once per scheduler interval instead of on every wake-up, and the accounting
                            loop (accounting_link.py AccountingLink._once) copies the job table
                            only when it will use it (accounting on, or a purge pass due).
"""

from __future__ import annotations

import sys
from pathlib import Path

# isort: off
import common  # noqa: F401  (puts tests/ on sys.path for the harness)
from harness import BIN, ControllerCluster, Proc
# isort: on

PATCHES = ("journal-sync-per-message", "leader-scans")


def _journal_sync_per_message() -> None:
    from pysyncobj.journal import FileJournal

    from spur_hpc.controller import raft

    def add(self, command, idx, term):
        FileJournal.add(self, command, idx, term)
        self._dirty = True

    raft.DurableJournal.add = add
    original_init = raft.SpurRaft.__init__

    def init(self, settings):
        original_init(self, settings)
        transport = self._SyncObj__transport
        journal = self._SyncObj__raftLog
        send = transport.send

        def send_after_sync(node, message):
            if getattr(journal, "_dirty", False):
                journal._dirty = False
                journal.flush()
            return send(node, message)

        transport.send = send_after_sync

    raft.SpurRaft.__init__ = init


def _leader_scans() -> None:
    import time

    from spur_hpc.controller import accounting_link, leader

    original_plan = leader.plan_starts

    def plan_starts(s, now=0.0):
        if not any(s.schedulable(n) and n["cpus"] > n["alloc_cpus"] for n in s.nodes.values()):
            return []
        return original_plan(s, now)

    leader.plan_starts = plan_starts
    original_follow = leader.LeaderDuties._follow_up_running

    def follow_up_running(self):
        now = time.monotonic()
        if now - getattr(self, "_bench_followed", 0.0) < self.interval:
            return
        self._bench_followed = now
        original_follow(self)

    leader.LeaderDuties._follow_up_running = follow_up_running
    original_once = accounting_link.AccountingLink._once

    def once(self):
        due = time.monotonic() - self.last_purge >= accounting_link.PURGE_EVERY_SECS
        if self.settings is None and not due:
            return
        original_once(self)

    accounting_link.AccountingLink._once = once


APPLY = {
    "journal-sync-per-message": _journal_sync_per_message,
    "leader-scans": _leader_scans,
}


class PatchedCluster(ControllerCluster):
    """ControllerCluster whose controllers run bench/patched.py with the given patches."""

    def __init__(self, *args, patches: list[str], **kw) -> None:
        super().__init__(*args, **kw)
        unknown = set(patches) - set(PATCHES)
        if unknown:
            raise SystemExit(f"unknown patch(es) {', '.join(sorted(unknown))}; known: {', '.join(PATCHES)}")
        self.patches = patches

    def spawn(self, m, write_conf: bool = True):
        if not self.patches:
            return super().spawn(m, write_conf)
        if write_conf and not m.conf_path.exists():
            self.write_conf(m)
        argv = [str(BIN / "python"), str(Path(__file__)), ",".join(self.patches), "--conf", str(m.conf_path)]
        m.proc = Proc(f"spurctld-{m.index}", argv, m.root / "spurctld.log").start()
        return m.proc


def cluster(*args, patches: list[str] | None = None, **kw) -> ControllerCluster:
    return PatchedCluster(*args, patches=patches or [], **kw)


def add_patch_option(parser) -> None:
    parser.add_argument(
        "--patch",
        action="append",
        default=[],
        choices=PATCHES,
        help="experiment: run the controllers with this proposed fix applied in memory (bench/patched.py)",
    )


def main() -> int:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # common.py's handler is for benchmarks, not daemons
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) >= 2 else 2
    names = [n for n in sys.argv[1].split(",") if n]
    unknown = [n for n in names if n not in APPLY]
    if unknown:
        print(f"patched.py: unknown patch(es) {', '.join(unknown)}; known: {', '.join(PATCHES)}", file=sys.stderr)
        return 2
    for name in names:
        APPLY[name]()
    from spur_hpc.controller.daemon import main as spurctld_main

    return spurctld_main(sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
