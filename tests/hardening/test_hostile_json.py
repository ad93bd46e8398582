"""Hostile JSON sent to the commands added with files and terminals: every request with a
usable id is answered by that id, and the host and its other clients go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ahp_files.plugin
import ahp_scripted.plugin

pytestmark = pytest.mark.anyio
SESSION = "scripted:/00000000-0000-4000-8000-000000000001"


def frame(ident: int, method: str, params_json: str) -> str:
    return f'{{"jsonrpc":"2.0","id":{ident},"method":"{method}","params":{params_json}}}'


@pytest.mark.parametrize(
    "params_json",
    [
        '{"channel":"ahp-root://","uri":"file:///\\ud800x"}',
        '{"channel":"ahp-root://","uri":"%(root)s/a","data":"\\udc00","encoding":"utf-8"}',
        '{"channel":"ahp-root://","uri":"%(root)s/a","data":"x","encoding":"utf-8","position":1e400}',
        '{"channel":"ahp-root://","uri":"%(root)s/a","data":"x","encoding":"utf-8",'
        '"position":123456789012345678901234567890}',
        '{"channel":"ahp-root://","uri":"%(root)s/a","uri":"file:///etc/passwd"}',
        '{"channel":"ahp-root://","uri":' + "[" * 300 + "]" * 300 + "}",
    ],
    ids=["surrogate-uri", "surrogate-data", "overflow", "huge-int", "duplicate-key", "deep"],
)
async def test_hostile_params_are_answered_by_id(ahp_host, tmp_path: Path, params_json: str):
    work = tmp_path / "work"
    work.mkdir()
    plugins = [("scripted", ahp_scripted.plugin), ("files", ahp_files.plugin)]
    async with ahp_host(plugins=plugins) as running:
        bystander = await running.connect("bystander")
        await bystander.initialize()
        client = await running.connect("c1")
        await client.initialize()
        await client.request(
            "createSession",
            {"channel": SESSION, "provider": "scripted", "workingDirectories": [work.as_uri()]},
        )
        method = "resourceWrite" if '"data"' in params_json else "resourceRead"
        await client.send_raw(frame(77, method, params_json % {"root": work.as_uri()}))
        answer = await client.recv_until(lambda f: "method" not in f)
        assert answer["id"] == 77, answer
        assert answer["error"]["code"] in (-32700, -32600, -32602, -32009), answer
        assert not (work / "a").exists()
        # Nothing was read from outside the fence by the duplicate key's second value.
        assert "root:" not in json.dumps(answer)
        await client.sync()
        await bystander.sync()
