"""``PrivateJsonFile``: what a plugin keeps of its own under the state folder."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import anyio
import pytest

from ahpcore.api import PrivateJsonFile

pytestmark = pytest.mark.anyio


async def test_saved_whole_owner_only_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "state" / "mine" / "kept.json"
    kept = PrivateJsonFile(path)
    assert kept.read() == {}
    await kept.save({"version": 1, "chats": {"a": {"title": "first"}}})
    await kept.save({"version": 1, "chats": {"b": {"title": "second"}}})
    assert PrivateJsonFile(path).read() == {"version": 1, "chats": {"b": {"title": "second"}}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", ""])
def test_a_file_it_cannot_use_is_started_without(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kept.json"
    path.write_text(text)
    assert PrivateJsonFile(path).read() == {}
    assert str(path) in caplog.text


async def test_a_save_cancelled_midway_is_still_written(tmp_path: Path) -> None:
    path = tmp_path / "kept.json"
    kept = PrivateJsonFile(path)
    with anyio.CancelScope() as scope:
        scope.cancel()  # already cancelled when the save begins
        await kept.save({"ended": "cancelled"})
    assert json.loads(path.read_text()) == {"ended": "cancelled"}


async def test_no_path_keeps_nothing() -> None:
    kept = PrivateJsonFile(None)
    await kept.save({"a": 1})
    assert kept.read() == {}
