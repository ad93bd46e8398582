"""``ahp chat``: a terminal client for a running host.

It speaks the protocol as any client does, over the host's WebSocket: it keeps
the root, the session and the chat it shows as snapshots folded forward with
``ahpcore.reducers``, and renders from that state. Nothing here reaches into
the host's own code.
"""
