"""The documentation names every configuration key the code accepts, with its default."""

from __future__ import annotations

import re
from pathlib import Path

from spur_hpc.conf import SCHEMA

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_config_key_is_documented_in_its_section():
    text = (DOCS / "configuration.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)
    by_name = {s.split("\n", 1)[0].strip(): s for s in sections}
    for section, keys in SCHEMA.items():
        body = by_name.get(f"[{section}]")
        assert body is not None, f"docs/configuration.md has no section [{section}]"
        documented = set(re.findall(r"^\| `([a-z_]+)` \|", body, flags=re.M))
        assert documented == set(keys), f"[{section}]: documented {sorted(documented)} vs code {sorted(keys)}"
