"""Release install on a host: `spur-release build` once (this tree), then `spur-release install` into a
fresh prefix N times (a venv plus the wheelhouse, no network); wall time of each install. Also timed: a
second install of the same release into the same prefix (nothing to do) and a switch between two
installed releases (the rollback path), and a second release installed into each prefix that holds the first
(what a rolling upgrade's stage does: the dependencies installed from the same wheels are reused, not unpacked).
Everything lives in a temporary directory.
Usage: python bench/release_install.py [--installs 5]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path for the harness
from harness import BIN
# isort: on


def run(argv: list[str], timeout: float = 600) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> {proc.returncode}:\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--installs", type=int, default=5)
    opts = parser.parse_args()
    tool = str(BIN / "spur-release")
    installs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        release = root / "release"
        build_s = run([tool, "build", "--out", str(release), "--source", str(common.ROOT)], timeout=900)
        print(f"build: {build_s:.1f} s", flush=True)
        for i in range(opts.installs):
            prefix = root / f"prefix{i}"
            wall = run([tool, "install", str(release), "--prefix", str(prefix), "--bin-dir", str(prefix / "bin")])
            installs.append(wall)
            print(f"install {i + 1}: {wall:.2f} s", flush=True)
        prefix = root / "prefix0"
        again_s = run([tool, "install", str(release), "--prefix", str(prefix), "--bin-dir", str(prefix / "bin")])
        release2 = root / "release2"
        run([tool, "build", "--out", str(release2), "--source", str(common.ROOT), "--version", "99.0.0"], timeout=900)
        seconds: list[float] = []
        for i in range(opts.installs):
            prefix = root / f"prefix{i}"
            wall = run([tool, "install", str(release2), "--prefix", str(prefix), "--bin-dir", str(prefix / "bin")])
            seconds.append(wall)
            print(f"second release into prefix {i + 1}: {wall:.2f} s", flush=True)
        rollback_s = run([tool, "rollback", "--prefix", str(root / "prefix0")])
        print(f"same release again: {again_s:.2f} s; rollback: {rollback_s:.2f} s", flush=True)
    s, second = common.summary(installs), common.summary(seconds)
    rows = [
        common.row(
            "release_install",
            "release install on a host (spur-release install into a fresh prefix)",
            [common.check("median", s["median"], "<=", 10.0, "s")],
            detail=f"range {s['min']:.1f}-{s['max']:.1f} s over {len(installs)} installs; build {build_s:.0f} s; "
            f"re-install (nothing to do) {again_s:.2f} s; rollback {rollback_s:.2f} s",
        ),
        common.row(
            "release_install_second",
            "second release into a prefix that holds the first (a rolling upgrade's stage)",
            [common.check("median", second["median"], "<=", s["median"], "s")],
            detail=f"range {second['min']:.1f}-{second['max']:.1f} s over {len(seconds)} installs, against "
            f"{s['median']:.1f} s into a fresh prefix: the dependencies of the same wheels are reused",
        ),
    ]
    result = {
        "build_s": build_s,
        "install_fresh_prefix_s": s,
        "install_same_again_s": again_s,
        "install_second_release_s": second,
        "rollback_s": rollback_s,
        "rows": rows,
    }
    path = common.record("release_install", result)
    common.print_rows(rows)
    print(f"-> {path}")


if __name__ == "__main__":
    main()
