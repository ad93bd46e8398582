"""Tool call lifecycle transitions for the chat reducer.

Each ``*_updater(action)`` returns a function from the current tool call to
the next one, or to the same object when the transition does not apply in
the call's current status (the caller treats that as "no change").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._helpers import Action, JsonDict, as_dict, as_list, assoc, compact, get, same, truthy

ToolCall = Mapping[str, Any]
Updater = Callable[[ToolCall], Any]

TOOL_CALL = "toolCall"

# ToolCallStatus
STREAMING = "streaming"
PENDING_CONFIRMATION = "pending-confirmation"
RUNNING = "running"
AUTH_REQUIRED = "auth-required"
PENDING_RESULT_CONFIRMATION = "pending-result-confirmation"
COMPLETED = "completed"
CANCELLED = "cancelled"

BLOCKING = (PENDING_CONFIRMATION, PENDING_RESULT_CONFIRMATION, AUTH_REQUIRED)

# ─── Tool call helpers ───────────────────────────────────────────────────────


def _tc_base(tc: ToolCall, meta: Any = None) -> JsonDict:
    """Fields every tool call lifecycle state carries; an action's ``_meta`` wins."""
    return compact(
        toolCallId=tc.get("toolCallId"),
        toolName=tc.get("toolName"),
        displayName=tc.get("displayName"),
        intention=tc.get("intention"),
        contributor=tc.get("contributor"),
        _meta=meta if meta is not None else tc.get("_meta"),
    )


def _refine_contributor(current: Any, proposed: Any) -> Any:
    """Client execution ownership is fixed at tool call start and never changes."""
    if not truthy(proposed):
        return current
    if get(current, "kind") == "client":
        same_client = get(proposed, "kind") == "client" and same(
            get(proposed, "clientId"), get(current, "clientId")
        )
        return proposed if same_client else current
    if get(proposed, "kind") == "client":
        return current
    return proposed


def _resolve_option(options: Any, option_id: Any) -> Any:
    if not truthy(option_id) or options is None:
        return None
    for option in as_list(options):
        if same(get(option, "id"), option_id):
            return option
    return None


def with_truthy(target: JsonDict, key: str, value: Any) -> JsonDict:
    """``...(value ? { key: value } : {})``."""
    if truthy(value):
        target[key] = value
    return target


def cancelled_part(tc: ToolCall) -> JsonDict:
    streaming = tc.get("status") == STREAMING
    invocation = tc.get("invocationMessage")
    return {
        "kind": TOOL_CALL,
        "toolCall": compact(
            status=CANCELLED,
            **_tc_base(tc),
            invocationMessage=(invocation if invocation is not None else "")
            if streaming
            else invocation,
            toolInput=None if streaming else tc.get("toolInput"),
            reason="skipped",
        ),
    }


def delta_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        if tc.get("status") != STREAMING:
            return tc
        out = dict(tc)
        if action.get("_meta") is not None:
            out["_meta"] = action["_meta"]
        content = action.get("content")
        if isinstance(content, str):
            partial = tc.get("partialInput")
            out["partialInput"] = (partial if isinstance(partial, str) else "") + content
        invocation = action.get("invocationMessage")
        return assoc(
            out,
            "invocationMessage",
            invocation if invocation is not None else tc.get("invocationMessage"),
        )

    return updater


def first(*values: Any) -> Any:
    """``a ?? b ?? …``."""
    for value in values:
        if value is not None:
            return value
    return None


def ready_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        status = tc.get("status")
        if status not in (STREAMING, RUNNING, PENDING_CONFIRMATION):
            return tc
        base = _tc_base(tc, action.get("_meta"))
        base = assoc(
            base,
            "contributor",
            _refine_contributor(tc.get("contributor"), action.get("contributor")),
        )
        base = assoc(base, "intention", first(action.get("intention"), tc.get("intention")))
        # Streaming input was partial; only a settled call keeps its old input.
        tool_input = first(
            action.get("toolInput"), None if status == STREAMING else tc.get("toolInput")
        )
        if truthy(action.get("confirmed")):
            return compact(
                status=RUNNING,
                **base,
                invocationMessage=action.get("invocationMessage"),
                toolInput=tool_input,
                confirmed=action.get("confirmed"),
            )
        pending = tc if status == PENDING_CONFIRMATION else {}
        out = compact(
            status=PENDING_CONFIRMATION,
            **base,
            invocationMessage=action.get("invocationMessage"),
            toolInput=tool_input,
            confirmationTitle=first(
                action.get("confirmationTitle"), pending.get("confirmationTitle")
            ),
            riskAssessment=first(action.get("riskAssessment"), pending.get("riskAssessment")),
            edits=first(action.get("edits"), pending.get("edits")),
            editable=first(action.get("editable"), pending.get("editable")),
        )
        return with_truthy(out, "options", first(action.get("options"), pending.get("options")))

    return updater


def confirmed_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        if tc.get("status") != PENDING_CONFIRMATION:
            return tc
        base = _tc_base(tc, action.get("_meta"))
        selected = _resolve_option(tc.get("options"), action.get("selectedOptionId"))
        if truthy(action.get("approved")):
            edited = action.get("editedToolInput")
            # Only inline (string) input can be replaced by an edit.
            use_edit = edited is not None and isinstance(tc.get("toolInput"), str)
            out = compact(
                status=RUNNING,
                **base,
                invocationMessage=tc.get("invocationMessage"),
                toolInput=edited if use_edit else tc.get("toolInput"),
                confirmed=action.get("confirmed"),
            )
        else:
            out = compact(
                status=CANCELLED,
                **base,
                invocationMessage=tc.get("invocationMessage"),
                toolInput=tc.get("toolInput"),
                reason=action.get("reason"),
                reasonMessage=action.get("reasonMessage"),
                userSuggestion=action.get("userSuggestion"),
            )
        return with_truthy(out, "selectedOption", selected)

    return updater


def complete_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        status = tc.get("status")
        if status not in (RUNNING, PENDING_CONFIRMATION, AUTH_REQUIRED):
            return tc
        result = as_dict(action.get("result"))
        # From auth-required only a failure (the client giving up) is valid.
        if status == AUTH_REQUIRED and truthy(result.get("success")):
            return tc
        after_confirmation = status in (RUNNING, AUTH_REQUIRED)
        needs_review = truthy(action.get("requiresResultConfirmation")) and status != AUTH_REQUIRED
        out = compact(
            status=PENDING_RESULT_CONFIRMATION if needs_review else COMPLETED,
            **_tc_base(tc, action.get("_meta")),
            invocationMessage=tc.get("invocationMessage"),
            toolInput=tc.get("toolInput"),
            confirmed=tc.get("confirmed") if after_confirmation else "not-needed",
        )
        with_truthy(out, "selectedOption", tc.get("selectedOption") if after_confirmation else None)
        # Content produced before an auth pause is the only content there is.
        with_truthy(out, "content", tc.get("content") if status == AUTH_REQUIRED else None)
        # The result is spread flat onto the tool call.
        for key, value in result.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    return updater


def result_confirmed_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        if tc.get("status") != PENDING_RESULT_CONFIRMATION:
            return tc
        base = _tc_base(tc, action.get("_meta"))
        if truthy(action.get("approved")):
            out = compact(
                status=COMPLETED,
                **base,
                invocationMessage=tc.get("invocationMessage"),
                toolInput=tc.get("toolInput"),
                confirmed=tc.get("confirmed"),
                success=tc.get("success"),
                pastTenseMessage=tc.get("pastTenseMessage"),
                content=tc.get("content"),
                structuredContent=tc.get("structuredContent"),
                error=tc.get("error"),
            )
        else:
            # A denied result never becomes state.
            out = compact(
                status=CANCELLED,
                **base,
                invocationMessage=tc.get("invocationMessage"),
                toolInput=tc.get("toolInput"),
                reason="result-denied",
            )
        return with_truthy(out, "selectedOption", tc.get("selectedOption"))

    return updater


def content_changed_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        if tc.get("status") != RUNNING:
            return tc
        out = dict(tc)
        if action.get("_meta") is not None:
            out["_meta"] = action["_meta"]
        return assoc(out, "content", action.get("content"))

    return updater


def auth_required_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        if tc.get("status") != RUNNING:
            return tc
        contributor = tc.get("contributor")
        # Only an MCP server can ask for authentication.
        if get(contributor, "kind") != "mcp":
            return tc
        out = compact(
            status=AUTH_REQUIRED,
            **_tc_base(tc, action.get("_meta")),
            invocationMessage=tc.get("invocationMessage"),
            toolInput=tc.get("toolInput"),
            confirmed=tc.get("confirmed"),
        )
        with_truthy(out, "selectedOption", tc.get("selectedOption"))
        with_truthy(out, "content", tc.get("content"))
        return assoc(out, "auth", action.get("auth"))

    return updater


def auth_resolved_updater(action: Action) -> Updater:
    def updater(tc: ToolCall) -> Any:
        if tc.get("status") != AUTH_REQUIRED:
            return tc
        # The challenge is over, so `auth` is not carried across.
        out = compact(
            status=RUNNING,
            **_tc_base(tc, action.get("_meta")),
            invocationMessage=tc.get("invocationMessage"),
            toolInput=tc.get("toolInput"),
            confirmed=tc.get("confirmed"),
        )
        with_truthy(out, "selectedOption", tc.get("selectedOption"))
        return with_truthy(out, "content", tc.get("content"))

    return updater
