"""shellInitScripts: the window's shell profile, sourced before every Bash command.

The CLI's shell tool has no setting for an init script. Rewriting each command in
a PreToolUse hook would work, but the CLI judges whether to ask on the rewritten
command, so even ``ls`` would then ask. Instead the CLI's bash gets ``BASH_ENV``,
which every non-interactive bash sources first: a wrapper file of the session's
own that sources the script with its stderr dropped and prints a nonzero status,
so a broken profile never hides the command's own output. The files live for the
session's life and are rewritten when the config changes. Only bash entries are
sourced, and the CLI is pinned to bash (``CLAUDE_CODE_SHELL``) unless its
environment already names a shell: left alone, it picks zsh whenever ``SHELL`` is
unset or not bash and zsh is installed, and zsh never reads ``BASH_ENV``.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ahpcore.api import write_private

KEY = "shellInitScripts"

SCHEMA: Mapping[str, Any] = {
    "type": "array",
    "title": "Shell init scripts",
    "description": "Scripts run before each shell command (the folder's shell profile)",
    "readOnly": True,
    "items": {
        "type": "object",
        "title": "Script",
        "properties": {
            "shell": {"type": "string", "title": "Shell"},
            "script": {"type": "string", "title": "Script"},
        },
    },
}


def bash_script(entries: Any) -> str:
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        return ""
    scripts = [
        str(entry.get("script", ""))
        for entry in entries
        if isinstance(entry, Mapping) and str(entry.get("shell", "bash")).lower() in ("bash", "sh")
    ]
    return "\n".join(s for s in scripts if s.strip())


class ShellInit:
    """Keeps the script file and answers the Bash PreToolUse hook."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.active = False

    def update(self, entries: Any) -> None:
        script = bash_script(entries)
        self.active = bool(script)
        if self.active:
            write_private(self.path, script + "\n")
        else:
            self.path.unlink(missing_ok=True)

    @property
    def wrapper(self) -> Path:
        return self.path.with_suffix(".env.sh")

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """What the CLI's environment needs so its bash sources the script.

        ``base`` is what the CLI gets otherwise, on top of the host's own environment.
        """
        quoted = shlex.quote(str(self.path))
        write_private(
            self.wrapper,
            f"if [ -f {quoted} ]; then\n"
            f"  . {quoted} 2>/dev/null\n"
            "  __ahp_init=$?\n"
            '  [ "$__ahp_init" -ne 0 ] && echo "(shell init script exited with $__ahp_init)"\n'
            "  unset __ahp_init\n"
            "fi\n",
        )
        env = {"BASH_ENV": str(self.wrapper)}
        if not (base.get("CLAUDE_CODE_SHELL") or os.environ.get("CLAUDE_CODE_SHELL")):
            bash = shutil.which("bash", path=base.get("PATH") or os.environ.get("PATH"))
            if bash is not None:
                env["CLAUDE_CODE_SHELL"] = bash
        return env

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self.wrapper.unlink(missing_ok=True)
