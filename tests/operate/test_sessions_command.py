"""``ahp sessions list|show|dispose``: against a running ``ahp serve``, found through
its state folder's lock, and against the state folder when no host runs on it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from ahpcore.protocol.wire import assert_valid_frame
from tests.operate.running import Serving, run_ahp, serve

pytestmark = pytest.mark.anyio

#: Takes a state folder's lock as ``ahp serve`` does, says so, and holds it until killed.
HOLD_LOCK = (
    "import sys, time; from pathlib import Path; from ahpcore.statelock import StateLock; "
    "lock = StateLock.acquire(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)"
)

#: A title a client chose, with a terminal escape and a newline in it.
HOSTILE_TITLE = "Fix\x1b[31m it\nnow"


def scripted_env() -> dict[str, str]:
    env = {**os.environ, "AHP_PLUGINS": "scripted"}
    for name in ("AHP_TOKEN", "AHP_TOKEN_FILE", "AHP_URL", "AHP_STATE_DIR"):
        env.pop(name, None)
    return env


class Client:
    """Just enough of a client to make sessions; every answer held to the schema."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws, self.next_id = ws, 0

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        ident = self.next_id
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        )
        while True:
            frame = json.loads(await self.ws.recv())
            if frame.get("id") == ident and "method" not in frame:
                assert_valid_frame(frame, direction="server", request_method=method)
                assert "result" in frame, frame
                return frame["result"]

    async def titled(self, session: str, title: str) -> None:
        await self.request("subscribe", {"channel": session})
        await self.ws.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {
                        "channel": session,
                        "clientSeq": 1,
                        "action": {"type": "session/titleChanged", "title": title},
                    },
                }
            )
        )
        await self.request("ping", {"channel": "ahp-root://"})


async def make_sessions(served: Serving, titles: list[str], prefix: str = "") -> list[str]:
    """One session per title, created over the host's WebSocket; their ids (each
    starting with ``prefix``, hex digits)."""
    ids = []
    async with connect(f"{served.url}?token={served.token}") as ws:
        client = Client(ws)
        await client.request(
            "initialize",
            {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "maker"},
        )
        for title in titles:
            session_id = prefix + str(uuid.uuid4())[len(prefix) :]
            uri = f"scripted:/{session_id}"
            await client.request("createSession", {"channel": uri, "provider": "scripted"})
            await client.titled(uri, title)
            ids.append(session_id)
    return ids


async def listed(served: Serving) -> list[str]:
    async with connect(f"{served.url}?token={served.token}") as ws:
        client = Client(ws)
        await client.request(
            "initialize",
            {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "lister"},
        )
        page = await client.request("listSessions", {"channel": "ahp-root://"})
    return [item["resource"] for item in page["items"]]


def sessions(state: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_ahp("sessions", *args, "--state-dir", str(state), env=env or scripted_env())


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def host(state: Path) -> Iterator[Serving]:
    served = serve(state, env=scripted_env())
    try:
        yield served
    finally:
        served.stop()


# -- a running host --------------------------------------------------------------------------
async def test_list_asks_the_host_holding_the_state_folder(host: Serving, state: Path) -> None:
    first, second = await make_sessions(host, ["First", HOSTILE_TITLE])
    done = sessions(state, "list")
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"2 session(s) on the host at {host.url} (pid {host.process.pid})\n"
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["ID", "PROVIDER", "MODIFIED", "STATUS", "TITLE"]
    # Newest first, columns aligned, and the client's control characters spelled out.
    assert [row.split()[0] for row in rows] == [second, first]
    assert rows[0].endswith("Fix\\x1b[31m it\\nnow") and rows[1].endswith("First")
    assert {row.index("scripted") for row in rows} == {header.index("PROVIDER")}
    assert "\x1b" not in done.stdout

    as_json = json.loads(sessions(state, "list", "--json").stdout)
    assert as_json["host"] == host.url and as_json["stateFolder"] == str(state)
    assert [item["resource"] for item in as_json["sessions"]] == await listed(host)
    assert as_json["sessions"][0]["title"] == HOSTILE_TITLE


async def test_show_subscribes_to_the_session_named_by_the_start_of_its_id(
    host: Serving, state: Path
) -> None:
    (session_id,) = await make_sessions(host, ["Shown"])
    done = sessions(state, "show", session_id[:8])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"session   scripted:/{session_id}"
    assert "title     Shown" in lines and "status    idle" in lines and "chats     1" in lines
    shown = json.loads(sessions(state, "show", f"scripted:/{session_id}", "--json").stdout)
    assert shown["summary"]["resource"] == f"scripted:/{session_id}"
    assert shown["state"]["lifecycle"] == "ready"
    assert [chat["resource"] for chat in shown["chats"]] == [shown["state"]["defaultChat"]]


async def test_dispose_on_the_running_host(host: Serving, state: Path) -> None:
    kept, gone = await make_sessions(host, ["Kept", "Gone"])
    refused = sessions(state, "dispose", gone)  # stdin is not a terminal: no one to ask
    assert refused.returncode == 2
    assert refused.stderr == (
        "ahp: disposing of a session deletes its conversation for good: add --yes to go ahead\n"
    )
    done = sessions(state, "dispose", gone, "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"disposed of scripted:/{gone} (Gone)\n"
    assert await listed(host) == [f"scripted:/{kept}"]


async def test_naming_no_session_or_several_is_one_line(host: Serving, state: Path) -> None:
    one, two = await make_sessions(host, ["One", "Two"], prefix="abcdef")
    missing = sessions(state, "show", "nosuchid")
    assert missing.returncode == 1
    assert missing.stderr == (
        f"ahp: no session 'nosuchid' among the 2 on the host at {host.url} "
        f"(pid {host.process.pid}); ahp sessions list shows them\n"
    )
    several = sessions(state, "dispose", "abcdef", "--yes")
    assert several.returncode == 2
    assert several.stderr == f"ahp: 'abcdef' names 2 sessions ({two}, {one}); give more of the id\n"
    assert len(await listed(host)) == 2


async def test_a_wrong_token_or_no_host_at_the_url_is_one_line(host: Serving, state: Path) -> None:
    env = {**scripted_env(), "AHP_TOKEN": "not-the-token-of-this-host"}
    done = sessions(state, "list", env=env)
    assert done.returncode == 1
    assert done.stderr == (
        f"ahp: the host at {host.url} refused the token from --token or AHP_TOKEN (it was "
        "started with another); pass its token with AHP_TOKEN, --token-file or --token\n"
    )
    with_token = sessions(state, "list", "--url", host.url, env={**env, "AHP_TOKEN": host.token})
    assert with_token.returncode == 0, with_token.stderr
    nobody = sessions(state, "list", "--url", "ws://127.0.0.1:9/")
    assert nobody.returncode == 1
    assert nobody.stderr == "ahp: no AHP host answers at ws://127.0.0.1:9/ (connection refused)\n"


# -- the state folder, no host running -------------------------------------------------------
def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_without_a_host_list_and_show_read_the_store_and_write_nothing(state: Path) -> None:
    served = serve(state, env=scripted_env())
    try:
        older, newer = await make_sessions(served, ["Older", "Newer"])
    finally:
        served.stop()
    store = state / "sessions.sqlite3"
    before = _digest(store)
    done = sessions(state, "list")
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"2 session(s) on the state folder {state} (no host is running on it)\n"
    assert [row.split()[0] for row in done.stdout.splitlines()[1:]] == [newer, older]
    as_json = json.loads(sessions(state, "list", "--json").stdout)
    assert as_json["host"] is None
    assert [s["title"] for s in as_json["sessions"]] == ["Newer", "Older"]
    shown = sessions(state, "show", older)
    assert shown.returncode == 0, shown.stderr
    assert f"session   scripted:/{older}" in shown.stdout and "title     Older" in shown.stdout
    assert "chats     1" in shown.stdout
    assert _digest(store) == before


async def test_without_a_host_dispose_goes_through_a_host_in_process_backend_copy_and_all(
    state: Path,
) -> None:
    served = serve(state, env=scripted_env())
    try:
        kept, gone = await make_sessions(served, ["Kept", "Gone"])
    finally:
        served.stop()
    done = sessions(state, "dispose", gone[:8], "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"disposed of scripted:/{gone} (Gone)\n"
    # The scripted backend lists what it keeps: had its copy stayed, a host would list it again.
    again = serve(state, env=scripted_env())
    try:
        assert await listed(again) == [f"scripted:/{kept}"]
    finally:
        again.stop()


def test_a_host_still_starting_on_the_folder_is_not_written_behind(state: Path) -> None:
    state.mkdir(mode=0o700)
    # Another process holds the lock, as a host does before it has bound its port.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(state)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        done = sessions(state, "dispose", "anything", "--yes")
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1
    assert done.stderr == (
        f"ahp: the host holding {state} (pid {holder.pid}) has not said where it listens yet "
        "(still starting?): it cannot be asked; give --url if it listens somewhere\n"
    )
    # Once it is gone, nothing holds the folder.
    assert sessions(state, "list").stderr.startswith("0 session(s) on the state folder")


def test_an_empty_state_folder_lists_nothing(state: Path) -> None:
    done = sessions(state, "list", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sessions"] == []
    assert not state.exists()  # looking made nothing
