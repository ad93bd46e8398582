"""The telemetry channels over real sockets: advertised, subscribed with no snapshot,
and carrying OTLP/JSON that opentelemetry-proto's own messages read back."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_harness import (
    initialized,
    is_export,
    loaded,
    log_records_of,
    metrics_of,
    open_session,
    otlp_host,
    run_turn,
    spans_of,
)

from ahp_otlp.telemetry import LOGS_TEMPLATE, METRICS_URI, TRACES_URI

pytestmark = pytest.mark.anyio

TRACES = "otlp/exportTraces"
LOGS = "otlp/exportLogs"
METRICS = "otlp/exportMetrics"


def _hex_back(value: Any) -> Any:
    """OTLP/JSON's hex ids as protobuf's JSON mapping has them (base64), to parse."""
    import base64

    if isinstance(value, dict):
        return {
            k: (
                base64.b64encode(bytes.fromhex(v)).decode()
                if k in ("traceId", "spanId", "parentSpanId")
                else _hex_back(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_back(v) for v in value]
    return value


def parses_as(payload: dict[str, Any], message: Any) -> Any:
    """``payload`` read by the OTLP message it claims to be; unknown fields refused."""
    return json_format.ParseDict(_hex_back(payload), message())


async def test_initialize_advertises_telemetry_and_subscribing_answers_no_snapshot(
    tmp_path: Path,
) -> None:
    async with otlp_host(tmp_path) as running:
        client, result = await initialized(running, "viewer")
        assert result["telemetry"] == {
            "logs": LOGS_TEMPLATE,
            "traces": TRACES_URI,
            "metrics": METRICS_URI,
        }
        assert LOGS_TEMPLATE == "ahp-otlp://logs/{level}"
        for uri in (TRACES_URI, METRICS_URI, "ahp-otlp://logs/info", "ahp-otlp://logs/WARN"):
            assert await client.request("subscribe", {"channel": uri}) == {}
        frame = await client.request_frame("subscribe", {"channel": "ahp-otlp://logs/verbose"})
        assert frame["error"]["code"] == -32008
        # A stateless channel in initialSubscriptions is watched, with no snapshot for it.
        other = await running.connect("other")
        answer = await other.initialize(["ahp-root://", TRACES_URI])
        assert [s["resource"] for s in answer["snapshots"]] == ["ahp-root://"]


async def test_without_the_plugin_nothing_is_advertised(tmp_path: Path) -> None:
    async with otlp_host(tmp_path, with_otlp=False) as running:
        client, result = await initialized(running, "viewer")
        assert "telemetry" not in result
        frame = await client.request_frame("subscribe", {"channel": TRACES_URI})
        assert "error" in frame


async def test_a_turn_is_a_span_with_its_tool_call_as_a_child_and_usage_as_attributes(
    tmp_path: Path,
) -> None:
    async with otlp_host(tmp_path) as running:
        watcher, _ = await initialized(running, "watcher")
        assert await watcher.request("subscribe", {"channel": TRACES_URI}) == {}
        await loaded(running)
        user, _ = await initialized(running, "user")
        _, chat = await open_session(user)
        await run_turn(user, chat, "work", "t1")
        spans: list[dict[str, Any]] = []
        with anyio.fail_after(10):
            while not any(s["name"] == "turn" for s in spans):
                frame = await watcher.recv_until(is_export(TRACES, TRACES_URI))
                payload = frame["params"]["payload"]
                parses_as(payload, ExportTraceServiceRequest)
                assert "serverSeq" not in frame["params"]
                spans.extend(spans_of(payload))
        [turn] = [s for s in spans if s["name"] == "turn"]
        [tool] = [s for s in spans if s["name"] == "tool ls"]
        assert tool["parentSpanId"] == turn["spanId"] and tool["traceId"] == turn["traceId"]
        assert len(turn["traceId"]) == 32 and len(turn["spanId"]) == 16
        attributes = {a["key"]: a["value"] for a in turn["attributes"]}
        assert attributes["ahp.chat"] == {"stringValue": chat}
        assert attributes["ahp.turn.id"] == {"stringValue": "t1"}
        assert attributes["ahp.provider"] == {"stringValue": "scripted"}
        assert attributes["gen_ai.usage.input_tokens"] == {"intValue": "12"}
        assert attributes["gen_ai.usage.output_tokens"] == {"intValue": "34"}
        assert attributes["gen_ai.response.model"] == {"stringValue": "scripted-1"}
        assert attributes["ahp.turn.outcome"] == {"stringValue": "completed"}
        # Requests are spans too: the createSession the user made.
        requests = {s["name"]: s for s in spans if s.get("kind") == 2}
        assert "createSession" in requests
        created = {a["key"]: a["value"] for a in requests["createSession"]["attributes"]}
        assert created["ahp.client.id"] == {"stringValue": "user"}
        assert created["rpc.method"] == {"stringValue": "createSession"}


async def test_a_refused_request_is_an_error_span_with_its_code(tmp_path: Path) -> None:
    async with otlp_host(tmp_path) as running:
        watcher, _ = await initialized(running, "watcher")
        await watcher.request("subscribe", {"channel": TRACES_URI})
        await loaded(running)
        frame = await watcher.request_frame("subscribe", {"channel": "ahp-session:/nothing"})
        assert "error" in frame
        with anyio.fail_after(10):
            while True:
                export = await watcher.recv_until(is_export(TRACES))
                failed = [
                    s
                    for s in spans_of(export["params"]["payload"])
                    if s["name"] == "subscribe" and s.get("status", {}).get("code") == 2
                ]
                if failed:
                    break
        attributes = {a["key"]: a["value"] for a in failed[0]["attributes"]}
        assert attributes["rpc.jsonrpc.error_code"] == {"intValue": str(frame["error"]["code"])}


async def test_log_records_at_or_above_the_level_and_never_a_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with otlp_host(tmp_path) as running:
        warn, _ = await initialized(running, "warn")
        debug, _ = await initialized(running, "debug")
        assert await warn.request("subscribe", {"channel": "ahp-otlp://logs/warn"}) == {}
        assert await debug.request("subscribe", {"channel": "ahp-otlp://logs/DEBUG"}) == {}
        await warn.sync()
        await debug.sync()
        logger = logging.getLogger("ahpcore.example")
        logger.debug("a debug line")
        logger.warning("a warning with ?token=s3cret-value and Bearer abcdef123")
        try:
            raise RuntimeError("failed at ?token=s3cret-value")
        except RuntimeError:
            logger.exception("an error")

        async def records(client: Any, spelling: str, wanted: int) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            with anyio.fail_after(10):
                while len(found) < wanted:
                    frame = await client.recv_until(is_export(LOGS))
                    assert frame["params"]["channel"] == spelling
                    parses_as(frame["params"]["payload"], ExportLogsServiceRequest)
                    found.extend(
                        r
                        for r in log_records_of(frame["params"]["payload"])
                        if r.get("body", {}).get("stringValue", "").startswith("a")
                    )
            return found

        at_warn = await records(warn, "ahp-otlp://logs/warn", 2)
        at_debug = await records(debug, "ahp-otlp://logs/DEBUG", 3)
        assert [r["body"]["stringValue"] for r in at_debug][:1] == ["a debug line"]
        assert all(r["severityNumber"] >= 13 for r in at_warn)
        assert [r["severityText"] for r in at_warn] == ["WARN", "ERROR"]
        text = str(at_warn) + str(at_debug)
        assert "s3cret" not in text and "abcdef123" not in text
        assert "[redacted]" in text
        error = {a["key"]: a["value"] for a in at_warn[1]["attributes"]}
        assert error["exception.type"] == {"stringValue": "RuntimeError"}
        assert "Traceback" in error["exception.stacktrace"]["stringValue"]


async def test_metrics_count_since_start(tmp_path: Path) -> None:
    async with otlp_host(tmp_path) as running:
        watcher, _ = await initialized(running, "watcher")
        user, _ = await initialized(running, "user")
        _, chat = await open_session(user)
        await run_turn(user, chat, "work", "t1")
        await run_turn(user, chat, "hello", "t2")
        assert await watcher.request("subscribe", {"channel": METRICS_URI}) == {}
        with anyio.fail_after(10):
            while True:
                frame = await watcher.recv_until(is_export(METRICS, METRICS_URI))
                payload = frame["params"]["payload"]
                parses_as(payload, ExportMetricsServiceRequest)
                metrics = metrics_of(payload)
                # The rate needs two collections; the turns, both turns ended.
                if "ahp.turns" in metrics and "ahp.actions.rate" in metrics:
                    break

        def points(name: str) -> list[dict[str, Any]]:
            metric = metrics[name]
            body = next(v for k, v in metric.items() if isinstance(v, dict))
            return list(body["dataPoints"])

        def total(name: str) -> float:
            return sum(float(p.get("asInt", p.get("asDouble", 0))) for p in points(name))

        assert metrics["ahp.connections"]["sum"]["isMonotonic"]
        # AGGREGATION_TEMPORALITY_CUMULATIVE: counted since the host started.
        assert metrics["ahp.connections"]["sum"]["aggregationTemporality"] == 2
        assert total("ahp.connections") == 2
        assert total("ahp.connections.open") == 2
        assert total("ahp.sessions") == 1
        assert total("ahp.sessions.open") == 1
        assert total("ahp.turns") == 2
        assert total("ahp.actions") > 10
        assert total("ahp.replay.bytes") > 0
        queues = {
            p["attributes"][0]["value"]["stringValue"] for p in points("ahp.client.queue.bytes")
        }
        assert queues == {"watcher", "user"}
        [latency] = points("ahp.turn.duration")
        assert latency["count"] == "2" and metrics["ahp.turn.duration"]["unit"] == "s"
        assert total("ahp.actions.rate") >= 0


async def test_a_subscriber_that_stops_reading_is_closed_and_sessions_go_on(
    tmp_path: Path,
) -> None:
    from websockets.exceptions import ConnectionClosed

    from ahpcore.protocol.uris import ROOT_CHANNEL

    async with otlp_host(tmp_path) as running:
        engine = running.host.engine_or_fail
        engine.apply(
            ROOT_CHANNEL, {"type": "root/configChanged", "config": {"clientQueueBytes": 1 << 20}}
        )
        # It reads nothing once subscribed: its socket and then its queue fill.
        slow = await running.connect("slow", conformance=False, max_queue=1)
        await slow.initialize([ROOT_CHANNEL])
        await slow.request("subscribe", {"channel": "ahp-otlp://logs/info"})
        await loaded(running)
        user, _ = await initialized(running, "user")
        _, chat = await open_session(user)
        (held,) = [c for c in engine.clients if c.client_id == "slow"]
        logger = logging.getLogger("ahpcore.flood")
        line = "x" * 4096
        with anyio.fail_after(30):
            n = 0
            while not held.peer.closed:
                for _ in range(200):
                    logger.warning("flood %d %s", n, line)
                    n += 1
                # A turn meanwhile ends as it would with nobody watching.
                with anyio.fail_after(5):
                    await run_turn(user, chat, "hello", f"t{n}")
        with anyio.fail_after(10), pytest.raises(ConnectionClosed):
            while True:
                await slow.connection.recv()
        assert slow.connection.close_code == 1008
        with anyio.fail_after(5):
            await run_turn(user, chat, "work", "after")


async def test_nothing_is_made_before_anyone_subscribes_and_nothing_is_replayed(
    tmp_path: Path,
) -> None:
    from opentelemetry.sdk._logs import LogRecordProcessor
    from opentelemetry.sdk.trace import SpanProcessor

    from ahp_otlp.plugin import OtlpPlugin

    made = {"spans": 0, "logs": 0}

    class Spans(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            made["spans"] += 1

    class Logs(LogRecordProcessor):
        def on_emit(self, log_record: Any) -> None:
            made["logs"] += 1

        def shutdown(self) -> None:
            return None

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    async with otlp_host(tmp_path) as running:
        plugin = running.host.plugins.get("otlp")
        assert isinstance(plugin, OtlpPlugin)
        [telemetry] = plugin.running
        user, _ = await initialized(running, "user")
        _, chat = await open_session(user)
        await run_turn(user, chat, "work", "unwatched")
        logging.getLogger("ahpcore.example").warning("nobody hears this")
        # Nobody watched: the SDK was not even loaded.
        assert telemetry.pipeline is None
        assert "ahp_otlp.sdk" not in sys.modules or telemetry.pipeline is None
        watcher, _ = await initialized(running, "watcher")
        await watcher.request("subscribe", {"channel": TRACES_URI})
        await loaded(running)
        telemetry.pipeline.tracer_provider.add_span_processor(Spans())
        telemetry.pipeline.logger_provider.add_log_record_processor(Logs())
        await watcher.request("ping", {"channel": "ahp-root://"})
        frame = await watcher.recv_until(is_export(TRACES))
        names = {span["name"] for span in spans_of(frame["params"]["payload"])}
        assert "ping" in names and "turn" not in names and made["spans"] > 0
        # A reconnect asks the traces channel back: nothing of it is replayed.
        again = await running.connect("watcher-again")
        result = await again.request(
            "reconnect",
            {
                "channel": "ahp-root://",
                "clientId": "watcher-again",
                "lastSeenServerSeq": running.host.engine_or_fail.server_seq,
                "subscriptions": [TRACES_URI],
            },
        )
        assert result == {"type": "replay", "actions": [], "missing": []}
