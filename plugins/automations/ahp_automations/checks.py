"""Checking and normalising a definition before it is kept.

Every refusal is a ``ValueError`` whose text starts with the field at fault, as
the action named it (``definition.triggers[1].id: ...`` for a create,
``changes.triggers[1].id: ...`` for an update), so a client can point at it.
Nothing is kept when any check fails.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ahp_automations.cron import Schedule, shortest_gap
from ahpcore.ports import AutomationContext


def refuse(field: str, why: str) -> ValueError:
    return ValueError(f"{field}: {why}")


def parse_instant(text: Any) -> datetime:
    """An ISO 8601 timestamp with its offset (a bare date or time is refused)."""
    if not isinstance(text, str):
        raise ValueError("is not a timestamp")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} names no offset from UTC (add Z or +01:00)")
    return moment


def _session(template: Any, field: str, context: AutomationContext) -> dict[str, Any]:
    if not isinstance(template, Mapping):
        raise refuse(field, "must be an object")
    template = dict(template)
    provider = template.get("provider")
    if provider is None:
        if len(context.providers) != 1:
            served = ", ".join(sorted(context.providers)) or "none"
            raise refuse(f"{field}.provider", f"name a provider (this host serves: {served})")
    elif provider not in context.providers:
        served = ", ".join(sorted(context.providers)) or "none"
        raise refuse(
            f"{field}.provider", f"no provider {provider!r} on this host (it serves: {served})"
        )
    if template.get("customizations"):
        # Capturing means reading each plugin from the client now and loading the copy
        # into every run's session later; this host's sessions load no client plugins at
        # all (createSession only records a client's), so nothing could carry them.
        raise refuse(
            f"{field}.customizations",
            "this host does not advertise automations.customizations: it captures no "
            "client plugins and its sessions load none, so a run could not use them; "
            "leave customizations out",
        )
    return template


def _schedule_trigger(trigger: dict[str, Any], field: str, min_interval: int) -> dict[str, Any]:
    schedule = trigger.get("schedule")
    if not isinstance(schedule, Mapping):
        raise refuse(f"{field}.schedule", "must be an object")
    expression: Any = schedule.get("expression")
    zone: Any = schedule.get("timeZone")
    try:
        Schedule(expression, "UTC")
    except ValueError as exc:
        raise refuse(f"{field}.schedule.expression", str(exc)) from None
    try:
        Schedule(expression, zone)
    except ValueError as exc:
        raise refuse(f"{field}.schedule.timeZone", str(exc)) from None
    gap = shortest_gap(expression, min_interval) if min_interval > 1 else None
    if gap is not None:
        raise refuse(
            f"{field}.schedule.expression",
            f"runs {gap} minute(s) after a run at its closest; this host runs a schedule "
            f"at most every {min_interval} minutes (minIntervalMinutes)",
        )
    policy = trigger.get("misfirePolicy")
    if policy is not None and policy not in ("skip", "runOnce"):
        raise refuse(f"{field}.misfirePolicy", "must be skip or runOnce")
    return trigger


def _event_trigger(
    trigger: dict[str, Any], field: str, context: AutomationContext
) -> dict[str, Any]:
    kind = trigger.get("type")
    offered = {str(item.get("type")): item for item in context.triggers}
    definition = offered.get(str(kind))
    if definition is None:
        known = ", ".join(sorted(offered)) or "none"
        raise refuse(
            f"{field}.type", f"no event trigger {kind!r} on this host (it offers: {known})"
        )
    events = {str(item.get("id")): item for item in definition.get("events") or ()}
    selected = trigger.get("events")
    if not isinstance(selected, list) or not selected:
        raise refuse(f"{field}.events", "select at least one event")
    normal: list[dict[str, Any]] = []
    for index, event in enumerate(selected):
        ident = event.get("id") if isinstance(event, Mapping) else None
        if ident not in events:
            known = ", ".join(sorted(events)) or "none"
            raise refuse(f"{field}.events[{index}].id", f"no event {ident!r} (offered: {known})")
        # The host's own words for the event, not the ones the client sent.
        shown = {"id": ident, "title": events[ident].get("title", ident)}
        if events[ident].get("description"):
            shown["description"] = events[ident]["description"]
        normal.append(shown)
    trigger = {**trigger, "title": definition.get("title", kind), "events": normal}
    if definition.get("description"):
        trigger["description"] = definition["description"]
    else:
        trigger.pop("description", None)
    return trigger


def _triggers(
    triggers: Any, field: str, context: AutomationContext, min_interval: int
) -> list[dict[str, Any]]:
    if not isinstance(triggers, list):
        raise refuse(field, "must be a list")
    seen: set[str] = set()
    normal = []
    for index, trigger in enumerate(triggers):
        here = f"{field}[{index}]"
        if not isinstance(trigger, Mapping):
            raise refuse(here, "must be an object")
        trigger = dict(trigger)
        ident = trigger.get("id")
        if not isinstance(ident, str) or not ident:
            raise refuse(f"{here}.id", "must be a non-empty string")
        if ident in seen:
            raise refuse(f"{here}.id", f"{ident!r} is the id of an earlier trigger")
        seen.add(ident)
        kind = trigger.get("kind")
        if kind == "schedule":
            normal.append(_schedule_trigger(trigger, here, min_interval))
        elif kind == "event":
            normal.append(_event_trigger(trigger, here, context))
        else:
            raise refuse(f"{here}.kind", f"{kind!r} is neither schedule nor event")
    return normal


def _conditions(conditions: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(conditions, list):
        raise refuse(field, "must be a list")
    kinds: set[str] = set()
    normal = []
    for index, condition in enumerate(conditions):
        here = f"{field}[{index}]"
        if not isinstance(condition, Mapping):
            raise refuse(here, "must be an object")
        kind = condition.get("kind")
        if kind in kinds:
            raise refuse(f"{here}.kind", f"{kind} is named twice")
        kinds.add(str(kind))
        if kind == "afterRuns":
            limit: Any = condition.get("max")
            whole = isinstance(limit, int) or (isinstance(limit, float) and limit.is_integer())
            if isinstance(limit, bool) or not whole or limit < 1:
                raise refuse(f"{here}.max", "must be a whole number of 1 or more")
            normal.append({**condition, "max": int(limit)})
        elif kind == "afterDate":
            try:
                parse_instant(condition.get("date"))
            except ValueError as exc:
                raise refuse(f"{here}.date", str(exc)) from None
            normal.append(dict(condition))
        else:
            raise refuse(f"{here}.kind", f"{kind!r} is neither afterRuns nor afterDate")
    return normal


def _message(message: Any, field: str) -> dict[str, Any]:
    if not isinstance(message, Mapping) or not isinstance(message.get("text"), str):
        raise refuse(field, "must be a message with text")
    if not message["text"].strip():
        raise refuse(f"{field}.text", "is empty: a run would say nothing to its agent")
    # A run's message is the automation's, whatever the client put there.
    return {**message, "origin": {"kind": "automation"}}


def check_definition(
    definition: Mapping[str, Any],
    field: str,
    context: AutomationContext,
    *,
    min_interval: int = 1,
) -> dict[str, Any]:
    """A whole ``AutomationDefinition`` as this host keeps it; ``min_interval`` is the
    closest two runs of one schedule may come, in minutes."""
    if not isinstance(definition, Mapping):
        raise refuse(field, "must be an object")
    normal = copy.deepcopy(dict(definition))
    if not isinstance(normal.get("title"), str) or not normal["title"].strip():
        raise refuse(f"{field}.title", "must be a non-empty string")
    if not isinstance(normal.get("enabled"), bool):
        raise refuse(f"{field}.enabled", "must be true or false")
    normal["message"] = _message(normal.get("message"), f"{field}.message")
    normal["session"] = _session(normal.get("session"), f"{field}.session", context)
    normal["triggers"] = _triggers(
        normal.get("triggers"), f"{field}.triggers", context, min_interval
    )
    if "disableConditions" in normal:
        normal["disableConditions"] = _conditions(
            normal["disableConditions"], f"{field}.disableConditions"
        )
    return normal


def patched(
    current: Mapping[str, Any],
    changes: Mapping[str, Any],
    context: AutomationContext,
    *,
    min_interval: int = 1,
) -> dict[str, Any]:
    """``current`` with an ``AutomationDefinitionPatch`` applied.

    Only the fields the patch names are checked (under ``changes.<field>``): the
    rest were checked when kept, and a host that lost a provider since must
    still let a person switch the automation off or rename it.
    """
    merged = copy.deepcopy(dict(current))
    if "title" in changes:
        if not isinstance(changes["title"], str) or not changes["title"].strip():
            raise refuse("changes.title", "must be a non-empty string")
        merged["title"] = changes["title"]
    if "enabled" in changes:
        if not isinstance(changes["enabled"], bool):
            raise refuse("changes.enabled", "must be true or false")
        merged["enabled"] = changes["enabled"]
    if "message" in changes:
        merged["message"] = _message(changes["message"], "changes.message")
    if "session" in changes:
        merged["session"] = _session(changes["session"], "changes.session", context)
    if "triggers" in changes:
        merged["triggers"] = _triggers(
            changes["triggers"], "changes.triggers", context, min_interval
        )
    if "disableConditions" in changes:
        merged["disableConditions"] = _conditions(
            changes["disableConditions"], "changes.disableConditions"
        )
    if "_meta" in changes:
        merged["_meta"] = copy.deepcopy(changes["_meta"])
    return merged


def after_runs(definition: Mapping[str, Any]) -> int | None:
    """The ``afterRuns`` cap of a definition, or None."""
    for condition in definition.get("disableConditions") or ():
        if condition.get("kind") == "afterRuns":
            return int(condition["max"])
    return None


def after_date(definition: Mapping[str, Any]) -> datetime | None:
    """The ``afterDate`` of a definition, or None."""
    for condition in definition.get("disableConditions") or ():
        if condition.get("kind") == "afterDate":
            return parse_instant(condition["date"])
    return None
