"""The conversation loop: read a message, run the turn, draw it, ask what it asks.

One thing has the terminal at a time. At the prompt, prompt_toolkit has it
(raw mode: Ctrl-C is a key). While a turn runs, the screen is drawn from the
reduced chat state as actions arrive and Ctrl-C is a signal, which cancels the
turn. A tool call waiting for approval and a question the agent asks get a
prompt of their own, taken down again if the call or question is settled
elsewhere (another client, the turn ending) before the person answers.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import ANSI
from prompt_toolkit.key_binding import KeyBindings
from rich.console import Console
from rich.text import Text

from ahpcore.chat import answers
from ahpcore.chat.link import Closed, Link
from ahpcore.chat.model import Model
from ahpcore.chat.render import (
    TurnView,
    clean,
    plain,
    tool_input,
    user_line,
)
from ahpcore.operate.client import HostError, OperateError

#: How long a turn may take to show up after it was sent, before the chat stops waiting.
TURN_START_TIMEOUT = 30.0
#: How long a new session may take to get ready.
SESSION_READY_TIMEOUT = 60.0
#: How many past turns opening a session shows.
HISTORY_TURNS = 10

T = TypeVar("T")


def now() -> str:
    """The time as the protocol writes it: ISO 8601, UTC, milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def elapsed_ms(started: str) -> int:
    try:
        begun = datetime.fromisoformat(started.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return 0
    return max(0, int((datetime.now(UTC) - begun).total_seconds() * 1000))


class SlashCompleter(Completer):
    """``/name`` completions from the session's commands, while the first word is typed."""

    def __init__(self, commands: Callable[[], list[dict[str, Any]]]) -> None:
        self.commands = commands

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        before = document.text_before_cursor
        if not before.startswith("/") or any(c.isspace() for c in before):
            return
        typed = before[1:].lower()
        for command in self.commands():
            name = str(command["name"])
            if name.lower().startswith(typed):
                meta = command.get("description") or (command.get("_meta") or {}).get("description")
                yield Completion(
                    f"/{name} ",
                    start_position=-len(before),
                    display=f"/{name}",
                    display_meta=clean(meta or ""),
                )


class Stale(Exception):
    """A prompt's question was settled elsewhere while it waited."""


@dataclass
class Interrupt:
    """Ctrl-C while a turn runs: how many times, and when the last came."""

    count: int = 0
    at: float = 0.0


class Chat:
    def __init__(self, link: Link, model: Model, console: Console, prefix: str | None) -> None:
        self.link = link
        self.model = model
        self.console = console
        #: initialize's terminalCommandPrefix: the host runs ``!command`` messages itself.
        self.prefix = prefix
        self._changed = anyio.Event()
        self._bindings = KeyBindings()

        @self._bindings.add("escape", "enter")
        def _newline(event: Any) -> None:
            event.current_buffer.insert_text("\n")

        self.prompts: PromptSession[str] = PromptSession(
            completer=SlashCompleter(model.slash_commands),
            complete_while_typing=True,
            key_bindings=self._bindings,
        )
        self.asks: PromptSession[str] = PromptSession()
        #: Tools the person said "always" to, where the host offered no lasting option.
        self.always: set[str] = set()
        self.interrupt = Interrupt()
        self._following: str | None = None
        #: Ctrl-C was pressed once at the prompt: a second one quits.
        self._quitting = False
        self._scope = anyio.CancelScope()

    # -- keeping the state ----------------------------------------------------------
    async def consume(self) -> None:
        """Fold every action the host sends into the model; wake whoever waits."""
        async for frame in self.link.events:
            params = frame.get("params")
            if not isinstance(params, dict) or frame.get("method") != "action":
                continue
            if self.model.apply(params):
                self._poke()
        self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def changed(self) -> None:
        """Wait for the state to change (or the connection to end)."""
        if self.link.closed:
            raise Closed(self.link.closed)
        await self._changed.wait()
        if self.link.closed:
            raise Closed(self.link.closed)

    async def until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        with anyio.move_on_after(timeout) as scope:
            while not ready():
                await self.changed()
        if scope.cancelled_caught:
            raise OperateError(f"gave up waiting for {what}")

    # -- opening ----------------------------------------------------------------------
    async def open_session(self, uri: str) -> None:
        model = self.model
        model.session_uri, model.session = uri, None
        answer = await self.link.request("subscribe", {"channel": uri})
        model.take_snapshot((answer or {}).get("snapshot") or {})
        if model.session is None:
            raise OperateError(f"the host sent no state for {uri}")

        def settled() -> bool:
            return (model.session or {}).get("lifecycle") != "creating"

        await self.until(settled, SESSION_READY_TIMEOUT, f"{uri} to be ready")
        session = model.session
        if session.get("lifecycle") == "creationFailed":
            error = (session.get("creationError") or {}).get("message", "no reason given")
            raise OperateError(f"the host could not start {uri}: {clean(error)}")
        chat_uri = session.get("defaultChat") or next(
            (c.get("resource") for c in session.get("chats") or []), None
        )
        if not chat_uri:
            raise OperateError(f"{uri} has no chat to open")
        model.chat_uri, model.chat = str(chat_uri), None
        answer = await self.link.request("subscribe", {"channel": chat_uri})
        model.take_snapshot((answer or {}).get("snapshot") or {})
        if model.chat is None:
            raise OperateError(f"the host sent no state for {chat_uri}")

    def show_history(self) -> None:
        turns = [t for t in (self.model.chat or {}).get("turns") or [] if isinstance(t, dict)]
        if len(turns) > HISTORY_TURNS:
            hidden = len(turns) - HISTORY_TURNS
            self.console.print(Text(f"({hidden} earlier turns not shown)", style="dim"))
        for turn in turns[-HISTORY_TURNS:]:
            self.console.print(user_line(str((turn.get("message") or {}).get("text", ""))))
            TurnView(self.console, str(turn.get("id"))).finish(turn)

    # -- the loop -----------------------------------------------------------------------
    async def run(self) -> None:
        """Until the person quits or the connection ends."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        try:
            with self._scope:
                await self._converse()
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    async def _converse(self) -> None:
        active = self.model.active_turn()
        if active is not None:
            await self.follow(str(active["id"]))
        draft = ""
        while True:
            try:
                text, draft = await self.read_message(draft)
            except KeyboardInterrupt:
                if self._quitting:
                    return
                self._quitting, draft = True, ""
                self.console.print(Text("(Ctrl-C again, or Ctrl-D, to quit)", style="dim"))
                continue
            except EOFError:
                return
            self._quitting = False
            if text is None:  # a turn somebody else started: show it
                active = self.model.active_turn()
                if active is not None:
                    self.console.print(
                        user_line(str((active.get("message") or {}).get("text", "")))
                    )
                    await self.follow(str(active["id"]))
                continue
            if not text.strip():
                continue
            await self.send(text)

    async def read_message(self, draft: str) -> tuple[str | None, str]:
        """The next message; (None, what was typed) when a turn starts meanwhile."""
        kept: list[str] = []

        def idle() -> bool:
            if self.model.active_turn() is None:
                return True
            kept.append(self.prompts.default_buffer.text)
            return False

        try:
            text = await self.ask_while(
                lambda: self.prompts.prompt_async(
                    ANSI("\x1b[1;35m>\x1b[0m "), default=draft, handle_sigint=False
                ),
                idle,
            )
        except Stale:
            return None, kept[-1] if kept else draft
        return text, ""

    async def ask_while(self, prompt: Callable[[], Awaitable[T]], valid: Callable[[], bool]) -> T:
        """``prompt``'s answer; ``Stale`` when ``valid`` turns false before it comes."""
        if not valid():
            raise Stale
        result: list[T] = []
        stale = False
        failed: BaseException | None = None
        async with anyio.create_task_group() as tasks:

            async def watch() -> None:
                nonlocal stale, failed
                try:
                    while valid():
                        await self.changed()
                except Closed as exc:
                    failed = exc  # the connection is gone: so is the prompt
                stale = True
                tasks.cancel_scope.cancel()

            tasks.start_soon(watch)
            try:
                result.append(await prompt())
            except (KeyboardInterrupt, EOFError) as exc:
                # Raised here, not inside the group: it would come out wrapped in one.
                failed = exc
            tasks.cancel_scope.cancel()
        if failed is not None:
            raise failed
        if stale or not result:
            raise Stale
        return result[0]

    async def send(self, text: str) -> None:
        chat = self.model.chat_uri
        assert chat is not None
        if text.startswith("!") and not self.prefix:
            self.console.print(
                Text(
                    "(this host runs no shell commands: it has no terminals plugin; "
                    "the message goes to the agent as written)",
                    style="dim",
                )
            )
        turn_id = str(uuid.uuid4())
        action = {
            "type": "chat/turnStarted",
            "turnId": turn_id,
            "startedAt": now(),
            "message": {"text": text, "origin": {"kind": "user"}},
        }
        await self.link.dispatch(chat, action)
        await self.follow(turn_id)

    # -- a turn ---------------------------------------------------------------------------
    def _on_sigint(self) -> None:
        if self._following is None and self._quitting:
            # Between two prompts (the terminal is not in raw mode): the second Ctrl-C.
            self._scope.cancel()
            return
        self.interrupt.count += 1
        self.interrupt.at = time.monotonic()
        self._poke()

    async def cancel(self, turn: dict[str, Any]) -> None:
        assert self.model.chat_uri is not None
        await self.link.dispatch(
            self.model.chat_uri,
            {
                "type": "chat/turnCancelled",
                "turnId": turn["id"],
                "duration": elapsed_ms(str(turn.get("startedAt", ""))),
            },
        )

    async def follow(self, turn_id: str) -> None:
        """Draw the turn as it goes, answering what it asks, until it ends."""
        view = TurnView(self.console, turn_id)
        self.interrupt = Interrupt()
        cancelled = 0
        started = time.monotonic()
        self._following = turn_id
        try:
            while True:
                refused = self._refused(turn_id)
                if refused is not None:
                    self.console.print(
                        Text(f"the host refused the message: {refused}", style="red")
                    )
                    return
                turn, ended = self.model.turn(turn_id)
                if turn is None:
                    if time.monotonic() - started > TURN_START_TIMEOUT:
                        self.console.print(Text("the turn did not start", style="red"))
                        return
                    with anyio.move_on_after(1):
                        await self.changed()
                    continue
                if ended:
                    view.finish(turn)
                    return
                if self.interrupt.count > cancelled:
                    if cancelled == 0:
                        view.pause()
                        self.console.print(Text("cancelling…", style="yellow"))
                        await self.cancel(turn)
                    else:
                        # A second Ctrl-C: stop waiting for the agent to wind down.
                        view.pause()
                        self.console.print(Text("(stopped following the turn)", style="yellow"))
                        return
                    cancelled = self.interrupt.count
                    continue
                view.draw(turn, ended=False)
                if await self._answer_one(view, turn):
                    continue
                await self.changed()
        finally:
            self._following = None

    def _refused(self, turn_id: str) -> str | None:
        for refusal in self.model.refusals:
            if refusal.action.get("turnId") == turn_id:
                self.model.refusals.remove(refusal)
                if refusal.action.get("type") == "chat/turnStarted":
                    return clean(refusal.reason)
                self.console.print(Text(f"the host refused: {clean(refusal.reason)}", style="red"))
        return None

    async def _answer_one(self, view: TurnView, turn: dict[str, Any]) -> bool:
        """Ask about the first thing in the turn that waits for a person; True if asked."""
        for part in turn.get("responseParts") or []:
            if not isinstance(part, dict):
                continue
            call = part.get("toolCall") if part.get("kind") == "toolCall" else None
            if isinstance(call, dict) and call.get("status") == "pending-confirmation":
                view.draw(turn, ended=False)
                await self.confirm(turn, call)
                return True
            if isinstance(call, dict) and call.get("status") == "pending-result-confirmation":
                view.draw(turn, ended=False)
                await self.confirm_result(turn, call)
                return True
            if part.get("kind") == "inputRequest" and part.get("response") is None:
                view.draw(turn, ended=False)
                await self.answer_questions(turn, part.get("request") or {})
                return True
        return False

    def _still(self, turn_id: str, check: Callable[[dict[str, Any]], bool]) -> Callable[[], bool]:
        def valid() -> bool:
            turn, ended = self.model.turn(turn_id)
            return turn is not None and not ended and check(turn)

        return valid

    async def _ask(self, label: str, valid: Callable[[], bool], default: str = "") -> str:
        """One line from the person; Ctrl-C there cancels the turn, as it does anywhere."""
        try:
            return await self.ask_while(
                lambda: self.asks.prompt_async(
                    ANSI(f"  \x1b[1m{label}\x1b[0m > "), default=default, handle_sigint=False
                ),
                valid,
            )
        except KeyboardInterrupt:
            self._on_sigint()
            raise Stale from None

    async def confirm(self, turn: dict[str, Any], call: dict[str, Any]) -> None:
        turn_id, call_id = str(turn["id"]), str(call["toolCallId"])
        name = str(call.get("toolName") or "")

        def pending(t: dict[str, Any]) -> bool:
            return any(
                p.get("kind") == "toolCall"
                and (p.get("toolCall") or {}).get("toolCallId") == call_id
                and (p.get("toolCall") or {}).get("status") == "pending-confirmation"
                for p in t.get("responseParts") or []
                if isinstance(p, dict)
            )

        if name and name in self.always:
            self.console.print(Text("  ✓ approved (you said always)", style="green"))
            await self._dispatch_call(turn_id, call_id, answers.auto_approval(call))
            await self._settle(turn_id, pending)
            return
        if call.get("confirmationTitle"):
            self.console.print(Text(f"  {plain(call['confirmationTitle'])}", style="bold"))
        if shown := tool_input(call):
            self.console.print(Text(f"  input: {shown}", style="dim"))
        for edit in (call.get("edits") or {}).get("items") or []:
            side = edit.get("after") or edit.get("before") or {}
            diff = edit.get("diff") or {}
            self.console.print(
                Text(
                    f"  edits {clean(side.get('uri', ''))} "
                    f"(+{diff.get('added', '?')} -{diff.get('removed', '?')})",
                    style="dim",
                )
            )
        options = answers.approval_options(call)
        for number, option in enumerate(options, 1):
            self.console.print(Text(f"  {number}. {clean(option.get('label', option['id']))}"))
        valid = self._still(turn_id, pending)
        while True:
            try:
                typed = await self._ask(f"Allow? {answers.approval_hint(call)}", valid)
            except Stale:
                return
            except EOFError:  # Ctrl-D: no
                typed = "n"
            decision = answers.decide(call, typed)
            if decision is not None:
                break
            self.console.print(Text(f"  answer {answers.approval_hint(call)}", style="yellow"))
        if decision.remember and name:
            self.always.add(name)
        await self._dispatch_call(turn_id, call_id, decision.fields)
        await self._settle(turn_id, pending)

    async def _dispatch_call(self, turn_id: str, call_id: str, fields: dict[str, Any]) -> None:
        assert self.model.chat_uri is not None
        await self.link.dispatch(
            self.model.chat_uri,
            {"type": "chat/toolCallConfirmed", "turnId": turn_id, "toolCallId": call_id, **fields},
        )

    async def _settle(self, turn_id: str, waiting: Callable[[dict[str, Any]], bool]) -> None:
        """Wait for the host to take the answer (or refuse it), so it is not asked twice."""
        still = self._still(turn_id, waiting)
        with anyio.move_on_after(TURN_START_TIMEOUT):
            while still() and self._refused(turn_id) is None and not self.interrupt.count:
                await self.changed()

    async def confirm_result(self, turn: dict[str, Any], call: dict[str, Any]) -> None:
        turn_id, call_id = str(turn["id"]), str(call["toolCallId"])

        def pending(t: dict[str, Any]) -> bool:
            return any(
                (p.get("toolCall") or {}).get("toolCallId") == call_id
                and (p.get("toolCall") or {}).get("status") == "pending-result-confirmation"
                for p in t.get("responseParts") or []
                if isinstance(p, dict)
            )

        self.console.print(Text(f"  result: {plain(call.get('pastTenseMessage'))}", style="dim"))
        valid = self._still(turn_id, pending)
        while True:
            try:
                typed = (await self._ask("Give the result to the agent? y/n", valid)).strip()
            except Stale:
                return
            except EOFError:  # Ctrl-D: no
                typed = "n"
            if typed.lower() in answers.YES + answers.NO:
                break
        assert self.model.chat_uri is not None
        await self.link.dispatch(
            self.model.chat_uri,
            {
                "type": "chat/toolCallResultConfirmed",
                "turnId": turn_id,
                "toolCallId": call_id,
                "approved": typed.lower() in answers.YES,
            },
        )
        await self._settle(turn_id, pending)

    async def answer_questions(self, turn: dict[str, Any], request: dict[str, Any]) -> None:
        turn_id, request_id = str(turn["id"]), str(request.get("id"))

        def open_(t: dict[str, Any]) -> bool:
            return any(
                p.get("kind") == "inputRequest"
                and (p.get("request") or {}).get("id") == request_id
                and p.get("response") is None
                for p in t.get("responseParts") or []
                if isinstance(p, dict)
            )

        valid = self._still(turn_id, open_)
        if request.get("message"):
            self.console.print(Text(f"? {clean(request['message'])}", style="bold yellow"))
        if request.get("url"):
            self.console.print(Text(f"  open {clean(request['url'])}", style="underline"))
        collected: dict[str, Any] = {}
        response = "accept"
        try:
            for question in request.get("questions") or []:
                if not isinstance(question, dict):
                    continue
                got = await self._question(question, valid)
                if got is not None:
                    collected[str(question["id"])] = got
            if not request.get("questions"):
                await self._ask("press Enter when done", valid)
        except Stale:
            return
        except EOFError:
            response = "decline"
        action: dict[str, Any] = {
            "type": "chat/inputCompleted",
            "requestId": request_id,
            "response": response,
        }
        if response == "accept" and collected:
            action["answers"] = collected
        assert self.model.chat_uri is not None
        await self.link.dispatch(self.model.chat_uri, action)
        await self._settle(turn_id, open_)

    async def _question(self, question: dict[str, Any], valid: Callable[[], bool]) -> Any:
        title = clean(question.get("title") or "")
        said = clean(question.get("message") or "")
        self.console.print(Text(f"  {said}" if not title else f"  {title}: {said}"))
        for number, option in enumerate(question.get("options") or [], 1):
            extra = f" ({clean(option['description'])})" if option.get("description") else ""
            self.console.print(Text(f"    {number}. {clean(option.get('label', ''))}{extra}"))
        hint = answers.question_hint(question)
        label = f"answer ({hint})" if hint else "answer"
        while True:
            typed = await self._ask(label, valid)
            try:
                return answers.answer(question, typed)
            except answers.Invalid as exc:
                self.console.print(Text(f"  {exc}", style="yellow"))


def print_header(console: Console, model: Model, created: bool, prefix: str | None) -> None:
    session = model.session or {}
    agent = model.agent(session.get("provider")) or {}
    name = clean(agent.get("displayName") or session.get("provider") or "agent")
    title = clean(session.get("title") or "")
    line = Text(f"{name}", style="bold")
    line.append(f"  {clean(model.session_uri)}" + (" (new)" if created else ""), style="dim")
    if title:
        line.append(f"  {title}")
    console.print(line)
    folders = [str(f) for f in session.get("workingDirectories") or []]
    if folders:
        console.print(Text(f"in {clean(', '.join(folders))}", style="dim"))
    shell = f"{clean(prefix)}command runs a shell command, " if prefix else ""
    console.print(
        Text(
            "Enter sends, Esc Enter starts a new line, / completes a command, "
            f"{shell}Ctrl-C cancels a turn, twice at the prompt quits.",
            style="dim",
        )
    )


__all__ = ["Chat", "HostError", "SlashCompleter", "print_header"]
