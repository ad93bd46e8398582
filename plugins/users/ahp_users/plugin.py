"""The ``users`` plugin: answers ``ahp_users`` with the people file, adds ``ahp users``."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ahp_users.store import (
    Entry,
    UsersError,
    now,
    people_path,
    read,
    read_seen,
    token_id,
    verify,
    write_seen,
)
from ahpcore.api import PluginHost
from ahpcore.hookspecs import hookimpl
from ahpcore.ports import Person

if TYPE_CHECKING:
    import typer

log = logging.getLogger(__name__)


class PeopleFile:
    """The users port over ``<state>/users/people.json``, read again whenever it changes.

    A file that cannot be read or makes no sense lets nobody in (the deployment
    token still does), logged once; the last good reading is not kept, so a
    person removed by hand is never let in by a file broken on the way.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = people_path(state_dir)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | bool | None = False  # False: never read
        self._people: dict[str, Entry] = {}
        self._trouble: str | None = None

    def _stamp_now(self) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size, info.st_mode)

    def people(self) -> dict[str, Entry]:
        with self._lock:
            stamp = self._stamp_now()
            if stamp == self._stamp:
                return self._people
            self._stamp = stamp
            try:
                self._people = read(self.path)
            except UsersError as exc:
                self._people = {}
                if str(exc) != self._trouble:
                    self._trouble = str(exc)
                    log.error("%s: no person may connect until it is mended", exc)
                return self._people
            self._trouble = None
            return self._people

    def person(self, token: str) -> Person | None:
        wanted = token_id(token)
        if wanted is None:
            return None
        for entry in self.people().values():
            if entry.token.get("id") == wanted:
                if not verify(token, entry.token):
                    return None
                self._seen(entry.name)
                return Person(entry.name, entry.role)
        return None

    def named(self, name: str) -> Person | None:
        entry = self.people().get(name)
        return Person(entry.name, entry.role) if entry is not None else None

    def _seen(self, name: str) -> None:
        try:
            seen = read_seen(self.state_dir)
            seen[name] = now()
            write_seen(self.state_dir, seen)
        except OSError as exc:
            log.warning("could not note when %s was last seen: %s", name, exc)


@hookimpl
def ahp_users(host: PluginHost) -> PeopleFile:
    port = PeopleFile(host.settings.state_dir)
    port.people()  # a broken file is said at start, not at the first handshake
    return port


@hookimpl
def ahp_cli_commands(app: typer.Typer) -> None:
    from ahp_users.cli import build_app

    app.add_typer(build_app(), name="users")
