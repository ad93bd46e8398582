"""``ahp check``: a conformance kit any AHP host can be run against.

It connects as a client, runs every check it can without knowing the host's
agents in advance, and reports each as pass, fail or skip with the reason.
It speaks to the host only over the wire: it imports the protocol's shapes
and reducers, never the host that answers here.

``run_checks(Options(url=...))`` runs them from Python; ``ahpcore.check.cli``
adds the ``check`` command to a typer app.

The names below load on first use, so ``ahp --help`` (which imports
``ahpcore.check.cli``) does not pay for websockets and the protocol models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ahpcore.check.results import CheckResult, Status
    from ahpcore.check.runner import CHECK_NAMES, Options, run_checks

_HOMES = {
    "CheckResult": "ahpcore.check.results",
    "Status": "ahpcore.check.results",
    "CHECK_NAMES": "ahpcore.check.runner",
    "Options": "ahpcore.check.runner",
    "run_checks": "ahpcore.check.runner",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)


__all__ = ["CHECK_NAMES", "CheckResult", "Options", "Status", "run_checks"]
