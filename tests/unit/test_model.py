"""The shared model: hostlists, addresses, output-path patterns, states."""

from __future__ import annotations

import pytest

from spur_hpc import model


@pytest.mark.parametrize(
    ("names", "text"),
    [(["n1", "n2", "n3", "n5"], "n[1-3,5]"), (["gpu01", "gpu02", "login"], "gpu[01-02],login"),
     (["a"], "a"), (["n10", "n9", "n11"], "n[9-11]"), (["x1", "y1"], "x1,y1"), ([], "")],
)  # fmt: skip
def test_hostlist_compress(names: list[str], text: str) -> None:
    assert model.compress_hostlist(names) == text


def test_hostlist_expand_round_trips() -> None:
    assert model.expand_hostlist("n[1-3,5],gpu[01-02],login") == ["n1", "n2", "n3", "n5", "gpu01", "gpu02", "login"]
    for expression in ("n[1-3,5]", "gpu[01-02],login", "a"):
        assert model.compress_hostlist(model.expand_hostlist(expression)) == expression


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [("node[1-", "unbalanced brackets"), ("n[3-1]", "runs backwards"), ("n[a-b]", "is not a number"),
     ("n[1-2]x[3]", "one bracket group"), ("pn[1-65537]", "more than 65536 nodes")],
)  # fmt: skip
def test_a_bad_hostlist_is_one_line_naming_it(expression: str, complaint: str) -> None:
    with pytest.raises(model.InvalidValue, match=complaint) as caught:
        model.expand_hostlist(expression)
    assert f"'{expression}'" in str(caught.value) and "\n" not in str(caught.value)
