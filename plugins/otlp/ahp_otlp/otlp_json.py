"""OTLP/JSON: the SDK's batches as the OTLP messages, then as JSON values.

The messages are ``opentelemetry-proto``'s, filled by the SDK's own encoders
(``opentelemetry-exporter-otlp-proto-common``), and turned into JSON by
protobuf's ``json_format``. OTLP/JSON departs from protobuf's JSON mapping in
two places, both mended here: trace and span ids are hex strings, not base64,
and enums are integers.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

# protobuf ships no type stubs.
from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import Message  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.metrics.export import MetricsData
from opentelemetry.sdk.trace import ReadableSpan

#: Fields OTLP/JSON spells as lowercase hex where protobuf's mapping writes base64.
HEX_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: (
                base64.b64decode(item).hex()
                if key in HEX_FIELDS and isinstance(item, str)
                else _hex_ids(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


def to_json(message: Message) -> dict[str, Any]:
    """An OTLP message as its OTLP/JSON value."""
    value = json_format.MessageToDict(message, use_integers_for_enums=True)
    result: dict[str, Any] = _hex_ids(value)
    return result


def spans_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` (``{resourceSpans: [...]}``) for ``spans``."""
    return to_json(encode_spans(spans))


def logs_json(records: Sequence[ReadableLogRecord]) -> dict[str, Any]:
    """An ``ExportLogsServiceRequest`` (``{resourceLogs: [...]}``) for ``records``."""
    return to_json(encode_logs(records))


def metrics_json(data: MetricsData) -> dict[str, Any]:
    """An ``ExportMetricsServiceRequest`` (``{resourceMetrics: [...]}``) for ``data``."""
    return to_json(encode_metrics(data))
