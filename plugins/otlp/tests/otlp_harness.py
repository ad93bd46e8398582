"""A host with the scripted backend and ahp-otlp, and clients that read telemetry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ahp_otlp.plugin import OtlpPlugin
from ahp_otlp.telemetry import Options
from ahp_scripted import Rule, Script, ScriptedBackend
from ahpcore import hookimpl
from ahpcore.host import HostSettings
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.testing import AhpTestClient, RunningHost, running_host

#: Batches every 0.1 s and metrics every 0.2 s: a test waits fractions of a second.
QUICK = Options(batch_seconds=0.1, metrics_seconds=0.2)
SESSION = "scripted:/00000000-0000-4000-8000-00000000000{n}"

#: A turn that calls a tool and reports usage, then answers.
TOOL_TURN = Rule(
    exact="work",
    steps=[
        {"tool": "ls", "input": {"path": "."}, "result": "README.md"},
        {"usage": {"input_tokens": 12, "output_tokens": 34, "model": "scripted-1"}},
        {"say": "done"},
    ],
)


class ScriptedPlugin:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.backend = backend

    @hookimpl
    def ahp_backends(self, host: Any, register: Callable[[Any], None]) -> None:
        register(self.backend)


@asynccontextmanager
async def otlp_host(
    tmp_path: Path,
    options: Options | None = QUICK,
    *,
    with_otlp: bool = True,
    rules: tuple[Rule, ...] = (TOOL_TURN,),
) -> AsyncIterator[RunningHost]:
    backend = ScriptedBackend(
        tmp_path / "scripted", Script(rules=list(rules), default=[{"say": "ok"}])
    )
    plugins: list[tuple[str, object]] = [("scripted", ScriptedPlugin(backend))]
    if with_otlp:
        plugins.append(("otlp", OtlpPlugin(options)))
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    async with running_host(plugins, settings=settings) as running:
        yield running


async def open_session(client: AhpTestClient, n: int = 1) -> tuple[str, str]:
    uri = SESSION.format(n=n)
    await client.request("createSession", {"channel": uri, "provider": "scripted"})
    snapshot = await client.request("subscribe", {"channel": uri})
    chat = snapshot["snapshot"]["state"]["defaultChat"]
    await client.request("subscribe", {"channel": chat})
    return uri, chat


async def run_turn(client: AhpTestClient, chat: str, text: str, turn_id: str) -> None:
    """Start a turn and wait for it to end."""
    await client.dispatch(
        chat,
        {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": "2026-11-29T00:00:00.000Z",
            "message": {"text": text, "origin": {"kind": "user"}},
        },
    )
    await client.recv_until(
        lambda f: (
            f.get("method") == "action"
            and f["params"]["channel"] == chat
            and f["params"]["action"]["type"] in ("chat/turnComplete", "chat/error")
            and f["params"]["action"].get("turnId") == turn_id
        )
    )


def is_export(method: str, channel: str | None = None) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        return frame.get("method") == method and (
            channel is None or frame["params"]["channel"] == channel
        )

    return match


async def loaded(running: RunningHost) -> Any:
    """The host's telemetry once the SDK runs (it loads for the first subscriber)."""
    import anyio

    from ahp_otlp.plugin import OtlpPlugin

    plugin = running.host.plugins.get("otlp")
    assert isinstance(plugin, OtlpPlugin)
    [telemetry] = plugin.running
    with anyio.fail_after(30):
        while telemetry.pipeline is None:
            await anyio.sleep(0.02)
    return telemetry


async def initialized(running: RunningHost, name: str) -> tuple[AhpTestClient, dict[str, Any]]:
    client = await running.connect(name)
    result = await client.initialize([ROOT_CHANNEL])
    return client, result


def spans_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        span
        for resource in payload.get("resourceSpans", [])
        for scope in resource.get("scopeSpans", [])
        for span in scope.get("spans", [])
    ]


def log_records_of(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        record
        for resource in payload.get("resourceLogs", [])
        for scope in resource.get("scopeLogs", [])
        for record in scope.get("logRecords", [])
    ]


def metrics_of(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        metric["name"]: metric
        for resource in payload.get("resourceMetrics", [])
        for scope in resource.get("scopeMetrics", [])
        for metric in scope.get("metrics", [])
    }
