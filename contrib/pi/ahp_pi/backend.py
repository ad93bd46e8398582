"""The pi coding agent as one provider: its models, its chats, its session files.

At attach pi is started once and asked for its models (a probe), so the root
lists them; a pi that cannot start is still listed, its error in its
description, and each session asked of it is refused with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ahp_pi.chat import PiChat, model_key
from ahp_pi.command import sessions_dir
from ahp_pi.records import Link, Records
from ahp_pi.rpc import PiFailed, PiProcess
from ahp_pi.sessions import Catalogue, Summary, conversation
from ahp_pi.transcript import Replay
from ahpcore.api import path_of_file_uri, sorted_pausing
from ahpcore.ports.backend import (
    Abilities,
    BackendNotifier,
    CataloguePage,
    CatalogueRow,
    ChatStart,
    TranscriptReader,
)

log = logging.getLogger(__name__)

PROVIDER = "pi"
TITLE = "pi"


class PiBackend:
    """The provider ``pi``: each chat runs in a pi process of its own."""

    provider = PROVIDER
    abilities = Abilities(resume=True, list_sessions=True, delete=True, steering=True)

    def __init__(
        self, command: Sequence[str], state_dir: Path | None, *, probe: bool = True
    ) -> None:
        self.command = list(command)
        self.records = Records(state_dir / "links.json" if state_dir is not None else None)
        self.sessions = Catalogue(sessions_dir())
        self.live: dict[str, PiChat] = {}
        self.notifier: BackendNotifier | None = None
        #: Why the probe could not start pi, if it could not.
        self.error: str | None = None
        self._probe = probe
        self._probing: asyncio.Task[None] | None = None

    # -- the probe ------------------------------------------------------------------------
    def attach(self, notifier: BackendNotifier) -> None:
        self.notifier = notifier
        if self._probe:
            # The host's own tasks are not running yet: a task of the loop's, cancelled at stop.
            self._probing = asyncio.get_running_loop().create_task(self._run_probe())

    async def stop(self) -> None:
        """The host stops: no probe goes on, and every chat's pi ends."""
        probing = self._probing
        if probing is not None and not probing.done():
            probing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await probing
        for chat in list(self.live.values()):
            with contextlib.suppress(Exception):
                await chat.close()

    async def _run_probe(self) -> None:
        process = PiProcess(self.command, args=["--no-session"])
        try:
            try:
                await process.start()
                found = await process.request({"type": "get_available_models"})
                state = await process.request({"type": "get_state"})
                models = found.get("models") if isinstance(found, Mapping) else None
                self.records.learned["models"] = [
                    {"id": key, "name": str(m.get("name") or key)}
                    for m in models or ()
                    if isinstance(m, Mapping) and (key := model_key(m))
                ]
                if isinstance(state, Mapping):
                    self.learn_model(state.get("model"), say=False)
                self.error = None
            except PiFailed as exc:
                self.error = str(exc)
                log.warning("pi: %s", exc)
            if self.notifier is not None:
                self.notifier.agents_changed()
        finally:
            # Even when the host stops mid-probe, pi goes before the probe ends.
            closing = asyncio.ensure_future(process.close())
            try:
                await asyncio.shield(closing)
            except asyncio.CancelledError:
                await asyncio.wait([closing])
                raise

    def learn_model(self, model: Mapping[str, Any] | None, *, say: bool = True) -> None:
        """The model pi runs on: listed first from now on."""
        key = model_key(model)
        if key is None or key == self.records.learned.get("model"):
            return
        self.records.learned["model"] = key
        known = self.records.learned.setdefault("models", [])
        if not any(m.get("id") == key for m in known):
            name = str(model.get("name") or key) if isinstance(model, Mapping) else key
            known.append({"id": key, "name": name})
        if say and self.notifier is not None:
            self.notifier.agents_changed()

    # -- the root's view ------------------------------------------------------------------
    def agents(self) -> Sequence[Mapping[str, Any]]:
        learned = self.records.learned
        current = learned.get("model")
        known = sorted(learned.get("models") or (), key=lambda m: m.get("id") != current)
        models = [{"id": m["id"], "provider": PROVIDER, "name": m["name"]} for m in known]
        if not models:
            models = [{"id": "default", "provider": PROVIDER, "name": "pi's default model"}]
        description = "The pi coding agent, over its RPC mode"
        if self.error:
            description = f"{description}. Not available: {self.error}"
        return [
            {
                "provider": PROVIDER,
                "displayName": TITLE,
                "description": description,
                "models": models,
            }
        ]

    # -- chats ------------------------------------------------------------------------------
    async def start(self, start: ChatStart) -> PiChat:
        roots = [p for p in map(path_of_file_uri, start.working_directories) if p]
        link = self.records.links.get(start.backend_id)
        if start.resume and link is None:
            found = await asyncio.to_thread(self._found, start.backend_id)
            if found is None:
                raise LookupError(f"no pi session {start.backend_id!r} to reopen")
            link = Link(start.backend_id, start.session_id, str(found.path), found.id)
            self.records.links[start.backend_id] = link
        if not start.resume:
            link = None
        if not roots and link is None:
            raise ValueError("pi runs in a local folder; this session names none")
        cwd = roots[0] if roots else None
        if cwd is None and link is not None:
            summary = await asyncio.to_thread(self.sessions.summary, Path(link.file))
            cwd = summary.cwd if summary is not None else None
        chat = PiChat(self, start, cwd or "/", link)
        try:
            await chat.open()
        except BaseException:
            with contextlib.suppress(Exception):
                await chat.process.close()
            raise
        if self.error is not None:
            self.error = None
            if self.notifier is not None:
                self.notifier.agents_changed()
        self.live[start.backend_id] = chat
        return chat

    # -- past sessions (worker threads) ---------------------------------------------------
    def _found(self, pi_id: str) -> Summary | None:
        path = self.sessions.find(pi_id)
        return self.sessions.summary(path) if path is not None else None

    def _file(self, backend_id: str) -> tuple[Path, str] | None:
        link = self.records.links.get(backend_id)
        if link is not None:
            return Path(link.file), link.pi_id
        found = self._found(backend_id)
        return (found.path, found.id) if found is not None else None

    def _row(self, summary: Summary) -> CatalogueRow | None:
        link = self.records.by_pi_id(summary.id)
        if link is not None and link.backend_id != link.session_id:
            return None  # a second chat of a session: listed through its session
        return CatalogueRow(
            session_id=link.session_id if link is not None else summary.id,
            title=summary.title,
            created_at=summary.created_at,
            modified_at=summary.modified_at,
            working_directories=summary.working_directories,
        )

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> CataloguePage:
        rows = [row for s in self.sessions.summaries() if (row := self._row(s)) is not None]
        if directory is not None:
            rows = [row for row in rows if directory in row.working_directories]
        rows = sorted_pausing(rows, key=lambda row: (row.modified_at, row.session_id), reverse=True)
        first = int(cursor) if cursor and cursor.isdigit() else 0
        end = len(rows) if limit is None else first + limit
        return CataloguePage(rows[first:end], str(end) if end < len(rows) else None)

    def lookup(self, session_id: str) -> CatalogueRow | None:
        link = self.records.links.get(session_id)
        if link is not None:
            summary = self.sessions.summary(Path(link.file))
        else:
            summary = self._found(session_id)
        return self._row(summary) if summary is not None else None

    def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        found = self._file(backend_id)
        if found is None:
            return False
        path, pi_id = found
        try:
            entries = conversation(path)
        except FileNotFoundError:
            return False  # a chat with no turn yet: pi writes its file with the first answer
        link = self.records.links.get(backend_id)
        Replay(reader, link.turns if link is not None else [], pi_id).tell(entries)
        return True

    def truncate(self, backend_id: str, turn_id: str | None) -> None:
        raise LookupError("pi's sessions cannot drop turns through this host")

    async def delete(self, backend_id: str) -> None:
        """The session is disposed of: pi's file goes with it, and the link."""
        link = self.records.links.pop(backend_id, None)
        if link is None:
            return
        with contextlib.suppress(OSError):
            await asyncio.to_thread(Path(link.file).unlink)
        await self.records.save()


__all__ = ["PiBackend"]
