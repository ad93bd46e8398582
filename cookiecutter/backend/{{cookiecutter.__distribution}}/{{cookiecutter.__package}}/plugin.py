"""The plugin the host loads through the ``ahp`` entry point: it registers one backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ahpcore.hookspecs import hookimpl

from {{ cookiecutter.__package }}.backend import PROVIDER, Backend

if TYPE_CHECKING:
    from ahpcore.api import PluginHost
    from ahpcore.ports import Backend as BackendPort


@hookimpl
def ahp_backends(host: PluginHost, register: Callable[[BackendPort], None]) -> None:
    # Each backend keeps its conversations under the host's state directory.
    register(Backend(host.settings.state_dir / PROVIDER))
