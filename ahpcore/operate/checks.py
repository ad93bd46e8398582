"""What ``ahp doctor`` checks: each check one line, passed or failed, and how to fix a failure.

Plugins add their own through the ``ahp_doctor_checks`` hook, returning
``Check`` objects; this module is light so that a plugin can import it.
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ahpcore.findings import Check

if TYPE_CHECKING:
    from ahpcore.plugins import PluginManager
    from ahpcore.statelock import Holder

#: The oldest Python the host runs on (``requires-python``).
MIN_PYTHON = (3, 11)
#: How long a probe (``git --version``, a ``/healthz`` request) may take.
PROBE_SECONDS = 3.0


def python_check() -> Check:
    version = ".".join(str(part) for part in sys.version_info[:3])
    said = f"Python {version} ({sys.executable})"
    if sys.version_info[:2] >= MIN_PYTHON:
        return Check("python", True, said)
    wanted = ".".join(str(part) for part in MIN_PYTHON)
    return Check(
        "python",
        False,
        f"{said} is too old",
        f"install Python {wanted} or newer and make the virtual environment again with it",
    )


def plugin_checks(manager: PluginManager) -> list[Check]:
    found = [
        Check(
            f"plugin {info.name}",
            True,
            f"plugin {info.name} {info.version or ''}".rstrip()
            + (f" ({info.distribution})" if info.distribution else " (built in)"),
        )
        for info in manager.plugins()
    ]
    for failure in manager.failures:
        found.append(
            Check(
                f"plugin {failure.name}",
                False,
                f"plugin {failure.name} could not be loaded: {failure.error}",
                f"reinstall {failure.distribution or failure.name}, or leave it out with "
                f"AHP_DISABLE_PLUGINS={failure.name}",
            )
        )
    return found


def state_folder_checks(state_dir: Path) -> list[Check]:
    """The folder itself, then the lock on it (who, if anyone, runs on it)."""
    name = "state folder"
    if not state_dir.exists():
        parent = next((p for p in state_dir.parents if p.exists()), None)
        if parent is not None and not os.access(parent, os.W_OK | os.X_OK):
            return [
                Check(
                    name,
                    False,
                    f"state folder {state_dir} does not exist and {parent} cannot take it",
                    f"make it yourself (mkdir -m 700 -p {state_dir}) or choose another "
                    "with --state-dir",
                )
            ]
        return [Check(name, True, f"state folder {state_dir} (made, owner-only, at first start)")]
    if not state_dir.is_dir():
        return [
            Check(
                name,
                False,
                f"state folder {state_dir} is a file, not a folder",
                "move the file away or choose another folder with --state-dir",
            )
        ]
    info = state_dir.stat()
    if info.st_uid != os.getuid():
        return [
            Check(
                name,
                False,
                f"state folder {state_dir} belongs to another user (uid {info.st_uid})",
                "run the host as that user, or choose a folder of yours with --state-dir",
            )
        ]
    found: list[Check] = []
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        found.append(
            Check(
                name,
                False,
                f"state folder {state_dir} is open to other users (mode {mode:o}); it holds "
                "conversations and the connection token",
                f"chmod 700 {state_dir}",
            )
        )
    elif not os.access(state_dir, os.W_OK | os.X_OK):
        found.append(
            Check(
                name,
                False,
                f"state folder {state_dir} cannot be written (mode {mode:o})",
                f"chmod 700 {state_dir}",
            )
        )
    else:
        found.append(Check(name, True, f"state folder {state_dir} (owner-only)"))
    found.append(lock_check(state_dir))
    return found


def lock_holder(state_dir: Path) -> Holder | None:
    """Who holds ``state_dir``'s lock now, or None when nobody does (see
    ``ahpcore.statelock.holder_of``)."""
    from ahpcore.statelock import holder_of

    return holder_of(state_dir)


def lock_check(state_dir: Path) -> Check:
    try:
        holder = lock_holder(state_dir)
    except OSError as exc:
        return Check(
            "lock",
            False,
            f"cannot look at the state folder's lock ({(exc.strerror or str(exc)).lower()})",
            f"make {state_dir} and its files yours (chown -R $USER {state_dir})",
        )
    if holder is None:
        return Check("lock", True, "no host is running on the state folder")
    return Check("lock", True, f"a host is running on the state folder ({holder.describe()})")


def token_check(state_dir: Path, env: Mapping[str, str]) -> Check:
    """Where ``ahp serve`` would take its connection token from, and whether it would take it."""
    from ahpcore import tokens

    name = "token"
    if env.get("AHP_NO_TOKEN", "").lower() in ("1", "true"):
        return Check(name, True, "no token (AHP_NO_TOKEN): any local process may connect")
    if env.get("AHP_TOKEN"):
        if tokens.is_weak(env["AHP_TOKEN"]):
            return Check(
                name,
                False,
                "the token in AHP_TOKEN is too weak (at least "
                f"{tokens.MIN_TOKEN_LENGTH} characters, {tokens.MIN_TOKEN_DISTINCT} different)",
                "unset AHP_TOKEN to use the stored token, or set a longer one",
            )
        return Check(name, True, "token from AHP_TOKEN")
    if env.get("AHP_TOKEN_FILE"):
        path = Path(env["AHP_TOKEN_FILE"])
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            text = path.read_text("utf-8").strip()
        except OSError as exc:
            return Check(
                name,
                False,
                f"cannot read the token file {path} named by AHP_TOKEN_FILE "
                f"({(exc.strerror or str(exc)).lower()})",
                "fix AHP_TOKEN_FILE, or unset it to use the stored token",
            )
        if mode & 0o077:
            return Check(
                name, False, f"token file {path} is open to other users (mode {mode:o})",
                f"chmod 600 {path}",
            )  # fmt: skip
        if tokens.is_weak(text):
            return Check(name, False, f"the token in {path} is too weak", "put a longer one in it")
        return Check(name, True, f"token from AHP_TOKEN_FILE ({path})")
    path = tokens.token_path(state_dir)
    if not path.exists():
        return Check(name, True, f"a token is made at first start and kept in {path}")
    try:
        tokens.stored_token(state_dir)
    except tokens.TokenError as exc:
        return Check(name, False, str(exc).split(";")[0], "ahp token --rotate")
    return Check(name, True, f"token kept in {path} (ahp token prints it)")


def git_check(needed: bool) -> Check:
    found = shutil.which("git")
    if found is None:
        if not needed:
            return Check("git", True, "git not found (not needed: the git plugin is not loaded)")
        return Check(
            "git",
            False,
            "git not found on PATH (the git plugin needs it)",
            "install git, or leave the plugin out with AHP_DISABLE_PLUGINS=git",
        )
    try:
        said = subprocess.run(
            [found, "--version"], capture_output=True, text=True, timeout=PROBE_SECONDS, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("git", False, f"{found} does not run ({exc})", "reinstall git")
    return Check("git", True, f"{said} ({found})")


def shell_check(env: Mapping[str, str]) -> Check:
    shell = env.get("SHELL") or "/bin/sh"
    source = "SHELL" if env.get("SHELL") else "no SHELL set"
    if os.path.isabs(shell) and os.access(shell, os.X_OK) and not os.path.isdir(shell):
        return Check("shell", True, f"shell {shell} ({source}): terminals and !commands run it")
    return Check(
        "shell",
        False,
        f"shell {shell} ({source}) is not a program that can be run",
        "set SHELL to an installed shell (/bin/bash, /bin/zsh)",
    )


def _healthz(host: str, port: int) -> str | None:
    """The version an ahp host listening there reports, or None when what listens is not one."""
    connection = http.client.HTTPConnection(host, port, timeout=PROBE_SECONDS)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        body = response.read(4096)
        if response.status == 401 and body.startswith(b"This AHP host"):
            return "a version without /healthz"
        if response.status != 200:
            return None
        answer = json.loads(body)
        version = answer.get("version") if isinstance(answer, dict) else None
        return str(version) if answer.get("status") == "ok" and version else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def port_check(host: str, port: int) -> Check:
    """Whether ``ahp serve`` could listen on ``host:port`` now."""
    name = "port"
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        return Check(name, False, f"cannot resolve {host} ({exc})", "give --host an address")
    probe = socket.socket(family, kind, proto)
    try:
        # As the host's own listener does: a port left in TIME_WAIT is free to it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(address)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            why = (exc.strerror or str(exc)).lower()
            return Check(name, False, f"cannot listen on {where} ({why})", "use another --host")
        version = _healthz(str(address[0]), port)
        if version is not None:
            return Check(name, True, f"{where} is taken by a running ahp host ({version})")
        return Check(
            name,
            False,
            f"{where} is taken by another program",
            f"stop it, or serve on another port: ahp serve --port {port + 1}",
        )
    finally:
        probe.close()
    return Check(name, True, f"{where} is free")


def plugins_own_checks(manager: PluginManager, state_dir: Path) -> list[Check]:
    """What each plugin's ``ahp_doctor_checks`` found; one that raises is a failed check."""
    import anyio

    found: list[Check] = []
    from ahpcore.awaitables import resolve

    for impl in manager.implementations("ahp_doctor_checks"):
        try:
            answer = anyio.run(resolve, impl(state_dir=state_dir))
            for check in answer or ():
                if not isinstance(check, Check):
                    raise TypeError(f"returned {type(check).__name__}, not ahpcore's Check")
                found.append(check)
        except Exception as exc:
            found.append(
                Check(
                    f"plugin {impl.plugin}",
                    False,
                    f"plugin {impl.plugin}'s own checks failed: {exc!r}",
                    f"report it to the plugin's authors; AHP_DISABLE_PLUGINS={impl.plugin} "
                    "leaves it out",
                )
            )
    return found
