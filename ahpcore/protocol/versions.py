"""Protocol version negotiation for ``initialize``.

The host speaks 1.0.0, 0.10.0 (VS Code 1.141's number for the 1.0.0 wire) and
0.9.0. It answers the highest offered version it speaks. A client newer than
the host inside major version 1 (a caret-compatible offer such as 1.2.0) is
answered rather than refused: semver promises it can read the 1.0.0 wire.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ahpcore.protocol.errors import INVALID_PARAMS, UNSUPPORTED_PROTOCOL_VERSION, ProtocolError

SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0.0", "0.10.0", "0.9.0")
#: The wire every negotiated version is served with.
SERVED_WIRE = "1.0.0"

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def parse_version(text: str) -> tuple[int, int, int]:
    """``"1.2.3"`` -> ``(1, 2, 3)``; anything that is not MAJOR.MINOR.PATCH raises ValueError."""
    match = _SEMVER.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a MAJOR.MINOR.PATCH version")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


@dataclass(frozen=True)
class Negotiated:
    """The outcome of a successful negotiation."""

    #: The entry of the client's offer the host answers with.
    protocol_version: str
    #: The version of the host's own that the connection is served as.
    served_as: str


def _caret_compatible(offer: tuple[int, int, int], ours: tuple[int, int, int]) -> bool:
    # ^1.0.0 admits 1.x.y >= 1.0.0; below 1.0.0 a minor bump is breaking, so
    # ^0.10.0 admits only 0.10.x.
    if offer[0] != ours[0]:
        return False
    if ours[0] == 0 and offer[1] != ours[1]:
        return False
    return offer >= ours


def negotiate(
    offered: Sequence[object], supported: Iterable[str] = SUPPORTED_VERSIONS
) -> Negotiated:
    """Pick the version to answer ``initialize`` with.

    Raises ``ProtocolError`` -32602 naming the first entry that is not a
    MAJOR.MINOR.PATCH string, and -32005 carrying ``supportedVersions`` when
    nothing offered can be spoken.
    """
    ours = sorted(supported, key=parse_version, reverse=True)
    parsed: list[tuple[tuple[int, int, int], str]] = []
    for index, entry in enumerate(offered):
        try:
            parsed.append((parse_version(entry), entry))  # type: ignore[arg-type]
        except ValueError:
            raise ProtocolError(
                INVALID_PARAMS,
                f"protocolVersions[{index}] = {entry!r} is not a MAJOR.MINOR.PATCH version",
            ) from None
    exact = [(v, text) for v, text in parsed if text in ours]
    if exact:
        _, text = max(exact)
        return Negotiated(protocol_version=text, served_as=text)
    for version, text in sorted(parsed, reverse=True):
        for mine in ours:
            if _caret_compatible(version, parse_version(mine)):
                return Negotiated(protocol_version=text, served_as=mine)
    shown = ", ".join(str(text) for _, text in parsed) or "nothing"
    raise ProtocolError(
        UNSUPPORTED_PROTOCOL_VERSION,
        f"no protocol version in common: the client offered {shown}; "
        f"this host speaks {', '.join(ours)}",
        data={"supportedVersions": list(ours)},
    )
