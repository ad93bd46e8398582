"""What a person typed, as the protocol's answer: a tool confirmation, a question's answer.

Pure functions, so each mapping is plain to read and to test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: An option whose label or id says it goes on approving (the Claude backend's
#: "Allow always"; "in this session" elsewhere).
_LASTING = re.compile(r"always|session|don.t ask", re.IGNORECASE)

YES = ("y", "yes")
NO = ("n", "no")
ALWAYS = ("a", "always")


@dataclass(frozen=True)
class Decision:
    """A confirmation answer: the action's fields, and whether to approve the same tool
    from now on without asking (only when the host offered no lasting option itself)."""

    fields: dict[str, Any]
    remember: bool = False


def approval_options(call: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in call.get("options") or [] if isinstance(o, dict) and "id" in o]


def approval_hint(call: dict[str, Any]) -> str:
    """The answers the prompt takes."""
    numbered = " or an option's number" if approval_options(call) else ""
    return f"y(es) / n(o) / a(lways){numbered}"


def _approve(option: dict[str, Any] | None, confirmed: str = "user-action") -> dict[str, Any]:
    fields: dict[str, Any] = {"approved": True, "confirmed": confirmed}
    if option is not None:
        fields["selectedOptionId"] = option["id"]
    return fields


def _deny(option: dict[str, Any] | None, suggestion: str = "") -> dict[str, Any]:
    fields: dict[str, Any] = {"approved": False, "reason": "denied"}
    if option is not None:
        fields["selectedOptionId"] = option["id"]
    if suggestion:
        # What to do instead goes to the agent with the denial.
        fields["userSuggestion"] = {"text": suggestion, "origin": {"kind": "user"}}
    return fields


def decide(call: dict[str, Any], typed: str) -> Decision | None:
    """The confirmation ``typed`` means for a ``pending-confirmation`` tool call, or None
    when it means nothing (ask again).

    ``y`` approves once (the first approving option, when the host offers options),
    ``n`` denies (the first denying option; ``n <text>`` tells the agent what to do
    instead), ``a`` approves from now on: the option that says so when the host
    offers one, else an approval now and the same tool approved by this client
    for the rest of the chat. A number picks an offered option by its place.
    """
    text = typed.strip()
    word, _, rest = text.partition(" ")
    word = word.lower()
    options = approval_options(call)
    approving = [o for o in options if o.get("kind") == "approve"]
    denying = [o for o in options if o.get("kind") == "deny"]
    if text.isdigit() and options:
        index = int(text) - 1
        if not 0 <= index < len(options):
            return None
        chosen = options[index]
        if chosen.get("kind") == "approve":
            return Decision({**_approve(chosen)})
        return Decision(_deny(chosen))
    if word in YES and not rest:
        return Decision(_approve(approving[0] if approving else None))
    if word in NO:
        return Decision(_deny(denying[0] if denying else None, rest.strip()))
    if word in ALWAYS and not rest:
        lasting = [
            o for o in approving[1:] if _LASTING.search(f"{o.get('label', '')} {o['id']}")
        ] or approving[1:]
        if lasting:
            return Decision(_approve(lasting[0]))
        return Decision(_approve(approving[0] if approving else None), remember=True)
    return None


def auto_approval(call: dict[str, Any]) -> dict[str, Any]:
    """The approval this client gives by itself to a tool the person said ``always`` to."""
    approving = [o for o in approval_options(call) if o.get("kind") == "approve"]
    return _approve(approving[0] if approving else None, confirmed="setting")


# -- questions ---------------------------------------------------------------------------------
class Invalid(ValueError):
    """An answer a question does not take; its message says what it takes."""


def question_hint(question: dict[str, Any]) -> str:
    kind = question.get("kind")
    if kind == "boolean":
        return "y/n"
    if kind in ("number", "integer"):
        bounds = [str(question[k]) for k in ("min", "max") if k in question]
        return f"a{'n integer' if kind == 'integer' else ' number'}" + (
            f" ({' to '.join(bounds)})" if len(bounds) == 2 else ""
        )
    if kind == "single-select":
        return "a number" + (" or your own answer" if question.get("allowFreeformInput") else "")
    if kind == "multi-select":
        extra = " or your own answers" if question.get("allowFreeformInput") else ""
        return f"numbers separated by commas{extra}"
    return ""


def answer(question: dict[str, Any], typed: str) -> dict[str, Any] | None:
    """The ``ChatInputAnswer`` for ``typed``; None to skip it (nothing typed, not
    required). Raises ``Invalid`` for an answer the question does not take."""
    text = typed.strip()
    kind = question.get("kind", "text")
    if not text:
        default = question.get("defaultValue")
        if default is not None and kind in ("text", "number", "integer", "boolean"):
            text = str(default).lower() if kind == "boolean" else str(default)
        elif question.get("required"):
            raise Invalid("an answer is required")
        else:
            return None
    value: dict[str, Any]
    if kind == "boolean":
        if text.lower() in ("y", "yes", "true"):
            value = {"kind": "boolean", "value": True}
        elif text.lower() in ("n", "no", "false"):
            value = {"kind": "boolean", "value": False}
        else:
            raise Invalid("answer y or n")
    elif kind in ("number", "integer"):
        try:
            number: float | int = int(text) if kind == "integer" else float(text)
        except ValueError:
            raise Invalid(f"answer {question_hint(question)}") from None
        low, high = question.get("min"), question.get("max")
        if (low is not None and number < low) or (high is not None and number > high):
            raise Invalid(f"answer {question_hint(question)}")
        value = {"kind": "number", "value": number}
    elif kind == "single-select":
        value = _selected(question, [text], many=False)
    elif kind == "multi-select":
        value = _selected(question, [t.strip() for t in text.split(",") if t.strip()], many=True)
    else:
        value = {"kind": "text", "value": text}
    return {"state": "submitted", "value": value}


def _selected(question: dict[str, Any], picks: list[str], many: bool) -> dict[str, Any]:
    options = [o for o in question.get("options") or [] if isinstance(o, dict)]
    chosen: list[str] = []
    freeform: list[str] = []
    for pick in picks:
        by_label = [o for o in options if str(o.get("label", "")).lower() == pick.lower()]
        if pick.isdigit() and 1 <= int(pick) <= len(options):
            chosen.append(str(options[int(pick) - 1]["id"]))
        elif by_label:
            chosen.append(str(by_label[0]["id"]))
        elif question.get("allowFreeformInput"):
            freeform.append(pick)
        else:
            raise Invalid(f"answer {question_hint(question)} (1 to {len(options)})")
    if many:
        low, high = question.get("min"), question.get("max")
        count = len(chosen) + len(freeform)
        if (low is not None and count < low) or (high is not None and count > high):
            raise Invalid(f"pick {low if low is not None else 0} to {high or len(options)}")
        value: dict[str, Any] = {"kind": "selected-many", "value": chosen}
    else:
        if len(chosen) + len(freeform) != 1:
            raise Invalid(f"answer {question_hint(question)}")
        value = {"kind": "selected", "value": chosen[0] if chosen else ""}
    if freeform:
        value["freeformValues"] = freeform
    return value
