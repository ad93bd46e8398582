"""A long prompt to the demo agent is answered without holding anybody else up.

The demo's ``echo`` rule was a regex whose lazy group backtracked over each run
of spaces: a 60 KB prompt held the host's event loop for 9 s, and every other
client with it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import ahp_scripted.plugin
from ahp_scripted import Rule, Say
from ahp_scripted.runner import MAX_PIECES, chunks
from ahp_scripted.script import MAX_REGEX_TEXT
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.testing import AhpTestClient, running_host

pytestmark = pytest.mark.anyio
SESSION = "scripted:/00000000-0000-4000-8000-00000000e0e0"
#: What another client's ping may take while a long prompt is handled.
PING_LIMIT = 0.5


def is_action(kind: str, channel: str) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        return (
            frame.get("method") == "action"
            and frame["params"]["channel"] == channel
            and frame["params"]["action"]["type"] == kind
            and "rejectionReason" not in frame["params"]
        )

    return match


def spaced(size: int) -> str:
    """Two words around one run of spaces, ``size`` characters: the old regex's worst case."""
    return "a" + " " * (size - 2) + "b"


def wordy(size: int) -> str:
    """``size`` characters of short words: as many pieces to stream as a text can have."""
    return ("word " * (size // 5)).strip()


async def echo_while_pinging(client: AhpTestClient, bystander: AhpTestClient, text: str) -> float:
    """Ask the demo to echo ``text``, approve it, and return the slowest ping meanwhile."""
    await client.request("createSession", {"channel": SESSION, "provider": "scripted"})
    snapshot = await client.request("subscribe", {"channel": SESSION})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    slowest = 0.0
    done = anyio.Event()

    async def ping_until_done() -> None:
        nonlocal slowest
        while not done.is_set():
            began = time.monotonic()
            with anyio.fail_after(30):
                await bystander.request("ping", {"channel": ROOT_CHANNEL})
            slowest = max(slowest, time.monotonic() - began)
            await anyio.sleep(0.02)

    async with anyio.create_task_group() as group:
        group.start_soon(ping_until_done)
        await client.dispatch(
            chat,
            {
                "type": "chat/turnStarted",
                "turnId": "t1",
                "startedAt": "2026-11-29T00:00:00.000Z",
                "message": {"text": f"echo {text}  ", "origin": {"kind": "user"}},
            },
        )
        ready = await client.recv_until(is_action("chat/toolCallReady", chat), timeout=30)
        await client.dispatch(
            chat,
            {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": ready["params"]["action"]["toolCallId"],
                "approved": True,
                "confirmed": "user-action",
            },
        )
        await client.recv_until(is_action("chat/turnComplete", chat), timeout=30)
        done.set()
    state = (await client.request("subscribe", {"channel": chat}))["snapshot"]["state"]
    (turn,) = state["turns"]
    assert turn["responseParts"][-1]["content"] == text
    return slowest


@pytest.mark.parametrize("size", [60_000, 1_000_000])
@pytest.mark.parametrize("shape", [spaced, wordy])
async def test_a_long_echo_is_answered_while_others_stay_fast(
    tmp_path: Path, size: int, shape: Any
) -> None:
    async with running_host(
        [("scripted", ahp_scripted.plugin)], state_dir=tmp_path / "state"
    ) as running:
        client = await running.connect("asker")
        await client.initialize()
        bystander = await running.connect("bystander")
        await bystander.initialize(subscriptions=())
        began = time.monotonic()
        slowest = await echo_while_pinging(client, bystander, shape(size))
        assert slowest < PING_LIMIT, f"another client's ping took {slowest:.2f} s"
        assert time.monotonic() - began < 10


def test_a_long_text_streams_in_a_bounded_number_of_pieces() -> None:
    text = wordy(1_000_000)
    pieces = chunks(text, 4)
    assert len(pieces) <= MAX_PIECES
    assert "".join(pieces) == text
    assert chunks("one two three", 1) == ["one ", "two ", "three"]


def test_words_are_split_in_linear_time() -> None:
    # Only spaces: the old pattern tried every start and gave each run back char by char.
    began = time.monotonic()
    assert chunks(" " * 200_000, 3) == [" " * 200_000]
    assert chunks("  one two  three four ", 2) == ["  one two  ", "three four "]
    assert time.monotonic() - began < 0.5


def test_a_regex_rule_is_not_tried_on_a_message_past_its_bound() -> None:
    # The demo's old echo rule, as any script may still write it.
    rule = Rule(regex=r"(?s)^\s*echo\s+(?P<text>\S.*?)\s*$", steps=[Say("${text}")])
    assert rule.match("echo  hello  ") == {"match": "echo  hello  ", "text": "hello"}
    short = "echo " + spaced(MAX_REGEX_TEXT - 5)
    assert rule.match(short) is not None
    began = time.monotonic()
    assert rule.match("echo " + spaced(60_000)) is None
    assert time.monotonic() - began < 0.1
