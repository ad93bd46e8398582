"""``ahp users ...``: add, list, remove people, rotate a token, change a role.

Each command changes the people file in the state folder; a host running on
that folder reads it again within a second or two. A new token is printed once,
as the last line of ``add`` and ``token``, and kept nowhere but as a hash.
Imported only when ``ahp`` builds its command line (``ahp_cli_commands``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ahp_users.store import (
    NAME,
    ROLES,
    Entry,
    UsersError,
    editing,
    make_token,
    now,
    people_path,
    read,
    read_seen,
)

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        envvar="AHP_STATE_DIR",
        help="The host's state folder (the one `ahp serve` uses).",
    ),
]


def _state(state_dir: Path | None) -> Path:
    if state_dir is not None:
        return state_dir.expanduser()
    from ahpcore.api import HostSettings

    return HostSettings().state_dir


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def _role(role: str) -> str:
    if role not in ROLES:
        _fail(f"role {role!r} is not one of {', '.join(ROLES)}")
    return role


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="users",
        help="People who may connect to this host, their tokens and roles.",
        no_args_is_help=True,
    )

    @app.command("add")
    def add(
        name: str,
        role: Annotated[str, typer.Option(help="admin, member or viewer.")] = "member",
        state_dir: StateDir = None,
    ) -> None:
        """Add a person; their token is the last line printed, and is shown only now."""
        _role(role)
        if not NAME.match(name):
            _fail(f"{name!r} is not a name (letters, digits, . _ -, at most 64)")
        token, kept = make_token()
        try:
            with editing(_state(state_dir)) as people:
                if name in people:
                    _fail(f"{name} is already a person here; `ahp users token {name}` rotates")
                people[name] = Entry(name, role, now(), kept)
        except UsersError as exc:
            _fail(str(exc))
        typer.echo(f"added {name} ({role}); their connection token, shown only now:")
        typer.echo(token)

    @app.command("list")
    def list_(
        as_json: Annotated[bool, typer.Option("--json", help="One JSON array.")] = False,
        state_dir: StateDir = None,
    ) -> None:
        """Name, role, when added and when last seen."""
        state = _state(state_dir)
        try:
            people = read(people_path(state))
        except UsersError as exc:
            _fail(str(exc))
        seen = read_seen(state)
        rows = [
            {"name": e.name, "role": e.role, "created": e.created, "lastSeen": seen.get(e.name)}
            for e in sorted(people.values(), key=lambda e: e.name)
        ]
        if as_json:
            typer.echo(json.dumps(rows))
            return
        if not rows:
            typer.echo("nobody yet: `ahp users add NAME` adds a person")
            return
        for row in rows:
            typer.echo(
                f"{row['name']:<20} {row['role']:<7} added {row['created']}  "
                f"last seen {row['lastSeen'] or 'never'}"
            )

    @app.command("remove")
    def remove(name: str, state_dir: StateDir = None) -> None:
        """Remove a person: their token stops working and their connections close."""
        try:
            with editing(_state(state_dir)) as people:
                if people.pop(name, None) is None:
                    _fail(f"{name} is not a person here")
        except UsersError as exc:
            _fail(str(exc))
        typer.echo(f"removed {name}")

    @app.command("token")
    def token(name: str, state_dir: StateDir = None) -> None:
        """Give a person a new token (the old one stops working); printed last, only now."""
        new, kept = make_token()
        try:
            with editing(_state(state_dir)) as people:
                entry = people.get(name)
                if entry is None:
                    _fail(f"{name} is not a person here")
                    return
                people[name] = Entry(name, entry.role, entry.created, kept)
        except UsersError as exc:
            _fail(str(exc))
        typer.echo(f"new connection token for {name}, shown only now:")
        typer.echo(new)

    @app.command("role")
    def role(name: str, role: str, state_dir: StateDir = None) -> None:
        """Change a person's role."""
        _role(role)
        try:
            with editing(_state(state_dir)) as people:
                entry = people.get(name)
                if entry is None:
                    _fail(f"{name} is not a person here")
                    return
                people[name] = Entry(name, role, entry.created, entry.token)
        except UsersError as exc:
            _fail(str(exc))
        typer.echo(f"{name} is now {role}")

    return app
