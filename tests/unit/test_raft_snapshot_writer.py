"""A snapshot writer that outlived its spurctld is ended before the store is opened (end_orphan_snapshot_writers)."""

from __future__ import annotations

import subprocess
import sys
import time

from spur_hpc.controller import raft


def test_a_writer_left_by_a_killed_controller_is_killed_and_its_file_removed(tmp_path):
    dump = tmp_path / "raft.dump"
    tmp = tmp_path / "raft.dump.tmp"
    code = f"f = open({str(tmp)!r}, 'wb'); f.write(b'x'); f.flush(); import time; time.sleep(60)"
    writer = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while not tmp.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert raft.end_orphan_snapshot_writers(str(dump)) == [writer.pid]
        assert writer.wait(10) != 0
        assert not tmp.exists()
    finally:
        writer.kill()


def test_nothing_to_do_without_a_temporary_file(tmp_path):
    (tmp_path / "raft.dump").write_bytes(b"snapshot")
    assert raft.end_orphan_snapshot_writers(str(tmp_path / "raft.dump")) == []
    assert (tmp_path / "raft.dump").read_bytes() == b"snapshot"
