"""The backend contract: what an agent backend offers and how it reports what its agent did.

A backend never builds protocol actions or envelopes. The core starts one
``Agent`` per chat and hands it a ``SessionReporter`` (in ``ChatStart.report``)
that lives as long as the agent; each turn the host starts gets a
``TurnReporter``, and the agent may start turns of its own through
``SessionReporter.begin_turn``. The backend says what happened (text,
reasoning, tool calls, subagents, questions, usage, a title) and the core
turns that into ``chat/*`` and ``session/*`` actions. A past conversation is
rebuilt through the same reporter, so a live turn and a rebuilt one cannot
drift apart.

Optional abilities are declared in ``Abilities``; the core advertises them to
clients (``AgentInfo.capabilities``) and refuses what a backend lacks, naming
the backend, rather than pretending.

Which calls may block: ``Backend.lookup``, ``Backend.catalogue``,
``Backend.read_transcript``, ``Backend.delete``, ``Backend.truncate`` and
``Backend.rename`` may be written as plain ``def`` that do blocking file I/O;
the core then calls them in a worker thread (a transcript reader is safe to
use from that thread: it only folds state). Every ``async def`` runs on the
event loop and must not block. ``Backend.agents`` is called on the event loop
and must answer from memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ahpcore.ports.backend_types import (
    JSON,
    Abilities,
    AgentRefused,
    Approval,
    ApprovalOption,
    CataloguePage,
    CatalogueRow,
    Cost,
    InputAnswer,
    Maybe,
    PendingEdit,
    ToolAnswer,
    TurnEnded,
    TurnInput,
    TurnOrigin,
)

__all__ = [
    "JSON",
    "Abilities",
    "Agent",
    "AgentControls",
    "AgentRefused",
    "Approval",
    "ApprovalOption",
    "Backend",
    "BackendNotifier",
    "CataloguePage",
    "CatalogueRow",
    "ChatStart",
    "Cost",
    "InputAnswer",
    "Maybe",
    "PendingEdit",
    "ServerTools",
    "SessionReporter",
    "ToolAnswer",
    "TranscriptReader",
    "TurnEnded",
    "TurnInput",
    "TurnOrigin",
    "TurnReporter",
]


class TurnReporter(Protocol):
    """How a backend says what its agent did in one turn (the core implements this).

    Synchronous methods report at once; the ``async`` ones wait for a person or
    a client and raise ``TurnEnded`` when the turn ends first. A host-started
    turn ends when ``Agent.run_turn`` returns (complete), raises (error) or is
    cancelled (cancelled): the core sends the ending. An agent-started turn
    ends when its ``SessionReporter.begin_turn`` block exits.
    """

    @property
    def turn_id(self) -> str:
        """The id of the turn this reports (a UUID when the agent began the turn itself)."""
        ...

    def reference(self, ref: str) -> None:
        """The backend's own id for this turn (a transcript entry id).

        The host hands it back to ``truncate`` and to a fork while the chat is
        open, and keeps it nowhere else: report it again for each turn of
        ``read_transcript``, which is how the host learns it after a restart
        (a record growing by one entry per turn would cost every save more).
        """
        ...

    def text(self, delta: str) -> None:
        """Append visible text; a new markdown part opens after anything else."""
        ...

    def reasoning(self, delta: str) -> None:
        """Append thinking; a reasoning part opens after anything else."""
        ...

    def tool_start(
        self,
        call_id: str,
        tool_name: str,
        *,
        display_name: str | None = None,
        intention: str | None = None,
        meta: Mapping[str, JSON] | None = None,
        mcp_server: str | None = None,
    ) -> None:
        """The model named a tool; its input may still be streaming.

        ``mcp_server`` names the customization id of the MCP server the tool
        comes from, which is what lets the call later ask for a sign-in.
        """
        ...

    def tool_input(self, call_id: str, delta: str) -> None:
        """More of the tool input's JSON text."""
        ...

    def tool_running(
        self, call_id: str, *, tool_input: str | None, invocation_message: str
    ) -> None:
        """The call runs without asking anybody (``confirmed: not-needed``)."""
        ...

    def tool_ready(self, call_id: str, *, tool_input: str | None, invocation_message: str) -> None:
        """The call's input is complete, but whether it will ask is not known yet.

        Nothing goes out until the backend follows with ``tool_approval`` (the
        call asks) or ``tool_running`` / ``tool_complete`` (it ran without
        asking); the input and message given here are used then unless repeated.
        """
        ...

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
        """Ask a person to allow the call, and wait for the answer.

        ``options`` offers named answers (``Approval.selected_option_id`` says
        which was picked); ``edits`` shows the file changes the call would make.
        Raises ``TurnEnded`` when the turn ends before anybody answers.
        """
        ...

    def tool_progress(self, call_id: str, message: str) -> None:
        """A line saying what a running call is doing now (a subagent's progress)."""
        ...

    def subagent(
        self, call_id: str, name: str, description: str, *, background: bool = False
    ) -> TurnReporter:
        """The call ``call_id`` runs a subagent: the core opens a child chat for it.

        The child chat (origin ``{kind: "tool"}``) is linked from the call, and
        what the subagent does is reported through the returned reporter as one
        turn of that chat, which ends when the parent's call completes (or its
        turn ends). A ``background`` subagent works on after both: its turn
        (and the returned reporter) lasts until the agent says it ended with
        ``SessionReporter.subagent_ended``, or the agent closes. Rebuilding a
        transcript uses the same call.
        """
        ...

    def tool_complete(
        self,
        call_id: str,
        *,
        success: bool,
        past_tense_message: str,
        content: Sequence[Mapping[str, JSON]] | None = None,
        error: str | None = None,
    ) -> None:
        """The call finished, well or badly (a failed call is completed with success False)."""
        ...

    async def tool_auth(self, call_id: str, requirement: Mapping[str, JSON]) -> str:
        """A running MCP tool call is blocked on a sign-in (an ``McpAuthRequirement``).

        Waits until a client pushes a token for ``requirement['resource']``
        with ``authenticate`` and returns it, so the backend can retry.
        """
        ...

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
        """A past call that asked, and the answer (None: the turn ended while it waited).

        For rebuilding a transcript: a live call asks with ``tool_approval``.
        """
        ...

    def asked(
        self,
        questions: Sequence[Mapping[str, JSON]],
        answer: InputAnswer,
        *,
        message: str | None = None,
    ) -> None:
        """A past question and its answer (rebuilding a transcript)."""
        ...

    async def client_tool(
        self, call_id: str, tool_name: str, *, tool_input: str, invocation_message: str
    ) -> Mapping[str, JSON]:
        """Run a tool a client provides (``<clientId>__<name>``); returns its ToolCallResult.

        The client that provides it runs it and answers with chat/toolCallComplete;
        if it leaves first, the call fails.
        """
        ...

    async def ask(
        self, questions: Sequence[Mapping[str, JSON]], *, message: str | None = None
    ) -> InputAnswer:
        """Put questions to a person (a chat input request) and wait for the answer."""
        ...

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
        meta: Mapping[str, JSON] | None = None,
    ) -> None:
        """Tokens the turn spent. What the protocol names no field for travels in
        ``_meta`` under this host's ``ahp.`` prefix (``ahp.cacheWriteTokens``,
        ``ahp.reasoningTokens``, ``ahp.context``, ``ahp.cost``); ``meta`` adds keys as given.
        """
        ...

    def title(self, title: str) -> None:
        """Name the session (the agent's own choice of title)."""
        ...

    def notification(self, content: str, *, meta: Mapping[str, JSON] | None = None) -> None:
        """Something the harness did on its own in this turn (it compacted the conversation),
        shown as a system notification; ``meta`` says what, for clients that group them."""
        ...

    def activity(self, activity: str | None) -> None:
        """What the chat is doing right now, in a line; None when idle."""
        ...

    def customizations(self, items: Sequence[Mapping[str, JSON]]) -> None:
        """The session's customizations now (containers with their children), replacing the old."""
        ...

    def config(self, values: Mapping[str, JSON]) -> None:
        """Session config values the agent changed itself (a model or effort switch)."""
        ...


class SessionReporter(Protocol):
    """How a live agent reports what happens outside a turn the host started.

    Handed over in ``ChatStart.report``, valid until ``Agent.close`` returns.
    Reports made while a turn runs go to that turn where they belong (usage).
    """

    def begin_turn(
        self, message: Mapping[str, JSON], *, origin: TurnOrigin = "agent"
    ) -> AbstractAsyncContextManager[TurnReporter]:
        """Start a turn of the agent's own (a follow-up after background work finished).

        ``async with report.begin_turn({"text": "..."}, origin="agent") as turn:``
        waits until the chat runs no other turn, sends ``chat/turnStarted``, and
        ends the turn when the block exits: complete, error (it raised) or
        cancelled (a client cancelled it; the block is cancelled).
        Call it from work of the agent's own (``start_soon``), never from inside
        ``run_turn``: the turn it would wait for is the one calling it.
        """
        ...

    def start_soon(self, function: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run work of the agent's own for as long as the agent lives.

        For a reader of the agent's event stream, or background work that ends
        in a follow-up turn. Cancelled when the agent closes; a failure is logged
        and goes no further.
        """
        ...

    def background_work_set(
        self,
        work_id: str,
        *,
        label: str,
        command: str | None = None,
        subagent_call_id: str | None = None,
        started_at: str | None = None,
        meta: Mapping[str, JSON] | None = None,
    ) -> None:
        """Work running in the background: a shell (``command``) or a subagent.

        A subagent names the tool call whose child chat it runs in. ``meta`` is the
        entry's ``_meta`` (how far it got, say), as given; set again to change it.
        """
        ...

    def background_work_removed(self, work_id: str) -> None:
        """Background work ended."""
        ...

    def subagent_ended(self, call_id: str, *, success: bool = True) -> None:
        """A background subagent (``TurnReporter.subagent(..., background=True)``) finished:
        its child chat's turn ends (complete, or error when it failed)."""
        ...

    def customizations(self, items: Sequence[Mapping[str, JSON]]) -> None:
        """The session's customizations now (containers with their children), replacing the old."""
        ...

    def customization_updated(self, item: Mapping[str, JSON]) -> None:
        """One top-level customization as it is now, new or replacing the one with its id
        (``session/customizationUpdated``): cheaper than the whole list when one entry moved.
        A new one goes last."""
        ...

    def customization_removed(self, customization_id: str) -> None:
        """A top-level customization, or a child of a container, is gone
        (``session/customizationRemoved``)."""
        ...

    def config(self, values: Mapping[str, JSON]) -> None:
        """Session config values the agent changed itself (a model or effort switch)."""
        ...

    def meta(self, values: Mapping[str, JSON | None]) -> None:
        """Facts about the session the protocol has no field for, merged into its ``_meta``.

        Each key is set to its value (None removes the key); keys not named
        stay as they are, whoever set them. Name keys ``ahp.<name>`` (the model
        the session is on is ``ahp.model``). Nothing goes out when nothing changes.
        """
        ...

    def mcp_server_state(
        self, customization_id: str, state: Mapping[str, JSON], *, channel: str | None = None
    ) -> None:
        """An MCP server's state now (an ``McpServerState``, e.g. ``{"kind": "ready"}``)."""
        ...

    def title(self, title: str) -> None:
        """Name the chat's session (the agent's own choice of title)."""
        ...

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
        meta: Mapping[str, JSON] | None = None,
    ) -> None:
        """Usage spent outside a turn; counted to the chat's latest turn."""
        ...


class ServerTools(Protocol):
    """The host's own tools, offered to one chat's agent (``ChatStart.server_tools``).

    The backend shows ``definitions()`` to its model beside its own tools and
    passes a call on with ``call``; it reports the call like any other tool
    call (``tool_start`` ... ``tool_complete``). The set is the session's
    ``serverTools``; it is read at each turn, so a changed set reaches the model
    at the next one.
    """

    def definitions(self) -> Sequence[Mapping[str, JSON]]:
        """The tools now, as ``ToolDefinition`` dicts (name, description, inputSchema)."""
        ...

    def instructions(self) -> str:
        """What the agent should be told about these tools beyond their descriptions
        (when an artifact is worth recording), or ``""``. The backend says it once with
        the agent's own instructions: a system prompt's append where the agent has one,
        else ahead of the first prompt it sends. Read when the agent starts."""
        ...

    async def call(self, name: str, arguments: Mapping[str, JSON]) -> ToolAnswer:
        """Run one; ``name`` may carry an MCP prefix (``mcp__ahp__list_sessions``).

        Never raises for a bad call: the answer says what was wrong, with success False.
        """
        ...


@dataclass(frozen=True)
class ChatStart:
    """Everything a backend needs to start (or reopen) the agent behind one chat.

    Defined here rather than with the other values: it carries the agent's
    ``SessionReporter``.
    """

    session_id: str
    chat_uri: str
    #: The backend's own name for this conversation; the core keeps it.
    backend_id: str
    working_directories: tuple[str, ...]
    config: Mapping[str, JSON]
    #: True when the conversation already exists (reopened, resumed after a restart).
    resume: bool = False
    #: Fork: continue from this (backend id, turn id) under ``backend_id``.
    fork_from: tuple[str, str] | None = None
    #: Side chat: what the named turn said, handed to the first prompt only.
    side_of: tuple[str, str] | None = None
    #: Credentials a client pushed with ``authenticate`` for this session's start.
    tokens: Mapping[str, str] = field(default_factory=dict)
    #: Tools active clients provide, named ``<clientId>__<name>`` (ToolDefinition dicts).
    client_tools: Sequence[Mapping[str, JSON]] = ()
    #: Where the agent reports what happens outside host-started turns; lives as long as
    #: the agent. None only for callers that predate it (tests driving a backend alone).
    report: SessionReporter | None = None
    #: The host's own tools for this chat's agent (``abilities.server_tools``), else None.
    server_tools: ServerTools | None = None
    #: Turn id -> the backend's own reference for it (``TurnReporter.reference``),
    #: as the host keeps them, so a fork or a truncation can name the backend's entry.
    references: Mapping[str, str] = field(default_factory=dict)


class BackendNotifier(Protocol):
    """What a backend may tell the host at any time (handed to ``Backend.attach``)."""

    def agents_changed(self) -> None:
        """``Backend.agents()`` answers differently now: the host sends ``root/agentsChanged``."""
        ...


@runtime_checkable
class Agent(Protocol):
    """The live agent behind one chat."""

    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        """Run one turn to its end, reporting through ``report``."""
        ...

    async def close(self) -> None:
        """Stop the agent; the conversation stays wherever the backend keeps it."""
        ...

    # Optional methods, each behind an ``Abilities`` flag; see ``AgentControls``.


class AgentControls(Protocol):
    """Optional methods of an ``Agent``, called only when its backend's ``Abilities`` say so.

    Each may raise ``AgentRefused``: the client's action is then refused with
    that message, and nothing changes.
    """

    async def steer(self, message: Mapping[str, JSON]) -> bool:
        """``abilities.steering``: take a steering message into the running turn.

        May return late; False leaves the message queued for the next turn.
        A plain (non-async) ``steer`` returning bool is accepted too.
        """
        ...

    async def configure(self, values: Mapping[str, JSON]) -> None:
        """``abilities.configure``: session config values a client changed (only those)."""
        ...

    async def toggle(self, customization_id: str, enabled: bool) -> None:
        """``abilities.toggle``: a client switched a customization on or off."""
        ...

    async def mcp_start(self, customization_id: str) -> None:
        """``abilities.mcp_control``: start an MCP server; report its state as it goes."""
        ...

    async def mcp_stop(self, customization_id: str) -> None:
        """``abilities.mcp_control``: stop an MCP server."""
        ...

    async def ran(self, *, command: str, output: str, exit_code: int | None) -> None:
        """Take the result of a ``!command`` a person ran in a terminal into the conversation.

        Without it, a ``!command`` on this backend's sessions is refused with the
        reason rather than sent to the model. A plain (non-async) ``ran`` is accepted too.
        """
        ...

    async def truncate(self, turn_id: str | None, reference: str | None) -> None:
        """``abilities.agent_truncate``: drop the turns after ``turn_id`` (None: all).

        Called between turns; the agent stops and restarts at the kept point.
        ``reference`` is the backend's own id for that turn, when it reported one.
        """
        ...


class TranscriptReader(Protocol):
    """How a backend rebuilds a past conversation: one turn at a time."""

    def turn(
        self, turn_id: str, message: Mapping[str, JSON], *, started_at: str | None = None
    ) -> TurnReporter:
        """Begin a past turn; report what happened in it through the returned reporter.

        ``turn_id`` should be the ``TurnInput.uuid`` the backend stamped when it
        stored the turn, so a rebuilt turn keeps the id clients knew it by.
        A subagent's turn is reported with ``TurnReporter.subagent`` as it was live.
        """
        ...

    def end_turn(
        self,
        *,
        state: Literal["complete", "cancelled", "error"] = "complete",
        duration_ms: int = 0,
        error: str | None = None,
    ) -> None:
        """Close the turn begun last."""
        ...


@runtime_checkable
class Backend(Protocol):
    """An agent backend: one provider name, its agents, and optional abilities."""

    provider: str
    abilities: Abilities

    def agents(self) -> Sequence[Mapping[str, JSON]]:
        """``AgentInfo`` dicts for the root channel (provider, displayName, models, ...)."""
        ...

    async def start(self, start: ChatStart) -> Agent:
        """Start (or reopen) the agent behind one chat."""
        ...

    def catalogue(
        self, *, limit: int | None = None, cursor: str | None = None, directory: str | None = None
    ) -> Maybe[CataloguePage | Sequence[CatalogueRow]]:
        """Past conversations, newest first (only when ``abilities.list_sessions``).

        ``limit`` caps the page, ``cursor`` is the ``next_cursor`` of the page
        before, ``directory`` keeps only conversations in that working
        directory (a file URI). A backend that cannot page may answer every row
        as a plain sequence. The host keeps its own index of what this lists
        and serves ``listSessions`` from it, so this is called to refresh that
        index, not per client request. May block (see the module docstring).
        """
        ...

    def lookup(self, session_id: str) -> Maybe[CatalogueRow | None]:
        """One past conversation by id, or None (reopening, subscribing to a chat URI).

        Called instead of listing everything when one session is wanted. May block.
        """
        ...

    def read_transcript(self, backend_id: str, reader: TranscriptReader) -> Maybe[bool]:
        """Rebuild a past conversation through ``reader``; False when there is none."""
        ...

    def delete(self, backend_id: str) -> Maybe[None]:
        """Delete the backend's own copy of a conversation (``abilities.delete``)."""
        ...

    def truncate(self, backend_id: str, turn_id: str | None) -> Maybe[None]:
        """Drop the turns after ``turn_id`` (all of them for None) (``abilities.truncate``)."""
        ...

    # Optional:
    #   def attach(self, notifier: BackendNotifier) -> None
    #     called once, before any start; keep the notifier to say agents() changed.
    #   def stop(self) -> None
    #     called once as the host stops, after its chats: end the backend's own threads
    #     and watchers.
    #   async def rename(self, backend_id: str, title: str) -> None   (abilities.rename)
    #     a client renamed the chat behind ``backend_id``; may block.
    #   def state_file(self, backend_id: str) -> Path | None
    #     the file this backend itself writes for that conversation (a transcript, its
    #     store's log), for a person to open; None when it keeps none. Never a path
    #     outside what the backend owns; may block.
    #   def session_meta(self, backend_id: str) -> Mapping[str, JSON]
    #     what the backend kept of a past session that has no protocol field (the model
    #     it was on: ``ahp.model``), merged into its ``_meta`` when it is reopened; may block.
