"""Plugins that ship inside ahpcore.

Essential plugins load on every host, ``--no-plugins`` included, and cannot
be disabled: without them the host cannot speak the protocol.
"""

#: plugin name -> module
ESSENTIAL_PLUGINS: dict[str, str] = {"core": "ahpcore.builtins.core"}
