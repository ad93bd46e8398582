"""Recording a live turn's reports, and replaying them through a transcript reader.

A turn is kept as the reporter calls it made, each ``[method, arguments]``;
calls that waited on a person or a client also keep the answer
(``[method, arguments, answer]``). Replay makes the same calls on the
reporter a ``TranscriptReader`` hands out, so a rebuilt turn goes through the
same builder the live one did.

A rebuilt turn has nobody to ask, so the calls that waited are replayed as
what happened: an approval as ``tool_decided`` with the answer the person gave
(a denial included), a question as ``asked`` with its answer, and a client
tool as ``tool_running`` then ``tool_complete`` with the result the client gave
(``structuredContent`` has no report). A call still waiting when the turn ended
is left for the turn's end to cancel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ahpcore.ports.backend import (
    Approval,
    ApprovalOption,
    Cost,
    InputAnswer,
    PendingEdit,
    TurnReporter,
)

Report = list[Any]


def _approval_json(approval: Approval) -> dict[str, Any]:
    return {
        "approved": approval.approved,
        "editedInput": approval.edited_input,
        "reason": approval.reason,
        "suggestion": approval.suggestion,
        "selectedOptionId": approval.selected_option_id,
        # Who decided when no person was asked: a rebuilt call says so as the live one did.
        "setting": approval.setting,
    }


def _option_json(option: ApprovalOption) -> dict[str, Any]:
    return {"id": option.id, "label": option.label, "kind": option.kind, "group": option.group}


def _options(entries: Any) -> list[ApprovalOption]:
    return [ApprovalOption(e["id"], e["label"], e["kind"], e.get("group")) for e in entries or []]


class RecordingReporter:
    """A ``TurnReporter`` that writes down every call, then passes it on."""

    def __init__(self, inner: TurnReporter, reports: list[Report]) -> None:
        self.inner = inner
        self.reports = reports

    @property
    def turn_id(self) -> str:
        return self.inner.turn_id

    def reference(self, ref: str) -> None:
        self.inner.reference(ref)  # the turn's record carries it already

    def tool_ready(self, call_id: str, *, tool_input: str | None, invocation_message: str) -> None:
        # Not kept: what follows (running or asking) says it all again.
        self.inner.tool_ready(call_id, tool_input=tool_input, invocation_message=invocation_message)

    def tool_progress(self, call_id: str, message: str) -> None:
        self._note("tool_progress", call_id=call_id, message=message)
        self.inner.tool_progress(call_id, message)

    def subagent(
        self, call_id: str, name: str, description: str, *, background: bool = False
    ) -> TurnReporter:
        child: list[Report] = []
        entry = self._note("subagent", call_id=call_id, name=name, description=description)
        entry.append(child)
        inner = self.inner.subagent(call_id, name, description, background=background)
        return RecordingReporter(inner, child)

    def _note(self, method: str, **arguments: Any) -> Report:
        entry: Report = [method, arguments]
        self.reports.append(entry)
        return entry

    def text(self, delta: str) -> None:
        self._note("text", delta=delta)
        self.inner.text(delta)

    def reasoning(self, delta: str) -> None:
        self._note("reasoning", delta=delta)
        self.inner.reasoning(delta)

    def tool_start(
        self,
        call_id: str,
        tool_name: str,
        *,
        display_name: str | None = None,
        intention: str | None = None,
        meta: Mapping[str, Any] | None = None,
        mcp_server: str | None = None,
    ) -> None:
        self._note(
            "tool_start",
            call_id=call_id,
            tool_name=tool_name,
            display_name=display_name,
            intention=intention,
            meta=dict(meta) if meta is not None else None,
            mcp_server=mcp_server,
        )
        self.inner.tool_start(
            call_id,
            tool_name,
            display_name=display_name,
            intention=intention,
            meta=meta,
            mcp_server=mcp_server,
        )

    def tool_input(self, call_id: str, delta: str) -> None:
        self._note("tool_input", call_id=call_id, delta=delta)
        self.inner.tool_input(call_id, delta)

    def tool_running(
        self, call_id: str, *, tool_input: str | None, invocation_message: str
    ) -> None:
        self._note(
            "tool_running",
            call_id=call_id,
            tool_input=tool_input,
            invocation_message=invocation_message,
        )
        self.inner.tool_running(
            call_id, tool_input=tool_input, invocation_message=invocation_message
        )

    async def tool_approval(
        self,
        call_id: str,
        *,
        tool_input: str | None,
        invocation_message: str,
        title: str | None = None,
        options: Sequence[ApprovalOption] = (),
        edits: Sequence[PendingEdit] = (),
    ) -> Approval:
        # Noted before the wait: a turn cancelled while asking still asked.
        entry = self._note(
            "tool_approval",
            call_id=call_id,
            tool_input=tool_input,
            invocation_message=invocation_message,
            title=title,
            options=[_option_json(option) for option in options],
        )
        approval = await self.inner.tool_approval(
            call_id,
            tool_input=tool_input,
            invocation_message=invocation_message,
            title=title,
            options=options,
            edits=edits,
        )
        entry.append(_approval_json(approval))
        return approval

    def tool_complete(
        self,
        call_id: str,
        *,
        success: bool,
        past_tense_message: str,
        content: Sequence[Mapping[str, Any]] | None = None,
        error: str | None = None,
    ) -> None:
        self._note(
            "tool_complete",
            call_id=call_id,
            success=success,
            past_tense_message=past_tense_message,
            content=[dict(c) for c in content] if content is not None else None,
            error=error,
        )
        self.inner.tool_complete(
            call_id,
            success=success,
            past_tense_message=past_tense_message,
            content=content,
            error=error,
        )

    async def tool_auth(self, call_id: str, requirement: Mapping[str, Any]) -> str:
        # The token is the person's secret: recorded is only that a sign-in happened.
        self._note("tool_auth", call_id=call_id, requirement=dict(requirement))
        return await self.inner.tool_auth(call_id, requirement)

    async def client_tool(
        self, call_id: str, tool_name: str, *, tool_input: str, invocation_message: str
    ) -> Mapping[str, Any]:
        entry = self._note(
            "client_tool",
            call_id=call_id,
            tool_name=tool_name,
            tool_input=tool_input,
            invocation_message=invocation_message,
        )
        result = await self.inner.client_tool(
            call_id, tool_name, tool_input=tool_input, invocation_message=invocation_message
        )
        entry.append(dict(result))
        return result

    def tool_decided(
        self,
        call_id: str,
        *,
        tool_input: str | None,
        invocation_message: str,
        approval: Approval | None,
        title: str | None = None,
        options: Sequence[ApprovalOption] = (),
    ) -> None:
        entry = self._note(
            "tool_approval",
            call_id=call_id,
            tool_input=tool_input,
            invocation_message=invocation_message,
            title=title,
            options=[_option_json(option) for option in options],
        )
        if approval is not None:
            entry.append(_approval_json(approval))
        self.inner.tool_decided(
            call_id,
            tool_input=tool_input,
            invocation_message=invocation_message,
            approval=approval,
            title=title,
            options=options,
        )

    def asked(
        self,
        questions: Sequence[Mapping[str, Any]],
        answer: InputAnswer,
        *,
        message: str | None = None,
    ) -> None:
        entry = self._note("ask", questions=[dict(q) for q in questions], message=message)
        entry.append({"response": answer.response, "answers": dict(answer.answers)})
        self.inner.asked(questions, answer, message=message)

    async def ask(
        self, questions: Sequence[Mapping[str, Any]], *, message: str | None = None
    ) -> InputAnswer:
        entry = self._note("ask", questions=[dict(q) for q in questions], message=message)
        answer = await self.inner.ask(questions, message=message)
        entry.append({"response": answer.response, "answers": dict(answer.answers)})
        return answer

    def usage(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        model: str | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        context_used: int | None = None,
        context_size: int | None = None,
        cost: Cost | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        figures = {
            "cache_write_tokens": cache_write_tokens,
            "reasoning_tokens": reasoning_tokens,
            "context_used": context_used,
            "context_size": context_size,
            "cost": [cost.amount, cost.currency] if cost is not None else None,
            "meta": dict(meta) if meta is not None else None,
        }
        self._note(
            "usage",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
            cache_read_tokens=cache_read_tokens,
            # Only the figures given, so a file written before they existed reads the same.
            **{key: value for key, value in figures.items() if value is not None},
        )
        self.inner.usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
            context_used=context_used,
            context_size=context_size,
            cost=cost,
            meta=meta,
        )

    def title(self, title: str) -> None:
        self._note("title", title=title)
        self.inner.title(title)

    def notification(self, content: str, *, meta: Mapping[str, Any] | None = None) -> None:
        self._note("notification", content=content, meta=dict(meta) if meta else None)
        self.inner.notification(content, meta=meta)

    def activity(self, activity: str | None) -> None:
        self._note("activity", activity=activity)
        self.inner.activity(activity)

    def customizations(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._note("customizations", items=[dict(item) for item in items])
        self.inner.customizations(items)

    def config(self, values: Mapping[str, Any]) -> None:
        self._note("config", values=dict(values))
        self.inner.config(values)


def replay(reports: Sequence[Report], report: TurnReporter) -> None:
    """Make a recorded turn's calls again on ``report`` (see the module docstring)."""
    for entry in reports:
        method, arguments = entry[0], dict(entry[1])
        answer = entry[2] if len(entry) > 2 else None
        if method in ("text", "reasoning"):
            getattr(report, method)(arguments["delta"])
        elif method == "tool_start":
            report.tool_start(arguments.pop("call_id"), arguments.pop("tool_name"), **arguments)
        elif method == "tool_input":
            report.tool_input(arguments["call_id"], arguments["delta"])
        elif method in ("tool_running", "tool_complete"):
            getattr(report, method)(arguments.pop("call_id"), **arguments)
        elif method == "usage":
            cost = arguments.pop("cost", None)
            report.usage(**arguments, cost=Cost(cost[0], cost[1]) if cost else None)
        elif method == "tool_progress":
            report.tool_progress(arguments["call_id"], arguments["message"])
        elif method == "subagent":
            child = report.subagent(
                arguments["call_id"], arguments["name"], arguments["description"]
            )
            replay(answer or [], child)
        elif method == "title":
            report.title(arguments["title"])
        elif method == "activity":
            report.activity(arguments["activity"])
        elif method in ("customizations", "config", "tool_auth"):
            pass  # what surrounded the turn (session facts, a sign-in), not its history
        elif method == "tool_approval":
            report.tool_decided(
                arguments["call_id"],
                tool_input=arguments["tool_input"],
                invocation_message=arguments["invocation_message"],
                title=arguments.get("title"),
                options=_options(arguments.get("options")),
                # None: asked, never answered (the turn ended while it waited).
                approval=None
                if answer is None
                else Approval(
                    approved=bool(answer.get("approved")),
                    edited_input=answer.get("editedInput"),
                    reason=answer.get("reason"),
                    suggestion=answer.get("suggestion"),
                    selected_option_id=answer.get("selectedOptionId"),
                    setting=answer.get("setting"),
                ),
            )
        elif method == "ask":
            if answer is None:
                continue
            report.asked(
                arguments["questions"],
                InputAnswer(answer["response"], answer.get("answers") or {}),
                message=arguments.get("message"),
            )
        elif method == "client_tool":
            report.tool_running(
                arguments["call_id"],
                tool_input=arguments["tool_input"],
                invocation_message=arguments["invocation_message"],
            )
            if answer is not None:
                error = answer.get("error")
                report.tool_complete(
                    arguments["call_id"],
                    success=bool(answer.get("success")),
                    past_tense_message=str(answer.get("pastTenseMessage", "")),
                    content=answer.get("content"),
                    error=error.get("message") if isinstance(error, Mapping) else None,
                )
