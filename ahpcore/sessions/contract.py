"""The backend contract: what an agent backend offers and how it reports what its agent did.

A backend never builds protocol actions or envelopes. The core starts one
``Agent`` per chat and hands each turn a ``TurnReporter``; the backend says
what happened (text, reasoning, tool calls, questions, usage, a title) and the
core turns that into ``chat/*`` actions. A past conversation is rebuilt through
the same reporter, so a live turn and a rebuilt one cannot drift apart.

Optional abilities are declared in ``Abilities``; the core refuses what a
backend lacks, naming the backend, rather than pretending.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

JSON = Any


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


@dataclass(frozen=True)
class CatalogueRow:
    """A past conversation a backend can reopen, as the catalogue lists it."""

    session_id: str
    title: str
    created_at: str
    modified_at: str
    working_directories: tuple[str, ...] = ()
    meta: Mapping[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatStart:
    """Everything a backend needs to start (or reopen) the agent behind one chat."""

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


@dataclass(frozen=True)
class InputAnswer:
    """A person's answer to a question the agent asked."""

    response: Literal["accept", "decline", "cancel"]
    #: question id -> ChatInputAnswer dict, as the protocol has it.
    answers: Mapping[str, JSON] = field(default_factory=dict)


class TurnReporter(Protocol):
    """How a backend says what its agent did in one turn (the core implements this).

    Synchronous methods report at once; the ``async`` ones wait for a person or
    a client. A turn ends when ``Agent.run_turn`` returns (complete), raises
    (error) or is cancelled (cancelled): the core sends the ending.
    """

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

    async def tool_approval(
        self,
        call_id: str,
        *,
        tool_input: str | None,
        invocation_message: str,
        title: str | None = None,
    ) -> Approval:
        """Ask a person to allow the call, and wait for the answer."""
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
    ) -> None: ...

    def title(self, title: str) -> None:
        """Name the session (the agent's own choice of title)."""
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


@runtime_checkable
class Agent(Protocol):
    """The live agent behind one chat."""

    async def run_turn(self, turn: TurnInput, report: TurnReporter) -> None:
        """Run one turn to its end, reporting through ``report``."""
        ...

    async def close(self) -> None:
        """Stop the agent; the conversation stays wherever the backend keeps it."""
        ...

    # Optional, for a backend with ``abilities.steering``:
    #   def steer(self, message: Mapping[str, JSON]) -> bool
    # takes a steering message into the running turn; False leaves it queued.
    #   def ran(self, *, command: str, output: str, exit_code: int | None) -> None
    # (or async) takes the result of a !command a person ran into the conversation.


class TranscriptReader(Protocol):
    """How a backend rebuilds a past conversation: one turn at a time."""

    def turn(
        self, turn_id: str, message: Mapping[str, JSON], *, started_at: str | None = None
    ) -> TurnReporter:
        """Begin a past turn; report what happened in it through the returned reporter."""
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

    async def catalogue(self) -> Sequence[CatalogueRow]:
        """Past conversations (called only when ``abilities.list_sessions``)."""
        ...

    async def read_transcript(self, backend_id: str, reader: TranscriptReader) -> bool:
        """Rebuild a past conversation through ``reader``; False when there is none."""
        ...

    async def delete(self, backend_id: str) -> None:
        """Delete the backend's own copy of a conversation (``abilities.delete``)."""
        ...

    async def truncate(self, backend_id: str, turn_id: str | None) -> None:
        """Drop the turns after ``turn_id`` (all of them for None) (``abilities.truncate``)."""
        ...
