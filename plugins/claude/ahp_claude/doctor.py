"""``ahp doctor``'s question to the Claude plugin: is there a sign-in for the CLI to use?

Only whether credentials are there, never whether they still work: that would
need the network, and ``ahp doctor`` only looks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ahp_claude.backend import config_dir
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from ahpcore.api import Check

#: The file the CLI's sign-in writes under its config folder (Linux, Windows).
CREDENTIALS_FILE = ".credentials.json"
#: Where it keeps them on macOS instead: a Keychain entry of this name.
KEYCHAIN_SERVICE = "Claude Code-credentials"


def _in_keychain() -> bool:
    security = shutil.which("security")
    if sys.platform != "darwin" or security is None:
        return False
    try:
        found = subprocess.run(
            [security, "find-generic-password", "-s", KEYCHAIN_SERVICE],
            capture_output=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return found.returncode == 0


def sign_in_check(env: dict[str, str] | None = None) -> Check:
    from ahpcore.api import Check

    env = dict(os.environ if env is None else env)
    name = "claude sign-in"
    for variable in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"):
        if env.get(variable, "").strip():
            return Check(name, True, f"Claude: signed in with {variable} from the environment")
    credentials = Path(config_dir(env)) / CREDENTIALS_FILE
    if credentials.is_file():
        return Check(name, True, f"Claude: signed in (credentials in {credentials})")
    if _in_keychain():
        return Check(name, True, f"Claude: signed in (the Keychain's {KEYCHAIN_SERVICE!r})")
    return Check(
        name,
        False,
        f"Claude: not signed in (no ANTHROPIC_API_KEY, no {credentials}); its turns will fail",
        "run `ahp claude login` as the user who runs the host, or set ANTHROPIC_API_KEY in "
        "its environment",
    )


@hookimpl
def ahp_doctor_checks(state_dir: Path) -> list[Check]:
    return [sign_in_check()]
