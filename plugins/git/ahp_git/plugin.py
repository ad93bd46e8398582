"""The ``git`` plugin: the changes port, driven through the git command."""

from __future__ import annotations

from typing import Any

from ahp_git.port import GitChanges
from ahpcore import hookimpl


@hookimpl
def ahp_changes(host: Any) -> GitChanges:
    return GitChanges()
