"""docs/clients.md and its example client: every frame the guide shows is real.

The example (docs/examples/ahp_client.py) runs the guide's whole flow against a
real ``ahp serve --plugins scripted``. Every frame it sends and receives passes
the strict wire validator, and every JSON frame in the guide is valid and has
the shape (keys, value types, method and action names) of one the example
exchanged, so the guide cannot drift from what the host does.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ahpcore.protocol.wire import assert_valid_frame
from tests.test_cli import start_serve

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "clients.md"
EXAMPLE = ROOT / "docs" / "examples" / "ahp_client.py"
REFRESH = (
    "run docs/examples/ahp_client.py --record FILE twice against `ahp serve --plugins scripted` "
    "and copy the frame from the second run"
)
#: Keys whose string values are part of a frame's shape: which method, which action, which kind.
NAMES = frozenset({"jsonrpc", "method", "type", "kind"})
Frame = tuple[str, dict[str, Any], str, str | None]


def guide_frames() -> list[Frame]:
    """(title, frame, direction, answered method) of every JSON block in the guide."""
    text = GUIDE.read_text("utf-8")
    untitled = re.findall(r"```json\n", text)
    assert not untitled, "every JSON block in the guide is a frame titled with who sends it"
    frames: list[Frame] = []
    for title, body in re.findall(r'```json title="([^"]+)"\n(.*?)\n```', text, re.DOTALL):
        assert title.startswith(("client → host", "host → client")), title
        direction = "client" if title.startswith("client") else "server"
        answered = re.search(r"answering (\w+)", title)
        frames.append((title, json.loads(body), direction, answered and answered.group(1)))
    return frames


def shape(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return ("object", tuple(sorted((k, shape(v, k)) for k, v in value.items())))
    if isinstance(value, list):
        return ("array", frozenset(shape(item) for item in value))
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if value is None:
        return "null"
    return ("name", value) if key in NAMES else "string"


def test_every_frame_in_the_guide_is_valid():
    frames = guide_frames()
    assert len(frames) >= 20
    for title, frame, direction, answered in frames:
        try:
            assert_valid_frame(frame, direction=direction, request_method=answered)
        except AssertionError as error:
            raise AssertionError(f"the frame titled {title!r}: {error}") from None


def test_the_guide_covers_the_whole_flow():
    sent = {
        frame["method"]
        if frame["method"] != "dispatchAction"
        else frame["params"]["action"]["type"]
        for _, frame, direction, _ in guide_frames()
        if direction == "client"
    }
    assert {
        "initialize",
        "createSession",
        "subscribe",
        "chat/turnStarted",
        "chat/toolCallConfirmed",
        "chat/inputCompleted",
        "chat/turnCancelled",
        "reconnect",
        "listSessions",
    } <= sent


def run_example(url: str, record: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), url, "--record", str(record)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def recorded(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@pytest.fixture
def served_scripted(tmp_path):
    served = start_serve(tmp_path, "--plugins", "scripted")
    try:
        yield f"{served.url}?token={served.token}"
    finally:
        served.process.send_signal(signal.SIGTERM)
        served.process.communicate(timeout=30)


def test_the_example_runs_the_flow_on_a_real_host_and_the_guide_shows_its_frames(
    served_scripted, tmp_path
):
    first = run_example(served_scripted, tmp_path / "first.jsonl")
    for said in (
        "[Echo this text? yes]\nhello\n",
        "[A quick question before I go on: Ada]\nNice to meet you, Ada!",
        "[reconnected: replay]",
        "[chat/turnCancelled]",
    ):
        assert said in first, first
    assert first.count("listed ") == 1
    # A second session, so the listing takes two pages.
    second = run_example(served_scripted, tmp_path / "second.jsonl")
    assert second.count("listed ") == 2, second

    # A wrong token is one line saying so, not a traceback.
    refused = subprocess.run(
        [sys.executable, str(EXAMPLE), served_scripted.split("?")[0] + "?token=wrong"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("ahp_client: ") and refused.stderr.count("\n") == 1, (
        refused.stderr
    )

    exchanged = recorded(tmp_path / "first.jsonl") + recorded(tmp_path / "second.jsonl")
    for row in exchanged:
        direction = "client" if row["from"] == "client" else "server"
        assert_valid_frame(row["frame"], direction=direction, request_method=row["answers"])
    shapes = {shape(row["frame"]) for row in exchanged}
    for title, frame, _, _ in guide_frames():
        assert shape(frame) in shapes, (
            f"the frame titled {title!r} in docs/clients.md is not one the example exchanged "
            f"with the host any more: {REFRESH}"
        )


def test_the_guide_is_in_the_site_nav_and_on_the_index():
    import importlib.util

    spec = importlib.util.spec_from_file_location("nav", ROOT / "docs" / "_hooks" / "nav.py")
    assert spec is not None and spec.loader is not None
    nav = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nav)
    entries = nav.build_nav(ROOT / "docs")
    assert {"Writing a client": "clients.md"} in entries
    # Right after getting started: what a client author reads next.
    assert entries.index({"Writing a client": "clients.md"}) == 2
    assert "](clients.md)" in (ROOT / "docs" / "index.md").read_text("utf-8")
