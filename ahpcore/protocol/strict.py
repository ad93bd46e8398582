"""Strict pydantic models: every object forbids keys the protocol does not declare.

Generated code lives in ``ahpcore.protocol._generated.strict``; this module is its public name.
"""

from ahpcore.protocol._generated.strict import *  # noqa: F403
