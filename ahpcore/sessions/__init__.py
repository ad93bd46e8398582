"""Sessions, chats and turns: the backend-neutral heart of the host.

Backends talk to the core only through ``ahpcore.sessions.contract``; the core
alone turns what they report into protocol actions.
"""

from ahpcore.sessions.contract import (
    Abilities,
    Agent,
    AgentControls,
    AgentRefused,
    Approval,
    ApprovalOption,
    Backend,
    BackendNotifier,
    CataloguePage,
    CatalogueRow,
    ChatStart,
    Cost,
    InputAnswer,
    PendingEdit,
    SessionReporter,
    TranscriptReader,
    TurnEnded,
    TurnInput,
    TurnOrigin,
    TurnReporter,
)

__all__ = [
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
    "PendingEdit",
    "SessionReporter",
    "TranscriptReader",
    "TurnEnded",
    "TurnInput",
    "TurnOrigin",
    "TurnReporter",
]
