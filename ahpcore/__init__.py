"""ahpcore: the core of the ahp Agent Host Protocol host."""

__version__ = "0.1.0"
