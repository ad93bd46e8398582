"""Terminals over real WebSocket connections, on real ptys."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest
from terminal_harness import is_action, open_session, open_terminal, output_of, wait_for_output

pytestmark = pytest.mark.anyio
T = "ahp-terminal:/t1"


async def test_shell_echo_round_trip(terminal_host, workdir: Path) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        state = await open_terminal(client, workdir)
        assert state["lifecycle"] == {"status": "running"}
        assert state["isPty"] is True
        await client.dispatch(T, {"type": "terminal/input", "data": "echo hel''lo-$((40+2))\r"})
        await wait_for_output(client, T, "hello-42")


async def test_ctrl_c_interrupts_sleep_and_commands_carry_exit_codes(
    terminal_host, workdir: Path
) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        state = await open_terminal(client, workdir)
        if not state["supportsCommandDetection"]:  # the prompt may come before the snapshot
            await client.recv_until(is_action("terminal/commandDetectionAvailable", T))

        await client.dispatch(T, {"type": "terminal/input", "data": "sleep 29\r"})
        executed = await client.recv_until(is_action("terminal/commandExecuted", T))
        assert executed["params"]["action"]["commandLine"] == "sleep 29"
        # The mark comes as the shell starts the command: wait until sleep runs in front.
        with anyio.fail_after(5):
            while not _running(b"sleep\x0029\x00"):
                await anyio.sleep(0.02)
        await client.dispatch(T, {"type": "terminal/input", "data": "\x03"})
        with anyio.fail_after(5):  # far less than the 29 s the sleep asked for
            finished = await client.recv_until(is_action("terminal/commandFinished", T))
        action = finished["params"]["action"]
        assert action["commandId"] == executed["params"]["action"]["commandId"]
        assert action["exitCode"] == 130  # 128 + SIGINT, as the shell reports it

        await client.dispatch(T, {"type": "terminal/input", "data": "sh -c 'exit 7'\r"})
        executed = await client.recv_until(is_action("terminal/commandExecuted", T))
        assert executed["params"]["action"]["commandLine"] == "sh -c 'exit 7'"
        finished = await client.recv_until(is_action("terminal/commandFinished", T))
        assert finished["params"]["action"]["exitCode"] == 7
        assert finished["params"]["action"]["durationMs"] >= 0
        # The marks never reach the output a client draws.
        assert "\x1b]133;" not in output_of(client, T)
        assert "\x1b]633;" not in output_of(client, T)


async def test_osc7_reports_the_directory_and_resize_reaches_the_pty(
    terminal_host, workdir: Path
) -> None:
    (workdir / "sub dir").mkdir()
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        await open_terminal(client, workdir, cols=80, rows=24)
        await client.dispatch(T, {"type": "terminal/input", "data": "cd 'sub dir'\r"})
        changed = await client.recv_until(
            lambda f: (
                is_action("terminal/cwdChanged", T)(f)
                and f["params"]["action"]["cwd"] == (workdir / "sub dir").as_uri()
            )
        )
        assert changed["params"]["action"]["cwd"].startswith("file://")

        seq = await client.dispatch(T, {"type": "terminal/resized", "cols": 101, "rows": 41})
        answer = await client.answer_to(seq)
        assert "rejectionReason" not in answer
        await client.dispatch(T, {"type": "terminal/input", "data": "stty size\r"})
        await wait_for_output(client, T, "41 101")


async def test_exited_comes_after_every_byte(terminal_host, workdir: Path) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        await open_terminal(client, workdir)
        await client.dispatch(
            T,
            {"type": "terminal/input", "data": "head -c 300000 /dev/zero | tr '\\0' x; exit 3\r"},
        )
        exited = await client.recv_until(is_action("terminal/exited", T), timeout=20)
        assert exited["params"]["action"]["exitCode"] == 3
        # Everything the process wrote was sent before the exit was announced.
        assert output_of(client, T).count("x") >= 300000
        root = await client.recv_until(
            lambda f: (
                is_action("root/terminalsChanged")(f)
                and f["params"]["action"]["terminals"][0]["lifecycle"]["status"] == "exited"
            )
        )
        assert root["params"]["action"]["terminals"][0]["lifecycle"]["exitCode"] == 3


async def test_late_subscriber_sees_scrollback_and_clear_keeps_the_rest(
    terminal_host, workdir: Path
) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        await open_terminal(client, workdir, name="build")
        await client.dispatch(T, {"type": "terminal/input", "data": "echo mark-$((6*7))\r"})
        await wait_for_output(client, T, "mark-42")

        late = await running.connect()
        await late.initialize()
        snapshot = (await late.request("subscribe", {"channel": T}))["snapshot"]["state"]
        assert "mark-42" in output_of(late, T)
        assert snapshot["title"] == "build"

        seq = await client.dispatch(T, {"type": "terminal/cleared"})
        await client.answer_to(seq)
        fresh = (await late.request("subscribe", {"channel": T}))["snapshot"]["state"]
        assert fresh["content"] == []
        assert (fresh["title"], fresh["cols"], fresh["claim"]) == (
            "build",
            snapshot["cols"],
            snapshot["claim"],
        )


async def test_the_claim_gates_input_and_disposal(terminal_host, workdir: Path) -> None:
    async with terminal_host() as running:
        owner = await running.connect()
        await owner.initialize()
        await open_session(owner, workdir)
        await open_terminal(owner, workdir)
        other = await running.connect()
        await other.initialize()
        await other.request("subscribe", {"channel": T})
        seq = await other.dispatch(T, {"type": "terminal/input", "data": "echo no\r"})
        answer = await other.answer_to(seq)
        assert "claim" in answer["rejectionReason"]
        refused = await other.request_frame("disposeTerminal", {"channel": T})
        assert refused["error"]["code"] == -32009
        # Handing the claim over lets the other client type.
        seq = await owner.dispatch(
            T,
            {"type": "terminal/claimed", "claim": {"kind": "client", "clientId": other.client_id}},
        )
        assert "rejectionReason" not in await owner.answer_to(seq)
        seq = await other.dispatch(T, {"type": "terminal/input", "data": "echo yes-$((1+1))\r"})
        assert "rejectionReason" not in await other.answer_to(seq)
        await wait_for_output(other, T, "yes-2")


async def test_the_fence_refuses_directories_outside_sessions(
    terminal_host, workdir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (workdir / "escape").symlink_to(outside)
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        claim = {"kind": "client", "clientId": client.client_id}
        for cwd in (
            outside.as_uri(),
            f"{workdir.as_uri()}/../elsewhere",
            (workdir / "escape").as_uri(),
        ):
            frame = await client.request_frame(
                "createTerminal", {"channel": "ahp-terminal:/x", "claim": claim, "cwd": cwd}
            )
            assert frame["error"]["code"] == -32009, cwd
        frame = await client.request_frame(
            "createTerminal",
            {
                "channel": "ahp-terminal:/x",
                "claim": {"kind": "client", "clientId": "someone-else"},
                "cwd": workdir.as_uri(),
            },
        )
        assert frame["error"]["code"] == -32602
        await open_terminal(client, workdir)
        frame = await client.request_frame(
            "createTerminal", {"channel": T, "claim": claim, "cwd": workdir.as_uri()}
        )
        assert frame["error"]["code"] == -32010


async def test_dispose_kills_the_whole_process_group(terminal_host, workdir: Path) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        await open_terminal(client, workdir)
        await client.dispatch(
            T, {"type": "terminal/input", "data": "sleep 1000 & echo child=$!=\r"}
        )
        await wait_for_output(client, T, "child=")
        import re

        with anyio.fail_after(10):
            while not (found := re.search(r"child=(\d+)=", output_of(client, T))):
                await client.recv_until(is_action("terminal/data", T))
        child = int(found.group(1))
        os.kill(child, 0)  # the background job runs
        await client.request("disposeTerminal", {"channel": T})
        root = await client.recv_until(
            lambda f: (
                is_action("root/terminalsChanged")(f) and f["params"]["action"]["terminals"] == []
            )
        )
        assert root
        with anyio.fail_after(5):
            while _alive(child):
                await anyio.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _running(cmdline: bytes) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as found:
                    if found.read() == cmdline:
                        return True
            except OSError:
                continue
    return False


async def test_a_paste_larger_than_the_pty_buffer_arrives_whole(
    terminal_host, workdir: Path
) -> None:
    lines = [f"{n:05d}" + "x" * 994 for n in range(300)]  # 300 KB, 1000-byte lines
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        await open_terminal(client, workdir)
        await client.dispatch(
            T, {"type": "terminal/input", "data": "stty -echo; cat > pasted.txt\r"}
        )
        await client.dispatch(T, {"type": "terminal/input", "data": "\r".join(lines) + "\r\x04"})
        await client.dispatch(
            T, {"type": "terminal/input", "data": "stty echo; echo pasted-$((2*3))\r"}
        )
        await wait_for_output(client, T, "pasted-6", timeout=30)
        assert (workdir / "pasted.txt").read_text().splitlines() == lines


async def test_without_a_pty_the_refusal_says_why(
    terminal_host, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ahp_terminals import plugin

    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        monkeypatch.setattr(plugin.sys, "platform", "win32")
        frame = await client.request_frame(
            "createTerminal",
            {
                "channel": T,
                "claim": {"kind": "client", "clientId": client.client_id},
                "cwd": workdir.as_uri(),
            },
        )
        assert "Windows" in frame["error"]["message"]
        assert T not in running.host.engine_or_fail.channels


async def test_a_session_claim_is_held_by_the_sessions_owner(terminal_host, workdir: Path) -> None:
    async with terminal_host() as running:
        owner = await running.connect()
        await owner.initialize()
        session, chat = await open_session(owner, workdir)
        await owner.request(
            "createTerminal",
            {"channel": T, "claim": {"kind": "session", "session": session, "chat": chat}},
        )
        state = (await owner.request("subscribe", {"channel": T}))["snapshot"]["state"]
        assert state["cwd"] == workdir.as_uri()  # no cwd: the session's own directory
        seq = await owner.dispatch(T, {"type": "terminal/input", "data": "echo own-$((3*3))\r"})
        assert "rejectionReason" not in await owner.answer_to(seq)
        await wait_for_output(owner, T, "own-9")
        stranger = await running.connect()
        await stranger.initialize()
        seq = await stranger.dispatch(T, {"type": "terminal/resized", "cols": 10, "rows": 10})
        assert "claim" in (await stranger.answer_to(seq))["rejectionReason"]


async def test_disposing_a_session_disposes_only_the_terminals_it_claimed(
    terminal_host, workdir: Path
) -> None:
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        session, chat = await open_session(client, workdir)
        await client.request(
            "createTerminal",
            {
                "channel": "ahp-terminal:/session-owned",
                "claim": {"kind": "session", "session": session, "chat": chat},
            },
        )
        await open_terminal(client, workdir)  # the client's own
        service = running.host.terminals
        shell = service.terminals["ahp-terminal:/session-owned"].process.pid
        await client.request("disposeSession", {"channel": session})
        root = await client.recv_until(
            lambda f: (
                is_action("root/terminalsChanged")(f)
                and [t["resource"] for t in f["params"]["action"]["terminals"]] == [T]
            )
        )
        assert root["params"]["action"]["terminals"][0]["claim"]["kind"] == "client"
        with anyio.fail_after(5):
            while _alive(shell):
                await anyio.sleep(0.05)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here")
async def test_zsh_integration_reports_directories_and_commands(
    terminal_host, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHELL", shutil.which("zsh") or "zsh")
    (workdir / "inner").mkdir()
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        await open_terminal(client, workdir)
        await client.dispatch(T, {"type": "terminal/input", "data": "cd inner; false\r"})
        executed = await client.recv_until(is_action("terminal/commandExecuted", T))
        assert executed["params"]["action"]["commandLine"] == "cd inner; false"
        finished = await client.recv_until(is_action("terminal/commandFinished", T))
        assert finished["params"]["action"]["exitCode"] == 1
        await client.recv_until(
            lambda f: (
                is_action("terminal/cwdChanged", T)(f)
                and f["params"]["action"]["cwd"] == (workdir / "inner").as_uri()
            )
        )
