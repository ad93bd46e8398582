"""``ahp compat`` lists the window's methods in an "outside the protocol" section."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ahp_git import plugin as git_plugin
from ahp_scripted import plugin as scripted_plugin
from ahp_vscode.plugin import VSCodePlugin
from ahpcore import compat
from ahpcore.plugins import PluginManager, Selection
from ahpcore.protocol.errors import METHOD_NOT_FOUND
from ahpcore.protocol.methods import COMMANDS
from ahpcore.testing import running_host

WINDOW_METHODS = {
    "shutdown",
    "getNetworkDiagnosticsInfo",
    "getManagedSettingsDiagnostics",
    "diagnosticsFetch",
    "vscode/collectAgentHostDebugLogs",
    "vscode/readAgentHostDebugLogsChunk",
    "vscode/createAgentHostDetachedWorktree",
    "vscode/claimAgentHostDetachedWorktree",
    "vscode/setAgentHostDetachedWorktreeArchived",
    "vscode/deleteAgentHostDetachedWorktree",
    "vscode/reconcileAgentHostDetachedWorktrees",
    "vscode/removeSessionArtifact",
    "vscode/devContainers/isDockerAvailable",
    "vscode/devContainers/connect",
    "vscode/devContainers/disconnect",
    "vscode/devContainers/stop",
    "vscode/devContainers/remove",
    "vscode/devContainers/relaySend",
}


@pytest.mark.anyio
async def test_every_method_outside_the_protocol_has_a_row_naming_its_plugin(tmp_path):
    async with running_host(
        [("scripted", scripted_plugin), ("git", git_plugin), ("vscode", VSCodePlugin())],
        state_dir=tmp_path,
    ) as running:
        rows = [row for row in compat.rows_of(running.host) if row.kind == compat.OUTSIDE]
        served = set(running.host.router.routes) - set(COMMANDS)
        assert {row.name for row in rows} == served >= WINDOW_METHODS
        for row in rows:
            if row.name in WINDOW_METHODS:
                assert (row.status, row.provider, row.served_by) == ("served", "vscode", "vscode")
                assert "ahp_vscode" in row.handler
        client = await running.connect()
        await client.initialize()
        # What the table calls served is answered, never "method not found".
        for row in rows:
            frame = await client.request_frame(row.name, {"handle": "nothing-here"})
            if row.name == "shutdown":
                continue
            assert (frame.get("error") or {}).get("code") != METHOD_NOT_FOUND, (row, frame)


def test_without_such_methods_there_is_no_section():
    manager = PluginManager(
        plugins=[("scripted", scripted_plugin)], entry_points=False, selection=Selection()
    )
    rows = compat.table(manager)
    assert not [row for row in rows if row.kind == compat.OUTSIDE]
    assert "## Outside the protocol" not in compat.as_markdown(rows, manager.names())


def test_markdown_json_and_text_carry_the_section():
    manager = PluginManager(
        plugins=[("scripted", scripted_plugin), ("git", git_plugin), ("vscode", VSCodePlugin())],
        entry_points=False,
        selection=Selection(),
    )
    rows = compat.table(manager)
    page = compat.as_markdown(rows, manager.names())
    section = page.split("## Outside the protocol", 1)[1]
    for method in WINDOW_METHODS:
        assert f"| `{method}` | served | vscode |" in section, method
    kinds = {row["name"]: row["kind"] for row in compat.as_json(rows, manager.names())["rows"]}
    assert all(kinds[method] == "outside the protocol" for method in WINDOW_METHODS)
    text = compat.as_text(rows)
    assert any(
        line.split()[:4] == ["outside", "the", "protocol", "vscode/collectAgentHostDebugLogs"]
        for line in text.splitlines()
    )


def test_the_command_lists_them_with_the_installed_plugin():
    done = subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", "compat", "--json", "--plugins", "git,vscode"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["rows"]
    outside = {row["name"]: row for row in rows if row["kind"] == "outside the protocol"}
    assert set(outside) >= WINDOW_METHODS
    assert outside["diagnosticsFetch"]["served_by"] == "ahp-vscode"
