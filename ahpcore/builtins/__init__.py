"""Plugins that ship inside ahpcore (``ahpcore.plugins.ESSENTIAL_PLUGINS`` names them).

Essential plugins load on every host, ``--no-plugins`` included, and cannot
be disabled: without them the host cannot speak the protocol.
"""
