"""Reducer for ``ahp-session:`` channels (``SessionState``).

Mirrors ``types/channels-session/reducer.ts``: lifecycle, the chat catalogue,
metadata flags, active clients, working directories, the session-level input
queue and the two-level customization tree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._helpers import (
    STATUS_ACTIVITY_MASK,
    STATUS_IN_PROGRESS,
    STATUS_INPUT_NEEDED,
    STATUS_IS_ARCHIVED,
    STATUS_IS_READ,
    Action,
    JsonDict,
    State,
    as_dict,
    as_list,
    assoc,
    assoc_many,
    dispatching,
    get,
    index_by,
    index_of,
    removed,
    replaced,
    same,
    set_field,
    status_of,
    truthy,
    upsert_by,
    with_status_flag,
    without_entry,
    working_directory_removed,
    working_directory_set,
)

MCP_SERVER = "mcpServer"
PLUGIN = "plugin"

Entry = Mapping[str, Any]


# ─── Helpers ─────────────────────────────────────────────────────────────────


def _awaits_user(request: Any) -> bool:
    # Client tool execution is delegated work, not a question for the user.
    return get(request, "kind") != "toolClientExecution"


def _with_input_needed(status: int, queue: list[Any]) -> int:
    if any(_awaits_user(r) for r in queue):
        return (status & ~STATUS_ACTIVITY_MASK) | STATUS_INPUT_NEEDED
    # Drop only the input-needed bit: a running turn stays in progress.
    return status & ~(STATUS_INPUT_NEEDED & ~STATUS_IN_PROGRESS)


def _update_customization(
    state: State, ident: Any, update: Callable[[Entry], Any], only_mcp: bool
) -> State:
    """Update the entry with *ident*, looking at the top level before any children.

    A top-level hit never falls through to the children. With *only_mcp* set
    (the MCP server actions) a non-server hit is skipped and every container
    is searched; otherwise the first container holding the id wins.
    """
    top = state.get("customizations")
    if top is None:
        return state
    entries = as_list(top)
    index = index_by(entries, "id", ident)
    if index >= 0:
        if only_mcp and get(entries[index], "type") != MCP_SERVER:
            return state
        return assoc(state, "customizations", replaced(entries, index, update(entries[index])))
    changed = False
    for i, container in enumerate(entries):
        if get(container, "type") == MCP_SERVER or get(container, "children") is None:
            continue
        children = as_list(container["children"])
        child_index = index_by(children, "id", ident)
        if child_index < 0:
            continue
        if only_mcp and get(children[child_index], "type") != MCP_SERVER:
            continue
        children[child_index] = update(children[child_index])
        entries[i] = assoc(container, "children", children)
        changed = True
        if not only_mcp:
            break
    return assoc(state, "customizations", entries) if changed else state


def _apply_enablement(entry: Entry, enablement: list[Any]) -> JsonDict:
    """Plugins and MCP servers keep explicit decisions; other entries a plain flag."""
    if entry.get("type") in (PLUGIN, MCP_SERVER):
        return assoc(entry, "enablement", list(enablement) if enablement else None)
    first = enablement[0] if enablement else None
    enabled = get(first, "enabled")
    return assoc(entry, "enabled", True if enabled is None else enabled)


# ─── Branches ────────────────────────────────────────────────────────────────


def _chat_added(state: State, action: Action) -> State:
    return assoc(
        state, "chats", upsert_by(as_list(state.get("chats")), "resource", action.get("summary"))
    )


def _chat_removed(state: State, action: Action) -> State:
    chats = as_list(state.get("chats"))
    index = index_by(chats, "resource", action.get("chat"))
    if index < 0:
        return state
    nxt = assoc(state, "chats", removed(chats, index))
    if same(state.get("defaultChat"), action.get("chat")):
        # The routing hint may not name a chat that is gone.
        nxt.pop("defaultChat", None)
    return nxt


def _chat_updated(state: State, action: Action) -> State:
    chats = as_list(state.get("chats"))
    index = index_by(chats, "resource", action.get("chat"))
    if index < 0:
        return state
    # Identity is not updatable, even if a sender includes it.
    changes = {k: v for k, v in as_dict(action.get("changes")).items() if k != "resource"}
    return assoc(
        state, "chats", replaced(chats, index, assoc_many(as_dict(chats[index]), **changes))
    )


def _chats_reordered(state: State, action: Action) -> State:
    chats = as_list(state.get("chats"))
    order = as_list(action.get("chats"))
    # Only an exact permutation of the current catalogue is applied.
    if len(order) != len(chats):
        return state
    picked: list[int] = []
    for resource in order:
        index = index_by(chats, "resource", resource)
        if index < 0 or index in picked:
            return state
        picked.append(index)
    return assoc(state, "chats", [chats[i] for i in picked])


def _changesets_changed(state: State, action: Action) -> State:
    value = action.get("changesets")
    return set_field(state, "changesets", value if truthy(value) else None)


def _config_changed(state: State, action: Action) -> State:
    config = state.get("config")
    if not truthy(config):
        # No schema was published, so there is nothing to write into.
        return state
    incoming = as_dict(action.get("config"))
    values = (
        dict(incoming)
        if truthy(action.get("replace"))
        else {
            **as_dict(get(config, "values")),
            **incoming,
        }
    )
    return assoc(state, "config", assoc(as_dict(config), "values", values))


def _active_client_set(state: State, action: Action) -> State:
    clients = as_list(state.get("activeClients"))
    return assoc(state, "activeClients", upsert_by(clients, "clientId", action.get("activeClient")))


def _active_client_removed(state: State, action: Action) -> State:
    return without_entry(state, "activeClients", "clientId", action.get("clientId"))


def _working_directory_replaced(state: State, action: Action) -> State:
    current = as_list(state.get("workingDirectories"))
    index = index_of(current, action.get("directory"))
    if index < 0:
        return state
    swapped = replaced(current, index, action.get("replacement"))
    # Deduplicate keeping first occurrences: [A,B,C] with B->C is [A,C], C->A is [A,B].
    result: list[Any] = []
    for uri in swapped:
        if index_of(result, uri) < 0:
            result.append(uri)
    return assoc(state, "workingDirectories", result)


def _input_needed_set(state: State, action: Action) -> State:
    queue = upsert_by(as_list(state.get("inputNeeded")), "id", action.get("request"))
    nxt = assoc(state, "inputNeeded", queue)
    nxt["status"] = _with_input_needed(status_of(state), queue)
    return nxt


def _input_needed_removed(state: State, action: Action) -> State:
    queue = state.get("inputNeeded")
    if queue is None:
        return state
    index = index_by(as_list(queue), "id", action.get("id"))
    if index < 0:
        return state
    left = removed(queue, index)
    nxt = assoc(state, "status", _with_input_needed(status_of(state), left))
    # An emptied queue is absent rather than [].
    return assoc(nxt, "inputNeeded", left or None)


def _customization_toggled(state: State, action: Action) -> State:
    enablement = as_list(action.get("enablement"))
    return _update_customization(
        state, action.get("id"), lambda e: _apply_enablement(e, enablement), only_mcp=False
    )


def _customization_updated(state: State, action: Action) -> State:
    entries = as_list(state.get("customizations"))
    return assoc(state, "customizations", upsert_by(entries, "id", action.get("customization")))


def _customization_removed(state: State, action: Action) -> State:
    top = state.get("customizations")
    if top is None:
        return state
    entries = as_list(top)
    ident = action.get("id")
    index = index_by(entries, "id", ident)
    if index >= 0:
        return assoc(state, "customizations", removed(entries, index))
    changed = False
    for i, container in enumerate(entries):
        if get(container, "type") == MCP_SERVER or get(container, "children") is None:
            continue
        children = as_list(container["children"])
        child_index = index_by(children, "id", ident)
        if child_index >= 0:
            # Every container holding the id loses it, not just the first.
            changed = True
            entries[i] = assoc(container, "children", removed(children, child_index))
    return assoc(state, "customizations", entries) if changed else state


def _mcp(update: Callable[[Entry, Action], Any]) -> Callable[[State, Action], State]:
    def branch(state: State, action: Action) -> State:
        return _update_customization(
            state, action.get("id"), lambda e: update(e, action), only_mcp=True
        )

    return branch


def _mcp_state(entry: Entry, action: Action) -> Any:
    return assoc_many(entry, state=action.get("state"), channel=action.get("channel"))


def _mcp_start(entry: Entry, action: Action) -> Any:
    return assoc_many(entry, state={"kind": "starting"}, channel=None)


def _mcp_stop(entry: Entry, action: Action) -> Any:
    return assoc_many(entry, state={"kind": "stopped"}, channel=None)


def _mcp_background(entry: Entry, action: Action) -> Any:
    current = entry.get("state")
    # Only a blocking startup can be sent to the background.
    if get(current, "kind") != "starting" or get(current, "blocking") is not True:
        return entry
    return assoc(entry, "state", assoc(as_dict(current), "blocking", False))


def _field(field: str, source: str | None = None) -> Callable[[State, Action], State]:
    def branch(state: State, action: Action) -> State:
        return set_field(state, field, action.get(source or field))

    return branch


def _flag(key: str, flag: int) -> Callable[[State, Action], State]:
    def branch(state: State, action: Action) -> State:
        status = with_status_flag(state.get("status"), flag, truthy(action.get(key)))
        return set_field(state, "status", status)

    return branch


_BRANCHES: dict[str, Callable[[State, Action], State]] = {
    # Readiness is a lifecycle change only: a provisional session may already
    # be running its first turn, so status is left alone.
    "session/ready": lambda s, a: set_field(s, "lifecycle", "ready"),
    "session/creationFailed": lambda s, a: assoc_many(
        s, lifecycle="failed", creationError=a.get("error")
    ),
    "session/chatAdded": _chat_added,
    "session/chatRemoved": _chat_removed,
    "session/chatUpdated": _chat_updated,
    "session/chatsReordered": _chats_reordered,
    "session/defaultChatChanged": _field("defaultChat"),
    "session/titleChanged": _field("title"),
    "session/isReadChanged": _flag("isRead", STATUS_IS_READ),
    "session/isArchivedChanged": _flag("isArchived", STATUS_IS_ARCHIVED),
    "session/activityChanged": _field("activity"),
    "session/changesetsChanged": _changesets_changed,
    "session/configChanged": _config_changed,
    "session/metaChanged": _field("_meta"),
    "session/serverToolsChanged": _field("serverTools", "tools"),
    "session/activeClientSet": _active_client_set,
    "session/activeClientRemoved": _active_client_removed,
    "session/workingDirectorySet": working_directory_set,
    "session/workingDirectoryRemoved": working_directory_removed,
    "session/workingDirectoryReplaced": _working_directory_replaced,
    "session/inputNeededSet": _input_needed_set,
    "session/inputNeededRemoved": _input_needed_removed,
    "session/customizationsChanged": _field("customizations"),
    "session/customizationToggled": _customization_toggled,
    "session/customizationUpdated": _customization_updated,
    "session/customizationRemoved": _customization_removed,
    "session/mcpServerStateChanged": _mcp(_mcp_state),
    "session/mcpServerStartRequested": _mcp(_mcp_start),
    "session/mcpServerStopRequested": _mcp(_mcp_stop),
    "session/mcpServerBackgroundRequested": _mcp(_mcp_background),
}

ACTION_TYPES = frozenset(_BRANCHES)


#: Apply one session action; an unknown or no-op action returns the state itself.
reduce = dispatching(_BRANCHES)


__all__ = ["ACTION_TYPES", "reduce"]
