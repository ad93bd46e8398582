"""VS Code's ``telemetryLevel`` and an outside collector: a real OTLP/HTTP exporter sending to a
receiver on 127.0.0.1, a host over real sockets, and a channel subscriber beside it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from otlp_harness import ScriptedPlugin, initialized, is_export, loaded
from test_collector import Collector
from test_collector import collector as collector  # the fixture

import ahp_vscode.plugin
from ahp_otlp.plugin import OtlpPlugin
from ahp_otlp.telemetry import Options
from ahp_scripted import Script, ScriptedBackend
from ahpcore.host import HostSettings
from ahpcore.testing import AhpTestClient, running_host

pytestmark = pytest.mark.anyio

QUICK = Options(batch_seconds=0.1, metrics_seconds=0.2)


def host(tmp_path: Path, endpoint: str) -> Any:
    backend = ScriptedBackend(tmp_path / "scripted", Script(rules=[], default=[{"say": "ok"}]))
    plugins = [
        ("scripted", ScriptedPlugin(backend)),
        ("otlp", OtlpPlugin(Options(batch_seconds=0.1, metrics_seconds=0.2, endpoint=endpoint))),
        # It declares telemetryLevel, the key VS Code's window pushes.
        ("vscode", ahp_vscode.plugin),
    ]
    settings = HostSettings(sessions="memory", port=0, state_dir=tmp_path / "state")
    return running_host(plugins, settings=settings)


async def push(client: AhpTestClient, level: str) -> None:
    seq = await client.dispatch(
        "ahp-root://", {"type": "root/configChanged", "config": {"telemetryLevel": level}}
    )
    assert "rejectionReason" not in await client.answer_to(seq)


def counts(collector: Collector) -> dict[str, int]:
    with collector.lock:
        return {path: len(items) for path, items in collector.received.items()}


def bodies(collector: Collector) -> list[str]:
    with collector.lock:
        return [
            record.body.string_value
            for request in collector.received["/v1/logs"]
            for resource in request.resource_logs
            for scope in resource.scope_logs
            for record in scope.log_records
        ]


async def settled(collector: Collector) -> dict[str, int]:
    """The collector's counts once batches made before now have gone (batches every 0.1 s,
    metrics every 0.2 s)."""
    await anyio.sleep(0.8)
    return counts(collector)


async def test_off_stops_the_collector_and_the_channel_goes_on(
    tmp_path: Path,
    collector: Collector,
) -> None:
    async with host(tmp_path, collector.url) as running:
        client, _ = await initialized(running, "window")
        await loaded(running)
        with anyio.fail_after(20):
            while not all(counts(collector).values()):
                logging.getLogger("ahpcore.example").warning("a warning while all")
                await client.request("ping", {})
                await anyio.sleep(0.1)
        assert await client.request("subscribe", {"channel": "ahp-otlp://traces"}) == {}
        await push(client, "off")
        before = await settled(collector)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            await client.request("ping", {})
            logging.getLogger("ahpcore.example").error("an error while off")
            await anyio.sleep(0.05)
        # the subscriber asked on its own connection: it still hears of every ping
        frame = await client.recv_until(is_export("otlp/exportTraces"))
        assert frame["params"]["channel"] == "ahp-otlp://traces"
        assert await settled(collector) == before
        assert "an error while off" not in bodies(collector)

        # back to all: the collector hears again
        await push(client, "all")
        with anyio.fail_after(20):
            while counts(collector)["/v1/traces"] == before["/v1/traces"]:
                await client.request("ping", {})
                await anyio.sleep(0.1)


async def test_error_and_crash_send_only_records_that_bad(
    tmp_path: Path,
    collector: Collector,
) -> None:
    logger = logging.getLogger("ahpcore.example")
    async with host(tmp_path, collector.url) as running:
        client, _ = await initialized(running, "window")
        await loaded(running)
        await push(client, "error")
        before = await settled(collector)
        logger.warning("a warning at error")
        logger.error("an error at error")
        logger.critical("a crash at error")
        await client.request("ping", {})
        with anyio.fail_after(20):
            while "a crash at error" not in bodies(collector):
                await anyio.sleep(0.05)
        said = bodies(collector)
        assert "an error at error" in said and "a warning at error" not in said
        after = await settled(collector)
        # no spans and no metrics: those tell what the host does, not what went wrong
        assert after["/v1/traces"] == before["/v1/traces"]
        assert after["/v1/metrics"] == before["/v1/metrics"]

        await push(client, "crash")
        await settled(collector)
        logger.error("an error at crash")
        logger.critical("a crash at crash")
        with anyio.fail_after(20):
            while "a crash at crash" not in bodies(collector):
                await anyio.sleep(0.05)
        assert "an error at crash" not in bodies(collector)
