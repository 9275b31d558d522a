"""sacctmgr replayed on Spur: the session of tools/slurm_capture/accounts_session.py, captured from Slurm 22.05 with
slurmdbd (tests/golden/slurm-22.05-accounts), run on one Spur controller named as the peer's cluster; each command's
stdout, stderr and exit status must be Slurm's, or differ as tests/golden/slurm-22.05-accounts/differences.toml
says (it fails on a difference not listed there and on a listed capture that has become identical).
SPUR_REPLAY_DUMP=DIR writes both sides of every capture for reading."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tools.slurm_capture
from tools.slurm_capture import accounts_session

from harness import BIN, ControllerCluster, next_ip_base

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05-accounts"
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# getopt's refusal names the program as it was invoked: /usr/bin/sacctmgr on one side, the venv's on the other
ARGV0 = re.compile(r"^\S*/sacctmgr: ", re.MULTILINE)


def normalise(text: str) -> str:
    return ARGV0.sub("sacctmgr: ", text)


def captures() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(GOLDEN.glob("[0-9][0-9][0-9]-*.json"))]


def load_differences() -> dict[str, str]:
    return tomllib.loads((GOLDEN / "differences.toml").read_text()).get("different", {})


def test_the_session_and_its_captures_agree():
    assert [c["capture"] for c in captures()] == accounts_session.capture_names()
    assert [c["cmd"] for c in captures()] == [r.cmd for r in accounts_session.ACCOUNTS_SESSION]
    names = set(accounts_session.capture_names())
    for name, reason in load_differences().items():
        assert name in names, f"differences.toml names {name}, which is no capture"
        assert reason.strip(), f"differences.toml gives no reason for {name}"


@pytest.fixture(scope="module")
def spur(tmp_path_factory):
    cluster = ControllerCluster(
        tmp_path_factory.mktemp("sacctmgr"), n=1, ip_base=next_ip_base(1), name=accounts_session.CLUSTER
    )
    cluster.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPUR_", "SLURM_"))}
    env["SPUR_CONTROLLER_ADDR"] = ",".join(cluster.hosts)
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    yield cluster, env
    cluster.stop()


def run(env: dict[str, str], step: accounts_session.Run) -> subprocess.CompletedProcess:
    cmd = step.cmd
    prefix: list[str] = []
    if cmd.startswith("as:nobody:"):
        cmd, prefix = cmd[len("as:nobody:") :], NOBODY
    argv = shlex.split(cmd)
    argv[0] = str(BIN / argv[0])
    return subprocess.run(
        prefix + argv,
        env=env,
        cwd="/tmp",
        input=(step.stdin or "").encode(),
        capture_output=True,
        timeout=60,
    )


@pytest.mark.slow
def test_sacctmgr_prints_what_slurm_printed(spur):
    cluster, env = spur
    listed = load_differences()
    dump = os.environ.get("SPUR_REPLAY_DUMP")
    unlisted, stale = [], []
    for capture, step in zip(captures(), accounts_session.ACCOUNTS_SESSION, strict=True):
        proc = run(env, step)
        ours = {"rc": proc.returncode, "stdout": proc.stdout.decode(), "stderr": proc.stderr.decode()}
        theirs = {"rc": capture["rc"], "stdout": capture["stdout"], "stderr": capture["stderr"]}
        ours = {k: normalise(v) if isinstance(v, str) else v for k, v in ours.items()}
        theirs = {k: normalise(v) if isinstance(v, str) else v for k, v in theirs.items()}
        assert "Traceback" not in ours["stderr"], f"{capture['capture']}: {ours['stderr']}"
        same = ours == theirs
        name = capture["capture"]
        if dump:
            Path(dump).mkdir(parents=True, exist_ok=True)
            for side, value in (("slurm", theirs), ("spur", ours)):
                text = f"$ {step.cmd}\n[rc={value['rc']}]\n{value['stdout']}--- stderr\n{value['stderr']}"
                (Path(dump) / f"{name}.{side}").write_text(text)
        if not same and name not in listed:
            unlisted.append(name)
        elif same and name in listed:
            stale.append(name)
    problems = []
    if unlisted:
        problems.append(f"{len(unlisted)} captures differ from Slurm and are not in differences.toml: {unlisted}")
    if stale:
        problems.append(f"now identical to Slurm: remove them from differences.toml: {', '.join(stale)}")
    assert not problems, "\n".join(problems) + "\n" + cluster.logs()[-3000:]
