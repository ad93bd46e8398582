"""``ahp serve --otlp-endpoint``: a real OTLP/HTTP exporter, received on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from websockets.sync.client import connect

MESSAGES = {
    "/v1/traces": ExportTraceServiceRequest,
    "/v1/logs": ExportLogsServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
}


class Collector(ThreadingHTTPServer):
    """The smallest OTLP/HTTP receiver: each protobuf body parsed by its message."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Receive)
        self.received: dict[str, list[Any]] = {path: [] for path in MESSAGES}
        self.content_types: set[str] = set()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Receive(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        message = MESSAGES.get(self.path)
        if message is None:
            self.send_response(404)
            self.end_headers()
            return
        parsed = message.FromString(body)
        with self.server.lock:
            self.server.received[self.path].append(parsed)
            self.server.content_types.add(self.headers.get("Content-Type", ""))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _request(ws: Any, ident: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
    while True:
        frame = json.loads(ws.recv(timeout=10))
        if frame.get("id") == ident:
            return frame


def test_serve_with_an_otlp_endpoint_sends_every_signal_to_the_collector(
    collector: Collector, tmp_path: Path
) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AHP_")}
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from ahpcore.cli import main; main()",
            "serve",
            "--no-token",
            "--port",
            str(port),
            "--state-dir",
            str(tmp_path / "state"),
            "--plugins",
            "scripted,otlp",
            "--sessions",
            "memory",
            "--otlp-endpoint",
            collector.url,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                ws = connect(f"ws://127.0.0.1:{port}/", open_timeout=2)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
                assert time.monotonic() < deadline, "ahp serve did not listen"
                time.sleep(0.1)
        with ws:
            answer = _request(
                ws,
                1,
                "initialize",
                {
                    "channel": "ahp-root://",
                    "protocolVersions": ["1.0.0"],
                    "clientId": "collector-test",
                },
            )
            assert "telemetry" in answer["result"]
            # The SDK loads on a thread of its own at start; pings until it runs.
            # Metrics go every 5 s, spans and log records every second.
            deadline = time.monotonic() + 20
            ident = 2
            while time.monotonic() < deadline:
                _request(ws, ident, "ping", {"channel": "ahp-root://"})
                ident += 1
                with collector.lock:
                    if all(collector.received.values()):
                        break
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(20)
    with collector.lock:
        received = {path: list(items) for path, items in collector.received.items()}
    assert all(received.values()), {path: len(items) for path, items in received.items()}
    assert collector.content_types == {"application/x-protobuf"}
    spans = [
        span
        for request in received["/v1/traces"]
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert "ping" in {span.name for span in spans}
    bodies = [
        record.body.string_value
        for request in received["/v1/logs"]
        for resource in request.resource_logs
        for scope in resource.scope_logs
        for record in scope.log_records
    ]
    assert any("connected" in body for body in bodies), bodies
    names = {
        metric.name
        for request in received["/v1/metrics"]
        for resource in request.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert {"ahp.connections", "ahp.actions", "ahp.replay.bytes"} <= names
    service = {
        attribute.key: attribute.value.string_value
        for attribute in received["/v1/metrics"][0].resource_metrics[0].resource.attributes
    }
    assert service["service.name"] == "ahp"
