"""The live agent behind a remote session's chat: the remote chat's actions, told again here.

This host is a client of the remote host. A turn a person starts here is
started there (``chat/turnStarted`` with the same turn id); what the remote
chat then does arrives as actions on its channel and is told to this host's
``TurnReporter`` one by one: text, reasoning, tool calls, usage, questions.
A tool call that asks for approval there asks here (``tool_approval``), and
the answer goes back as the remote's ``chat/toolCallConfirmed``; a question
(``chat/inputRequested``) is asked here and answered there alike. A turn
that starts there without this host (a follow-up the agent starts, another
client of that host) is told here as a turn of the agent's own.

A subagent's chat there is followed by a child chat here, and a terminal
there by a mirror here (``ahp_remote.terminals``). Anything else a tool
result points at on the remote (a file, a resource) is named in text rather
than linked: a URI of the remote would be read on this machine by a client
that follows it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ahp_remote.link import LinkClosed, RemoteError
from ahp_remote.parts import plain, tell_parts, tool_content, tool_input
from ahp_remote.terminals import Mirrors
from ahpcore.api import escape
from ahpcore.ports.backend import (
    AgentRefused,
    Approval,
    ApprovalOption,
    ChatStart,
    InputAnswer,
    PendingEdit,
    TurnEnded,
    TurnInput,
    TurnOrigin,
    TurnReporter,
)
from ahpcore.protocol import default_chat_uri

if TYPE_CHECKING:
    from ahp_remote.machine import Machine
    from ahpcore.api import PluginHost

log = logging.getLogger(__name__)

#: How long a turn waits for a dropped WebSocket link to come back and replay what it missed.
RELINK_SECONDS = 30.0
#: The largest file text an approval here shows of an edit there.
MAX_EDIT_CHARS = 4 << 20
#: How long a cancelled turn waits for the remote to say it ended.
CANCEL_SECONDS = 5.0


class RemoteTurnFailed(RuntimeError):
    """The remote turn ended in error (or could not be followed to its end)."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TurnRelay:
    """One remote turn, told to one ``TurnReporter`` here."""

    def __init__(self, chat: RemoteChat, turn_id: str, channel: str | None = None) -> None:
        self.chat = chat
        #: The remote's id for the turn (the same as here for a turn started here).
        self.turn_id = turn_id
        #: The remote chat the turn runs in (a subagent's own chat, for a subagent's turn).
        self.channel = channel or chat.chat_uri
        #: Tool call id -> the subagent it runs there, told to a child chat here.
        self.children: dict[str, ChildWatch] = {}
        self.report: TurnReporter | None = None
        self._held: list[dict[str, Any]] = []
        self.done = asyncio.Event()
        self.outcome = ""
        self.error: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._relink: asyncio.TimerHandle | None = None

    def attach(self, report: TurnReporter) -> None:
        self.report = report
        held, self._held = self._held, []
        for action in held:
            self.take(action)

    def end(self, outcome: str, error: str | None = None) -> None:
        if self.done.is_set():
            return
        self.outcome, self.error = outcome, error
        self.done.set()
        self.stop()

    def stop(self) -> None:
        if self._relink is not None:
            self._relink.cancel()
            self._relink = None
        for task in list(self._tasks):
            task.cancel()
        for child in list(self.children.values()):
            child.stop()
        self.children.clear()

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the link ----------------------------------------------------------------------------
    def lost(self, why: str) -> None:
        machine = self.chat.machine
        if not machine.streams:
            self.end("error", f"the link to {machine.title} dropped mid-turn ({why})")
            return
        if self._relink is None:
            self._relink = asyncio.get_running_loop().call_later(
                RELINK_SECONDS,
                self.end,
                "error",
                f"the link to {machine.title} dropped mid-turn and did not come back ({why})",
            )

    def relinked(self) -> None:
        if self._relink is not None:
            self._relink.cancel()
            self._relink = None

    # -- what the remote did ---------------------------------------------------------------------
    def take(self, action: dict[str, Any]) -> None:
        report = self.report
        if report is None:
            self._held.append(action)
            return
        if self.done.is_set():
            return
        kind = action.get("type")
        call_id = str(action.get("toolCallId", ""))
        if kind == "chat/responsePart":
            self.part(action.get("part") or {})
        elif kind == "chat/delta":
            report.text(str(action.get("content", "")))
        elif kind == "chat/reasoning":
            report.reasoning(str(action.get("content", "")))
        elif kind == "chat/toolCallStart":
            contributor = action.get("contributor") or {}
            report.tool_start(
                call_id,
                str(action.get("toolName", "")),
                display_name=action.get("displayName"),
                intention=action.get("intention"),
                meta=action.get("_meta"),
                mcp_server=contributor.get("customizationId")
                if contributor.get("kind") == "mcp"
                else None,
            )
        elif kind == "chat/toolCallDelta":
            report.tool_input(call_id, str(action.get("content", "")))
        elif kind == "chat/toolCallReady":
            if action.get("confirmed") is not None:
                report.tool_running(
                    call_id,
                    tool_input=tool_input(action.get("toolInput")),
                    invocation_message=plain(action.get("invocationMessage")),
                )
            else:
                self._spawn(self._approve(report, action))
        elif kind == "chat/toolCallContentChanged":
            for item in action.get("content") or ():
                if (
                    isinstance(item, Mapping)
                    and item.get("type") == "subagent"
                    and call_id not in self.children
                    and isinstance(item.get("resource"), str)
                ):
                    self._subagent(report, call_id, item)
            progress = (action.get("_meta") or {}).get("progressMessage")
            if isinstance(progress, str):
                report.tool_progress(call_id, progress)
        elif kind == "chat/toolCallComplete":
            result = action.get("result") or {}
            error = result.get("error")
            content = result.get("content")
            if call_id in self.children and content is not None:
                # The child chat here is named by the call already.
                content = [c for c in content if (c or {}).get("type") != "subagent"]
            report.tool_complete(
                call_id,
                success=bool(result.get("success")),
                past_tense_message=plain(result.get("pastTenseMessage")),
                content=tool_content(content, self.chat.machine.title, self.chat.mirrors.local_uri),
                error=str(error.get("message")) if isinstance(error, Mapping) else None,
            )
        elif kind == "chat/inputRequested":
            self._spawn(self._ask(report, action.get("request") or {}))
        elif kind == "chat/usage":
            usage = action.get("usage") or {}
            report.usage(
                input_tokens=int(usage.get("inputTokens") or 0),
                output_tokens=int(usage.get("outputTokens") or 0),
                model=usage.get("model"),
                cache_read_tokens=usage.get("cacheReadTokens"),
                meta=usage.get("_meta"),
            )
        elif kind == "chat/activityChanged":
            report.activity(action.get("activity"))
        elif kind == "chat/turnComplete":
            self.end("complete")
        elif kind == "chat/turnCancelled":
            self.end("cancelled")
        elif kind == "chat/error":
            error = (action.get("part") or {}).get("error") or {}
            self.end("error", str(error.get("message") or "the turn failed"))

    def _subagent(self, report: TurnReporter, call_id: str, item: Mapping[str, Any]) -> None:
        """The call runs a subagent there, in a chat of its own: a child chat here follows it."""
        child_report = report.subagent(
            call_id, str(item.get("agentName") or "subagent"), str(item.get("title") or "")
        )
        child = ChildWatch(self.chat, str(item["resource"]), child_report)
        self.children[call_id] = child
        self._spawn(child.open())

    def part(self, part: Mapping[str, Any]) -> None:
        """A response part opened whole (text arrives this way first)."""
        report = self.report
        if report is None:
            return
        kind = part.get("kind")
        if kind == "markdown":
            report.text(str(part.get("content", "")))
        elif kind == "reasoning":
            report.reasoning(str(part.get("content", "")))
        elif kind == "systemNotification":
            report.notification(plain(part.get("content")), meta=part.get("_meta"))

    async def _approve(self, report: TurnReporter, action: Mapping[str, Any]) -> None:
        call_id = str(action.get("toolCallId"))
        options = [
            ApprovalOption(str(o["id"]), str(o["label"]), o["kind"], o.get("group"))
            for o in action.get("options") or ()
            if isinstance(o, Mapping) and o.get("kind") in ("approve", "deny")
        ]
        edits = await self._edits(action.get("edits"))
        try:
            approval: Approval = await report.tool_approval(
                call_id,
                tool_input=tool_input(action.get("toolInput")),
                invocation_message=plain(action.get("invocationMessage")),
                title=plain(action.get("confirmationTitle")) or None,
                options=options,
                edits=edits,
            )
        except TurnEnded:
            return
        answer: dict[str, Any] = {
            "type": "chat/toolCallConfirmed",
            "turnId": self.turn_id,
            "toolCallId": call_id,
            "approved": approval.approved,
        }
        if approval.approved:
            answer["confirmed"] = "user-action"
            if approval.edited_input is not None:
                answer["editedToolInput"] = approval.edited_input
        else:
            answer["reason"] = approval.reason if approval.reason == "skipped" else "denied"
            if approval.suggestion:
                answer["userSuggestion"] = {"text": approval.suggestion}
        if approval.selected_option_id is not None:
            answer["selectedOptionId"] = approval.selected_option_id
        await self.chat.send(answer, self.channel)

    async def _edits(self, collection: Any) -> list[PendingEdit]:
        """The file edits a call would make there, read from the remote to be shown here
        (an edit whose text cannot be read is left out; the approval is still asked)."""
        items = collection.get("items") if isinstance(collection, Mapping) else None
        found = []
        for item in items or ():
            if not isinstance(item, Mapping):
                continue
            after, before = item.get("after"), item.get("before")
            side = after if isinstance(after, Mapping) else before
            if not isinstance(side, Mapping) or not isinstance(side.get("uri"), str):
                continue
            try:
                after_text = await self._read(after) if isinstance(after, Mapping) else ""
                before_text = await self._read(before) if isinstance(before, Mapping) else None
            except (LinkClosed, RemoteError, ValueError) as exc:
                log.info("an edit on %s is not shown: %s", self.chat.machine.title, exc)
                continue
            found.append(PendingEdit(str(side["uri"]), after_text, before_text))
        return found

    async def _read(self, side: Mapping[str, Any]) -> str:
        content = side.get("content")
        uri = content.get("uri") if isinstance(content, Mapping) else None
        if not isinstance(uri, str):
            raise ValueError("an edit names no content")
        result = await self.chat.machine.request("resourceRead", {"uri": uri})
        data = result.get("data", "") if isinstance(result, Mapping) else ""
        if len(data) > MAX_EDIT_CHARS:
            raise ValueError(f"{uri} is too large to show")
        if result.get("encoding") == "base64":
            try:
                return base64.b64decode(data).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                raise ValueError(f"{uri} is not text") from None
        return str(data)

    async def _ask(self, report: TurnReporter, request: Mapping[str, Any]) -> None:
        try:
            answer: InputAnswer = await report.ask(
                list(request.get("questions") or ()), message=request.get("message")
            )
        except TurnEnded:
            return
        done: dict[str, Any] = {
            "type": "chat/inputCompleted",
            "requestId": str(request.get("id")),
            "response": answer.response,
        }
        if answer.answers:
            done["answers"] = dict(answer.answers)
        await self.chat.send(done, self.channel)


class ChildWatch:
    """A subagent's chat there, told to the child chat a tool call opened here.

    The subagent's turn there is one turn of its own chat; everything it does is told
    to the child reporter, whatever its turn id, and it ends here with its parent call.
    """

    def __init__(self, chat: RemoteChat, uri: str, report: TurnReporter) -> None:
        self.chat = chat
        self.uri = uri
        self.relay = TurnRelay(chat, "", channel=uri)
        self.relay.attach(report)
        self._watching = False

    async def open(self) -> None:
        machine = self.chat.machine
        try:
            state = await machine.watch(self.uri, self)
        except (LinkClosed, RemoteError) as exc:
            log.info("the subagent chat %s is not followed: %s", self.uri, escape(str(exc)))
            return
        self._watching = True
        # What it did before this host watched: told first, held actions follow it.
        active = state.get("activeTurn")
        turns = [t for t in state.get("turns") or () if isinstance(t, Mapping)]
        turn = active if isinstance(active, Mapping) else (turns[-1] if turns else None)
        report = self.relay.report
        if turn is not None and report is not None:
            self.relay.turn_id = str(turn.get("id", ""))
            tell_parts(report, turn.get("responseParts") or (), machine.title)
            for part in turn.get("responseParts") or ():
                call = part.get("toolCall") if isinstance(part, Mapping) else None
                if isinstance(call, Mapping) and call.get("status") == "pending-confirmation":
                    self.relay.take({**call, "type": "chat/toolCallReady"})

    def stop(self) -> None:
        self.relay.stop()
        if self._watching:
            self._watching = False
            asyncio.get_running_loop().create_task(self.chat.machine.unwatch(self.uri, self))

    def take(self, action: dict[str, Any], origin: Mapping[str, Any] | None) -> None:
        if action.get("type") == "chat/turnStarted":
            self.relay.turn_id = str(action.get("turnId", ""))
            return
        self.relay.take(action)

    def reset(self, state: dict[str, Any] | None) -> None:
        pass

    def lost(self, why: str) -> None:
        pass

    def relinked(self) -> None:
        pass


class SessionWatch:
    """The remote session's channel: what of it this host's session takes."""

    def __init__(self, chat: RemoteChat) -> None:
        self.chat = chat

    def take(self, action: dict[str, Any], origin: Mapping[str, Any] | None) -> None:
        report = self.chat.start.report
        if report is None:
            return
        kind = action.get("type")
        if kind == "session/titleChanged" and action.get("title"):
            report.title(str(action["title"]))

    def reset(self, state: dict[str, Any] | None) -> None:
        pass

    def lost(self, why: str) -> None:
        pass

    def relinked(self) -> None:
        pass


def remote_chat_uri(remote_session: str, session_id: str, backend_id: str) -> str:
    """The remote chat behind one chat here: the remote session's default chat for the
    default chat (whose backend id is the session id), ``ahp-chat:/remote-<backend id>``
    for another."""
    if backend_id == session_id:
        return default_chat_uri(remote_session)
    return f"ahp-chat:/remote-{backend_id}"


class RemoteChat:
    """The agent behind one chat of a session that runs on a remote host."""

    #: A ``!command`` typed here is the remote's to run (see ``ahp_remote.plugin``).
    runs_commands_remotely = True

    def __init__(
        self,
        machine: Machine,
        remote_provider: str,
        start: ChatStart,
        host: PluginHost | None = None,
    ) -> None:
        self.machine = machine
        self.remote_provider = remote_provider
        self.start = start
        self.session_uri = f"{remote_provider}:/{start.session_id}"
        self.default = start.backend_id == start.session_id
        self.chat_uri = remote_chat_uri(self.session_uri, start.session_id, start.backend_id)
        self.relays: dict[str, TurnRelay] = {}
        self.mirrors = Mirrors(
            host, machine, self.session_uri, start.chat_uri, self.chat_uri, self.default
        )
        #: Remote turn ids this chat has taken, so a replay or a snapshot tells none twice.
        self.seen: set[str] = set()
        self._session = SessionWatch(self)
        self._watching = False
        #: Called once the chat closes (the backend forgets it).
        self.forget: Callable[[], object] = lambda: None

    async def open(self, *, create: bool) -> None:
        machine = self.machine
        start = self.start
        if create and self.default:
            params: dict[str, Any] = {
                "channel": self.session_uri,
                "provider": self.remote_provider,
            }
            if start.working_directories:
                params["workingDirectories"] = list(start.working_directories)
            await machine.request("createSession", params)
        elif create:
            params = {"channel": self.session_uri, "chat": self.chat_uri}
            source = start.fork_from or start.side_of
            if source is not None:
                params["source"] = {
                    "kind": "fork" if start.fork_from else "sideChat",
                    "chat": remote_chat_uri(self.session_uri, start.session_id, source[0]),
                    "turnId": source[1],
                }
            if start.working_directories:
                params["workingDirectories"] = list(start.working_directories)
            await machine.request("createChat", params)
        session = await machine.watch(self.session_uri, self._session)
        try:
            chat = await machine.watch(self.chat_uri, self)
        except BaseException:
            await machine.unwatch(self.session_uri, self._session)
            raise
        self._watching = True
        self.note(chat)
        machine.terminal_listeners.append(self.mirrors.sync)
        self.mirrors.sync()
        report = self.start.report
        if report is not None and session.get("title"):
            report.title(str(session["title"]))

    def note(self, state: Mapping[str, Any]) -> None:
        """Take in the remote chat as a snapshot has it: which turns it already had."""
        for turn in state.get("turns") or ():
            if isinstance(turn, Mapping) and turn.get("id"):
                self.seen.add(str(turn["id"]))
        active = state.get("activeTurn")
        if isinstance(active, Mapping) and active.get("id"):
            turn_id = str(active["id"])
            if turn_id not in self.seen and turn_id not in self.relays:
                # Running there already (this host restarted mid-turn): followed from here on.
                self.seen.add(turn_id)
                self._follow(turn_id, active.get("message") or {}, active.get("responseParts"))

    async def send(self, action: Mapping[str, Any], channel: str | None = None) -> None:
        """Send an answer there; one given while the link is down waits for it a while."""
        try:
            await self.machine.ready(RELINK_SECONDS)
            await self.machine.dispatch(channel or self.chat_uri, action)
        except LinkClosed as exc:
            log.warning(
                "cannot send %s to %s: %s", action.get("type"), self.machine.title, escape(str(exc))
            )

    # -- the agent -----------------------------------------------------------------------------
    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        machine = self.machine
        try:
            await machine.ready(10.0)
        except LinkClosed as exc:
            raise RemoteTurnFailed(str(exc)) from None
        relay = TurnRelay(self, turn.turn_id)
        relay.attach(report)
        self.relays[turn.turn_id] = relay
        self.seen.add(turn.turn_id)
        try:
            refused = await machine.dispatch(
                self.chat_uri,
                {
                    "type": "chat/turnStarted",
                    "turnId": turn.turn_id,
                    "startedAt": now_iso(),
                    "message": dict(turn.message),
                },
                answered=True,
            )
            if refused is not None:
                raise RemoteTurnFailed(f"{machine.title} refused the turn: {refused}")
            try:
                await relay.done.wait()
            except asyncio.CancelledError:
                with anyio_shield():
                    await self._cancel(relay)
                raise
        except LinkClosed as exc:
            raise RemoteTurnFailed(str(exc)) from None
        finally:
            relay.stop()
            self.relays.pop(turn.turn_id, None)
        if relay.outcome == "error":
            raise RemoteTurnFailed(relay.error or "the turn failed")
        if relay.outcome == "cancelled":
            raise RemoteTurnFailed(f"the turn was cancelled on {machine.title}")

    async def truncate(self, turn_id: str | None, reference: str | None) -> None:
        """Drop the turns after ``turn_id`` there (all of them for None); the remote says no
        with a reason (a turn it does not know, a provider that cannot)."""
        action: dict[str, Any] = {"type": "chat/truncated"}
        if turn_id is not None:
            action["turnId"] = turn_id
        try:
            refused = await self.machine.dispatch(self.chat_uri, action, answered=True)
        except LinkClosed as exc:
            raise AgentRefused(str(exc)) from None
        if refused is not None:
            raise AgentRefused(f"{self.machine.title} refused: {refused}")
        self.seen.discard(turn_id or "")

    async def steer(self, message: Mapping[str, Any]) -> bool:
        """Hand a steering message to the running turn there; False (kept for the next turn
        here) when the remote will not take it."""
        action = {
            "type": "chat/pendingMessageSet",
            "kind": "steering",
            "id": str(uuid.uuid4()),
            "message": dict(message),
        }
        try:
            refused = await self.machine.dispatch(self.chat_uri, action, answered=True)
        except LinkClosed:
            return False
        return refused is None

    async def _cancel(self, relay: TurnRelay) -> None:
        if relay.done.is_set():
            return
        await self.send({"type": "chat/turnCancelled", "turnId": relay.turn_id, "duration": 0})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_SECONDS):
                await relay.done.wait()

    async def close(self) -> None:
        self.forget()
        for relay in list(self.relays.values()):
            relay.stop()
        if self.mirrors.sync in self.machine.terminal_listeners:
            self.machine.terminal_listeners.remove(self.mirrors.sync)
        await self.mirrors.close()
        if self._watching:
            self._watching = False
            await self.machine.unwatch(self.chat_uri, self)
            await self.machine.unwatch(self.session_uri, self._session)

    # -- the remote chat's channel ----------------------------------------------------------------
    def take(self, action: dict[str, Any], origin: Mapping[str, Any] | None) -> None:
        kind = action.get("type")
        turn_id = action.get("turnId")
        if kind == "chat/turnStarted":
            turn_id = str(turn_id)
            if turn_id not in self.seen:
                self.seen.add(turn_id)
                self._follow(turn_id, action.get("message") or {}, None)
            return
        relay = self.relays.get(str(turn_id)) if turn_id is not None else None
        if relay is None and turn_id is None and self.relays:
            # Actions of the running turn that name none (a question, the activity line).
            relay = next(reversed(self.relays.values()))
        if relay is not None:
            relay.take(action)
            return
        report = self.start.report
        if report is None:
            return
        if kind == "chat/backgroundWorkSet":
            work = action.get("work") or {}
            if work.get("id"):
                report.background_work_set(
                    str(work["id"]),
                    label=str(work.get("label", "")),
                    command=work.get("command"),
                    started_at=work.get("startedAt"),
                )
        elif kind == "chat/backgroundWorkRemoved" and action.get("id"):
            report.background_work_removed(str(action["id"]))

    def reset(self, state: dict[str, Any] | None) -> None:
        title = self.machine.title
        for relay in list(self.relays.values()):
            relay.end(
                "error",
                f"the link to {title} dropped mid-turn and what was missed could not be replayed"
                if state is not None
                else f"{title} no longer has this session",
            )
        if state is not None:
            self.note(state)

    def lost(self, why: str) -> None:
        for relay in list(self.relays.values()):
            relay.lost(why)

    def relinked(self) -> None:
        for relay in list(self.relays.values()):
            relay.relinked()

    # -- turns the remote began ------------------------------------------------------------------
    def _follow(self, turn_id: str, message: Mapping[str, Any], parts: Any) -> None:
        report = self.start.report
        if report is None:
            return
        relay = TurnRelay(self, turn_id)
        self.relays[turn_id] = relay
        report.start_soon(self._foreign, relay, dict(message), list(parts or ()))

    async def _foreign(self, relay: TurnRelay, message: dict[str, Any], parts: list[Any]) -> None:
        report = self.start.report
        assert report is not None
        kind = (message.get("origin") or {}).get("kind")
        origin: TurnOrigin = "systemNotification" if kind == "systemNotification" else "agent"
        try:
            async with report.begin_turn(message, origin=origin) as turn:
                relay.attach(turn)
                for part in parts:
                    if isinstance(part, Mapping):
                        relay.part(part)
                await relay.done.wait()
                if relay.outcome == "error":
                    raise RemoteTurnFailed(relay.error or "the turn failed")
        finally:
            relay.stop()
            self.relays.pop(relay.turn_id, None)


@contextlib.contextmanager
def anyio_shield() -> Any:
    """Let the cancelled turn still tell the remote to stop (anyio's shield, lazily imported)."""
    import anyio

    with anyio.CancelScope(shield=True):
        yield
