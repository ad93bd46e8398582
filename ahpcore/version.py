"""The version of ahpcore, in a module of its own so anything may import it."""

__version__ = "0.1.0"
