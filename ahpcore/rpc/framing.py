"""Turning wire text into JSON-RPC messages and back.

Knows method names only as strings; what they mean is the engine's business.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from ahpcore.protocol.errors import INVALID_REQUEST, PARSE_ERROR, ProtocolError

#: Deeper than any protocol shape; bounds the parser so a hostile frame cannot recurse forever.
MAX_JSON_DEPTH = 256

Kind = Literal["request", "notification", "response"]


@dataclass(frozen=True)
class Message:
    kind: Kind
    raw: dict[str, Any]

    @property
    def id(self) -> Any:
        return self.raw.get("id")

    @property
    def method(self) -> str:
        return str(self.raw.get("method", ""))

    @property
    def params(self) -> Any:
        return self.raw.get("params")


def dumps(message: Any) -> str:
    """Compact JSON text, as frames go out."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _depth_exceeds(text: str, limit: int) -> bool:
    # Cheap pre-scan: brackets inside strings only overestimate depth, which
    # errs on the side of refusing absurd frames. Counting first keeps the
    # character loop off the hot path: few frames have that many brackets.
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for char in text:
        if char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


#: Escapes that may spell half a surrogate pair (checked precisely only when present).
_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _encodable(value: Any) -> bool:
    try:
        dumps(value).encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return False
    return True


def parse(text: str | bytes) -> Message:
    """Parse one frame. Raises ProtocolError -32700 (not JSON) or -32600 (not JSON-RPC).

    A -32600 raised for a frame that carried a usable ``id`` has it in
    ``error.data['id']`` so the answer can name the request.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(PARSE_ERROR, "frame is not UTF-8 text") from None
    if _depth_exceeds(text, MAX_JSON_DEPTH):
        raise ProtocolError(PARSE_ERROR, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        raw = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(PARSE_ERROR, f"frame is not valid JSON: {exc}") from None
    if _MAYBE_SURROGATE.search(text) and not _encodable(raw):
        # JSON can escape half a UTF-16 pair; such a string cannot be text again.
        raise ProtocolError(PARSE_ERROR, "frame holds an unpaired UTF-16 surrogate escape")
    if not isinstance(raw, dict):
        kind = "a batch" if isinstance(raw, list) else f"a {type(raw).__name__}"
        raise ProtocolError(INVALID_REQUEST, f"expected a JSON-RPC object, got {kind}")
    ident = raw.get("id")
    id_ok = "id" not in raw or (isinstance(ident, (int, str)) and not isinstance(ident, bool))
    data = {"id": ident} if id_ok and "id" in raw else None
    if raw.get("jsonrpc") != "2.0":
        raise ProtocolError(INVALID_REQUEST, 'jsonrpc must be "2.0"', data)
    if not id_ok:
        raise ProtocolError(INVALID_REQUEST, "id must be an integer or a string")
    if "method" in raw:
        if not isinstance(raw["method"], str):
            raise ProtocolError(INVALID_REQUEST, "method must be a string", data)
        if "params" in raw and not isinstance(raw["params"], (dict, list)):
            raise ProtocolError(INVALID_REQUEST, "params must be an object", data)
        return Message("request" if "id" in raw else "notification", raw)
    if "id" in raw and ("result" in raw or "error" in raw):
        return Message("response", raw)
    raise ProtocolError(
        INVALID_REQUEST, "frame is neither a request, a notification nor a response", data
    )
