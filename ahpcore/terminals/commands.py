"""``!command`` on a session: run a shell command in a terminal the session claims."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ahpcore.terminals.service import TerminalService


class TerminalCommands:
    def __init__(self, service: TerminalService) -> None:
        self.service = service

    async def intercept(self, chat: Any, turn: Any, report: Any) -> bool:
        return False
