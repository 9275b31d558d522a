"""Every command block marked `<!-- runnable -->` in docs/ runs against a live cluster and succeeds."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from agents import AgentProc, cleanup
from harness import BIN

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"<!-- runnable -->\s*\n```(?:sh|bash)\n(.*?)```", re.S)


def runnable_blocks() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        for match in BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 1
            found.append((path.name, line, match.group(1)))
    return found


BLOCKS = runnable_blocks()


def test_the_docs_have_runnable_examples():
    assert len(BLOCKS) >= 4


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from harness import ControllerCluster, cleanup_all, next_ip_base

    root = tmp_path_factory.mktemp("docs")
    cluster = ControllerCluster(root / "ctl", 3, ip_base=next_ip_base(3)).start()
    agent = AgentProc(root / "agent", cluster.hosts).start()
    work = root / "work"
    work.mkdir()
    env = dict(os.environ, SPUR_CONTROLLER_ADDR=",".join(cluster.hosts), PATH=f"{BIN}:{os.environ['PATH']}")
    yield env, work
    agent.stop()
    cluster.stop()
    cleanup()
    cleanup_all()


@pytest.mark.parametrize("doc, line, code", BLOCKS, ids=[f"{d}:{n}" for d, n, _ in BLOCKS])
def test_runnable_block(live, doc, line, code):
    env, work = live
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, (
        f"{doc}:{line} failed:\n{code}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
