"""Terminals on the host's side: channels, claims, the fence, scrollback, ``!command``.

A terminals port (``ahpcore.ports.TerminalsPort``) runs the processes; this
package turns what they report into ``terminal/*`` actions (``output``), serves
the commands and client actions that reach them (``service``) and runs a
turn's ``!command`` in a terminal the session claims (``commands``).
"""
