"""A past session's turns rebuilt from the CLI's transcript, through the reporter live turns use.

What one agent did (the main conversation, or a subagent's) is folded by a
``Replay``: text, thinking, tool calls with how they were settled, compaction
notices and what a slash command printed. A subagent's own transcript is found
by the call that ran it and replayed into the child chat ``TurnReporter.subagent``
opens, as it was live. What the transcript does not keep (who was asked, a
turn's cost and the model's context window) comes from the host's sidecar.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from ahp_claude import questions, tools
from ahp_claude.background import notification_message
from ahp_claude.tagged import between
from ahp_claude.transcripts import INTERRUPTED, prompt_text, read_entries, turns
from ahpcore.api import TurnRecorder
from ahpcore.ports.backend import (
    Approval,
    ApprovalOption,
    Cost,
    InputAnswer,
    TranscriptReader,
    TurnReporter,
)

DENIED = ("denied this tool call", "doesn't want to proceed", "user rejected")

#: How a turn reads that was still running when its host stopped (killed, crashed).
HOST_STOPPED = (
    "Interrupted: the host stopped before this turn ended. What it said until then is "
    "kept; send a message to go on."
)


Entries = list[dict[str, Any]]


class Subagents:
    """Where the transcripts of a session's subagents are, by the call that ran each.

    The CLI writes each subagent to ``<session>/subagents/agent-<id>.jsonl`` beside
    the session's transcript, with a ``.meta.json`` naming the call; older CLIs
    wrote them into the main transcript as sidechain entries. A call's result
    names the agent id too (``toolUseResult.agentId``).
    """

    def __init__(
        self,
        path: Path | None,
        entries: Entries,
        kept: Mapping[str, Mapping[str, Any]] | None = None,
        cut_off: Collection[str] = (),
    ) -> None:
        self.folder = path.with_suffix("") / "subagents" if path is not None else None
        #: What the host kept of each subagent it saw run (its duration), by its call.
        self.kept = kept or {}
        #: The calls whose background subagent still ran when the host stopped.
        self.cut_off = cut_off
        self._agent_of: dict[str, str] = {}
        #: When each call's result was written, by call id.
        self.result_at: dict[str, datetime] = {}
        self._files: dict[str, Path] | None = None
        self._note(entries)
        #: Sidechains in the main transcript, by agent id (or by their first entry's uuid).
        self._sidechains: dict[str, Entries] = {}
        first: dict[str, str] = {}
        for entry in entries:
            if not entry.get("isSidechain"):
                continue
            uuid, parent = str(entry.get("uuid")), str(entry.get("parentUuid"))
            key = entry.get("agentId") or first.get(parent) or uuid
            first[uuid] = str(key)
            self._sidechains.setdefault(str(key), []).append(entry)

    def _note(self, entries: Entries) -> None:
        """Learn which agent each call ran from the calls' results."""
        for entry in entries:
            result = entry.get("toolUseResult")
            if not isinstance(result, Mapping) or not result.get("agentId"):
                continue
            content = (entry.get("message") or {}).get("content")
            moment = _moment(entry)
            for block in content if isinstance(content, list) else ():
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    self._agent_of[str(block.get("tool_use_id"))] = str(result["agentId"])
                    if moment is not None:
                        self.result_at[str(block.get("tool_use_id"))] = moment

    def _by_call(self) -> dict[str, Path]:
        if self._files is None:
            self._files = {}
            if self.folder is not None and self.folder.is_dir():
                for meta in self.folder.glob("agent-*.meta.json"):
                    try:
                        call = json.loads(meta.read_text()).get("toolUseId")
                    except (OSError, ValueError, AttributeError):
                        continue
                    if call:
                        self._files[str(call)] = meta.with_name(
                            meta.name.removesuffix(".meta.json") + ".jsonl"
                        )
        return self._files

    def entries(self, call_id: str, prompt: Any = None) -> Entries | None:
        """What the subagent the call ``call_id`` ran (given ``prompt``) did, or None."""
        path = self._by_call().get(call_id)
        agent = self._agent_of.get(call_id)
        if (path is None or not path.is_file()) and agent and self.folder is not None:
            path = self.folder / f"agent-{agent}.jsonl"
        if path is not None and path.is_file():
            kept = read_entries(path)
            self._note(kept)
            return kept
        if agent and agent in self._sidechains:
            return self._sidechains.pop(agent)
        # A sidechain that names no agent begins with the prompt its call gave it.
        key = next(
            (k for k, e in self._sidechains.items() if prompt and _said(e[0]) == prompt), None
        )
        return self._sidechains.pop(key) if key is not None else None


def _said(entry: Mapping[str, Any]) -> str | None:
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, list):
        content = "".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return content if isinstance(content, str) else None


class Replay:
    """One agent's entries (the main conversation's, or one subagent's) into a reporter."""

    def __init__(
        self,
        report: TurnReporter,
        decisions: Mapping[str, Mapping[str, Any]],
        subagents: Subagents,
    ) -> None:
        self.report = report
        self.decisions = decisions
        self.subagents = subagents
        self.calls: dict[str, tuple[str, dict[str, Any]]] = {}
        #: Calls already said to run (a subagent's, opened before its result).
        self.running: set[str] = set()
        self.usage: dict[str, Mapping[str, Any]] = {}
        self.model: str | None = None
        self.state = "complete"
        #: When the entry being replayed was written.
        self.at: datetime | None = None

    def entries(self, entries: Iterable[Mapping[str, Any]]) -> None:
        for entry in entries:
            self.entry(entry)

    def entry(self, entry: Mapping[str, Any]) -> None:
        self.at = _moment(entry) or self.at
        kind = entry.get("type")
        if kind == "system":
            self._system(entry)
            return
        message = entry.get("message") or {}
        content = message.get("content")
        if kind == "assistant":
            if entry.get("error") == "authentication_failed":
                return  # the CLI's "Not logged in" stand-in: the turn's error says it (SIGN_IN)
            self.model = message.get("model") or self.model
            if message.get("id") and message.get("usage"):
                self.usage[message["id"]] = message["usage"]
            for block in content if isinstance(content, list) else ():
                self._assistant_block(block)
        elif kind == "user" and not entry.get("isMeta"):
            if isinstance(content, str):
                if content.startswith(INTERRUPTED):
                    self.state = "cancelled"
                return
            for block in content if isinstance(content, list) else ():
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "tool_result":
                    self._tool_result(block, entry.get("toolUseResult"))
                elif str(block.get("text", "")).startswith(INTERRUPTED):
                    self.state = "cancelled"

    def _system(self, entry: Mapping[str, Any]) -> None:
        subtype = entry.get("subtype")
        if subtype == "compact_boundary":
            about = entry.get("compactMetadata") or {}
            notice(self.report, str(about.get("trigger") or "manual"), about.get("preTokens"))
        elif subtype == "local_command":
            # What a slash command printed: live, the CLI says it as the turn's answer.
            printed = between(str(entry.get("content", "")), "local-command-stdout")
            if printed and printed.strip():
                self.report.text(printed.strip())

    def _assistant_block(self, block: Any) -> None:
        if not isinstance(block, Mapping):
            return
        kind = block.get("type")
        if kind == "text":
            self.report.text(str(block.get("text", "")))
        elif kind == "thinking":
            self.report.reasoning(str(block.get("thinking", "")))
        elif kind == "tool_use":
            self._tool_use(str(block.get("id")), str(block.get("name")), block.get("input"))

    def _tool_use(self, call_id: str, name: str, given: Any) -> None:
        tool_input = dict(given or {})
        self.calls[call_id] = (name, tool_input)
        if name == "AskUserQuestion":
            return
        report = self.report
        mcp = tools.mcp_parts(name)
        client_name = tools.client_tool_name(name)
        if client_name is not None:
            report.tool_start(call_id, client_name)
        else:
            report.tool_start(
                call_id, name, meta=tools.tool_meta(name), mcp_server=mcp[0] if mcp else None
            )
        report.tool_input(call_id, json.dumps(tool_input))
        if name in tools.SUBAGENT_TOOLS:
            self._subagent(call_id, name, tool_input)

    def _subagent(self, call_id: str, name: str, tool_input: dict[str, Any]) -> None:
        """A subagent's work, replayed into its child chat while its call runs (as live)."""
        found = self.subagents.entries(call_id, tool_input.get("prompt"))
        if not found:
            return
        if call_id in self.decisions and self.decisions[call_id].get("approved") is not True:
            return  # it asked and was not let run: no subagent ran
        self._settle(call_id, name, tool_input)
        agent = str(tool_input.get("subagent_type") or "general-purpose")
        description = str(tool_input.get("description") or agent)
        try:
            child = self.report.subagent(call_id, agent, description)
        except Exception:  # a reporter without child chats: the call still reads right
            return
        began = self.at
        # Its first entry is the prompt its caller wrote: words, which a replay passes over.
        Replay(child, self.decisions, self.subagents).entries(found)
        if isinstance(child, TurnRecorder):  # how its turn ends is read when its call does
            child.took_ms = self._child_ms(call_id, began, found)
            if call_id in self.subagents.cut_off:
                child.cut_off = HOST_STOPPED

    def _child_ms(self, call_id: str, began: datetime | None, found: Entries) -> int:
        """How long a subagent ran: as the host timed it live, else from its call's entry
        to its result (or its own last entry, for one that ran on in the background)."""
        kept = (self.subagents.kept.get(call_id) or {}).get("duration")
        if isinstance(kept, int | float):
            return int(kept)
        ended = [m for m in map(_moment, found) if m is not None]
        if call_id in self.subagents.result_at:
            ended.append(self.subagents.result_at[call_id])
        if began is None or not ended:
            return 0
        return max(0, int((max(ended) - began).total_seconds() * 1000))

    def _settle(self, call_id: str, name: str, tool_input: Mapping[str, Any]) -> bool:
        """Say how the call came to run (asked, or not); False when it never ran."""
        if call_id in self.running:
            return True
        as_json = json.dumps(tool_input)
        invocation = self._invocation(name, tool_input)
        decided = self.decisions.get(call_id)
        if decided is not None and decided.get("asked"):
            approval = (
                Approval(
                    bool(decided.get("approved")),
                    edited_input=decided.get("edited"),
                    reason=decided.get("reason"),
                    selected_option_id=decided.get("selected"),
                    setting=decided.get("setting"),
                )
                if "approved" in decided
                else None
            )
            self.report.tool_decided(
                call_id,
                tool_input=as_json,
                invocation_message=invocation,
                approval=approval,
                title=decided.get("title"),
                options=_options(decided.get("options")),
            )
            if approval is None or not approval.approved:
                return False
        else:
            self.report.tool_running(call_id, tool_input=as_json, invocation_message=invocation)
        self.running.add(call_id)
        return True

    @staticmethod
    def _invocation(name: str, tool_input: Mapping[str, Any]) -> str:
        client_name = tools.client_tool_name(name)
        if client_name is not None:
            return f"Run `{client_name}`"  # a client's tool: what the live call said
        return tools.invocation_message(name, tool_input)

    def _past_tense(self, call_id: str, name: str, tool_input: Mapping[str, Any]) -> str:
        said = (self.decisions.get(call_id) or {}).get("pastTenseMessage")
        if said:
            return str(said)  # the client that ran it said so
        client_name = tools.client_tool_name(name)
        if client_name is not None:
            return f"Ran `{client_name}`"
        return tools.past_tense_message(name, tool_input)

    def _tool_result(self, block: Mapping[str, Any], result: Any) -> None:
        call_id = str(block.get("tool_use_id"))
        if call_id not in self.calls:
            return
        name, tool_input = self.calls.pop(call_id)
        content = tools.result_content(block.get("content"))
        said = " ".join(c["text"] for c in content)
        report = self.report
        if name == "AskUserQuestion":
            asked = questions.to_protocol(tool_input)
            recorded = result.get("answers") if isinstance(result, Mapping) else None
            answers = questions.answers_from_tool(asked, recorded or {})
            report.asked(asked, InputAnswer("accept" if answers else "decline", answers))
            return
        error = bool(block.get("is_error"))
        if (
            call_id not in self.running
            and call_id not in self.decisions
            and error
            and any(word in said for word in DENIED)
        ):
            report.tool_decided(
                call_id,
                tool_input=json.dumps(tool_input),
                invocation_message=self._invocation(name, tool_input),
                approval=Approval(False, reason="denied"),
            )
            return
        if not self._settle(call_id, name, tool_input):
            return
        report.tool_complete(
            call_id,
            success=not error,
            past_tense_message=self._past_tense(call_id, name, tool_input),
            content=content,
            error=(said or "failed") if error else None,
        )

    def report_usage(self, known: Mapping[str, Any]) -> None:
        """The turn's tokens as the live turn reported them at its end."""
        if not self.usage and not known.get("model"):
            return
        spent = list(self.usage.values())

        def total(key: str) -> int:
            return sum(int(u.get(key) or 0) for u in spent)

        context = None
        if spent:
            # The latest call's prompt and answer: what the context held when the turn ended.
            last = spent[-1]
            context = sum(
                int(last.get(key) or 0)
                for key in (
                    "input_tokens",
                    "cache_read_input_tokens",
                    "cache_creation_input_tokens",
                    "output_tokens",
                )
            )
        cost = known.get("cost")
        size = known.get("contextSize")
        self.report.usage(
            input_tokens=total("input_tokens"),
            output_tokens=total("output_tokens"),
            model=known.get("model") or self.model,
            context_used=context,
            context_size=int(size) if size else None,
            cache_read_tokens=total("cache_read_input_tokens"),
            cache_write_tokens=total("cache_creation_input_tokens"),
            cost=Cost(float(cost)) if cost is not None else None,
        )


def _options(kept: Any) -> list[ApprovalOption]:
    """The answers a call offered, as the sidecar kept them (none from older hosts)."""
    offered: list[ApprovalOption] = []
    for option in kept if isinstance(kept, list) else ():
        if isinstance(option, Mapping) and option.get("kind") in ("approve", "deny"):
            offered.append(
                ApprovalOption(str(option.get("id")), str(option.get("label")), option["kind"])
            )
    return offered


def notice(report: TurnReporter, trigger: str, before: Any) -> None:
    """The harness compacted the conversation: a system notification, live or rebuilt."""
    said = "Conversation compacted" + (f" from {before} tokens" if before else "")
    meta: dict[str, Any] = {"kind": "compaction", "trigger": trigger}
    if before is not None:
        meta["preTokens"] = before
    report.notification(said, meta=meta)


def rebuild(
    entries: Entries,
    reader: TranscriptReader,
    decisions: Mapping[str, Mapping[str, Any]] | None = None,
    turn_ids: Mapping[str, str] | None = None,
    *,
    path: Path | None = None,
    ended: Mapping[str, Mapping[str, Any]] | None = None,
    cut_off: Collection[str] = (),
    subagents: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Every turn of a transcript through ``reader``.

    ``decisions`` says which calls asked and what the answer was, ``turn_ids``
    names the turns whose id was not their transcript uuid, ``ended`` holds how
    a live turn ended where the transcript does not say (its cost, the model's
    context window, an error; by the turn's entry uuid), ``cut_off`` names the turns
    (and background subagents' calls) the host never saw end (it stopped first),
    ``subagents`` what the host kept of each subagent it saw (its duration, by its
    call), and ``path`` is where the transcript is, so its subagents are found.
    """
    decisions = decisions or {}
    turn_ids = turn_ids or {}
    ended = ended or {}
    found = Subagents(path, entries, subagents, cut_off)
    for start, rest in turns(entries):
        start_id = str(start.get("uuid"))
        report = reader.turn(
            turn_ids.get(start_id, start_id),
            # A turn the CLI began when background work ended reads as it did live.
            notification_message(start)
            or {"text": prompt_text(start) or "", "origin": {"kind": "user"}},
            started_at=start.get("timestamp"),
        )
        report.reference(start_id)  # as it was live: the entry the turn began at
        replay = Replay(report, decisions, found)
        replay.entries(rest)
        known = ended.get(start_id) or {}
        # As long as the live turn took, where this host saw it; else what the timestamps span.
        kept = known.get("duration")
        duration = int(kept) if isinstance(kept, int | float) else _span_ms(start, rest)
        if known.get("error"):
            # The CLI failed (or died) mid-turn: the transcript just stops.
            if known.get("model"):
                replay.report_usage(known)  # it failed after saying what it spent
            reader.end_turn(state="error", duration_ms=duration, error=str(known["error"]))
            continue
        if start_id in cut_off:
            # What the transcript kept of it stays; how it would have ended nobody knows.
            reader.end_turn(state="error", duration_ms=duration, error=HOST_STOPPED)
            continue
        if replay.state != "cancelled":
            # A cancelled turn stops listening before the CLI counts what it spent.
            replay.report_usage(known)
        reader.end_turn(state=replay.state, duration_ms=duration)  # type: ignore[arg-type]


def _moment(entry: Mapping[str, Any]) -> datetime | None:
    stamp = entry.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _span_ms(start: Mapping[str, Any], rest: Iterable[Mapping[str, Any]]) -> int:
    """From a turn's first entry to its latest one, by the timestamps the CLI wrote."""
    began = _moment(start)
    moments = [m for m in map(_moment, rest) if m is not None]
    if began is None or not moments:
        return 0
    return max(0, int((max(moments) - began).total_seconds() * 1000))
