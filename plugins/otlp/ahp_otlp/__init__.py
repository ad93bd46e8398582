"""OpenTelemetry for an ahp host: logs, traces and metrics on ``ahp-otlp:`` channels."""
