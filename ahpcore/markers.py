"""The pluggy markers of the ``ahp`` project: ``hookimpl`` for plugins, ``hookspec`` for
the core. In a module of their own so that any layer may mark an implementation."""

from __future__ import annotations

import pluggy

PROJECT = "ahp"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
