"""The ``claude`` plugin: registers the Claude backend, its catalogue under the host's state."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ahp_claude.backend import ClaudeBackend
from ahpcore.hookspecs import hookimpl

if TYPE_CHECKING:
    from ahpcore.host import Host
    from ahpcore.ports import Backend


def backend_for(host: Host, env: dict[str, str] | None = None, **options: Any) -> ClaudeBackend:
    def spawn(function: Callable[..., Any], *args: Any, name: str | None = None) -> None:
        host.spawn(function, *args, name=name)

    return ClaudeBackend(host.settings.state_dir / "claude", spawn, env=env, **options)


@hookimpl
def ahp_backends(host: Host, register: Callable[[Backend], None]) -> None:
    register(backend_for(host))
