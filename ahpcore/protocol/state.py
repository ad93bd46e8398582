"""TypedDicts of the protocol's state shapes, for the plain dicts reducers handle.

Generated code lives in ``ahpcore.protocol._generated.state``; this module is its public name.
"""

from ahpcore.protocol._generated.state import *  # noqa: F403
