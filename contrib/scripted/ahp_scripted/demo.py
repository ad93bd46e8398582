"""The demo agent: the script a newcomer meets, and what it knows about the host."""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ahp_scripted.script import Script
    from ahpcore.api import PluginHost

#: The demo's ``name`` and ``description`` (as in ``demo.yaml``, which a test holds
#: them to): the host lists the agent at start, before anyone needs the script.
DEMO_NAME = "Demo agent"
DEMO_DESCRIPTION = 'A scripted demo agent that shows what a client can do. Say "help".'


@functools.cache
def demo_script() -> Script:
    """The demo agent's script (``demo.yaml`` in this package).

    Its questions are checked by this package's tests, not each time a host starts;
    it is read (with the YAML parser) when the first turn needs it, not at start.
    """
    from ahp_scripted.loader import loads_script

    return loads_script(demo_text(), format="yaml", source=DEMO_SOURCE, check_shapes=False)


DEMO_SOURCE = "ahp_scripted/demo.yaml"


def demo_text() -> str:
    return resources.files("ahp_scripted").joinpath("demo.yaml").read_text(encoding="utf-8")


def _code_list(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names) or "none"


def host_variables(host: PluginHost | None = None) -> Callable[[], dict[str, str]]:
    """``${version}``, ``${plugins}`` and ``${methods}`` of a host, read when a turn starts.

    Read late because a host adds methods after its backends register. Without
    a host, the protocol's own command list stands in.
    """
    from ahpcore import __version__
    from ahpcore.protocol.methods import COMMANDS

    def variables() -> dict[str, str]:
        if host is None:
            return {
                "version": __version__,
                "plugins": "none",
                "methods": _code_list(sorted(COMMANDS)),
            }
        return {
            "version": __version__,
            "plugins": _code_list(host.plugin_names()),
            "methods": _code_list(host.method_names()),
        }

    return variables
