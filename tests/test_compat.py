"""The compatibility table has a row for everything in the protocol and tells the truth."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ahp_scripted import plugin as scripted_plugin
from ahpcore import compat, reducers
from ahpcore.plugins import PluginManager, Selection
from ahpcore.protocol.errors import METHOD_NOT_FOUND
from ahpcore.protocol.methods import (
    CLIENT_NOTIFICATIONS,
    COMMANDS,
    SERVER_COMMANDS,
    SERVER_NOTIFICATIONS,
)

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "compatibility.md"
REGENERATE = "uv run ahp compat --markdown > docs/compatibility.md"


def _expected_rows() -> Counter[tuple[str, str]]:
    expected: Counter[tuple[str, str]] = Counter()
    expected.update(("command", name) for name in COMMANDS)
    expected.update(("server command", name) for name in SERVER_COMMANDS)
    expected.update(("client notification", name) for name in CLIENT_NOTIFICATIONS)
    expected.update(("server notification", name) for name in SERVER_NOTIFICATIONS)
    expected.update(("action", name) for name in reducers.ALL_ACTION_TYPES)
    return expected


@pytest.mark.parametrize("protocol_only", [True, False])
def test_every_method_and_action_has_exactly_one_row(protocol_only):
    manager = PluginManager(
        plugins=[("scripted", scripted_plugin)],
        entry_points=False,
        selection=Selection(protocol_only=protocol_only),
    )
    rows = compat.table(manager)
    assert Counter((row.kind, row.name) for row in rows) == _expected_rows()
    by_name = {(row.kind, row.name): row for row in rows}
    create = by_name[("command", "createSession")]
    if protocol_only:
        assert create.status == "refused"
        assert "backends port" in create.detail and "ahp-scripted" in create.detail
        assert by_name[("action", "chat/turnStarted")].status == "refused"
    else:
        assert (create.status, create.provider) == ("port", "scripted")
        turn = by_name[("action", "chat/turnStarted")]
        assert turn.status == "served" and "ClientActions" in turn.detail
        assert by_name[("action", "chat/responsePart")].status == "sent"
    assert by_name[("command", "initialize")].notes, "the note kept by the handler is shown"


@pytest.mark.anyio
@pytest.mark.parametrize("no_plugins", [True, False])
async def test_command_statuses_match_what_a_client_gets(ahp_host, no_plugins):
    plugins = [] if no_plugins else [("scripted", scripted_plugin)]
    async with ahp_host(plugins=plugins, no_plugins=no_plugins) as running:
        rows = [row for row in compat.rows_of(running.host) if row.kind == "command"]
        client = await running.connect()
        await client.initialize()
        for row in rows:
            if row.name in {"initialize", "reconnect"}:
                continue
            # Empty params: a served method answers "invalid params" or a result, never
            # "method not found"; a refused one answers exactly the reason in the table.
            frame = await client.request_frame(row.name, {})
            error = frame.get("error") or {}
            if row.status == "refused":
                assert error.get("code") == METHOD_NOT_FOUND, row
                assert error["message"] == row.detail
            else:
                assert error.get("code") != METHOD_NOT_FOUND, (row, frame)


def test_the_committed_page_is_current():
    manager = PluginManager(selection=Selection.from_options(None, False))
    rows = compat.table(manager)
    page = compat.as_markdown(rows, manager.names())
    assert PAGE.read_text("utf-8") == page, f"docs/compatibility.md is stale: run {REGENERATE}"
