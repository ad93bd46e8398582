"""The shortcuts on a dispatched action's path say what the long way said."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ahpcore import reducers
from ahpcore.engine.core import Engine
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.rpc.framing import dumps, dumps_weighed
from ahpcore.sessions.follow import FOLLOWED, ROW_BLIND
from ahpcore.sessions.state import CHAT_ROW_FIELDS, same_row
from tests.engine.support import add_chat

pytestmark = pytest.mark.anyio

SAMPLES: list[Any] = [
    {"jsonrpc": "2.0", "method": "action", "params": {"serverSeq": 17, "origin": {"a": 1}}},
    {"text": 'héllo ✓ 𝄞 \u2028 \x00 "quoted" \\ / \n'},
    {"n": [0, -1, 2**63 - 1, -(2**63), 1.5, 0.1, 1e300, -0.0, True, False]},
    {"big": 2**70},  # past 64 bits: not orjson's, still written
    {"none": None, "list": [None]},
    {1: "int key", "x": {2.5: "float key"}},
    {"deep": json.loads("[" * 300 + "]" * 300)},
    [],
    "",
]


@pytest.mark.parametrize("value", SAMPLES)
def test_a_weighed_frame_is_the_json_dumps_writes_and_its_size_in_bytes(value):
    text, weight = dumps_weighed(value)
    assert json.loads(text) == json.loads(dumps(value))
    assert weight == len(text.encode("utf-8"))
    # Written as text, not escaped: what a client reads is what it would have read.
    assert "\\u00e9" not in text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_weighed_frame_refuses_what_dumps_refuses(bad):
    with pytest.raises(ValueError):
        dumps({"x": [1, bad]})
    with pytest.raises(ValueError):
        dumps_weighed({"x": [1, bad]})


def test_an_unpaired_surrogate_is_refused_as_before():
    with pytest.raises(UnicodeEncodeError):
        text = dumps({"x": "a\ud800"})
        text.encode("utf-8")
    with pytest.raises(UnicodeEncodeError):
        dumps_weighed({"x": "a\ud800"})


def test_values_json_cannot_write_stay_refused():
    with pytest.raises(TypeError):
        dumps_weighed({"x": object()})
    with pytest.raises(TypeError):
        dumps_weighed({"x": {1, 2}})


def test_a_listener_given_types_is_told_of_those_alone():
    engine = Engine({"config": {}}, first_seq=0)
    chat = "ahp-chat:/c1"
    add_chat(engine, chat)
    every: list[str] = []
    some: list[str] = []
    engine.on_change(lambda channel, action, before: every.append(action["type"]))
    engine.on_change(
        lambda channel, action, before: some.append(action["type"]),
        types={"chat/movableChanged"},
    )
    engine.apply(chat, {"type": "chat/draftChanged", "draft": {"text": "a"}})
    engine.apply(chat, {"type": "chat/movableChanged", "movable": True})
    # A listener added later is told too (what was worked out per type is redone).
    late: list[str] = []
    engine.on_change(lambda channel, action, before: late.append(action["type"]))
    engine.apply(chat, {"type": "chat/draftChanged", "draft": {"text": "b"}})
    assert every == ["chat/draftChanged", "chat/movableChanged", "chat/draftChanged"]
    assert some == ["chat/movableChanged"]
    assert late == ["chat/draftChanged"]


def test_the_actions_the_follower_is_not_told_of_move_no_row():
    assert reducers.ACTION_TYPES["chat"] >= ROW_BLIND
    assert not ROW_BLIND & FOLLOWED
    assert "draft" not in CHAT_ROW_FIELDS
    before = {
        "resource": "ahp-chat:/c1",
        "title": "t",
        "status": 1,
        "activity": "thinking",
        "modifiedAt": "2026-01-01T00:00:00Z",
        "turns": [],
        "draft": {"text": "old"},
    }
    for draft in ({"text": "new", "origin": {"kind": "user"}}, None):
        action = {"type": "chat/draftChanged", **({"draft": draft} if draft else {})}
        after = reducers.reduce("chat", before, action)
        assert after is not before
        assert same_row(before, after)
        assert {
            key for key in before.keys() | after.keys() if before.get(key) != after.get(key)
        } == {"draft"}


def test_a_budget_read_again_after_the_config_changed_is_the_new_one():
    from ahpcore.engine.service import root_config_value

    mib = 1 << 20
    engine = Engine({"config": {"schema": {}, "values": {}}}, first_seq=0)
    assert root_config_value(engine, "replayBytes", 32 * mib) == 32 * mib
    assert root_config_value(engine, "replayBytes", 32 * mib) == 32 * mib
    engine.apply(ROOT_CHANNEL, {"type": "root/configChanged", "config": {"replayBytes": 2 * mib}})
    assert root_config_value(engine, "replayBytes", 32 * mib) == 2 * mib
    engine.apply(ROOT_CHANNEL, {"type": "root/configChanged", "config": {"replayBytes": 3 * mib}})
    assert root_config_value(engine, "replayBytes", 32 * mib) == 3 * mib
    assert root_config_value(engine, "clientQueueBytes", 8 * mib) == 8 * mib
