"""What the composer asks for: ``completions``, ``resolveSessionConfig`` and
``sessionConfigCompletions``.

Every completion item carries ``_meta.command`` (and ``description`` /
``argumentHint``): the reference client reads a slash command out of the
attachment's ``_meta`` and drops an item without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

CHAT_PREFIX = "#chat:"
MAX_CHAT_ITEMS = 20
COMMAND_KINDS = ("skill", "prompt")


def word_at(text: str, offset: int) -> tuple[int, str]:
    """The word ending at ``offset``: (where it starts, the word)."""
    offset = max(0, min(int(offset), len(text)))
    start = offset
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return start, text[start:offset]


def commands(customizations: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The slash commands a session offers: the skill and prompt children of its containers."""
    found = []
    for container in customizations:
        for child in container.get("children") or []:
            if child.get("type") not in COMMAND_KINDS or child.get("enabled", True) is False:
                continue
            # A skill only the agent may invoke is not a slash command.
            if not child.get("disableUserInvocation"):
                found.append(child)
    return found


def command_items(
    customizations: Iterable[Mapping[str, Any]], start: int, word: str
) -> list[dict[str, Any]]:
    typed = word[1:].lower()
    items = []
    for child in commands(customizations):
        name = str(child["name"])
        if not name.lower().startswith(typed):
            continue
        meta_in = child.get("_meta") or {}
        meta: dict[str, Any] = {"command": name}
        for key in ("description", "argumentHint"):
            # SkillCustomization and PromptCustomization declare description themselves.
            value = meta_in.get(key) or meta_in.get(f"ahp.{key}") or child.get(key)
            if value:
                meta[key] = value
        if child.get("type") == "skill":
            meta["isSkill"] = True
        items.append(
            {
                "insertText": f"/{name} ",
                "rangeStart": start,
                "rangeEnd": start + len(word),
                "attachment": {"type": "simple", "label": f"/{name}", "_meta": meta},
            }
        )
    return items


def chat_items(
    chats: Iterable[Mapping[str, Any]], typing_in: str, start: int, word: str
) -> list[dict[str, Any]]:
    """Other chats of the session, matched case blind on the title, newest first."""
    query = word[len(CHAT_PREFIX) :].lower() if word.startswith(CHAT_PREFIX) else ""
    candidates = [
        chat
        for chat in chats
        if chat["resource"] != typing_in
        and (chat.get("origin") or {}).get("kind") != "tool"
        and query in str(chat.get("title", "")).lower()
    ]
    candidates.sort(key=lambda chat: str(chat.get("modifiedAt", "")), reverse=True)
    items = []
    for chat in candidates[:MAX_CHAT_ITEMS]:
        title = str(chat.get("title") or "Untitled chat")
        attachment: dict[str, Any] = {
            "type": "chat",
            "label": title,
            "resource": chat["resource"],
            "_meta": {"command": f"chat:{title}"},
        }
        completed = [t for t in chat.get("turns", []) if t.get("state") == "complete"]
        if completed:
            attachment["endTurn"] = completed[-1]["id"]
        items.append(
            {
                "insertText": f"{CHAT_PREFIX}{title} ",
                "rangeStart": start,
                "rangeEnd": start + len(word),
                "attachment": attachment,
            }
        )
    return items


def resolve_config(
    properties: Mapping[str, Mapping[str, Any]], answered: Mapping[str, Any]
) -> dict[str, Any]:
    """A config schema with values: what was answered stays, the rest take their defaults."""
    values = {key: value for key, value in answered.items() if key in properties}
    for key, prop in properties.items():
        if key not in values and "default" in prop:
            values[key] = prop["default"]
    return {"schema": {"type": "object", "properties": dict(properties)}, "values": values}


def config_properties(backend: Any, directory: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """The session config properties a backend offers (``session_config`` is optional)."""
    describe = getattr(backend, "session_config", None)
    return dict(describe(directory, values) or {}) if callable(describe) else {}
