"""The protocol engine: channels and their state, clients, routing, replay.

It knows the protocol and nothing of sessions, ports or plugins; the layers
above build on it (see docs/architecture.md).
"""
