"""``python -m ahpcore.chat``: the ``ahp chat`` command on its own."""

from __future__ import annotations

import typer

from ahpcore.chat.cli import chat_command


def main() -> None:
    typer.run(chat_command)


if __name__ == "__main__":
    main()
