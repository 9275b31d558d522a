"""Hostlists (model.compress_hostlist / expand_hostlist), property-tested: any set of names survives compression
and expansion, compression is Slurm's form (one bracket group per prefix, padding kept, node-[0-2]), and an
expression naming more than model.MAX_HOSTLIST_NAMES nodes is one clear error, never a huge list."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spur_hpc import model

PREFIXES = ["n", "node-", "gpu", "rack2-n", "a", "login"]


@st.composite
def node_name(draw: st.DrawFn) -> str:
    prefix = draw(st.sampled_from(PREFIXES))
    if draw(st.integers(0, 9)) == 0:
        return prefix.rstrip("-")  # a name without a number (login, gpu)
    number = draw(st.integers(0, 1200))
    width = draw(st.sampled_from([0, 0, 2, 3]))
    suffix = draw(st.sampled_from(["", "", "", "-ib"]))
    return f"{prefix}{number:0{width}d}{suffix}"


@settings(max_examples=300, deadline=None)
@given(st.lists(node_name(), max_size=40))
def test_any_names_round_trip_through_compression(names: list[str]) -> None:
    text = model.compress_hostlist(names)
    expanded = model.expand_hostlist(text)
    assert sorted(expanded) == sorted(set(names))  # every name back, none twice, nothing invented
    assert model.compress_hostlist(expanded) == text  # and the same text again
    assert model.compress_hostlist(list(reversed(names))) == text  # whatever order they came in


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PREFIXES), st.sets(st.integers(0, 500), min_size=1, max_size=30))
def test_one_prefix_is_one_bracket_group_of_sorted_ranges(prefix: str, numbers: set[int]) -> None:
    text = model.compress_hostlist([f"{prefix}{n}" for n in numbers])
    if len(numbers) == 1:
        assert text == f"{prefix}{min(numbers)}"
        return
    assert text.startswith(f"{prefix}[") and text.endswith("]") and text.count("[") == 1
    ranges = [item.split("-") for item in text[len(prefix) + 1 : -1].split(",")]
    bounds = [(int(r[0]), int(r[-1])) for r in ranges]
    gaps = zip(bounds, bounds[1:], strict=False)
    assert bounds == sorted(bounds) and all(high < low - 1 for (_, high), (low, _) in gaps)  # runs never touch


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("a[1-3,5]", ["a1", "a2", "a3", "a5"]),
        ("a[01-10]", [f"a{n:02d}" for n in range(1, 11)]),
        ("a[1-2]-ib", ["a1-ib", "a2-ib"]),
        ("a[1-2],b[3-4]", ["a1", "a2", "b3", "b4"]),
        ("node-[0-2]", ["node-0", "node-1", "node-2"]),
        ("n[009-011]", ["n009", "n010", "n011"]),
    ],
)
def test_slurms_forms_expand(expression: str, names: list[str]) -> None:
    assert model.expand_hostlist(expression) == names


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["node-0", "node-1", "node-2"], "node-[0-2]"),  # a 0 without padding joins its neighbours
        (["n09", "n10", "n11"], "n[09-11]"),  # n10 is as wide as the padded n09
        (["n9", "n10"], "n[9-10]"),
        (["rack10-1", "rack2-1"], "rack2-1,rack10-1"),  # prefixes in natural order, as strnatcmp sorts them
        (["a1-ib", "a2-ib"], "a1-ib,a2-ib"),  # the number must end the name to be compressed (Slurm's rule)
        (["n", "n1", "n2"], "n,n[1-2]"),
    ],
)
def test_compression_writes_slurms_form(names: list[str], text: str) -> None:
    assert model.compress_hostlist(names) == text


def test_expansion_stops_at_the_cap_with_one_clear_line() -> None:
    cap = model.MAX_HOSTLIST_NAMES
    assert len(model.expand_hostlist(f"n[1-{cap}]")) == cap
    for expression in (f"n[1-{cap + 1}]", f"n[1-{cap}],extra", "pn[1-99999999999]", f"a[1-{cap // 2}],b[0-{cap // 2}]"):
        with pytest.raises(model.InvalidValue, match=f"more than {cap} nodes") as caught:
            model.expand_hostlist(expression)
        assert "\n" not in str(caught.value) and expression in str(caught.value)
