"""Commands plugins add to ``ahp`` through the ``ahp_cli_commands`` hook (``ahp claude login``).

The command line is built before it is parsed, so the plugins asked are those the
environment admits (``AHP_PLUGINS``, ``AHP_DISABLE_PLUGINS``, ``AHP_NO_PLUGINS``), not
a command's ``--plugins``. A plugin that cannot be loaded is left out in silence here:
``ahp serve`` and ``ahp plugins`` report it, and ``ahp --help`` should not.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ahpcore.plugins import PluginError, PluginManager, Selection

if TYPE_CHECKING:
    import typer

log = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes", "on")


@contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """Hold back what ``logger`` says (a plugin left out) while the command line is built."""
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was


def add_plugin_commands(app: typer.Typer) -> None:
    """Let every admitted plugin add its commands or command groups to ``app``."""
    if os.environ.get("AHP_NO_PLUGINS", "").strip().lower() in _TRUE:
        return
    try:
        manager = PluginManager(selection=Selection.from_options(None, False))
        with _quiet(logging.getLogger("ahpcore.plugins")):
            manager.load()
    except PluginError:
        return  # the command that loads plugins says what is wrong, in its own words
    for impl in manager.implementations("ahp_cli_commands"):
        try:
            impl(app=app)
        except Exception as exc:  # one plugin's mistake costs its commands, not the CLI
            log.warning("plugin %s added no commands: %r", impl.plugin, exc)
