"""``vscode/removeSessionArtifact`` over real sockets: the entries an agent recorded with
the host's own tools, taken out by the window's close button on a pill."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ahp_users.plugin as users_plugin
from ahp_scripted import ScriptedBackend
from ahp_scripted.loader import loads_script
from ahp_vscode.plugin import VSCodePlugin
from ahpcore.hookspecs import hookimpl
from ahpcore.host import HostSettings
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    NOT_FOUND,
    PERMISSION_DENIED,
    SESSION_NOT_FOUND,
)
from ahpcore.testing import AhpTestClient, running_host

pytestmark = pytest.mark.anyio

REMOVE = "vscode/removeSessionArtifact"
ARTIFACTS = "agentHost/sessionArtifacts"
ONE = "scripted:/00000000-0000-4000-8000-00000000b001"
DEPLOYMENT = "deployment-token-0123456789abcdef"
SCRIPT = """
name: Artifacts
rules:
  - prefix: "record"
    steps:
      - tool: add_artifact_or_reference
        server: true
        input:
          items:
            - {type: pullRequest, label: "The fix", isArtifact: true, link: "https://github.com/o/r/pull/7"}
            - {type: file, label: "Notes", isArtifact: false, uri: "file:///w/notes.md"}
      - say: "${result}"
default:
  - say: "ok"
"""


class Scripted:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Any) -> None:
        register(self.backend)


def host(tmp_path: Path, *extra: Any, token: str | None = None) -> Any:
    backend = ScriptedBackend(tmp_path / "scripted", loads_script(SCRIPT, format="yaml"))
    settings = HostSettings(sessions="file", port=0, state_dir=tmp_path / "state")
    plugins = [("scripted", Scripted(backend)), *extra, ("vscode", VSCodePlugin())]
    return running_host(plugins, settings=settings, token=token)


async def record(client: AhpTestClient, uri: str = ONE) -> list[dict[str, Any]]:
    """A session whose agent recorded two entries; the entries."""
    await client.request("createSession", {"channel": uri, "provider": "scripted"})
    state = (await client.request("subscribe", {"channel": uri}))["snapshot"]["state"]
    chat = state["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": "t1",
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": "record", "origin": {"kind": "user"}},
        },
    )
    await client.recv_until(
        lambda f: (
            f.get("method") == "action" and f["params"]["action"]["type"] == "chat/turnComplete"
        )
    )
    state = (await client.request("subscribe", {"channel": uri}))["snapshot"]["state"]
    entries: list[dict[str, Any]] = state["_meta"][ARTIFACTS]
    assert [e["label"] for e in entries] == ["The fix", "Notes"]
    return entries


def meta_changed(held: int) -> Any:
    """A ``session/metaChanged`` leaving ``held`` entries."""

    def match(frame: dict[str, Any]) -> bool:
        action = (frame.get("params") or {}).get("action") or {}
        entries = (action.get("_meta") or {}).get(ARTIFACTS) or []
        return action.get("type") == "session/metaChanged" and len(entries) == held

    return match


async def row_meta(client: AhpTestClient, uri: str = ONE) -> dict[str, Any]:
    rows = (await client.request("listSessions", {}))["items"]
    meta: dict[str, Any] = next(r for r in rows if r["resource"] == uri).get("_meta") or {}
    return meta


async def test_the_window_removes_an_entry_and_the_session_its_row_and_record_follow(tmp_path):
    async with host(tmp_path) as running:
        client = await running.connect()
        result = await client.initialize()
        assert result["_meta"]["vscode.removeSessionArtifact"] is True
        fix, notes = await record(client)
        assert await client.request(REMOVE, {"session": ONE, "artifactId": fix["id"]}) is None
        changed = await client.recv_until(meta_changed(1))
        assert [e["id"] for e in changed["params"]["action"]["_meta"][ARTIFACTS]] == [notes["id"]]
        assert [e["id"] for e in (await row_meta(client))[ARTIFACTS]] == [notes["id"]]
    # Kept in the record: a host started again over the same state folder, the session
    # not open there, takes out the other entry and the key goes with the last one.
    async with host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        assert [e["id"] for e in (await row_meta(client))[ARTIFACTS]] == [notes["id"]]
        assert await client.request(REMOVE, {"session": ONE, "artifactId": notes["id"]}) is None
        state = (await client.request("subscribe", {"channel": ONE}))["snapshot"]["state"]
        assert ARTIFACTS not in (state.get("_meta") or {})
        assert ARTIFACTS not in await row_meta(client)


async def test_refusals_name_what_is_missing(tmp_path):
    async with host(tmp_path) as running:
        client = await running.connect()
        await client.initialize()
        (fix, _) = await record(client)
        cases = [
            ({"session": ONE}, INVALID_PARAMS, "artifactId must be a non-empty string"),
            ({"session": ONE, "artifactId": "  "}, INVALID_PARAMS, "artifactId"),
            ({"artifactId": fix["id"]}, INVALID_PARAMS, "session"),
            (
                {"session": "scripted:/00000000-0000-4000-8000-00000000beef", "artifactId": "x"},
                SESSION_NOT_FOUND,
                "00000000beef",
            ),
            ({"session": ONE, "artifactId": "nothing"}, NOT_FOUND, "nothing"),
        ]
        for params, code, named in cases:
            frame = await client.request_frame(REMOVE, params)
            assert frame["error"]["code"] == code, (params, frame)
            assert named in frame["error"]["message"], (params, frame)
        state = (await client.request("subscribe", {"channel": ONE}))["snapshot"]["state"]
        assert len(state["_meta"][ARTIFACTS]) == 2  # nothing was taken by a refusal


def add_person(state: Path, name: str, role: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ahpcore.cli", "users", "add", name, "--role", role],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AHP_STATE_DIR": str(state)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


async def test_with_people_only_a_member_who_owns_the_session_or_an_admin_removes(tmp_path):
    state = tmp_path / "state"
    bob, carol, vic = (
        add_person(state, n, r)
        for n, r in [("bob", "member"), ("carol", "member"), ("vic", "viewer")]
    )
    async with host(tmp_path, ("users", users_plugin), token=DEPLOYMENT) as running:
        owner = await running.connect(token=bob)
        await owner.initialize()
        fix, notes = await record(owner)
        for token, role in ((carol, "member"), (vic, "viewer")):
            other = await running.connect(token=token)
            await other.initialize()
            frame = await other.request_frame(REMOVE, {"session": ONE, "artifactId": fix["id"]})
            assert frame["error"]["code"] == PERMISSION_DENIED, frame
            assert role in frame["error"]["message"]
        assert await owner.request(REMOVE, {"session": ONE, "artifactId": fix["id"]}) is None
        admin = await running.connect()  # the deployment token: the host itself
        await admin.initialize()
        assert await admin.request(REMOVE, {"session": ONE, "artifactId": notes["id"]}) is None
