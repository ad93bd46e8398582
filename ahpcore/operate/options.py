"""Options the operating commands (``ahp sessions``, ``ahp doctor``) share."""

from __future__ import annotations

from typing import Annotated, Any

import typer

#: A flag's help shows no metavar (typer would print one for a bool).
FLAG: dict[str, Any] = {"metavar": ""}

JsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Machine-readable output (no environment variable).",
        show_default="off",
        **FLAG,
    ),
]
