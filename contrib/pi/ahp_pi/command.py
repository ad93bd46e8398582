"""Where pi is and where it keeps its sessions: read from the environment, nothing started.

``AHP_PI_COMMAND`` is the command line that starts pi (split like a shell would,
so it may carry options such as ``--provider`` and ``--model``); without it,
``pi`` on ``PATH``. pi's own variables say where its sessions are:
``PI_CODING_AGENT_SESSION_DIR``, else ``sessions`` under
``PI_CODING_AGENT_DIR`` (default ``~/.pi/agent``), unless that folder's
``settings.json`` names a ``sessionDir``. The config file's ``[pi]`` table may name
the command (below ``AHP_PI_COMMAND``) and set pi's two folders where their variables
are unset.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

ENV = "AHP_PI_COMMAND"
#: pi's own variables for its folders.
AGENT_DIR_ENV = "PI_CODING_AGENT_DIR"
SESSION_DIR_ENV = "PI_CODING_AGENT_SESSION_DIR"


def pi_command(
    environ: Mapping[str, str] | None = None, configured: str | Sequence[str] | None = None
) -> list[str] | None:
    """The command line starting pi: ``AHP_PI_COMMAND``, else ``configured`` (the config
    file's), else ``pi`` on PATH; None when there is none."""
    environ = os.environ if environ is None else environ
    said = environ.get(ENV, "").strip()
    if said:
        return shlex.split(said)
    if isinstance(configured, str) and configured.strip():
        return shlex.split(configured)
    if configured and not isinstance(configured, str):
        return list(configured)
    found = shutil.which("pi", path=environ.get("PATH"))
    return [found] if found else None


def agent_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    configured = environ.get(AGENT_DIR_ENV, "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".pi" / "agent"


def sessions_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The folder pi keeps its session files in (one subfolder per working directory)."""
    environ = os.environ if environ is None else environ
    configured = environ.get(SESSION_DIR_ENV, "").strip()
    if configured:
        return Path(configured).expanduser()
    base = agent_dir(environ)
    try:
        settings = json.loads((base / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        settings = None
    if isinstance(settings, dict) and isinstance(settings.get("sessionDir"), str):
        return Path(settings["sessionDir"]).expanduser()
    return base / "sessions"
