"""``python -m ahpcore.chat``: the ``ahp chat`` command on its own."""

from __future__ import annotations

import typer

from ahpcore.chat.cli import register


def main() -> None:
    # Plain help, as ``ahp`` gives; with one command, typer runs it without its name.
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)
    app(prog_name="ahp chat")


if __name__ == "__main__":
    main()
