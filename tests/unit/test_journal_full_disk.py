"""The durable journal on a filesystem with no space left: entries are refused, never a SIGBUS, the file stays whole.

Its appends run in a child process: before the fix the mmap write killed the process with SIGBUS.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prereqs import needs_root, require
from spur_hpc.controller import storage

pytestmark = needs_root()

# Opens the journal and appends 2000-byte entries until refused ("fill") or 5 of them ("more"), then prints the
# count it holds in memory. min_free_disk_mb 0: only the allocation can refuse.
CHILD = textwrap.dedent(
    """
    import sys
    from spur_hpc.controller.raft import DiskFullError, DiskGuard, DurableJournal
    path, mode = sys.argv[1], sys.argv[2]
    DiskGuard(sys.argv[3], 0)  # the guard of that directory, as SpurRaft makes it
    journal = DurableJournal(path)
    start = len(journal)
    for i in range(5 if mode == "more" else 100000):
        try:
            journal.add(b"x" * 2000, start + i + 1, 1)
        except DiskFullError as exc:
            print("refused:", exc, file=sys.stderr)
            break
    print(len(journal))
    """
)


def run_child(journal: Path, mode: str) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(journal), mode, str(journal.parent)], capture_output=True, text=True
    )
    assert result.returncode == 0, (
        f"the journal's process ended with {result.returncode} (-{int(signal.SIGBUS)} is SIGBUS): {result.stderr}"
    )
    return int(result.stdout), result.stderr


@pytest.fixture
def tiny_tmpfs(tmp_path):
    path = tmp_path / "disk"
    path.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(path)], capture_output=True, text=True
    )
    require(result.returncode == 0, f"cannot mount a tmpfs on {path}: {result.stderr.strip()}", "run the tests as root")
    yield path
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_full_disk_refuses_journal_entries_and_keeps_the_file_readable(tiny_tmpfs):
    journal = tiny_tmpfs / "raft.journal"
    assert run_child(journal, "more")[0] == 5
    filler = tiny_tmpfs / "filler"
    with open(filler, "wb", buffering=0) as fh:  # nothing at all remains, except what the journal allocated
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass

    held, stderr = run_child(journal, "fill")
    assert "No space left on device" in stderr and "MB free" in stderr
    assert 5 < held == storage.journal_records(str(journal)), "memory and file hold the same entries"
    assert run_child(journal, "more")[0] == held, "a reopened journal on a full disk refuses, and keeps all it had"

    filler.unlink()
    assert run_child(journal, "more")[0] == held + 5
    assert storage.journal_records(str(journal)) == held + 5
