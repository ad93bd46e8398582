"""The live agent behind one chat: one pi process in RPC mode, one pi session file.

A turn sends ``prompt`` and lasts until pi says ``agent_end``; what pi streams
meanwhile goes to the turn's ``TurnView``. A turn the host cancels sends
``abort`` and waits a while for ``agent_end``, so the next prompt starts clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio

from ahp_pi.records import Link, Records, TurnNote
from ahp_pi.rpc import Event, PiFailed, PiProcess
from ahp_pi.view import TurnView
from ahpcore.ports.backend import AgentRefused, ChatStart, SessionReporter, TurnInput, TurnReporter

log = logging.getLogger(__name__)

#: How long a cancelled turn waits for pi to say the run ended.
DRAIN_SECONDS = 10.0
MODEL_META = "ahp.model"
#: pi's own dialogs (from its extensions) are not asked of anybody over this host yet.
DIALOGS = {"select", "confirm", "input", "editor"}


class Owner(Protocol):
    """What a chat needs of the backend that started it (``PiBackend``)."""

    command: list[str]
    records: Records
    live: dict[str, PiChat]

    def learn_model(self, model: Mapping[str, Any] | None) -> None: ...


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def model_key(model: Mapping[str, Any] | None) -> str | None:
    """A pi model as one id: ``provider/id``."""
    if not isinstance(model, Mapping) or not model.get("id"):
        return None
    return f"{model.get('provider')}/{model['id']}" if model.get("provider") else str(model["id"])


def prompt_text(message: Mapping[str, Any]) -> str:
    """A protocol ``Message`` as pi's prompt: its text, then what it attaches, as text."""
    parts = [str(message.get("text", ""))]
    for attachment in message.get("attachments") or ():
        if attachment.get("type") == "resource" and attachment.get("uri"):
            parts.append(f"[{attachment.get('label') or attachment['uri']}]({attachment['uri']})")
        elif attachment.get("type") == "simple" and attachment.get("modelRepresentation"):
            parts.append(str(attachment["modelRepresentation"]))
    return "\n\n".join(p for p in parts if p)


class PiChat:
    """One chat's pi session in its own pi process."""

    def __init__(self, backend: Owner, start: ChatStart, cwd: str, link: Link | None) -> None:
        self.backend = backend
        self.start = start
        self.cwd = cwd
        self.link = link
        self.session: SessionReporter | None = start.report
        self.view: TurnView | None = None
        self.note: TurnNote | None = None
        self.ran = asyncio.Event()
        self.model: str | None = None
        self.closed = False
        args = ["--session", link.file] if link is not None else []
        self.process = PiProcess(backend.command, args=args, cwd=cwd, on_event=self._event)

    # -- opening ------------------------------------------------------------------------
    async def open(self) -> None:
        """Start pi on a new session, or on the chat's session file when it is reopened."""
        await self.process.start()
        state = await self.process.request({"type": "get_state"})
        state = state if isinstance(state, Mapping) else {}
        self._took_model(state.get("model"))
        if self.link is None:
            if not state.get("sessionFile") or not state.get("sessionId"):
                raise PiFailed("pi runs without a session file, so this chat could not be kept")
            self.link = Link(
                backend_id=self.start.backend_id,
                session_id=self.start.session_id,
                file=str(state["sessionFile"]),
                pi_id=str(state["sessionId"]),
            )
            self.backend.records.links[self.start.backend_id] = self.link
            await self.backend.records.save()

    def _took_model(self, model: Any) -> None:
        key = model_key(model)
        if key is None or key == self.model:
            return
        self.model = key
        self.backend.learn_model(model)
        if self.session is not None:
            self.session.meta({MODEL_META: key})

    # -- what pi says ------------------------------------------------------------------
    def _event(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "extension_ui_request":
            self._dialog(event)
            return
        if kind == "agent_end":
            self.ran.set()
        if kind == "message_end":
            message = event.get("message") or {}
            if message.get("role") == "assistant" and message.get("provider"):
                self._took_model({"provider": message["provider"], "id": message.get("model")})
        view = self.view
        if view is not None:
            view.event(event)

    def _dialog(self, request: Event) -> None:
        method = request.get("method")
        if method in DIALOGS:
            # Nobody to ask yet: pi's extension hears the dialog was dismissed.
            self.process.send(
                {"type": "extension_ui_response", "id": request.get("id"), "cancelled": True}
            )
        elif method == "notify" and self.view is not None and request.get("message"):
            self.view.report.notification(str(request["message"]))

    # -- turns --------------------------------------------------------------------------
    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        link, process = self.link, self.process
        if self.closed or link is None or not process.running:
            raise PiFailed(process.why("pi is not running"))
        note = self.note = TurnNote(turn.turn_id, now_iso())
        link.turns.append(note)
        await self.backend.records.save()
        view = self.view = TurnView(report)
        self.ran.clear()
        began = time.monotonic()
        try:
            await self._pick_model(turn.message)
            await process.request({"type": "prompt", "message": prompt_text(turn.message)})
            try:
                await self._ran()
            except asyncio.CancelledError:
                with anyio.CancelScope(shield=True):
                    await self._abort()
                raise
            view.finish()
            if view.error is not None:
                raise PiFailed(view.error)
            note.state = "complete" if not view.aborted else "cancelled"
        except PiFailed as exc:
            note.state, note.error = "error", str(exc)
            view.finish()
            raise
        finally:
            if self.view is view:
                self.view = None
            self.note = None
            note.duration_ms = int((time.monotonic() - began) * 1000)
            await self.backend.records.save()

    async def _ran(self) -> None:
        """Until pi says the run ended, or pi itself ends."""
        ended = asyncio.ensure_future(self.ran.wait())
        gone = asyncio.ensure_future(self.process.exited.wait())
        try:
            await asyncio.wait({ended, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            gone.cancel()
        if not self.ran.is_set():
            raise PiFailed(self.process.why("pi stopped in the middle of the turn"))

    async def _abort(self) -> None:
        """The host cancelled the turn: tell pi, and give it a while to wind down."""
        view = self.view
        if view is not None:
            view.ended = True
        with contextlib.suppress(PiFailed):
            await self.process.request({"type": "abort"}, seconds=DRAIN_SECONDS)
        with anyio.move_on_after(DRAIN_SECONDS):
            with contextlib.suppress(PiFailed):
                await self._ran()
        if not self.ran.is_set():
            log.info("%s: pi did not end the run in time after abort", self.start.chat_uri)

    async def _pick_model(self, message: Mapping[str, Any]) -> None:
        """A message's model selection (``provider/id``), passed on when it differs."""
        selection = message.get("model")
        if not isinstance(selection, Mapping):
            return
        wanted = str(selection.get("id") or "")
        if not wanted or wanted == self.model or "/" not in wanted:
            return
        provider, model_id = wanted.split("/", 1)
        try:
            model = await self.process.request(
                {"type": "set_model", "provider": provider, "modelId": model_id}
            )
        except PiFailed as exc:
            log.info("%s: staying on %s: %s", self.start.chat_uri, self.model, exc)
            return
        self._took_model(model)

    async def steer(self, message: Mapping[str, Any]) -> bool:
        """A steering message: pi takes it after the tools it is running now."""
        note = self.note
        if note is None or self.closed:
            return False
        try:
            await self.process.request({"type": "steer", "message": prompt_text(message)})
        except PiFailed as exc:
            raise AgentRefused(str(exc)) from None
        note.prompts += 1
        return True

    async def close(self) -> None:
        self.closed = True
        view, self.view = self.view, None
        if view is not None:
            view.ended = True
        if self.backend.live.get(self.start.backend_id) is self:
            del self.backend.live[self.start.backend_id]
        await self.process.close()
