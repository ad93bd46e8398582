"""ahp-remote: sessions that run on another AHP host, reached over stdio, SSH, Docker or WebSocket."""

__version__ = "0.1.0"
