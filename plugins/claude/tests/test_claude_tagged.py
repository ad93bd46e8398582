"""The CLI's pseudo-XML tags are read in linear time, with the answers a lazy regex gives."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from ahp_claude.background import notification_message
from ahp_claude.tagged import between, every_between
from ahp_claude.transcripts import prompt_text

# Text made mostly of tag pieces, so openings without closings and nesting are common.
pieces = st.sampled_from(["<t>", "</t>", "<t", "t>", "x", "\n", "<", ">", "/"])
texts = st.lists(pieces, max_size=30).map("".join)


@given(texts)
def test_the_same_answers_as_the_lazy_regex(text: str) -> None:
    lazy = re.compile(r"<t>(.*?)</t>", re.DOTALL)
    assert list(every_between(text, "t")) == lazy.findall(text)
    found = lazy.search(text)
    assert between(text, "t") == (found.group(1) if found else None)


def _bounded(seconds: float, work: object) -> None:
    started = time.monotonic()
    assert callable(work)
    work()
    # A lazy regex takes minutes on these inputs; a linear scan, milliseconds.
    assert time.monotonic() - started < seconds


def test_a_prompt_of_unclosed_command_tags_is_read_at_once() -> None:
    text = "<command-name>/x</command-name>" + "<command-args>" * 50_000
    entry = {"type": "user", "message": {"content": text}}
    _bounded(2.0, lambda: prompt_text(entry))
    assert prompt_text(entry) == "/x"


def test_a_notification_of_unclosed_summaries_is_read_at_once() -> None:
    content = "<summary>done</summary>" + "<summary>" * 50_000
    entry = {"origin": {"kind": "task-notification"}, "message": {"content": content}}
    _bounded(2.0, lambda: notification_message(entry))
    assert notification_message(entry) == {
        "text": "done",
        "origin": {"kind": "systemNotification"},
    }
