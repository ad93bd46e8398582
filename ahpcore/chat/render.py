"""Drawing a chat on a terminal with ``rich``: streamed markdown, tool calls, turn ends.

Everything shown came from the host, and much of it from an agent or another
client: control characters are spelled out before anything reaches the
terminal, so no text can move the cursor, retitle the window or hide a line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown
from rich.text import Text

#: Controls but newline and tab: ESC, CR, BEL, the C1 range and the line separators.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
#: How much of a tool's text result is shown (its last lines, as a terminal would).
RESULT_LINES = 12


def clean(text: object) -> str:
    """``text`` with its control characters spelled out (``\\x1b``), newlines kept."""

    def spell(match: re.Match[str]) -> str:
        return match.group().encode("unicode_escape").decode("ascii")

    return _CONTROL.sub(spell, str(text))


def plain(value: Any) -> str:
    """A ``StringOrMarkdown`` as text."""
    if isinstance(value, dict):
        return clean(value.get("markdown") or value.get("value") or "")
    return clean(value or "")


def settled(text: str) -> int:
    """How much of ``text`` is whole markdown blocks: up to its last blank line that is
    not inside a code fence. A block drawn once no longer changes."""
    position = cut = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        position += len(line)
        if not fenced and not stripped and line.endswith("\n"):
            cut = position
    return cut


class MarkdownStream:
    """One growing markdown part. Whole blocks are printed once and stay; the block
    still being written is redrawn in place as it grows (on a terminal)."""

    def __init__(self, console: Console, style: str = "") -> None:
        self.console = console
        self.style = style
        self.shown = 0
        #: How much past ``shown`` the live view holds.
        self._drawn = 0
        self._live: Live | None = None

    def _markdown(self, text: str) -> Markdown:
        return Markdown(clean(text), style=self.style or "none")

    def update(self, content: str) -> None:
        tail = content[self.shown :]
        cut = settled(tail)
        if cut:
            self._draw(tail[:cut])
            self._stop()
            self.shown += cut
            self._drawn = 0
            tail = tail[cut:]
        if tail.strip() and self.console.is_terminal:
            self._draw(tail)
            self._drawn = len(tail)

    def close(self, content: str) -> None:
        """Draw the rest of ``content``; the part is done (or a prompt needs the screen)."""
        tail = content[self.shown :]
        if tail.strip():
            self._draw(tail)
        self._stop()
        self.shown = max(self.shown, len(content))
        self._drawn = 0

    def pause(self) -> None:
        """Leave what is drawn as it stands (a prompt needs the screen); what the part
        says after it is drawn below, as a block of its own."""
        if self._live is not None:
            self._stop()
            self.shown += self._drawn

    def _draw(self, text: str) -> None:
        if not self.console.is_terminal:
            self.console.print(self._markdown(text))
            return
        if self._live is None:
            self._live = Live(
                console=self.console,
                auto_refresh=False,
                transient=False,
                vertical_overflow="visible",
            )
            self._live.start()
        self._live.update(self._markdown(text), refresh=True)

    def _stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


@dataclass
class TurnView:
    """What of one turn is on screen already, to draw only what is new."""

    console: Console
    turn_id: str
    #: Text parts by id: their stream.
    streams: dict[str, MarkdownStream] = field(default_factory=dict)
    #: Tool calls by id: the last status drawn.
    calls: dict[str, str] = field(default_factory=dict)
    #: Input requests drawn as answered.
    answered: set[str] = field(default_factory=set)
    #: Error parts drawn, by position.
    notes: set[int] = field(default_factory=set)

    def draw(self, turn: dict[str, Any], ended: bool) -> None:
        parts = [p for p in turn.get("responseParts") or [] if isinstance(p, dict)]
        for index, part in enumerate(parts):
            kind = part.get("kind")
            last = index == len(parts) - 1 and not ended
            if kind in ("markdown", "reasoning"):
                self._text(part, last)
            elif kind == "toolCall" and isinstance(part.get("toolCall"), dict):
                self._tool_call(part["toolCall"])
            elif kind == "inputRequest":
                request = part.get("request") or {}
                ident = str(request.get("id"))
                if part.get("response") is not None and ident not in self.answered:
                    self.answered.add(ident)
                    self.console.print(
                        Text(f"  ↳ question {part['response']}ed", style="dim")
                        if part["response"] != "accept"
                        else Text("  ↳ answered", style="dim")
                    )
            elif index not in self.notes:
                self._note(index, part)

    def pause(self) -> None:
        for stream in self.streams.values():
            stream.pause()

    def _text(self, part: dict[str, Any], last: bool) -> None:
        ident = str(part.get("id"))
        content = str(part.get("content") or "")
        stream = self.streams.get(ident)
        if stream is None:
            style = "dim italic" if part.get("kind") == "reasoning" else ""
            stream = self.streams[ident] = MarkdownStream(self.console, style)
        if last:
            stream.update(content)
        elif stream.shown < len(content):
            stream.close(content)

    def _tool_call(self, call: dict[str, Any]) -> None:
        ident, status = str(call.get("toolCallId")), str(call.get("status"))
        before = self.calls.get(ident)
        if status == before or status == "streaming":
            return
        self.calls[ident] = status
        if before is None:
            self.console.print(tool_header(call))
        if status == "completed":
            self.console.print(tool_outcome(call))
            for line in tool_result_lines(call):
                self.console.print(line)
        elif status == "cancelled":
            why = {"denied": "denied", "skipped": "skipped", "result-denied": "result denied"}
            reason = why.get(str(call.get("reason")), "cancelled")
            self.console.print(Text(f"  ✗ {reason}", style="yellow"))
        elif status == "auth-required":
            self.console.print(Text("  ! the tool needs a sign-in first", style="yellow"))

    def _note(self, index: int, part: dict[str, Any]) -> None:
        kind = part.get("kind")
        if kind == "error":
            error = part.get("error") or {}
            self.notes.add(index)
            self.console.print(Text(f"error: {clean(error.get('message', ''))}", style="red"))
        elif kind == "systemNotification":
            self.notes.add(index)
            self.console.print(Text(plain(part.get("content")), style="dim"))
        elif kind == "contentRef":
            self.notes.add(index)
            self.console.print(Text(f"[{clean(part.get('uri', ''))}]", style="dim"))

    def finish(self, turn: dict[str, Any]) -> None:
        self.draw(turn, ended=True)
        for stream in self.streams.values():
            stream.close("")  # already drawn in full; stops a live view left running
        state = turn.get("state")
        if state == "cancelled":
            self.console.print(Text("(turn cancelled)", style="yellow"))
        elif state == "error" and not any(
            p.get("kind") == "error" for p in turn.get("responseParts") or []
        ):
            self.console.print(Text("(turn failed)", style="red"))


def tool_header(call: dict[str, Any]) -> Text:
    name = clean(call.get("displayName") or call.get("toolName") or "tool")
    said = plain(call.get("invocationMessage") or call.get("intention") or "")
    line = Text("⚙ ", style="cyan")
    line.append(name, style="bold cyan")
    if said and said != name:
        line.append(f"  {said}")
    return line


def tool_input(call: dict[str, Any]) -> str:
    raw = call.get("toolInput")
    if not isinstance(raw, str) or not raw:
        return ""
    try:
        return clean(json.dumps(json.loads(raw), ensure_ascii=False))
    except ValueError:
        return clean(raw)


def tool_outcome(call: dict[str, Any]) -> Text:
    said = plain(call.get("pastTenseMessage")) or "done"
    if call.get("success", True):
        return Text(f"  ✓ {said}", style="green")
    error = (call.get("error") or {}).get("message")
    return Text(f"  ✗ {said}" + (f": {clean(error)}" if error else ""), style="red")


def tool_result_lines(call: dict[str, Any]) -> list[Text]:
    """A tool's result as a few dim lines: text content, or a terminal's output."""
    lines: list[str] = []
    for content in call.get("content") or []:
        if not isinstance(content, dict):
            continue
        if content.get("type") == "text":
            lines.extend(str(content.get("text") or "").splitlines())
        elif content.get("type") == "terminal":
            result = content.get("result") or {}
            lines.extend(str(result.get("preview") or "").splitlines())
            if "exitCode" in result:
                lines.append(f"(exit code {result['exitCode']})")
        elif content.get("type") == "subagent":
            lines.append(f"(a subagent worked in {content.get('resource')})")
    shown = lines[-RESULT_LINES:]
    out = [Text(f"  │ {clean(line)}", style="dim") for line in shown]
    if len(lines) > len(shown):
        out.insert(0, Text(f"  │ … {len(lines) - len(shown)} more lines", style="dim"))
    return out


def user_line(text: str) -> Text:
    line = Text("> ", style="bold magenta")
    line.append(clean(text))
    return line
