"""Lenient pydantic models of every protocol type (unknown keys ignored).

Generated code lives in ``ahpcore.protocol._generated.models``; this module is its public name.
"""

from ahpcore.protocol._generated.models import *  # noqa: F403
