"""The bash integration runs beside whatever PROMPT_COMMAND the user's ~/.bashrc sets."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from terminal_harness import is_action, open_session, open_terminal, output_of

from ahpcore.testing import AhpTestClient

pytestmark = pytest.mark.anyio
T = "ahp-terminal:/t1"


def _bash_version() -> tuple[int, int]:
    bash = shutil.which("bash")
    if bash is None:
        return (0, 0)
    out = subprocess.run(
        [bash, "-c", 'echo "${BASH_VERSINFO[0]} ${BASH_VERSINFO[1]}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


ARRAYS = pytest.mark.skipif(
    _bash_version() < (5, 1), reason="PROMPT_COMMAND is an array from bash 5.1"
)

PROMPT_COMMANDS = [
    # pyenv's ends in ';', which once made '; __ahp_ready' a syntax error.
    pytest.param("PROMPT_COMMAND='echo hi;'", ["hi"], id="trailing-semicolon"),
    pytest.param("PROMPT_COMMAND=$'echo hi\\n'", ["hi"], id="trailing-newline"),
    pytest.param("PROMPT_COMMAND='echo hi'", ["hi"], id="plain"),
    pytest.param(
        "PROMPT_COMMAND=('echo hi;' 'echo there')", ["hi", "there"], id="array", marks=ARRAYS
    ),
]


async def _mark(client: AhpTestClient, kind: str, after: str) -> None:
    try:
        await client.recv_until(is_action(kind, T), timeout=5)
    except TimeoutError:
        pytest.fail(f"no {kind} after {after}; the terminal said: {output_of(client, T)!r}")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("setting", "said"), PROMPT_COMMANDS)
async def test_the_users_prompt_command_runs_and_the_marks_still_arrive(
    terminal_host, workdir: Path, setting: str, said: list[str]
) -> None:
    (Path.home() / ".bashrc").write_text(f"PS1='$ '\n{setting}\n")
    typed = ["echo one", "false", "echo done-$((2+3))"]
    async with terminal_host() as running:
        client = await running.connect()
        await client.initialize()
        await open_session(client, workdir)
        state = await open_terminal(client, workdir)
        if not state["supportsCommandDetection"]:
            await _mark(client, "terminal/commandDetectionAvailable", "the first prompt")
        for line in typed:
            await client.dispatch(T, {"type": "terminal/input", "data": line + "\r"})
            await _mark(client, "terminal/commandFinished", repr(line))
        await client.sync()
        actions = [e["action"] for e in client.actions_for(T)]
        output = output_of(client, T)
    assert "syntax error" not in output, output
    # Only what was typed ran as a command: the prompt's own commands are not reported.
    assert [a["commandLine"] for a in actions if a["type"] == "terminal/commandExecuted"] == typed
    assert [a["exitCode"] for a in actions if a["type"] == "terminal/commandFinished"] == [0, 1, 0]
    assert "done-5" in output
    for word in said:
        # Once before each prompt a command was typed at.
        assert output.count(word + "\r\n") >= len(typed), output
