"""The compatibility table has a row for everything in the protocol and tells the truth."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ahp_files import plugin as files_plugin
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
        assert turn.status == "served" and "ClientActions" in turn.handler
        # Given as a module, the plugin has no distribution: its name stands in.
        assert (turn.served_by, create.served_by) == ("scripted", "scripted")
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


def _resource_params(method: str, uri: str) -> dict[str, object]:
    """Valid params of each resource command, on ``uri``."""
    params: dict[str, object] = {"channel": "ahp-root://"}
    if method in {"resourceMove", "resourceCopy"}:
        return {**params, "source": uri, "destination": uri + ".copy"}
    if method == "resourceWrite":
        return {**params, "uri": uri, "data": "hi", "encoding": "utf-8"}
    return {**params, "uri": uri}


@pytest.mark.anyio
@pytest.mark.parametrize("with_files", [False, True])
async def test_resource_commands_on_a_file_uri_are_what_the_table_says(
    ahp_host, tmp_path, with_files
):
    """Without ahp-files the core relays only what clients publish: a file: URI is
    refused, so the table must not call those commands served."""
    plugins = [("files", files_plugin)] if with_files else []
    target = (tmp_path / "note.txt").as_uri()
    async with ahp_host(plugins=plugins, no_plugins=not with_files) as running:
        rows = {
            row.name: row
            for row in compat.rows_of(running.host)
            if row.kind == "command"
            and (row.name.startswith("resource") or row.name == "createResourceWatch")
        }
        client = await running.connect()
        await client.initialize()
        for name, row in rows.items():
            frame = await client.request_frame(name, _resource_params(name, target))
            refused = (frame.get("error") or {}).get("code") == METHOD_NOT_FOUND
            if with_files:
                assert (row.status, row.served_by) == ("port", "files"), row
                assert not refused, (row, frame)
            else:
                assert row.status == "partial" and "ahp-files" in row.detail, row
                assert refused, (row, frame)


STATUS_WORDS = {"served", "through a port", "in part", "refused", "sent", "not sent"}


def test_the_text_table_has_a_header_and_aligned_columns():
    done = subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", "compat", "--no-plugins"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0]
    assert header.split() == ["kind", "name", "status", "served", "by", "how", "/", "why"]
    starts = [header.index(column) for column in compat.TEXT_COLUMNS]
    rows = [line for line in lines[1:] if line.strip() and not set(line) <= {"─", " "}]
    assert len(rows) == len(compat.table(PluginManager(selection=Selection(protocol_only=True))))
    seen: dict[str, str] = {}
    for line in rows:
        line = line.ljust(starts[-1])  # trailing blanks of an empty last cell are trimmed
        # Every cell starts where its header does, and nothing spills into the gap.
        cells = [
            line[start:end].strip() for start, end in zip(starts, [*starts[1:], None], strict=True)
        ]
        for start in starts[1:]:
            assert line[start - 1] == " ", line
        kind, name, status, served_by, _how = cells
        assert status in STATUS_WORDS, line
        assert re.fullmatch(r"[\w/ ]+", kind) and name and served_by, line
        if kind == "command":
            seen[name] = status
    # What the live protocol-only host refuses on file: URIs is not "served".
    assert seen["resourceRead"] == "in part"
    assert "ahpcore." not in done.stdout, "a person reads what serves it, not a code path"


def test_an_installed_plugin_is_named_by_its_distribution():
    manager = PluginManager(selection=Selection.from_options("files,scripted", env={}))
    rows = {(row.kind, row.name): row for row in compat.table(manager)}
    assert rows[("command", "resourceRead")].served_by == "ahp-files"
    assert rows[("command", "createSession")].served_by == "ahp-scripted"
    assert rows[("command", "ping")].served_by == "core"


def test_the_committed_page_is_current():
    manager = PluginManager(selection=Selection.from_options(None, False))
    rows = compat.table(manager)
    page = compat.as_markdown(rows, manager.names())
    assert PAGE.read_text("utf-8") == page, f"docs/compatibility.md is stale: run {REGENERATE}"
