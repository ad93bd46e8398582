"""ahp-otlp: the host's logs, traces and metrics as OTLP, on ``ahp-otlp:`` channels.

Installed, it advertises ``telemetry`` on ``initialize``; a client that
subscribes to ``ahp-otlp://logs/{level}``, ``ahp-otlp://traces`` or
``ahp-otlp://metrics`` is sent ``otlp/exportLogs``, ``otlp/exportTraces`` and
``otlp/exportMetrics``. With ``ahp serve --otlp-endpoint URL`` (or
``AHP_OTLP_ENDPOINT`` for a host started otherwise) the same goes to that
OTLP/HTTP collector too.
"""

from __future__ import annotations

import os

from ahp_otlp.telemetry import Options, Telemetry
from ahpcore import hookimpl
from ahpcore.api import PluginHost
from ahpcore.lifecycle import TurnStart

#: The collector's base URL (``http://127.0.0.1:4318``); ``ahp serve --otlp-endpoint`` sets it.
ENV_ENDPOINT = "AHP_OTLP_ENDPOINT"


class OtlpPlugin:
    """The plugin's hooks, for every host started in this process."""

    def __init__(self, options: Options | None = None) -> None:
        #: None: read from the environment when a host starts.
        self.options = options
        self.running: list[Telemetry] = []

    def _options(self, host: PluginHost) -> Options:
        if self.options is not None:
            return self.options
        endpoint = host.settings.otlp_endpoint or os.environ.get(ENV_ENDPOINT, "").strip()
        return Options(endpoint=endpoint or None)

    @hookimpl
    def ahp_host_started(self, host: PluginHost) -> None:
        telemetry = Telemetry(host, self._options(host))
        self.running.append(telemetry)

        def forget() -> None:
            if telemetry in self.running:
                self.running.remove(telemetry)

        host.at_stop(forget)

    def _of_session(self, session: str) -> Telemetry | None:
        for telemetry in self.running:
            if telemetry.host.is_open_session(session):
                return telemetry
        return None

    @hookimpl
    def ahp_turn_starting(self, start: TurnStart) -> None:
        telemetry = self._of_session(start.session)
        if telemetry is not None:
            telemetry.turn_starting(start)

    @hookimpl
    def ahp_session_created(self, session: str) -> None:
        telemetry = self._of_session(session)
        if telemetry is not None:
            telemetry.session_created()


#: What the ``ahp`` entry point registers.
PLUGIN = OtlpPlugin()
ahp_host_started = PLUGIN.ahp_host_started
ahp_turn_starting = PLUGIN.ahp_turn_starting
ahp_session_created = PLUGIN.ahp_session_created
