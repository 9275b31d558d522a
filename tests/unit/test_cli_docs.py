"""docs/cli.md's option table is what cli/jobopts.py declares (tools/gen_cli_docs.py writes it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "tools" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_option_table_in_the_docs_is_the_one_in_jobopts() -> None:
    gen = load_generator()
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert gen.render(text) == text, "docs/cli.md drifted from cli/jobopts.py: run python tools/gen_cli_docs.py"


def test_every_option_and_every_refusal_reason_is_in_the_table() -> None:
    from spur_hpc.cli import jobopts

    table = load_generator().reference()
    for entry in jobopts.OPTIONS:
        assert f"--{entry.long}" in table
        if entry.reason:
            assert entry.reason.replace("|", "\\|") in table


def test_a_missing_marker_is_reported() -> None:
    import pytest

    gen = load_generator()
    with pytest.raises(ValueError, match="lacks the markers"):
        gen.render("no markers here")
