"""Session directories are refused, never followed, when tampered: symlinks, wrong owner, loose modes,
truncated or edited records. Both readers check: spurstepd at start and spurd when it re-adopts."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from agents import cleanup, launch_supervisor, new_session, unique_node
from spur_hpc.agent.supervisors import SupervisorTable
from spur_hpc.stepd.session import (
    LAUNCH_FILE,
    RESULT_FILE,
    SessionError,
    decode_record,
    encode_record,
    open_session,
    open_state_dir,
)

NOBODY = 65534


def state_fd(path: Path) -> int:
    return open_state_dir(str(path))


def test_new_session_is_private_and_written_atomically(tmp_path: Path) -> None:
    session = new_session(tmp_path / "state", unique_node(), 7, "true\n")
    st = os.stat(session.path)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    names = sorted(os.listdir(session.path))
    assert names == ["launch.json", "script"], "no temp file may be left behind"
    for name in names:
        assert stat.S_IMODE(os.stat(Path(session.path) / name).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700


def test_symlinked_session_directory_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    elsewhere = new_session(tmp_path / "other", unique_node(), 8, "true\n")
    state.mkdir(mode=0o700)
    (state / "8.1").symlink_to(elsewhere.path)
    fd = state_fd(state)
    try:
        with pytest.raises(SessionError, match="is a symlink; refusing to follow it"):
            open_session(fd, str(state), "8.1")
    finally:
        os.close(fd)


def test_symlink_planted_as_a_record_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("do not read me")
    secret.chmod(0o600)
    session = new_session(tmp_path / "state", unique_node(), 9, "true\n")
    result = Path(session.path) / RESULT_FILE
    result.symlink_to(secret)
    with pytest.raises(SessionError, match="result.json is a symlink; refusing to follow it"):
        session.read_record(RESULT_FILE, "result")


def test_planted_symlink_is_replaced_not_followed_on_write(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("original")
    session = new_session(tmp_path / "state", unique_node(), 10, "true\n")
    (Path(session.path) / RESULT_FILE).symlink_to(target)
    session.write_record(RESULT_FILE, "result", {"state": "COMPLETED"})
    assert target.read_text() == "original"
    assert not os.path.islink(Path(session.path) / RESULT_FILE)


def test_record_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    session = new_session(tmp_path / "state", unique_node(), 11, "true\n")
    os.chown(Path(session.path) / LAUNCH_FILE, NOBODY, NOBODY)
    with pytest.raises(SessionError, match=f"owned by uid {NOBODY}, expected {os.geteuid()}"):
        session.read_record(LAUNCH_FILE, "launch")


def test_session_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    session = new_session(state, unique_node(), 12, "true\n")
    os.chown(session.path, NOBODY, NOBODY)
    fd = state_fd(state)
    try:
        with pytest.raises(SessionError, match=f"owned by uid {NOBODY}"):
            open_session(fd, str(state), "12.1")
    finally:
        os.close(fd)


def test_loose_mode_is_refused(tmp_path: Path) -> None:
    session = new_session(tmp_path / "state", unique_node(), 13, "true\n")
    os.chmod(Path(session.path) / LAUNCH_FILE, 0o644)
    with pytest.raises(SessionError, match="has mode 0644, expected 0600"):
        session.read_record(LAUNCH_FILE, "launch")


def test_truncated_record_is_refused(tmp_path: Path) -> None:
    session = new_session(tmp_path / "state", unique_node(), 14, "true\n")
    path = Path(session.path) / LAUNCH_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SessionError, match="is corrupt or truncated"):
        session.read_record(LAUNCH_FILE, "launch")


def test_edited_record_fails_its_checksum() -> None:
    data = json.loads(encode_record("result", {"state": "FAILED", "exit_code": 7}))
    data["body"]["exit_code"] = 0
    with pytest.raises(SessionError, match="fails its checksum"):
        decode_record("result.json", "result", json.dumps(data).encode())
    with pytest.raises(SessionError, match="holds a 'result' record, expected 'launch'"):
        decode_record("x", "launch", encode_record("result", {}))


def test_edited_script_is_refused_by_the_supervisor(tmp_path: Path) -> None:
    node = unique_node()
    session = new_session(tmp_path / "state", node, 15, "echo original\n", work_dir=str(tmp_path))
    session.write_bytes("script", b"echo injected\n")
    sup = launch_supervisor(session, node)
    assert not sup.handshake["ok"]
    assert "does not match the checksum" in sup.handshake["error"]
    assert not (tmp_path / "slurm-15.out").exists()


def test_supervisor_refuses_a_symlinked_session(tmp_path: Path) -> None:
    node = unique_node()
    real = new_session(tmp_path / "real", node, 16, "echo ran\n", work_dir=str(tmp_path))
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "16.1").symlink_to(real.path)
    from spur_hpc.stepd.session import SessionDir

    fake = SessionDir(str(state / "16.1"), real.fd, 16, 1)  # the handshake path is what counts
    sup = launch_supervisor(fake, node)
    assert not sup.handshake["ok"]
    assert "symlink" in sup.handshake["error"]
    assert not (tmp_path / "slurm-16.out").exists()


def test_spurd_refuses_tampered_sessions_on_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A restarted spurd re-adopts nothing it cannot trust, logs why, and leaves the evidence in place."""
    state = tmp_path / "state"
    node = unique_node()
    truncated = new_session(state, node, 21, "true\n")
    launch = Path(truncated.path) / LAUNCH_FILE
    launch.write_bytes(launch.read_bytes()[:40])
    wrong_owner = new_session(state, node, 22, "true\n")
    os.chown(wrong_owner.path, NOBODY, NOBODY)
    elsewhere = new_session(tmp_path / "elsewhere", node, 23, "true\n")
    (state / "23.1").symlink_to(elsewhere.path)

    import threading

    caplog.set_level(logging.INFO)
    table = SupervisorTable(str(state), node, [], 5.0, threading.Event())
    try:
        table.reconcile()
        assert table.sessions == {}
        assert table.finished.empty()
    finally:
        table.close()
    text = caplog.text
    assert "launch.json is corrupt or truncated" in text
    assert f"22.1 is owned by uid {NOBODY}" in text
    assert "23.1 is a symlink; refusing to follow it" in text
    assert (state / "23.1").is_symlink() and launch.exists(), "refused sessions stay for inspection"


def test_a_job_cannot_read_or_plant_anything_in_sessions() -> None:
    """Even with the state dir on a world-traversable path, a job (as nobody) sees none of the records."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="spur-test-"))
    try:
        base.chmod(0o755)
        work = base / "work"
        work.mkdir(mode=0o777)
        work.chmod(0o777)
        state = base / "state"
        node = unique_node()
        new_session(state, node, 31, "sleep 300\n", work_dir=str(work))
        probe = (
            f"cat {state}/31.1/launch.json >/dev/null 2>&1 && echo read-other || echo no-read-other\n"
            f"ls {state} >/dev/null 2>&1 && echo list || echo no-list\n"
            f"ln -s /etc/shadow {state}/32.1/result.json 2>/dev/null && echo planted || echo no-plant\n"
        )
        session = new_session(state, node, 32, probe, user="nobody", work_dir=str(work))
        sup = launch_supervisor(session, node)
        assert sup.wait_result()["state"] == "COMPLETED"
        assert (work / "slurm-32.out").read_text().split() == ["no-read-other", "no-list", "no-plant"]
    finally:
        cleanup()
        shutil.rmtree(base, ignore_errors=True)
