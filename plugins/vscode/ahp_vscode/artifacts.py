"""``vscode/removeSessionArtifact``: the close button on an artifact or reference pill above the chat.

The entries are the ones agents record with the host's own tools
(``_meta["agentHost/sessionArtifacts"]`` on the session and its row); the core
takes one out, tells the session and its row, and keeps the change in the
session's record.
"""

from __future__ import annotations

from typing import Any

from ahpcore.api import PluginHost
from ahpcore.protocol.errors import (
    INVALID_PARAMS,
    NOT_FOUND,
    PERMISSION_DENIED,
    SESSION_NOT_FOUND,
    ProtocolError,
)

REMOVE = "vscode/removeSessionArtifact"
#: ``_meta`` flag: the window shows the close button on a pill only when the host sets it.
FLAG = "vscode.removeSessionArtifact"


class Artifacts:
    def __init__(self, host: PluginHost) -> None:
        self.host = host

    async def remove(self, client: Any, params: Any) -> None:
        params = params if isinstance(params, dict) else {}
        session, ident = params.get("session"), params.get("artifactId")
        if not isinstance(session, str) or not session.strip():
            raise ProtocolError(INVALID_PARAMS, f"{REMOVE}: session must be a session URI")
        if not isinstance(ident, str) or not ident.strip():
            raise ProtocolError(INVALID_PARAMS, f"{REMOVE}: artifactId must be a non-empty string")
        # A viewer is refused before a past session is opened for nothing.
        reason = self.host.refusal(client, "dispatchAction", {"channel": session})
        if reason is not None:
            raise ProtocolError(PERMISSION_DENIED, f"{REMOVE}: {reason}")
        try:
            gone = await self.host.remove_session_artifact(
                session, ident.strip(), connection=client
            )
        except LookupError as exc:
            raise ProtocolError(SESSION_NOT_FOUND, f"{REMOVE}: {exc}") from None
        except PermissionError as exc:
            raise ProtocolError(PERMISSION_DENIED, f"{REMOVE}: {exc}") from None
        if gone is None:
            raise ProtocolError(
                NOT_FOUND, f"{REMOVE}: {session} has no artifact or reference {ident.strip()}"
            )
        return None
