"""What an outside collector may be sent, by VS Code's ``telemetryLevel``.

The window pushes root config ``telemetryLevel`` (``all``, ``error``, ``crash``,
``off``: the most restrictive of its users' settings). An outside collector
(``--otlp-endpoint``) is sent what that level allows: ``all`` everything;
``error`` log records of severity ERROR and above, no spans, no metrics;
``crash`` only FATAL records; ``off`` nothing. A client subscribed to an
``ahp-otlp:`` channel asked for what it reads on its own connection, and keeps
getting it whatever the level.

The level is read at each export, on the SDK's threads: a push takes effect for
the next batch, those already made included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: Each level -> the lowest log severity number the collector is sent; None: none.
LOG_FLOORS: dict[str, int | None] = {"all": 1, "error": 17, "crash": 21, "off": None}


def log_floor(level: Any) -> int | None:
    """The lowest severity a collector gets at ``level`` (unset or unknown: ``all``)."""
    return LOG_FLOORS.get(level, 1) if isinstance(level, str) else 1


def usage_allowed(level: Any) -> bool:
    """Whether spans and metrics (what the host does, not what went wrong) may go out."""
    return log_floor(level) == 1


def collector_exporters(endpoint: str, level: Callable[[], Any]) -> tuple[Any, Any, Any]:
    """The OTLP/HTTP exporters for ``endpoint``, each holding back what ``level()`` forbids:
    (spans, log records, metrics)."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs.export import LogRecordExportResult
    from opentelemetry.sdk.metrics.export import MetricExportResult
    from opentelemetry.sdk.trace.export import SpanExportResult

    class Spans(OTLPSpanExporter):
        def export(self, spans: Sequence[Any]) -> Any:
            if not usage_allowed(level()):
                return SpanExportResult.SUCCESS  # held back, not failed: nothing retries
            return super().export(spans)

    class Logs(OTLPLogExporter):
        def export(self, batch: Sequence[Any]) -> Any:
            floor = log_floor(level())
            kept = [r for r in batch if floor is not None and _severity(r) >= floor]
            if not kept:
                return LogRecordExportResult.SUCCESS
            return super().export(kept)

    class Metrics(OTLPMetricExporter):
        def export(
            self, metrics_data: Any, timeout_millis: float | None = 10_000, **kwargs: Any
        ) -> Any:
            if not usage_allowed(level()):
                return MetricExportResult.SUCCESS
            return super().export(metrics_data, timeout_millis, **kwargs)

    return (
        Spans(endpoint=f"{endpoint}/v1/traces"),
        Logs(endpoint=f"{endpoint}/v1/logs"),
        Metrics(endpoint=f"{endpoint}/v1/metrics"),
    )


def _severity(record: Any) -> int:
    number = record.log_record.severity_number
    return int(number.value) if number is not None else 0
