"""Sessions, chats and turns: the backend-neutral heart of the host.

Backends talk to the core only through ``ahpcore.ports.backend``; the core
alone turns what they report into protocol actions.
"""

from ahpcore.ports.backend import (
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
