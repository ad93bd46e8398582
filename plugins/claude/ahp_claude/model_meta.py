"""The model a session is on, kept in the session state's ``_meta`` as ``ahp.model``.

SessionState has no field for it, and a turn's usage says only what that turn
ran on. It is the model id the CLI sends to the API (``claude-sonnet-…``), not
the alias a person picks (``sonnet``): the CLI lists what each alias resolves
to, and says the model it runs on in each turn's ``init`` message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ahpcore.ports.backend import SessionReporter

if TYPE_CHECKING:  # the backend reads KEY at startup, before the SDK is wanted
    from claude_agent_sdk import ClaudeSDKClient

log = logging.getLogger(__name__)

KEY = "ahp.model"


def resolve(name: str | None, models: Sequence[Mapping[str, Any]]) -> str | None:
    """The model id the CLI runs for ``name`` (None: its default), when it can be told."""
    wanted = name or "default"
    for model in models:
        if model.get("value") == wanted and model.get("resolvedModel"):
            return str(model["resolvedModel"])
    return name  # a full model id, or an alias this CLI did not list


class ModelMeta:
    """Says the session's model whenever it may have changed, and once per change."""

    def __init__(self, report: SessionReporter | None, models: Sequence[Mapping[str, Any]]):
        self.report = report
        self.models = list(models)
        self.model: str | None = None

    async def connected(self, client: ClaudeSDKClient, name: str | None) -> None:
        """A CLI started on the model ``name``: learn what its aliases run, then say it."""
        try:
            info = await client.get_server_info()
        except Exception:  # an answer it never gave: the first turn's init says the model
            log.debug("reading the CLI's server info failed", exc_info=True)
            info = None
        models = (info or {}).get("models")
        if models:
            self.models = [m for m in models if isinstance(m, Mapping)]
        self.chosen(name)

    def chosen(self, name: str | None) -> None:
        """A person picked a model (or the default)."""
        resolved = resolve(name, self.models)
        if resolved is not None and resolved != "default":
            self.running(resolved)

    def running(self, model: str | None) -> None:
        """The CLI said which model it runs on."""
        if not model or model == self.model:
            return
        self.model = model
        if self.report is not None:
            self.report.meta({KEY: model})

    async def ask(self, client: ClaudeSDKClient) -> None:
        """Ask the CLI which model it runs on now (after a local command such as ``/model``).

        Its answer to a ``/model`` is the model's display name, so the id is asked for.
        """
        try:
            usage = await client.get_context_usage()
        except Exception:  # the CLI may be gone: the next turn's init says it anyway
            log.debug("asking the CLI for its model failed", exc_info=True)
            return
        self.running(str(usage.get("model") or "") or None)
