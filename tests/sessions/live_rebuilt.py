"""Checking that a chat rebuilt after a restart is the chat its clients saw live."""

from __future__ import annotations

from typing import Any

#: What differs between a live turn and its rebuild by nature: clocks.
CLOCK_KEYS = frozenset({"startedAt", "modifiedAt", "duration", "createdAt"})


def comparable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if k not in CLOCK_KEYS}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def turns_of(state: dict[str, Any]) -> Any:
    return comparable(state.get("turns", []))


async def snapshot(client: Any, channel: str) -> dict[str, Any]:
    answer = await client.request("subscribe", {"channel": channel})
    return dict(answer["snapshot"]["state"])


async def assert_rebuilt_equals_live(
    session_host: Any, the_script: Any, session: str, *chats: str, live: Any = None
) -> dict[str, dict[str, Any]]:
    """Restart the host and compare each chat's turns with what ``live`` held (if given).

    Without ``live`` the states are taken from a host started again first, so
    the check is between two rebuilds and the live run kept by the caller.
    Returns the rebuilt chat states by URI.
    """
    rebuilt: dict[str, dict[str, Any]] = {}
    async with session_host(the_script) as (running, _):
        client = await running.connect("again")
        await client.initialize()
        await snapshot(client, session)
        for chat in chats:
            rebuilt[chat] = await snapshot(client, chat)
    if live is not None:
        for chat in chats:
            assert turns_of(rebuilt[chat]) == turns_of(live[chat]), chat
    return rebuilt
