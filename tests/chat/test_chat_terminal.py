"""``ahp chat`` as a person uses it: a real pty (pexpect), a real ``ahp serve`` running the
scripted demo agent, keys typed and the screen read back."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pexpect
import pytest
from websockets.asyncio.client import connect

from ahpcore.protocol.uris import default_chat_uri
from ahpcore.protocol.wire import assert_valid_frame
from tests.operate.running import Serving, serve

#: Everything a terminal takes as a command rather than text: CSI, OSC, charset and
#: keypad switches. What is left is what a person reads (with Live's redraws repeated).
_ESCAPES = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][0-9A-B]|[=>78])"
)
#: The chat's own prompt, at the start of a line.
PROMPT = r"(?m)^>"
CHAT = [sys.executable, "-m", "ahpcore.chat"]


def host_env() -> dict[str, str]:
    env = {**os.environ, "AHP_PLUGINS": "scripted,terminals", "AHP_CLAUDE_PROBE": "0"}
    for name in ("AHP_TOKEN", "AHP_TOKEN_FILE", "AHP_URL", "AHP_STATE_DIR"):
        env.pop(name, None)
    return env


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    served = serve(tmp_path_factory.mktemp("chat") / "state", env=host_env())
    try:
        yield served
    finally:
        served.stop()


class Screen:
    """A chat in a pty: what it has written so far, read past each thing waited for."""

    def __init__(self, host: Serving, folder: Path, *args: str) -> None:
        env = {**host_env(), "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"}
        assert host.token is not None
        self.child = pexpect.spawn(
            CHAT[0],
            [*CHAT[1:], "--url", host.url, "--token", host.token, "--folder", str(folder), *args],
            encoding="utf-8",
            dimensions=(40, 120),
            env=env,
            timeout=30,
        )
        self.host = host
        self.raw = ""
        self.seen = 0

    def text(self) -> str:
        return _ESCAPES.sub("", self.raw).replace("\r", "")

    def _read(self, wait: float) -> None:
        with contextlib.suppress(pexpect.TIMEOUT):
            self.raw += self.child.read_nonblocking(65536, timeout=wait)

    def wait(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        """The next match of ``pattern`` past what was waited for before."""
        found = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = found.search(self.text(), self.seen)
            if match is not None:
                self.seen = match.end()
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} on screen; after the last:\n{self.since()}")
            self._read(0.2)

    def since(self) -> str:
        return self.text()[self.seen :]

    def type(self, line: str) -> None:
        self.child.send(line + "\r")

    def settle(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read(0.1)

    def quit(self) -> int:
        """Ctrl-C twice at the prompt; the exit status."""
        self.child.sendcontrol("c")
        self.wait(r"Ctrl-C again")
        self.wait(PROMPT)
        self.child.sendcontrol("c")
        self.child.expect(pexpect.EOF, timeout=30)
        self.child.close()
        assert self.child.exitstatus is not None
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def chat(host: Serving, tmp_path: Path) -> Iterator[Screen]:
    screen = Screen(host, tmp_path, "--agent", "scripted")
    try:
        screen.wait(r"Demo agent")
        screen.wait(PROMPT)
        yield screen
    finally:
        screen.close()


def test_a_turn_streams_the_answer_as_markdown(chat: Screen) -> None:
    chat.type("help")
    chat.wait(r"Hi! I'm the demo agent of this ahp host")
    chat.wait(r"slow: I count slowly")
    chat.wait(PROMPT)
    # Rendered, not shown as written: no emphasis or code markers left.
    assert "**demo agent**" not in chat.text() and "`echo <text>`" not in chat.text()
    assert chat.quit() == 0


def test_an_approval_answered_y_runs_the_tool(chat: Screen) -> None:
    chat.type("echo hello")
    chat.wait(r"Echo this text\?")
    chat.wait(r'input: \{"text": "hello"\}')
    chat.wait(r"Allow\? y\(es\) / n\(o\) / a\(lways\)")
    chat.type("y")
    chat.wait(r"✓ Echoed “hello”")
    chat.wait(r"(?m)^hello")
    chat.wait(PROMPT)
    assert chat.quit() == 0


def test_an_approval_answered_n_with_a_suggestion_denies_it(chat: Screen) -> None:
    chat.type("echo secret")
    chat.wait(r"Allow\?")
    chat.type("n echo something else")
    chat.wait(r"✗ denied")
    chat.wait(r"Okay, I won't echo that\.")
    chat.wait(PROMPT)
    assert "Echoed" not in chat.text()
    assert chat.quit() == 0


def test_ctrl_c_at_an_approval_cancels_the_turn_and_ctrl_d_denies(chat: Screen) -> None:
    chat.type("echo first")
    chat.wait(r"Allow\?.*>")
    chat.child.sendcontrol("c")
    chat.wait(r"cancelling…")
    chat.wait(r"\(turn cancelled\)")
    chat.wait(PROMPT)
    chat.type("echo second")
    chat.wait(r"Allow\?.*>")
    chat.child.sendcontrol("d")
    chat.wait(r"✗ denied")
    chat.wait(r"Okay, I won't echo that\.")
    chat.wait(PROMPT)
    assert "Echoed" not in chat.text()
    assert chat.quit() == 0


def test_always_approves_the_same_tool_without_asking_again(chat: Screen) -> None:
    chat.type("echo one")
    chat.wait(r"Allow\?")
    chat.type("a")
    chat.wait(r"✓ Echoed “one”")
    chat.wait(PROMPT)
    chat.type("echo two")
    chat.wait(r"approved \(you said always\)")
    chat.wait(r"✓ Echoed “two”")
    chat.wait(PROMPT)
    assert chat.text().count("Allow?") <= 2  # the first call's prompt, drawn and accepted
    assert chat.quit() == 0


def test_a_question_is_answered_inline(chat: Screen) -> None:
    chat.type("ask")
    chat.wait(r"A quick question before I go on")
    chat.wait(r"Your name: What should I call you\?")
    chat.wait(r"answer >")
    chat.type("Ada")
    chat.wait(r"Nice to meet you, Ada!")
    chat.wait(PROMPT)
    assert chat.quit() == 0


def test_ctrl_c_cancels_a_slow_turn_and_the_chat_goes_on(chat: Screen) -> None:
    chat.type("slow")
    chat.wait(r"three")
    chat.child.sendintr()
    chat.wait(r"cancelling…")
    chat.wait(r"\(turn cancelled\)", timeout=15)
    chat.wait(PROMPT)
    chat.settle(1.5)  # the count would have gone on: it does not
    assert "twenty" not in chat.text() and "Done!" not in chat.text()
    # Still talking to the agent after the cancel.
    chat.type("echo again")
    chat.wait(r"Allow\?")
    chat.type("y")
    chat.wait(r"✓ Echoed “again”")
    chat.wait(PROMPT)
    assert chat.quit() == 0


def test_a_shell_command_goes_to_the_host_as_the_message(chat: Screen) -> None:
    # The host runs ``!command`` turns itself; the demo agent cannot take the output
    # back, so the host refuses it with its reason, which the chat shows.
    chat.type("!echo hi")
    chat.wait(r"error: .*cannot take the result of a !command")
    chat.wait(PROMPT)
    assert chat.quit() == 0


def test_opening_a_session_shows_its_turns(host: Serving, tmp_path: Path, chat: Screen) -> None:
    chat.type("ask")
    chat.wait(r"answer >")
    chat.type("Grace")
    chat.wait(r"Nice to meet you, Grace!")
    chat.wait(PROMPT)
    uri = re.search(r"(ahp-session:/[0-9a-f-]+) \(new\)", chat.text())
    assert uri is not None
    assert chat.quit() == 0

    again = Screen(host, tmp_path, "--session", uri.group(1))
    try:
        again.wait(r"Demo agent")
        again.wait(r"> ask")
        again.wait(r"Nice to meet you, Grace!")
        again.wait(PROMPT)
        assert "(new)" not in again.text()
        assert again.quit() == 0
    finally:
        again.close()


def test_a_host_that_stops_ends_the_chat_with_the_reason(tmp_path: Path) -> None:
    own = serve(tmp_path / "state", env=host_env())
    screen = Screen(own, tmp_path, "--agent", "scripted")
    try:
        screen.wait(PROMPT)
        own.stop()
        screen.child.expect(pexpect.EOF, timeout=30)
        screen.child.close()
        screen.raw += screen.child.before or ""
        assert screen.child.exitstatus == 1
        assert re.search(r"ahp: .*(connection|closed)", screen.text()), screen.text()
    finally:
        screen.close()
        own.stop()


def test_without_a_choice_it_asks_which_session_or_agent(host: Serving, tmp_path: Path) -> None:
    screen = Screen(host, tmp_path)
    try:
        screen.wait(r"Agents")
        screen.wait(r"A session's number, or an agent for a new one \[scripted\]:")
        screen.type("nobody")
        screen.wait(r"no session nobody and no agent by that name")
        screen.wait(r"\[scripted\]:")
        screen.type("")
        screen.wait(r"Demo agent  ahp-session:/\S+ \(new\)")
        screen.wait(PROMPT)
        assert screen.quit() == 0
    finally:
        screen.close()


def test_list_names_the_agents_and_sessions(host: Serving, tmp_path: Path) -> None:
    assert host.token is not None
    done = subprocess.run(
        [*CHAT, "--url", host.url, "--token", host.token, "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=host_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "Agents" in done.stdout and "scripted  Demo agent" in done.stdout
    assert "Recent sessions" in done.stdout


def test_an_unknown_agent_is_named_in_the_error(host: Serving, tmp_path: Path) -> None:
    screen = Screen(host, tmp_path, "--agent", "nobody")
    try:
        screen.child.expect(pexpect.EOF, timeout=30)
        screen.child.close()
        assert screen.child.exitstatus == 2
        assert "no agent 'nobody' on this host (agents: scripted)" in screen.child.before
    finally:
        screen.close()


def test_no_host_at_the_address_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CHAT, "--url", "ws://127.0.0.1:9/", "--token", "x" * 32, "--list"],
        capture_output=True,
        text=True,
        timeout=60,
        env=host_env(),
    )
    assert done.returncode == 1
    assert done.stderr.startswith("ahp: no AHP host answers at ws://127.0.0.1:9/")


async def _start_turn_elsewhere(host: Serving, session: str, text: str) -> None:
    """Another client of the same session starts a turn."""
    chat_uri = default_chat_uri(session)
    async with connect(
        host.url, additional_headers={"Authorization": f"Bearer {host.token}"}
    ) as ws:
        requests = [
            (
                "initialize",
                {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "other"},
            ),
            ("subscribe", {"channel": chat_uri}),
        ]
        for ident, (method, params) in enumerate(requests, 1):
            await ws.send(
                json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
            )
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("id") == ident:
                    assert_valid_frame(frame, direction="server", request_method=method)
                    assert "result" in frame, frame
                    break
        action = {
            "type": "chat/turnStarted",
            "turnId": str(uuid.uuid4()),
            "startedAt": "2026-01-01T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        }
        await ws.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "dispatchAction",
                    "params": {"channel": chat_uri, "clientSeq": 1, "action": action},
                }
            )
        )
        while True:  # until the host has taken it
            frame = json.loads(await ws.recv())
            if (
                frame.get("method") == "action"
                and frame["params"].get("origin", {}).get("clientSeq") == 1
            ):
                assert "rejectionReason" not in frame["params"], frame
                return


def test_a_turn_another_client_starts_is_shown_and_the_draft_kept(chat: Screen) -> None:
    match = re.search(r"(ahp-session:/[0-9a-f-]+) \(new\)", chat.text())
    assert match is not None
    chat.child.send("partial")  # typed, not sent
    chat.settle(0.5)
    anyio.run(_start_turn_elsewhere, chat.host, match.group(1), "think")
    chat.wait(r"> think")
    chat.wait(r"Done thinking\.")
    chat.wait(PROMPT)
    chat.wait(r"partial")  # the draft is back at the prompt
    chat.type(" words")
    chat.wait(r"I don't know what to do with “partial words”")
    chat.wait(PROMPT)
    assert chat.quit() == 0
