"""The OpenTelemetry SDK's side: providers, processors, exporters and instruments.

Importing the SDK and protobuf takes most of a second, so this module is loaded
only when somebody first wants telemetry (a subscriber, or a collector at
start), on a thread of its own: a host nobody watches never pays for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ahp_otlp.exporters import (
    ChannelLogExporter,
    ChannelMetricExporter,
    ChannelSpanExporter,
    Outlet,
)
from ahpcore.api import HostMeasures, Stream, redact

log = logging.getLogger(__name__)

SCOPE = "ahp"
SEVERITY_TEXT = {1: "TRACE", 5: "DEBUG", 9: "INFO", 13: "WARN", 17: "ERROR", 21: "FATAL"}

#: What the metrics read of the host: its measures (None when nobody wants them),
#: the turns ended by attributes, the sessions made.
Measures = Callable[[], HostMeasures | None]


class Pipeline:
    """One host's providers, each with a processor to its channels and, given an
    endpoint, one to the collector."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        version: str,
        log_streams: Mapping[int, Stream],
        traces: Stream,
        metrics: Stream,
        batch_seconds: float,
        metrics_seconds: float,
        endpoint: str | None,
        measures: Measures,
        turns_ended: Callable[[], Mapping[tuple[tuple[str, str], ...], int]],
        sessions_made: Callable[[], int],
        level: Callable[[], Any] = lambda: None,
    ) -> None:
        """``level``: the window's ``telemetryLevel`` now, read at each export to the
        collector (the channels do not ask it)."""
        outlet = Outlet(loop)
        resource = Resource.create(
            {
                "service.name": "ahp",
                "service.version": version,
                "service.instance.id": str(uuid.uuid4()),
            }
        )
        batch_ms = batch_seconds * 1000
        metrics_ms = metrics_seconds * 1000
        self.tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(ChannelSpanExporter(traces, outlet), schedule_delay_millis=batch_ms)
        )
        self.logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(
                ChannelLogExporter(log_streams, outlet), schedule_delay_millis=batch_ms
            )
        )
        readers: list[MetricReader] = [
            PeriodicExportingMetricReader(
                ChannelMetricExporter(metrics, outlet), export_interval_millis=metrics_ms
            )
        ]
        if endpoint is not None:
            self._to_collector(endpoint.rstrip("/"), readers, batch_ms, metrics_ms, level)
        self.meter_provider = MeterProvider(
            resource=resource, metric_readers=readers, shutdown_on_exit=False
        )
        self.tracer = self.tracer_provider.get_tracer(SCOPE, version)
        self._measures = measures
        self._turns_ended = turns_ended
        self._sessions_made = sessions_made
        self._last_rate: tuple[float, int] | None = None
        self._instruments(version)

    def _to_collector(
        self,
        endpoint: str,
        readers: list[MetricReader],
        batch_ms: float,
        metrics_ms: float,
        level: Callable[[], Any],
    ) -> None:
        """The standard OTLP/HTTP exporters, beside the channels, sending what the
        window's ``telemetryLevel`` allows (``ahp_otlp.gates``)."""
        from ahp_otlp.gates import collector_exporters

        spans, logs, metrics = collector_exporters(endpoint, level)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(spans, schedule_delay_millis=batch_ms)
        )
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(logs, schedule_delay_millis=batch_ms)
        )
        readers.append(PeriodicExportingMetricReader(metrics, export_interval_millis=metrics_ms))

    # -- spans ----------------------------------------------------------------------
    def request_span(self, client_id: str | None, method: str) -> Span:
        return self.tracer.start_span(
            method,
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "jsonrpc",
                "rpc.method": method,
                "ahp.client.id": client_id or "",
            },
        )

    def turn_span(self, chat: str, turn_id: str) -> Span:
        return self.tracer.start_span("turn", attributes={"ahp.chat": chat, "ahp.turn.id": turn_id})

    def tool_span(self, turn: Span, name: str, call: str) -> Span:
        return self.tracer.start_span(
            f"tool {name}",
            context=trace.set_span_in_context(turn),
            attributes={"gen_ai.tool.name": name, "gen_ai.tool.call.id": call},
        )

    @staticmethod
    def fail(span: Span, description: str | None = None) -> None:
        span.set_status(Status(StatusCode.ERROR, description))

    # -- logs -----------------------------------------------------------------------
    def emit_log(self, record: logging.LogRecord, severity: int) -> None:
        attributes: dict[str, Any] = {
            "code.file.path": record.pathname,
            "code.function.name": record.funcName,
            "code.line.number": record.lineno,
            "thread.name": record.threadName or "",
        }
        if record.exc_info and record.exc_info[0] is not None:
            kind, value, _ = record.exc_info
            attributes["exception.type"] = kind.__name__
            attributes["exception.message"] = redact(str(value))
            attributes["exception.stacktrace"] = redact(
                "".join(traceback.format_exception(*record.exc_info))
            )
        otel = LogRecord(
            timestamp=int(record.created * 1e9),
            observed_timestamp=time.time_ns(),
            severity_number=SeverityNumber(severity),
            severity_text=SEVERITY_TEXT.get(severity - (severity - 1) % 4),
            body=redact(_message(record)),
            attributes=attributes,
        )
        self.logger_provider.get_logger(record.name).emit(otel)

    # -- metrics ----------------------------------------------------------------------
    def _instruments(self, version: str) -> None:
        meter = self.meter_provider.get_meter(SCOPE, version)
        self.turn_latency = meter.create_histogram(
            "ahp.turn.duration", unit="s", description="From a turn's start to its end."
        )
        meter.create_observable_counter(
            "ahp.turns",
            [self._turns],
            unit="{turn}",
            description="Turns ended since the host started.",
        )
        meter.create_observable_counter(
            "ahp.sessions",
            [lambda options: [Observation(self._sessions_made())]],
            unit="{session}",
            description="Sessions made since the host started.",
        )
        for name, field, unit, kind, description in (
            ("ahp.connections", "connections_made", "{connection}", "counter", "Connections served since the host started."),
            ("ahp.connections.open", "connections", "{connection}", "updown", "Connections open now."),
            ("ahp.sessions.open", "sessions", "{session}", "updown", "Sessions open on the host now."),
            ("ahp.actions", "actions", "{action}", "counter", "Changes of state applied since the host started."),
            ("ahp.replay.bytes", "replay_bytes", "By", "gauge", "Bytes the replay buffer holds."),
        ):  # fmt: skip
            make = {
                "counter": meter.create_observable_counter,
                "updown": meter.create_observable_up_down_counter,
                "gauge": meter.create_observable_gauge,
            }[kind]
            make(name, [self._observe(field)], unit=unit, description=description)
        meter.create_observable_gauge(
            "ahp.actions.rate",
            [self._actions_rate],
            unit="{action}/s",
            description="Changes of state per second since the last collection.",
        )
        meter.create_observable_gauge(
            "ahp.client.queue.bytes",
            [self._client_queues],
            unit="By",
            description="Bytes each connection has yet to take.",
        )

    def _turns(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(count, dict(key)) for key, count in self._turns_ended().items()]

    def _observe(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            measures = self._measures()
            return [] if measures is None else [Observation(getattr(measures, name))]

        return callback

    def _actions_rate(self, options: CallbackOptions) -> Iterable[Observation]:
        measures = self._measures()
        if measures is None:
            return []
        now = time.monotonic()
        last, self._last_rate = self._last_rate, (now, measures.actions)
        if last is None or now <= last[0]:
            return []
        return [Observation((measures.actions - last[1]) / (now - last[0]))]

    def _client_queues(self, options: CallbackOptions) -> Iterable[Observation]:
        measures = self._measures()
        if measures is None:
            return []
        return [
            Observation(queued, {"ahp.client.id": client})
            for client, queued in measures.queued_bytes.items()
        ]

    def shutdown(self) -> None:
        """Flush and stop every provider's threads (blocking: call it off the loop)."""
        for provider in (self.tracer_provider, self.logger_provider, self.meter_provider):
            try:
                provider.shutdown()
            except Exception:
                log.exception("telemetry did not stop cleanly")


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # a bad format string is the logger's bug; show it as it is
        return f"{record.msg!r} % {record.args!r}"
