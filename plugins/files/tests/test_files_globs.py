"""The watch globs: the same answers the regex translation gave, in linear time."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ahp_files.globs import (
    MAX_EXPANDED_LENGTH,
    MAX_PATTERN_LENGTH,
    MAX_PATTERNS,
    checked_globs,
    compile_globs,
)
from ahpcore.protocol.errors import ProtocolError


def _reference_regex(pattern: str) -> re.Pattern[str]:
    """The regex translation the watches used before (backtracking, so small inputs only).

    DOTALL: without it ``**`` stopped at a newline in a name, which no glob means.
    """
    out: list[str] = []
    i = 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern[i:] == "/**":
            out.append("(?:/.*)?")
            i += 3
        elif pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "{" and "}" in pattern[i:]:
            end = pattern.index("}", i)
            options = pattern[i + 1 : end].split(",")
            out.append("(?:" + "|".join(re.escape(o) for o in options) + ")")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def reference(patterns: Iterable[str], relative: str) -> bool:
    compiled = [_reference_regex(p) for p in patterns if p.strip("/")]
    parts = relative.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    return any(rx.fullmatch(prefix) for rx in compiled for prefix in prefixes)


patterns = st.lists(st.text(alphabet="ab/*?{},", max_size=10), max_size=4)
paths = st.text(alphabet="ab/{},*?\n", min_size=1, max_size=10)


@settings(max_examples=1500, deadline=None)
@given(patterns, paths)
@example(["**/a"], "a")
@example(["**/a"], "b/b/a")
@example(["a/**"], "a")
@example(["a/**"], "a/b/c")
@example(["a**/b"], "ab")
@example(["*/**/b"], "a/b")
@example(["{a,}b"], "b")
@example(["{a,b"], "{a,b")
@example(["**/**/"], "a")
def test_the_globs_agree_with_the_regex_translation(patterns: list[str], relative: str):
    assert compile_globs(patterns)(relative) == reference(patterns, relative)


@settings(max_examples=100, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=3), paths)
def test_patterns_packed_into_many_automata_agree_too(lists: list[list[str]], relative: str):
    every = [p for group in lists for p in group] * 80  # past one automaton's size
    assert compile_globs(every)(relative) == reference(every, relative)


def test_patterns_built_to_backtrack_match_in_linear_time():
    cases = [
        ("**a" * 341 + "b", "a" * 4000),
        ("*a" * 511 + "b", "a" * 4000),
        ("**/" * 341 + "b", "a/" * 2000),
        ("{a,aa}" + "**a" * 338 + "b", "a" * 4000),
        ("?*" * 512, "a" * 4000 + "/"),
    ]
    for pattern, relative in cases:
        assert len(pattern) <= MAX_PATTERN_LENGTH
        # A list of patterns near the longest, all different, none matching.
        items = [pattern[: len(pattern) - n - 1] + "b" for n in range(MAX_PATTERNS // 2)]
        globs = checked_globs({"items": items}, "excludes")
        started = time.perf_counter()
        globs(relative)
        assert time.perf_counter() - started < 2.0, pattern[:12]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"items": ["*"] * (MAX_PATTERNS + 1)}, f"at most {MAX_PATTERNS}"),
        (
            {"items": ["a" * (MAX_PATTERN_LENGTH + 1)]},
            f"most a pattern may have is {MAX_PATTERN_LENGTH}",
        ),
        ({"items": ["{a,b}" * 20]}, f"more than {MAX_EXPANDED_LENGTH}"),
        ({"items": ["{,}" * 300]}, f"more than {MAX_EXPANDED_LENGTH}"),
        ({"items": "*.py"}, "items"),
        ({"items": [3]}, "items"),
    ],
)
def test_lists_past_a_bound_are_refused_naming_it(value, says: str):
    with pytest.raises(ProtocolError) as refused:
        checked_globs(value, "includes")
    assert refused.value.code == -32602 and says in refused.value.message
