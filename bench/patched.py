"""Experiments only: run spurctld with a proposed fix applied in memory, to measure what the fix would buy
before anyone changes daemons/. The published rows never use this (results record any patch in
"controller_patches").

  python bench/patched.py PATCH[,PATCH...] --conf spur.conf     # spurctld with the patches applied
  python bench/patched.py --help                                 # this text

The benchmarks that take --patch (submit, cli, squeue, heartbeats, catchup) start their controllers this way.

Patches: none at the moment. The two this file carried were built into daemons/ and then removed from here,
since they no longer applied to it: journal-sync-per-message (one journal sync per message sent, bypassing
DurableJournal's bookkeeping) became group commit (raft.py: the journal synced once per batch), and leader-scans
(skip the whole-queue scans that cannot find anything) became the incremental scheduler (scheduler.JobIndex)
and the accounting link's copy only when a purge is due. A new experiment is a function in APPLY.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from harness import BIN, ControllerCluster, Proc
# isort: on

# name -> a function that applies the proposed fix to the imported modules before spurctld starts
APPLY: dict[str, Callable[[], None]] = {}
PATCHES = tuple(APPLY)


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


@contextlib.contextmanager
def bench_cluster(root: Path, ip_base: int, opts, name: str = "bench"):
    """The benchmarks' cluster: 3 controllers on 127.0.1.<ip_base>.. with the run's --set and --patch, started;
    yields (cluster, leader) and stops everything on the way out."""
    from harness import cleanup_all

    c = cluster(root, 3, ip_base=ip_base, name=name, extra_controller=common.controller_extra(opts), patches=opts.patch)
    try:
        c.start()
        yield c, c.wait_leader(timeout=30)
    finally:
        c.stop()
        cleanup_all()


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
