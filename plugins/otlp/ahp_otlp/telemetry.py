"""One host's telemetry: its channels, the SDK's providers, and what feeds them.

* Logs: a ``logging`` handler on the root logger turns each record the host
  logs into an OpenTelemetry log record (tokens redacted as in the host's own
  log) while a logs channel is watched or a collector is configured.
* Traces: a span per protocol request (``host.on_request``) and per turn, with
  a child span per tool call, driven by the chat actions (``host.on_change``)
  and ``ahp_turn_starting`` (provider, session); usage and model are
  attributes of the turn's span.
* Metrics: counters and gauges read from ``host.measures()`` when the SDK
  collects, and a counter and a histogram of turns fed as turns end.

Nothing is made while nobody wants it: no span, no log record, no reading of
the host. The SDK's processors run on threads of their own, so encoding a batch
never holds the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.metadata
import logging
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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
from ahpcore.api import HostMeasures, PluginHost, redact
from ahpcore.lifecycle import TurnStart
from ahpcore.protocol import ProtocolError

log = logging.getLogger(__name__)

SCOPE = "ahp"
#: The channels advertised on ``initialize`` (``telemetry``).
LOGS_TEMPLATE = "ahp-otlp://logs/{level}"
TRACES_URI = "ahp-otlp://traces"
METRICS_URI = "ahp-otlp://metrics"
#: The protocol's ``{level}`` values and the lowest OTLP severity number of each band.
LEVEL_FLOORS = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}
#: Loggers whose records are not exported: the SDK's and the HTTP stack's own, which
#: speak while a batch is sent, and would otherwise feed the next batch forever.
IGNORED_LOGGERS = ("opentelemetry", "urllib3", "requests", "ahp_otlp")
#: Turns followed at once; past it the oldest is let go (its span ended as such).
MAX_TURNS = 1000
#: How long an SDK thread waits for the event loop to read the host's measures.
MEASURE_TIMEOUT = 2.0

TURN_TYPES = frozenset(
    {
        "chat/turnStarted",
        "chat/toolCallStart",
        "chat/toolCallComplete",
        "chat/usage",
        "chat/turnComplete",
        "chat/turnCancelled",
        "chat/error",
    }
)
#: How a turn ended, by the action that ended it.
OUTCOMES = {
    "chat/turnComplete": "completed",
    "chat/turnCancelled": "cancelled",
    "chat/error": "error",
}


def logs_uri(level: str) -> str:
    return LOGS_TEMPLATE.replace("{level}", level)


def severity_of(levelno: int) -> int:
    """A ``logging`` level as an OTLP severity number (DEBUG 5, INFO 9, WARNING 13,
    ERROR 17, CRITICAL 21; levels between move up within the band)."""
    if levelno < logging.DEBUG:
        return 1
    bands = (
        (logging.CRITICAL, 21),
        (logging.ERROR, 17),
        (logging.WARNING, 13),
        (logging.INFO, 9),
        (logging.DEBUG, 5),
    )
    for floor, number in bands:
        if levelno >= floor:
            return min(number + (levelno - floor), number + 3)
    return 5


SEVERITY_TEXT = {1: "TRACE", 5: "DEBUG", 9: "INFO", 13: "WARN", 17: "ERROR", 21: "FATAL"}


@dataclass(frozen=True)
class Options:
    """How often batches go out, and where else they go."""

    #: Seconds between batches of spans and of log records.
    batch_seconds: float = 1.0
    #: Seconds between collections of metrics.
    metrics_seconds: float = 5.0
    #: An OTLP/HTTP collector's base URL (``http://127.0.0.1:4318``), or None.
    endpoint: str | None = None


@dataclass
class _Turn:
    started: float
    span: Span | None
    tools: dict[str, Span] = field(default_factory=dict)
    provider: str | None = None


class Telemetry:
    """Telemetry for one host, from ``ahp_host_started`` until the host stops."""

    def __init__(self, host: PluginHost, options: Options) -> None:
        self.host = host
        self.options = options
        self.loop = asyncio.get_running_loop()
        outlet = Outlet(self.loop)
        self.log_streams = {
            LEVEL_FLOORS[level]: host.open_stream(logs_uri(level), kind="otlp", fold_case=True)
            for level in LEVEL_FLOORS
        }
        self.traces = host.open_stream(TRACES_URI, kind="otlp")
        self.metrics = host.open_stream(METRICS_URI, kind="otlp")
        host.advertise(
            "telemetry", {"logs": LOGS_TEMPLATE, "traces": TRACES_URI, "metrics": METRICS_URI}
        )
        resource = Resource.create(
            {
                "service.name": "ahp",
                "service.version": _version(),
                "service.instance.id": str(uuid.uuid4()),
            }
        )
        batch_ms = options.batch_seconds * 1000
        endpoint = options.endpoint.rstrip("/") if options.endpoint else None

        self.tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(
                ChannelSpanExporter(self.traces, outlet), schedule_delay_millis=batch_ms
            )
        )
        self.logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(
                ChannelLogExporter(self.log_streams, outlet), schedule_delay_millis=batch_ms
            )
        )
        readers: list[MetricReader] = [
            PeriodicExportingMetricReader(
                ChannelMetricExporter(self.metrics, outlet),
                export_interval_millis=options.metrics_seconds * 1000,
            )
        ]
        if endpoint is not None:
            self._to_collector(endpoint, readers, batch_ms)
        self.meter_provider = MeterProvider(
            resource=resource, metric_readers=readers, shutdown_on_exit=False
        )
        self.tracer = self.tracer_provider.get_tracer(SCOPE, _version())
        self._instruments()
        self.turns: OrderedDict[tuple[str, str], _Turn] = OrderedDict()
        self._measured: tuple[float, HostMeasures | None] = (0.0, None)
        self._measure_lock = threading.Lock()
        self._last_rate: tuple[float, int] | None = None
        self.handler = LogBridge(self)
        logging.getLogger().addHandler(self.handler)
        host.on_request(self.request_started)
        host.on_change(self.turn_changed, types=TURN_TYPES)
        host.at_stop(self.stop)

    def _to_collector(self, endpoint: str, readers: list[MetricReader], batch_ms: float) -> None:
        """The standard OTLP/HTTP exporters, beside the channels."""
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"), schedule_delay_millis=batch_ms
            )
        )
        self.logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(
                OTLPLogExporter(endpoint=f"{endpoint}/v1/logs"), schedule_delay_millis=batch_ms
            )
        )
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"),
                export_interval_millis=self.options.metrics_seconds * 1000,
            )
        )

    # -- who wants what ----------------------------------------------------------------
    @property
    def collector(self) -> bool:
        return self.options.endpoint is not None

    def tracing(self) -> bool:
        return self.collector or self.traces.watched

    def log_floor(self) -> int | None:
        """The lowest severity anyone wants now, or None when nobody wants logs."""
        if self.collector:
            return 1
        for floor, stream in self.log_streams.items():  # lowest first
            if stream.watched:
                return floor
        return None

    def measuring(self) -> bool:
        return self.collector or self.metrics.watched

    # -- spans per request -------------------------------------------------------------
    def request_started(self, client_id: str | None, method: str) -> Any:
        if not self.tracing():
            return None
        span = self.tracer.start_span(
            method,
            kind=SpanKind.SERVER,
            attributes={
                "rpc.system": "jsonrpc",
                "rpc.method": method,
                "ahp.client.id": client_id or "",
            },
        )

        def done(error: BaseException | None) -> None:
            if isinstance(error, ProtocolError):
                span.set_attribute("rpc.jsonrpc.error_code", error.code)
                span.set_status(Status(StatusCode.ERROR, redact(error.message)))
            elif error is not None and isinstance(error, Exception):
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.end()

        return done

    # -- spans per turn, and the turn metrics ----------------------------------------------
    def turn_starting(self, start: TurnStart) -> None:
        """The lifecycle's word on a turn about to go to its agent: who runs it."""
        turn = self.turns.get((start.chat, start.turn.turn_id))
        if turn is None:
            return
        turn.provider = start.provider
        if turn.span is not None:
            turn.span.set_attribute("ahp.provider", start.provider)
            turn.span.set_attribute("ahp.session", start.session)

    def turn_changed(self, chat: str, action: Mapping[str, Any]) -> None:
        kind = action.get("type")
        turn_id = action.get("turnId")
        if not isinstance(turn_id, str):
            return
        key = (chat, turn_id)
        if kind == "chat/turnStarted":
            self._turn_started(key)
            return
        turn = self.turns.get(key)
        if turn is None:
            return
        if kind == "chat/toolCallStart" and turn.span is not None:
            call = str(action.get("toolCallId"))
            context = trace.set_span_in_context(turn.span)
            turn.tools[call] = self.tracer.start_span(
                f"tool {action.get('toolName')}",
                context=context,
                attributes={
                    "gen_ai.tool.name": str(action.get("toolName")),
                    "gen_ai.tool.call.id": call,
                },
            )
        elif kind == "chat/toolCallComplete":
            span = turn.tools.pop(str(action.get("toolCallId")), None)
            if span is not None:
                result = action.get("result") or {}
                if result.get("success") is False:
                    span.set_status(Status(StatusCode.ERROR))
                span.end()
        elif kind == "chat/usage" and turn.span is not None:
            usage = action.get("usage") or {}
            for key_name, attribute in (
                ("inputTokens", "gen_ai.usage.input_tokens"),
                ("outputTokens", "gen_ai.usage.output_tokens"),
                ("cacheReadTokens", "gen_ai.usage.cache_read_tokens"),
            ):
                if isinstance(usage.get(key_name), (int, float)):
                    turn.span.set_attribute(attribute, int(usage[key_name]))
            if isinstance(usage.get("model"), str):
                turn.span.set_attribute("gen_ai.response.model", usage["model"])
        elif kind in OUTCOMES:
            self._turn_ended(key, OUTCOMES[kind])

    def _turn_started(self, key: tuple[str, str]) -> None:
        span = None
        if self.tracing():
            span = self.tracer.start_span(
                "turn", attributes={"ahp.chat": key[0], "ahp.turn.id": key[1]}
            )
        self.turns[key] = _Turn(time.monotonic(), span)
        while len(self.turns) > MAX_TURNS:
            _, oldest = self.turns.popitem(last=False)
            self._end_spans(oldest, "abandoned")

    def _turn_ended(self, key: tuple[str, str], outcome: str) -> None:
        turn = self.turns.pop(key, None)
        if turn is None:
            return
        attributes = {"ahp.turn.outcome": outcome}
        if turn.provider is not None:
            attributes["ahp.provider"] = turn.provider
        self.turn_count.add(1, attributes)
        self.turn_latency.record(time.monotonic() - turn.started, attributes)
        self._end_spans(turn, outcome)

    @staticmethod
    def _end_spans(turn: _Turn, outcome: str) -> None:
        for span in turn.tools.values():
            span.end()
        if turn.span is not None:
            turn.span.set_attribute("ahp.turn.outcome", outcome)
            if outcome == "error":
                turn.span.set_status(Status(StatusCode.ERROR))
            turn.span.end()

    # -- metrics ----------------------------------------------------------------------------
    def _instruments(self) -> None:
        meter = self.meter_provider.get_meter(SCOPE, _version())
        self.turn_count = meter.create_counter(
            "ahp.turns", unit="{turn}", description="Turns ended since the host started."
        )
        self.turn_latency = meter.create_histogram(
            "ahp.turn.duration", unit="s", description="From a turn's start to its end."
        )
        self.session_count = meter.create_counter(
            "ahp.sessions", unit="{session}", description="Sessions made since the host started."
        )
        meter.create_observable_counter(
            "ahp.connections",
            [self._observe("connections_made")],
            unit="{connection}",
            description="Connections served since the host started.",
        )
        meter.create_observable_up_down_counter(
            "ahp.connections.open",
            [self._observe("connections")],
            unit="{connection}",
            description="Connections open now.",
        )
        meter.create_observable_up_down_counter(
            "ahp.sessions.open",
            [self._observe("sessions")],
            unit="{session}",
            description="Sessions open on the host now.",
        )
        meter.create_observable_counter(
            "ahp.actions",
            [self._observe("actions")],
            unit="{action}",
            description="Changes of state applied since the host started.",
        )
        meter.create_observable_gauge(
            "ahp.actions.rate",
            [self._actions_rate],
            unit="{action}/s",
            description="Changes of state per second since the last collection.",
        )
        meter.create_observable_gauge(
            "ahp.replay.bytes",
            [self._observe("replay_bytes")],
            unit="By",
            description="Bytes the replay buffer holds.",
        )
        meter.create_observable_gauge(
            "ahp.client.queue.bytes",
            [self._client_queues],
            unit="By",
            description="Bytes each connection has yet to take.",
        )

    def _measures(self) -> HostMeasures | None:
        """The host's measures, read on the event loop; one reading serves a whole
        collection. None when nobody wants metrics or the loop does not answer."""
        if not self.measuring():
            return None
        with self._measure_lock:
            at, measures = self._measured
            if measures is not None and time.monotonic() - at < 0.5:
                return measures
            future: concurrent.futures.Future[HostMeasures] = concurrent.futures.Future()

            def read() -> None:
                try:
                    future.set_result(self.host.measures())
                except Exception as exc:
                    future.set_exception(exc)

            try:
                self.loop.call_soon_threadsafe(read)
                measures = future.result(MEASURE_TIMEOUT)
            except (RuntimeError, concurrent.futures.TimeoutError):
                return None
            self._measured = (time.monotonic(), measures)
            return measures

    def _observe(self, name: str) -> Any:
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

    def session_created(self) -> None:
        self.session_count.add(1)

    # -- the end ------------------------------------------------------------------------------
    async def stop(self) -> None:
        """Flush what is pending and stop the SDK's threads (off the event loop)."""
        import anyio

        logging.getLogger().removeHandler(self.handler)
        for turn in self.turns.values():
            self._end_spans(turn, "abandoned")
        self.turns.clear()

        def shutdown() -> None:
            for provider in (self.tracer_provider, self.logger_provider, self.meter_provider):
                try:
                    provider.shutdown()
                except Exception:
                    log.exception("telemetry did not stop cleanly")

        with anyio.move_on_after(15):
            await anyio.to_thread.run_sync(shutdown, abandon_on_cancel=True)
        for stream in (*self.log_streams.values(), self.traces, self.metrics):
            stream.close()


class LogBridge(logging.Handler):
    """The host's log records, as OpenTelemetry log records, while anyone wants them."""

    def __init__(self, telemetry: Telemetry) -> None:
        super().__init__()
        self.telemetry = telemetry

    def handle(self, record: logging.LogRecord) -> bool:
        # Before the handler's lock and filters: nobody watching costs this test alone.
        floor = self.telemetry.log_floor()
        if floor is None or severity_of(record.levelno) < floor:
            return False
        if record.name.startswith(IGNORED_LOGGERS):
            return False
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            severity = severity_of(record.levelno)
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
            self.telemetry.logger_provider.get_logger(record.name).emit(otel)
        except Exception:
            self.handleError(record)


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # a bad format string is the logger's bug; show it as it is
        return f"{record.msg!r} % {record.args!r}"


def _version() -> str:
    try:
        return importlib.metadata.version("ahpcore")
    except importlib.metadata.PackageNotFoundError:
        return "0"
