"""The values the backend contract passes around: abilities, turns, answers, rows.

Part of ``ahpcore.ports.backend``, which re-exports every name here; import
them from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, TypeVar

JSON = Any
T = TypeVar("T")

#: An answer, or an awaitable of it: the calls that may block are written either way.
Maybe: TypeAlias = T | Awaitable[T]

#: Who started a turn the agent began itself (``MessageOrigin.kind``).
TurnOrigin = Literal["agent", "systemNotification"]


class TurnEnded(Exception):
    """The turn an ``await`` belonged to has ended (cancelled, or the chat was disposed).

    Raised in the backend from ``tool_approval``, ``ask``, ``client_tool`` and
    ``tool_auth`` when the question is settled because its turn ended rather
    than because somebody answered it. A backend lets it propagate, or stops
    its own work and returns.
    """

    def __init__(self, turn_id: str, why: str = "the turn ended") -> None:
        super().__init__(f"turn {turn_id}: {why}")
        self.turn_id = turn_id
        self.why = why


class AgentRefused(Exception):
    """The live agent refuses a change a client asked for (a config value, a toggle).

    Its message reaches the client as the reason the action was refused, so it
    should say what was wrong in words a person reads.
    """


@dataclass(frozen=True)
class Abilities:
    """What a backend can do beyond running turns in a fresh chat."""

    #: Reopen a conversation by its backend id (catalogue rows, restarts, moves).
    resume: bool = False
    #: Start a chat from a named turn of another chat's conversation.
    fork: bool = False
    #: Start a side chat that sees what one turn said.
    side_chat: bool = False
    #: Drop the turns after a named one (``chat/truncated``).
    truncate: bool = False
    #: Delete its own copy of a conversation when the session is disposed.
    delete: bool = False
    #: List past conversations for the catalogue (``listSessions``).
    list_sessions: bool = False
    #: Re-run the last, errored turn (``chat/turnResume``).
    turn_resume: bool = False
    #: Take a steering message into a running turn.
    steering: bool = False
    #: Host more than one chat per session (``createChat`` beyond the default).
    multiple_chats: bool = True
    #: Work in more than one directory per session.
    multiple_working_directories: bool = False
    #: The first working directory is the agent's fixed root.
    immutable_primary: bool = False
    #: The first working directory may be swapped (``session/workingDirectoryReplaced``).
    primary_replacement: bool = False
    #: Hear of a chat's new title (``Backend.rename``), so its own catalogue agrees.
    rename: bool = False
    #: Take session config changes into a live agent (``Agent.configure``).
    configure: bool = False
    #: Switch customizations on and off in a live agent (``Agent.toggle``).
    toggle: bool = False
    #: Start and stop MCP servers in a live agent (``Agent.mcp_start`` / ``mcp_stop``).
    mcp_control: bool = False
    #: Truncate through the live agent (``Agent.truncate``) rather than a dead transcript.
    agent_truncate: bool = False
    #: Offer the agent the host's own tools (``ChatStart.server_tools``); without it the
    #: session advertises none.
    server_tools: bool = False
    #: The session's working directories are folders of this machine. False for a backend
    #: whose sessions run on another (ahp-remote): this host's files fence, terminals and
    #: worktrees then leave its folders alone, whatever paths they name.
    local_folders: bool = True


@dataclass(frozen=True)
class ToolAnswer:
    """What one of the host's server tools answered: text for the model, and whether it worked."""

    text: str
    success: bool = True


#: The ``meta`` of a row that has none: one shared, read-only mapping, not a dict per row.
_NO_META: Mapping[str, JSON] = MappingProxyType({})


def _no_meta() -> Mapping[str, JSON]:
    return _NO_META


# Slots and a shared empty meta: a catalogue holds a row per past session, 100,000
# after a year of use, and each row's __dict__ and empty dict were a third of its size.
@dataclass(frozen=True, slots=True)
class CatalogueRow:
    """A past conversation a backend can reopen, as the catalogue lists it."""

    session_id: str
    title: str
    created_at: str
    modified_at: str
    working_directories: tuple[str, ...] = ()
    meta: Mapping[str, JSON] = field(default_factory=_no_meta)


@dataclass(frozen=True)
class CataloguePage:
    """One page of a backend's catalogue, newest first.

    ``next_cursor`` is the backend's own opaque cursor for the next page (None:
    this was the last). The host never shows it to a client.
    """

    rows: Sequence[CatalogueRow]
    next_cursor: str | None = None


@dataclass(frozen=True)
class ApprovalOption:
    """One answer a person may pick for a tool call (a ``ConfirmationOption``).

    For example ``ApprovalOption("allow-session", "Allow for this session", "approve")``.
    ``group`` puts options that belong together side by side.
    """

    id: str
    label: str
    kind: Literal["approve", "deny"]
    group: int | None = None


@dataclass(frozen=True)
class PendingEdit:
    """A file edit a tool call would make, shown to the person who approves it.

    The core serves ``after`` (and ``before``) to clients under content URIs
    while the approval is pending, and stops serving them once it settles.
    ``path`` is the file's URI (``file:///...``).
    """

    path: str
    after: str
    before: str | None = None


@dataclass(frozen=True)
class Cost:
    """What a turn cost, in a currency (``amount`` in units, not cents)."""

    amount: float
    currency: str = "USD"


@dataclass(frozen=True)
class TurnInput:
    """One turn a client started."""

    turn_id: str
    #: The protocol ``Message`` (text, attachments, model, ...).
    message: Mapping[str, JSON]
    config: Mapping[str, JSON] = field(default_factory=dict)
    #: Tools active clients provide as the turn starts, named ``<clientId>__<name>``.
    client_tools: Sequence[Mapping[str, JSON]] = ()
    #: True when this re-runs the last turn, which ended in a resumable error
    #: (``chat/turnResume``); the turn keeps its id and what it already said.
    resume: bool = False
    #: A UUID the host minted for this turn (the turn id itself when that is one). A
    #: backend may stamp it on what it stores, and report its own reference with
    #: ``TurnReporter.reference``; the host keeps turn id <-> reference across restarts.
    uuid: str = ""

    @property
    def text(self) -> str:
        return str(self.message.get("text", ""))


@dataclass(frozen=True)
class Approval:
    """A person's answer to a tool call that asked for approval."""

    approved: bool
    #: Input the person edited before approving, if any.
    edited_input: str | None = None
    #: Why a denial happened: "denied" or "skipped".
    reason: str | None = None
    #: What the person suggested instead, when they denied.
    suggestion: str | None = None
    #: The ``ApprovalOption.id`` the person picked, when the call offered options.
    selected_option_id: str | None = None
    #: Set when nobody was asked: the reason a plugin gave deciding in the person's
    #: stead (``ahp_tool_confirming``, such as a terminal auto-approve rule).
    setting: str | None = None


@dataclass(frozen=True)
class InputAnswer:
    """A person's answer to a question the agent asked."""

    response: Literal["accept", "decline", "cancel"]
    #: question id -> ChatInputAnswer dict, as the protocol has it.
    answers: Mapping[str, JSON] = field(default_factory=dict)
