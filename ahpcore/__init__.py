"""ahpcore: the core of the ahp Agent Host Protocol host.

``ahpcore.hookimpl`` marks a plugin's hook implementations. It is loaded on
first use so that ``ahpcore.protocol`` stays importable with pydantic alone.
"""

from typing import Any

from ahpcore.version import __version__

__all__ = ["__version__", "hookimpl", "hookspec"]


def __getattr__(name: str) -> Any:
    if name in ("hookimpl", "hookspec"):
        from ahpcore import markers

        return getattr(markers, name)
    raise AttributeError(f"module 'ahpcore' has no attribute {name!r}")
