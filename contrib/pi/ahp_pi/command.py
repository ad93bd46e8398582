"""Where pi is and where it keeps its sessions: read from the environment, nothing started.

``AHP_PI_COMMAND`` is the command line that starts pi (split like a shell would,
so it may carry options such as ``--provider`` and ``--model``); without it,
``pi`` on ``PATH``. pi's own variables say where its sessions are:
``PI_CODING_AGENT_SESSION_DIR``, else ``sessions`` under
``PI_CODING_AGENT_DIR`` (default ``~/.pi/agent``), unless that folder's
``settings.json`` names a ``sessionDir``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

ENV = "AHP_PI_COMMAND"


def pi_command(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The command line starting pi, or None when pi is neither configured nor on PATH."""
    environ = os.environ if environ is None else environ
    configured = environ.get(ENV, "").strip()
    if configured:
        return shlex.split(configured)
    found = shutil.which("pi", path=environ.get("PATH"))
    return [found] if found else None


def agent_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    configured = environ.get("PI_CODING_AGENT_DIR", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".pi" / "agent"


def sessions_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The folder pi keeps its session files in (one subfolder per working directory)."""
    environ = os.environ if environ is None else environ
    configured = environ.get("PI_CODING_AGENT_SESSION_DIR", "").strip()
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
