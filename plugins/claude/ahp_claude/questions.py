"""AskUserQuestion in the protocol's words, and the answers back in the tool's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def to_protocol(tool_input: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool's questions as ChatInputQuestion dicts (ids ``q1``, ``q2``, ...)."""
    questions: list[dict[str, Any]] = []
    for index, item in enumerate(tool_input.get("questions") or (), start=1):
        options = [
            {
                "id": str(option.get("label", "")),
                "label": str(option.get("label", "")),
                **(
                    {"description": str(option["description"])} if option.get("description") else {}
                ),
            }
            for option in item.get("options") or ()
        ]
        question: dict[str, Any] = {"id": f"q{index}", "message": str(item.get("question", ""))}
        if item.get("header"):
            question["title"] = str(item["header"])
        if options:
            question["kind"] = "multi-select" if item.get("multiSelect") else "single-select"
            question["options"] = options
            question["allowFreeformInput"] = True
        else:
            question["kind"] = "text"
        questions.append(question)
    return questions


def _value(answer: Mapping[str, Any]) -> str | None:
    if answer.get("state") not in ("draft", "submitted"):
        return None
    value = answer.get("value") or {}
    picked = value.get("value")
    parts = [*(picked if isinstance(picked, list) else [picked] if picked else [])]
    parts += value.get("freeformValues") or []
    return ", ".join(str(p) for p in parts) if parts else None


def answers_for_tool(
    tool_input: Mapping[str, Any],
    questions: Sequence[Mapping[str, Any]],
    answers: Mapping[str, Any],
) -> dict[str, str]:
    """``{question text: answer}`` as the tool takes them in ``updated_input['answers']``."""
    result: dict[str, str] = {}
    for question in questions:
        answer = answers.get(question["id"])
        text = _value(answer) if isinstance(answer, Mapping) else None
        if text is not None:
            result[str(question["message"])] = text
    return result


def answers_from_tool(
    questions: Sequence[Mapping[str, Any]], answers: Mapping[str, Any]
) -> dict[str, Any]:
    """The tool's recorded answers as ChatInputAnswer dicts (for a rebuilt turn)."""
    result: dict[str, Any] = {}
    for question in questions:
        text = answers.get(str(question["message"]))
        if text is None:
            continue
        value: dict[str, Any]
        if question.get("kind") == "single-select":
            value = {"kind": "selected", "value": str(text)}
        elif question.get("kind") == "multi-select":
            value = {"kind": "selected-many", "value": [p.strip() for p in str(text).split(",")]}
        else:
            value = {"kind": "text", "value": str(text)}
        result[question["id"]] = {"state": "submitted", "value": value}
    return result
