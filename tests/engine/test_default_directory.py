"""initialize names the folder a client starts a new session in: the user's home."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.anyio


async def test_initialize_names_the_home_folder_as_the_default_directory(
    ahp_host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    home = tmp_path / "someone"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    async with ahp_host() as running:
        client = await running.connect()
        result = await client.initialize()
        assert result["defaultDirectory"] == home.as_uri()
