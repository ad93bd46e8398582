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
the host, and the SDK itself (``ahp_otlp.sdk``) is not even imported until the
first subscriber or a collector wants it. Its processors run on threads of
their own, so encoding a batch never holds the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.metadata
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ahp_otlp import gates
from ahpcore.api import HostMeasures, PluginHost, redact
from ahpcore.lifecycle import TurnStart
from ahpcore.protocol import ProtocolError

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ahp_otlp.sdk import Pipeline

log = logging.getLogger(__name__)

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
#: Turn durations kept for the histogram until the SDK is loaded.
MAX_PENDING_DURATIONS = 10_000
#: Log records kept while the SDK loads for a first subscriber.
MAX_EARLY_RECORDS = 1000
#: How long an SDK thread waits for the event loop to read the host's measures.
MEASURE_TIMEOUT = 2.0
#: The root config key VS Code's window pushes its telemetry level in.
LEVEL_KEY = "telemetryLevel"
#: Methods after which a telemetry channel may have its first subscriber.
SUBSCRIBING = frozenset({"subscribe", "initialize", "reconnect"})

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
        self.log_streams = {
            LEVEL_FLOORS[level]: host.open_stream(logs_uri(level), kind="otlp", fold_case=True)
            for level in LEVEL_FLOORS
        }
        self.traces = host.open_stream(TRACES_URI, kind="otlp")
        self.metrics = host.open_stream(METRICS_URI, kind="otlp")
        host.advertise(
            "telemetry", {"logs": LOGS_TEMPLATE, "traces": TRACES_URI, "metrics": METRICS_URI}
        )
        #: The SDK's side, once loaded (``ahp_otlp.sdk``).
        self.pipeline: Pipeline | None = None
        self._loading = False
        self._stopped = False
        self.turns: OrderedDict[tuple[str, str], _Turn] = OrderedDict()
        #: Counted here, not in the SDK, so they hold from the host's start.
        self.turns_ended: dict[tuple[tuple[str, str], ...], int] = {}
        self.sessions_made = 0
        self._durations: deque[tuple[float, dict[str, str]]] = deque(maxlen=MAX_PENDING_DURATIONS)
        self._measured: tuple[float, HostMeasures | None] = (0.0, None)
        self._measure_lock = threading.Lock()
        #: The window's root config ``telemetryLevel`` (declared by ahp-vscode): what an
        #: outside collector may be sent (``ahp_otlp.gates``). Read on the SDK's threads.
        self.level: Any = host.root_config(LEVEL_KEY)
        self.handler = LogBridge(self)
        logging.getLogger().addHandler(self.handler)
        host.on_request(self.request_started)
        host.on_change(self.turn_changed, types=TURN_TYPES)
        host.on_change(self._config_changed, types=("root/configChanged",))
        host.at_stop(self.stop)
        if self.collector:
            self.load()

    # -- loading the SDK ----------------------------------------------------------------
    def load(self) -> None:
        """Load the SDK on a thread of its own; from then on, telemetry is made."""
        if self.pipeline is not None or self._loading or self._stopped:
            return
        self._loading = True
        threading.Thread(target=self._load, name="ahp-otlp load", daemon=True).start()

    def _load(self) -> None:
        try:
            from ahp_otlp.sdk import Pipeline

            pipeline = Pipeline(
                self.loop,
                version=_version(),
                log_streams=self.log_streams,
                traces=self.traces,
                metrics=self.metrics,
                batch_seconds=self.options.batch_seconds,
                metrics_seconds=self.options.metrics_seconds,
                endpoint=self.options.endpoint,
                measures=self._measures,
                turns_ended=lambda: dict(self.turns_ended),
                sessions_made=lambda: self.sessions_made,
                level=lambda: self.level,
            )
        except Exception:
            log.exception("could not start telemetry")
            self._loading = False
            return
        try:
            self.loop.call_soon_threadsafe(self._loaded, pipeline)
        except RuntimeError:  # the host is gone meanwhile
            pipeline.shutdown()

    def _loaded(self, pipeline: Pipeline) -> None:
        if self._stopped:
            threading.Thread(target=pipeline.shutdown, daemon=True).start()
            return
        self.pipeline = pipeline
        self._loading = False
        while self.handler.early:
            record, severity = self.handler.early.popleft()
            pipeline.emit_log(record, severity)
        while self._durations:
            seconds, attributes = self._durations.popleft()
            pipeline.turn_latency.record(seconds, attributes)

    def _wanted(self) -> bool:
        return self.collector or any(
            stream.watched for stream in (self.traces, self.metrics, *self.log_streams.values())
        )

    # -- who wants what ----------------------------------------------------------------
    @property
    def collector(self) -> bool:
        return self.options.endpoint is not None

    def _config_changed(self, channel: str, action: Mapping[str, Any]) -> None:
        self.level = self.host.root_config(LEVEL_KEY)

    def _usage_to_collector(self) -> bool:
        return self.collector and gates.usage_allowed(self.level)

    def tracing(self) -> Pipeline | None:
        pipeline = self.pipeline
        if pipeline is not None and (self._usage_to_collector() or self.traces.watched):
            return pipeline
        return None

    def log_floor(self) -> int | None:
        """The lowest severity anyone wants now, or None when nobody wants logs."""
        if self.pipeline is None and not self._loading:
            return None
        floors = []
        if self.collector and gates.log_floor(self.level) is not None:
            floors.append(gates.log_floor(self.level) or 1)
        for floor, stream in self.log_streams.items():  # lowest first
            if stream.watched:
                floors.append(floor)
                break
        return min(floors) if floors else None

    def measuring(self) -> bool:
        return self._usage_to_collector() or self.metrics.watched

    # -- spans per request -------------------------------------------------------------
    def request_started(self, client_id: str | None, method: str) -> Any:
        pipeline = self.tracing()
        if pipeline is None:
            if method in SUBSCRIBING and self.pipeline is None:
                return self._maybe_load
            return None
        span = pipeline.request_span(client_id, method)

        def done(error: BaseException | None) -> None:
            if isinstance(error, ProtocolError):
                span.set_attribute("rpc.jsonrpc.error_code", error.code)
                pipeline.fail(span, redact(error.message))
            elif isinstance(error, Exception):
                pipeline.fail(span, type(error).__name__)
            span.end()

        return done

    def _maybe_load(self, error: BaseException | None) -> None:
        """After a subscribe (or initialize, reconnect): load the SDK if it now has a
        subscriber."""
        if self._wanted():
            self.load()

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
        pipeline = self.pipeline
        if kind == "chat/toolCallStart" and turn.span is not None and pipeline is not None:
            call = str(action.get("toolCallId"))
            turn.tools[call] = pipeline.tool_span(turn.span, str(action.get("toolName")), call)
        elif kind == "chat/toolCallComplete":
            span = turn.tools.pop(str(action.get("toolCallId")), None)
            if span is not None and pipeline is not None:
                result = action.get("result") or {}
                if result.get("success") is False:
                    pipeline.fail(span)
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
        pipeline = self.tracing()
        span = pipeline.turn_span(*key) if pipeline is not None else None
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
        counted = tuple(sorted(attributes.items()))
        self.turns_ended[counted] = self.turns_ended.get(counted, 0) + 1
        seconds = time.monotonic() - turn.started
        if self.pipeline is not None:
            self.pipeline.turn_latency.record(seconds, attributes)
        else:
            self._durations.append((seconds, attributes))
        self._end_spans(turn, outcome)

    def _end_spans(self, turn: _Turn, outcome: str) -> None:
        for span in turn.tools.values():
            span.end()
        if turn.span is not None:
            turn.span.set_attribute("ahp.turn.outcome", outcome)
            if outcome == "error" and self.pipeline is not None:
                self.pipeline.fail(turn.span)
            turn.span.end()

    # -- metrics ----------------------------------------------------------------------------
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

    def session_created(self) -> None:
        self.sessions_made += 1

    # -- the end ------------------------------------------------------------------------------
    async def stop(self) -> None:
        """Flush what is pending and stop the SDK's threads (off the event loop)."""
        import anyio

        self._stopped = True
        logging.getLogger().removeHandler(self.handler)
        for turn in self.turns.values():
            self._end_spans(turn, "abandoned")
        self.turns.clear()
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is not None:
            with anyio.move_on_after(15):
                await anyio.to_thread.run_sync(pipeline.shutdown, abandon_on_cancel=True)
        for stream in (*self.log_streams.values(), self.traces, self.metrics):
            stream.close()


class LogBridge(logging.Handler):
    """The host's log records, as OpenTelemetry log records, while anyone wants them."""

    def __init__(self, telemetry: Telemetry) -> None:
        super().__init__()
        self.telemetry = telemetry
        #: Records logged while the SDK loads for a first subscriber.
        self.early: deque[tuple[logging.LogRecord, int]] = deque(maxlen=MAX_EARLY_RECORDS)

    def handle(self, record: logging.LogRecord) -> bool:
        # Before the handler's lock and filters: nobody watching costs this test alone.
        floor = self.telemetry.log_floor()
        if floor is None:
            return False
        severity = severity_of(record.levelno)
        if severity < floor or record.name.startswith(IGNORED_LOGGERS):
            return False
        pipeline = self.telemetry.pipeline
        if pipeline is None:
            # The SDK is loading for a first subscriber: kept until it runs.
            self.early.append((record, severity))
            return True
        try:
            pipeline.emit_log(record, severity)
        except Exception:
            self.handleError(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        self.handle(record)


def _version() -> str:
    try:
        return importlib.metadata.version("ahpcore")
    except importlib.metadata.PackageNotFoundError:
        return "0"
