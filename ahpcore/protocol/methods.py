"""The protocol's method tables: which params and result shapes each method carries.

The JSON Schemas declare the shapes but not which method uses which, so this
table, taken from the protocol's command and notification maps, joins them.
Names refer to classes of the generated models (``ahpcore.protocol.models``).
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Command(NamedTuple):
    params: str
    #: The result model's name, or None when the result is JSON ``null``.
    result: str | None


#: Client -> host requests served on the 1.0.0 surface.
COMMANDS: dict[str, Command] = {
    "initialize": Command("InitializeParams", "InitializeResult"),
    "ping": Command("PingParams", None),
    "reconnect": Command("ReconnectParams", "ReconnectResult"),
    "subscribe": Command("SubscribeParams", "SubscribeResult"),
    "listSessions": Command("ListSessionsParams", "ListSessionsResult"),
    "createSession": Command("CreateSessionParams", None),
    "disposeSession": Command("DisposeSessionParams", None),
    "createChat": Command("CreateChatParams", None),
    "disposeChat": Command("DisposeChatParams", None),
    "moveChat": Command("MoveChatParams", "MoveChatResult"),
    "createTerminal": Command("CreateTerminalParams", None),
    "disposeTerminal": Command("DisposeTerminalParams", None),
    "createResourceWatch": Command("CreateResourceWatchParams", "CreateResourceWatchResult"),
    "fetchTurns": Command("FetchTurnsParams", "FetchTurnsResult"),
    "completions": Command("CompletionsParams", "CompletionsResult"),
    "authenticate": Command("AuthenticateParams", "AuthenticateResult"),
    "resolveSessionConfig": Command("ResolveSessionConfigParams", "ResolveSessionConfigResult"),
    "sessionConfigCompletions": Command(
        "SessionConfigCompletionsParams", "SessionConfigCompletionsResult"
    ),
    "invokeChangesetOperation": Command(
        "InvokeChangesetOperationParams", "InvokeChangesetOperationResult"
    ),
    "resourceRead": Command("ResourceReadParams", "ResourceReadResult"),
    "resourceList": Command("ResourceListParams", "ResourceListResult"),
    "resourceResolve": Command("ResourceResolveParams", "ResourceResolveResult"),
    "resourceWrite": Command("ResourceWriteParams", "ResourceWriteResult"),
    "resourceDelete": Command("ResourceDeleteParams", "ResourceDeleteResult"),
    "resourceMkdir": Command("ResourceMkdirParams", "ResourceMkdirResult"),
    "resourceMove": Command("ResourceMoveParams", "ResourceMoveResult"),
    "resourceCopy": Command("ResourceCopyParams", "ResourceCopyResult"),
    "resourceRequest": Command("ResourceRequestParams", "ResourceRequestResult"),
    "listAutomationTriggerDefinitions": Command(
        "ListAutomationTriggerDefinitionsParams", "ListAutomationTriggerDefinitionsResult"
    ),
    "runAutomation": Command("RunAutomationParams", "RunAutomationResult"),
    "fetchAutomationRuns": Command("FetchAutomationRunsParams", "FetchAutomationRunsResult"),
}

#: Host -> client requests: the resource* family is symmetrical.
SERVER_COMMANDS: dict[str, Command] = {
    name: command
    for name, command in COMMANDS.items()
    if name.startswith("resource") or name == "createResourceWatch"
}

#: Client -> host notifications (no id, no answer).
CLIENT_NOTIFICATIONS: dict[str, str] = {
    "unsubscribe": "UnsubscribeParams",
    "dispatchAction": "DispatchActionParams",
}

#: Host -> client notifications. Only ``action`` carries a serverSeq.
SERVER_NOTIFICATIONS: dict[str, str] = {
    "action": "ActionEnvelope",
    "root/sessionAdded": "SessionAddedParams",
    "root/sessionRemoved": "SessionRemovedParams",
    "root/sessionSummaryChanged": "SessionSummaryChangedParams",
    "root/progress": "ProgressParams",
    "auth/required": "AuthRequiredParams",
    "otlp/exportLogs": "OtlpExportLogsParams",
    "otlp/exportTraces": "OtlpExportTracesParams",
    "otlp/exportMetrics": "OtlpExportMetricsParams",
}

#: Params models generated each into a module of its own (``_generated/commands/``):
#: a request is checked after building only the classes its params need, so neither a
#: host's first ``initialize`` nor its first ``listSessions`` waits for the five hundred
#: others. ``dispatchAction`` carries any action: it needs the full models.
CUT_PARAMS: tuple[str, ...] = tuple(
    dict.fromkeys(
        [command.params for command in COMMANDS.values()]
        + [name for method, name in CLIENT_NOTIFICATIONS.items() if method != "dispatchAction"]
    )
)


def cut_module(model_name: str) -> str:
    """The module of ``_generated/commands`` holding ``model_name`` (ListSessionsParams ->
    list_sessions)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", model_name.removesuffix("Params")).lower()
