"""A backend conformance suite: what every backend does for a client, checked over a real host.

A backend author describes the backend once (``BackendUnderTest``: its
provider, how to start a host with it, what to say to get text back and what
keeps a turn running) and runs every check against it::

    from ahpcore.testing import BackendUnderTest, backend_checks

    SUBJECT = BackendUnderTest(provider="mine", host=my_host, prompt="hello")

    @backend_checks()
    async def test_conformance(check, tmp_path):
        await check(SUBJECT, tmp_path)

Each check starts the host through ``host(state_dir)`` (the same folder again is a
restart), talks to it with a real WebSocket client whose frames are validated
against the protocol's schemas, and skips what the backend says it cannot do:
what it lacks must instead be refused with a reason naming it. Exported from
``ahpcore.testing``; this module imports no host of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The time a step may take: agents run as real processes, some start slowly.
STEP_TIMEOUT = 60.0


@dataclass(frozen=True)
class BackendUnderTest:
    """What the suite needs to know of a backend."""

    #: The provider the backend registers.
    provider: str
    #: A started host serving that backend (an ``ahpcore.testing.running_host``), its
    #: state kept in the folder given: a second host on the same folder is a restart.
    #: Use a session store that outlives the host (``sessions="file"``).
    host: Callable[[Path], AbstractAsyncContextManager[Any]]
    #: A message the agent answers with text, ending the turn by itself (each tool call
    #: it asks approval for is approved).
    prompt: str = "hello"
    #: A message that keeps a turn running (streaming) until it is cancelled; None
    #: skips the cancel check.
    slow_prompt: str | None = None


Check = Callable[[BackendUnderTest, Path], Awaitable[None]]


# -- what a client does ----------------------------------------------------------------------
def _action(frame: dict[str, Any], kind: str, channel: str) -> bool:
    params = frame.get("params")
    return (
        frame.get("method") == "action"
        and isinstance(params, dict)
        and params.get("channel") == channel
        and "rejectionReason" not in params
        and params["action"].get("type") == kind
    )


def _turn_end(channel: str) -> Callable[[dict[str, Any]], bool]:
    ends = ("chat/turnComplete", "chat/turnCancelled", "chat/error")
    return lambda frame: any(_action(frame, kind, channel) for kind in ends)


def _abilities(running: Any, provider: str) -> Any:
    return running.host.backends[provider].abilities


def _workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir(exist_ok=True)
    return folder


async def _connect(running: Any) -> Any:
    client = await running.connect()
    await client.initialize()
    return client


async def _create(client: Any, subject: BackendUnderTest, folder: Path) -> tuple[str, str]:
    session = f"{subject.provider}:/{uuid.uuid4()}"
    await client.request(
        "createSession",
        {
            "channel": session,
            "provider": subject.provider,
            "workingDirectories": [folder.as_uri()],
        },
    )
    return session, await _open(client, session)


async def _open(client: Any, session: str) -> str:
    snapshot = await client.request("subscribe", {"channel": session})
    chat = str(snapshot["snapshot"]["state"]["defaultChat"])
    await client.request("subscribe", {"channel": chat})
    return chat


async def _start_turn(client: Any, chat: str, text: str, turn_id: str) -> None:
    seq = await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    answer = await client.answer_to(seq, timeout=STEP_TIMEOUT)
    assert "rejectionReason" not in answer, answer


def _asks_approval(channel: str) -> Callable[[dict[str, Any]], bool]:
    # A call the host confirmed by itself arrives ready with ``confirmed`` set.
    return lambda frame: (
        _action(frame, "chat/toolCallReady", channel)
        and "confirmed" not in frame["params"]["action"]
    )


async def _end_of(client: Any, chat: str) -> dict[str, Any]:
    """How the running turn ends, approving each tool call it asks about as a person would."""
    ended, asks = _turn_end(chat), _asks_approval(chat)
    while True:
        frame = await client.recv_until(lambda f: ended(f) or asks(f), timeout=STEP_TIMEOUT)
        action = dict(frame["params"]["action"])
        if ended(frame):
            return action
        approve = {
            "type": "chat/toolCallConfirmed",
            "turnId": action["turnId"],
            "toolCallId": action["toolCallId"],
            "approved": True,
            "confirmed": "user-action",
        }
        await client.answer_to(await client.dispatch(chat, approve), timeout=STEP_TIMEOUT)


async def _chat_state(client: Any, chat: str) -> dict[str, Any]:
    await client.sync()
    return dict((await client.request("subscribe", {"channel": chat}))["snapshot"]["state"])


def _text_of(turn: dict[str, Any]) -> str:
    return "".join(
        str(part.get("content", ""))
        for part in turn.get("responseParts", [])
        if part.get("kind") == "markdown"
    )


async def _turn_with_text(client: Any, subject: BackendUnderTest, chat: str) -> dict[str, Any]:
    await _start_turn(client, chat, subject.prompt, "conformance-1")
    end = await _end_of(client, chat)
    assert end["type"] == "chat/turnComplete", f"the turn did not complete: {end}"
    [turn] = (await _chat_state(client, chat))["turns"]
    assert turn["state"] == "complete"
    assert _text_of(turn).strip(), f"the agent said nothing to {subject.prompt!r}: {turn}"
    return dict(turn)


async def _listed(client: Any) -> set[str]:
    items = (await client.request("listSessions"))["items"]
    return {str(item["resource"]) for item in items}


# -- the checks ----------------------------------------------------------------------------
async def check_listed_as_an_agent(subject: BackendUnderTest, tmp_path: Path) -> None:
    """The root state lists the provider among its agents."""
    async with subject.host(tmp_path / "state") as running:
        client = await running.connect()
        result = await client.initialize()
        agents = result["snapshots"][0]["state"]["agents"]
        assert subject.provider in {agent["provider"] for agent in agents}


async def check_a_turn_runs_to_completion_with_text(
    subject: BackendUnderTest, tmp_path: Path
) -> None:
    """A new session's first turn ends complete, with text from the agent."""
    async with subject.host(tmp_path / "state") as running:
        client = await _connect(running)
        _, chat = await _create(client, subject, _workdir(tmp_path))
        await _turn_with_text(client, subject, chat)
        await client.assert_replay_agrees()


async def check_a_turn_can_be_cancelled(subject: BackendUnderTest, tmp_path: Path) -> None:
    """A running turn ends cancelled when the client cancels it, and the chat takes
    the next turn."""
    if subject.slow_prompt is None:
        pytest.skip("no slow_prompt: the backend under test has no turn to cancel")
    async with subject.host(tmp_path / "state") as running:
        client = await _connect(running)
        _, chat = await _create(client, subject, _workdir(tmp_path))
        await _start_turn(client, chat, subject.slow_prompt, "conformance-slow")
        await client.recv_until(
            lambda f: _action(f, "chat/responsePart", chat) or _action(f, "chat/delta", chat),
            timeout=STEP_TIMEOUT,
        )
        cancel = {"type": "chat/turnCancelled", "turnId": "conformance-slow", "duration": 0}
        # The cancel is the turn's end: its own echo says the turn was cancelled.
        answer = await client.answer_to(await client.dispatch(chat, cancel), timeout=STEP_TIMEOUT)
        assert "rejectionReason" not in answer, answer
        [turn] = (await _chat_state(client, chat))["turns"]
        assert turn["state"] == "cancelled", turn
        await _start_turn(client, chat, subject.prompt, "conformance-next")
        assert (await _end_of(client, chat))["type"] == "chat/turnComplete"


async def check_a_disposed_session_is_gone(subject: BackendUnderTest, tmp_path: Path) -> None:
    """``disposeSession`` closes the session and its chat; no listing shows it, not
    even after a restart."""
    state = tmp_path / "state"
    async with subject.host(state) as running:
        client = await _connect(running)
        session, chat = await _create(client, subject, _workdir(tmp_path))
        await _turn_with_text(client, subject, chat)
        await client.request("disposeSession", {"channel": session})
        assert not running.host.engine_or_fail.channels.get(session)
        assert session not in await _listed(client)
    async with subject.host(state) as running:
        client = await _connect(running)
        assert session not in await _listed(client)


async def check_reopened_after_a_restart(subject: BackendUnderTest, tmp_path: Path) -> None:
    """A backend that can resume reopens a session after the host restarts, its turn
    and text as they were, and runs the next turn in it."""
    state = tmp_path / "state"
    async with subject.host(state) as running:
        client = await _connect(running)
        session, chat = await _create(client, subject, _workdir(tmp_path))
        before = await _turn_with_text(client, subject, chat)
        # Read once a chat ran: a backend may learn what it can do from its agent.
        if not _abilities(running, subject.provider).resume:
            pytest.skip(f"the {subject.provider} backend does not resume conversations")
    async with subject.host(state) as running:
        client = await _connect(running)
        chat = await _open(client, session)
        [turn] = (await _chat_state(client, chat))["turns"]
        assert turn["state"] == "complete"
        assert _text_of(turn) == _text_of(before)
        await _start_turn(client, chat, subject.prompt, "conformance-2")
        assert (await _end_of(client, chat))["type"] == "chat/turnComplete"


async def check_listed_after_a_restart(subject: BackendUnderTest, tmp_path: Path) -> None:
    """A backend that lists or resumes conversations has a session in ``listSessions``
    after the host restarts."""
    state = tmp_path / "state"
    async with subject.host(state) as running:
        client = await _connect(running)
        session, chat = await _create(client, subject, _workdir(tmp_path))
        await _turn_with_text(client, subject, chat)
        abilities = _abilities(running, subject.provider)
        if not (abilities.list_sessions or abilities.resume):
            pytest.skip(f"the {subject.provider} backend neither lists nor resumes sessions")
        assert session in await _listed(client)
    async with subject.host(state) as running:
        client = await _connect(running)
        assert session in await _listed(client)


async def check_what_it_cannot_do_is_refused_with_a_reason(
    subject: BackendUnderTest, tmp_path: Path
) -> None:
    """Each ability the backend lacks is refused, the refusal naming what is missing."""
    async with subject.host(tmp_path / "state") as running:
        client = await _connect(running)
        folder = _workdir(tmp_path)
        session, chat = await _create(client, subject, folder)
        # Read once an agent runs: a backend may learn what it can do from its agent
        # (an ACP agent's capabilities come with its initialize).
        abilities = _abilities(running, subject.provider)
        tried = 0
        if not abilities.multiple_working_directories:
            tried += 1
            other = tmp_path / "other"
            other.mkdir(exist_ok=True)
            frame = await client.request_frame(
                "createSession",
                {
                    "channel": f"{subject.provider}:/{uuid.uuid4()}",
                    "provider": subject.provider,
                    "workingDirectories": [folder.as_uri(), other.as_uri()],
                },
            )
            assert "one directory" in frame["error"]["message"], frame
        if not abilities.multiple_chats:
            tried += 1
            frame = await client.request_frame(
                "createChat", {"channel": session, "chat": f"ahp-chat:/{uuid.uuid4()}"}
            )
            assert "multipleChats" in frame["error"]["message"], frame
        if not (abilities.truncate and abilities.fork):
            await _turn_with_text(client, subject, chat)
        if not abilities.truncate:
            tried += 1
            seq = await client.dispatch(chat, {"type": "chat/truncated", "turnId": "conformance-1"})
            answer = await client.answer_to(seq, timeout=STEP_TIMEOUT)
            assert "cannot truncate" in answer.get("rejectionReason", ""), answer
        if abilities.multiple_chats and not abilities.fork:
            tried += 1
            frame = await client.request_frame(
                "createChat",
                {
                    "channel": session,
                    "chat": f"ahp-chat:/{uuid.uuid4()}",
                    "source": {"kind": "fork", "chat": chat, "turnId": "conformance-1"},
                },
            )
            assert "cannot fork" in frame["error"]["message"], frame
        if not tried:
            pytest.skip(f"the {subject.provider} backend lacks none of the abilities checked")


#: Every check, in the order a reader would try them.
BACKEND_CHECKS: tuple[Check, ...] = (
    check_listed_as_an_agent,
    check_a_turn_runs_to_completion_with_text,
    check_a_turn_can_be_cancelled,
    check_a_disposed_session_is_gone,
    check_reopened_after_a_restart,
    check_listed_after_a_restart,
    check_what_it_cannot_do_is_refused_with_a_reason,
)


def backend_checks() -> pytest.MarkDecorator:
    """``@backend_checks()`` on an ``async def test(check, tmp_path)``: one test per check,
    named after it."""
    return pytest.mark.parametrize(
        "check",
        BACKEND_CHECKS,
        ids=[check.__name__.removeprefix("check_") for check in BACKEND_CHECKS],
    )


__all__ = ["BACKEND_CHECKS", "STEP_TIMEOUT", "BackendUnderTest", "Check", "backend_checks"]
