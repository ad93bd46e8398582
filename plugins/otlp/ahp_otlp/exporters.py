"""SDK exporters whose destination is an ``ahp-otlp:`` channel.

The SDK's batch processors and metric reader call ``export`` on threads of
their own: the batch is turned into OTLP/JSON there, off the event loop, and
only the finished notification is handed to the loop, which sends it to the
channel's subscribers. A channel nobody watches costs a truth test per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ahp_otlp.otlp_json import logs_json, metrics_json, spans_json
from ahpcore.api import Stream

log = logging.getLogger(__name__)


class Outlet:
    """Hands a notification from an exporter's thread to the event loop that sends it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def send(self, stream: Stream, method: str, payload: dict[str, Any]) -> None:
        if self.loop.is_closed():
            return
        # The loop may close meanwhile (RuntimeError): then the host is gone.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(stream.notify, method, {"payload": payload})


class ChannelSpanExporter(SpanExporter):
    """Each batch of spans as one ``otlp/exportTraces`` on the traces channel."""

    def __init__(self, stream: Stream, outlet: Outlet) -> None:
        self.stream = stream
        self.outlet = outlet

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if spans and self.stream.watched:
            self.outlet.send(self.stream, "otlp/exportTraces", spans_json(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class ChannelLogExporter(LogRecordExporter):
    """Each batch of log records as ``otlp/exportLogs`` on every level channel watched,
    holding the records at or above that channel's level."""

    def __init__(self, streams: Mapping[int, Stream], outlet: Outlet) -> None:
        #: The lowest severity number of each level's band -> that level's channel.
        self.streams = streams
        self.outlet = outlet

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        for floor, stream in self.streams.items():
            if not stream.watched:
                continue
            kept = [
                record
                for record in batch
                if (record.log_record.severity_number or 0) and _severity(record) >= floor
            ]
            if kept:
                self.outlet.send(stream, "otlp/exportLogs", logs_json(kept))
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        return None


def _severity(record: ReadableLogRecord) -> int:
    number = record.log_record.severity_number
    return int(number.value) if number is not None else 0


class ChannelMetricExporter(MetricExporter):
    """Each collection as one ``otlp/exportMetrics`` on the metrics channel."""

    def __init__(self, stream: Stream, outlet: Outlet) -> None:
        super().__init__()
        self.stream = stream
        self.outlet = outlet

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self.stream.watched and metrics_data.resource_metrics:
            self.outlet.send(self.stream, "otlp/exportMetrics", metrics_json(metrics_data))
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None
