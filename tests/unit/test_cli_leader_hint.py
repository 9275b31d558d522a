"""The leader hint a command keeps between runs (cli/controller.py): where it lives, when it is believed, and
what a wrong one costs (one try), against the fake controllers of test_cli_support."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_cli_support import fake_cluster

from spur_hpc.cli import controller, slurm


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(directory))
    return directory


def submit(capsys: pytest.CaptureFixture) -> None:
    assert slurm.sbatch_main(["--wrap", "true"]) == 0
    assert capsys.readouterr().out.startswith("Submitted batch job ")


def calls(cluster) -> list[tuple[int, str]]:
    """(index of the controller, method) of every call so far, then forget them."""
    seen = [(cluster.addresses.index(address), method) for address, method in cluster.state.calls]
    cluster.state.calls.clear()
    return seen


def test_a_write_learns_the_leader_and_the_next_command_goes_there_first(runtime, monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch, count=3, leader_index=2) as cluster:
        submit(capsys)
        # no hint yet: the configured order, the refusal's hint, then one Ping to learn who leads
        assert calls(cluster) == [(0, "SubmitJob"), (2, "SubmitJob"), (2, "Ping")]
        hint = runtime / controller.LEADER_HINT_FILE
        assert hint.stat().st_mode & 0o777 == 0o600
        assert hint.read_text().split()[1:] == [cluster.addresses[2], ",".join(cluster.addresses)]
        submit(capsys)
        assert calls(cluster) == [(2, "SubmitJob")], "a fresh hint: straight to the leader, nothing else"


def test_a_stale_hint_costs_one_try_and_is_replaced(runtime, monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch, count=3, leader_index=2) as cluster:
        old = time.time() - controller.LEADER_HINT_FRESH_SECS - 5
        controller.write_leader_hint(cluster.addresses, cluster.addresses[1], old)  # leadership moved since
        submit(capsys)
        assert calls(cluster) == [(1, "SubmitJob"), (2, "SubmitJob"), (2, "Ping")]
        assert controller.read_leader_hint(cluster.addresses, time.time()) == (cluster.addresses[2], True)


def test_a_hint_naming_a_dead_controller_costs_one_try(runtime, monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch, count=2, leader_index=1) as cluster:
        dead = "127.0.0.1:1"
        monkeypatch.setenv("SPUR_CONTROLLER_ADDR", f"{dead},{cluster.env()}")
        addresses = controller.controller_addresses()
        controller.write_leader_hint(addresses, dead, time.time())
        submit(capsys)
        # the dead one, then the configured order (its first refuses and names the leader), then the Ping
        assert calls(cluster) == [(0, "SubmitJob"), (1, "SubmitJob"), (1, "Ping")]
        assert controller.read_leader_hint(addresses, time.time()) == (cluster.addresses[1], True)


def test_a_hint_for_other_controllers_or_outside_them_is_not_read(runtime) -> None:
    mine, other = ["a:1", "b:1"], ["a:1", "c:1"]
    controller.write_leader_hint(other, "c:1", time.time())
    assert controller.read_leader_hint(mine, time.time()) == ("", False)
    (runtime / controller.LEADER_HINT_FILE).write_text(f"{time.time():.0f} evil:1 a:1,b:1\n")
    assert controller.read_leader_hint(mine, time.time()) == ("", False), "not a configured controller"
    controller.write_leader_hint(mine, "evil:1", time.time())  # nor is one kept
    assert controller.read_leader_hint(mine, time.time()) == ("", False)


def test_a_directory_others_may_write_is_neither_read_nor_written(runtime) -> None:
    controller.write_leader_hint(["a:1"], "a:1", time.time())
    assert controller.read_leader_hint(["a:1"], time.time()) == ("a:1", True)
    runtime.chmod(0o777)
    assert controller.leader_hint_dir() is None
    assert controller.read_leader_hint(["a:1"], time.time()) == ("", False)
    runtime.chmod(0o700)
    link = runtime.parent / "link"
    link.symlink_to(runtime)
    assert controller.leader_hint_dir({"XDG_RUNTIME_DIR": str(link)}) is None, "a symbolic link is not followed"


def test_without_a_runtime_dir_the_hint_goes_to_a_private_tmp_dir(monkeypatch) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    directory = controller.leader_hint_dir()
    assert directory == f"/tmp/spur-{os.getuid()}"
    info = os.lstat(directory)
    assert info.st_uid == os.getuid() and info.st_mode & 0o077 == 0


def test_a_hint_is_fresh_from_the_second_it_was_written_for_a_minute(runtime) -> None:
    controller.write_leader_hint(["a:1"], "a:1", 100.9)
    assert controller.read_leader_hint(["a:1"], 100.95) == ("a:1", True), "not rounded into the future"
    assert controller.read_leader_hint(["a:1"], 100 + controller.LEADER_HINT_FRESH_SECS - 0.1) == ("a:1", True)
    assert controller.read_leader_hint(["a:1"], 100 + controller.LEADER_HINT_FRESH_SECS) == ("a:1", False)
    assert controller.read_leader_hint(["a:1"], 99.0) == ("a:1", False), "a clock set back: asked again"
