"""Turning wire text into JSON-RPC messages and back.

Knows method names only as strings; what they mean is the engine's business.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from ahpcore.protocol.errors import INVALID_REQUEST, PARSE_ERROR, ProtocolError

#: Deeper than any protocol shape; bounds the parser so a hostile frame cannot recurse forever.
MAX_JSON_DEPTH = 256
#: Arrays plus objects one frame may hold. The largest protocol messages (a prompt with
#: attachments, a file written through resourceWrite) are a few long strings in a few
#: dozen containers; a frame of millions of ``[]`` is only there to make the parser work.
MAX_JSON_CONTAINERS = 100_000
#: Values (counted by their separating commas, or strings by their quotes) one frame may hold.
MAX_JSON_ELEMENTS = 250_000

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


#: Built once: json.dumps with any option builds a new encoder on every call.
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def dumps(message: Any) -> str:
    """Compact JSON text, as frames go out."""
    return _ENCODE(message)


#: Values ``dumps`` refuses make orjson raise too (its ``TypeError``), except NaN and the
#: infinities, which it writes as ``null``: see ``dumps_weighed``.
_ORJSON_STRICT = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def dumps_weighed(message: Any) -> tuple[str, int]:
    """``dumps(message)`` as a frame to send, and its size in UTF-8 bytes.

    Encoded by orjson (several times faster, and the size comes free) whenever it
    writes the same JSON ``dumps`` would; anything else goes to ``dumps``, which
    then answers as it always did: integers past 64 bits and keys that are not
    strings are written, NaN and the infinities refused (orjson writes them as
    ``null``, so a frame holding ``null`` is left to ``dumps``), and an unpaired
    surrogate raises ``UnicodeEncodeError`` when the frame is weighed.
    """
    try:
        data = orjson.dumps(message, option=_ORJSON_STRICT)
    except TypeError:
        data = None
    if data is None or b"null" in data:
        text = _ENCODE(message)
        return text, len(text.encode("utf-8"))
    return data.decode("utf-8"), len(data)


#: Items encoded per call by ``dumps_answer_in_slices``: each call holds the GIL about a
#: millisecond, so the event loop's thread gets it back between them.
ANSWER_SLICE = 200


def dumps_answer_in_slices(ident: Any, result: dict[str, Any]) -> tuple[str, int]:
    """The answer frame of a result with a long ``items`` list, and its size in bytes.

    Meant for a worker thread: the items are encoded a slice at a time, so the
    event loop runs between slices instead of waiting for the whole answer.
    The frame is the one ``dumps`` would write, except that ``items`` comes first
    in ``result``.
    """
    items = result["items"]
    rest = {key: value for key, value in result.items() if key != "items"}
    shell = _ENCODE({"jsonrpc": "2.0", "id": ident, "result": {"items": [], **rest}})
    # Nothing before "result" can hold this unescaped: jsonrpc and the id are written first.
    marker = '"result":{"items":['
    cut = shell.index(marker) + len(marker)
    parts = [shell[:cut]]
    # Weighed as the slices are made: encoding 27 MB again to weigh it held the event
    # loop's thread out for tens of milliseconds at 100,000 rows.
    size = len(shell.encode("utf-8"))
    for start in range(0, len(items), ANSWER_SLICE):
        if start:
            parts.append(",")
            size += 1
        text, weight = dumps_weighed(items[start : start + ANSWER_SLICE])
        parts.append(text[1:-1])
        size += weight - 2  # the slice's own brackets
    parts.append(shell[cut:])
    return "".join(parts), size


_BRACKETS = re.compile(r"[\[\]{}]")
#: ``"id": <value>`` on the top-level object before anything nested opens.
_LEADING_ID = re.compile(r'\A\s*\{[^{}\[\]]*?"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")\s*[,}]')


def _skeleton(text: str) -> str:
    """The frame with every string taken out: what is left is structure.

    Escaped backslashes go first, then escaped quotes; every quote left then
    opens or closes a string (valid JSON has none elsewhere), so splitting on
    quotes alternates outside and inside. All of it runs at C speed, however
    many strings or escapes the frame holds.
    """
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    return "".join(unescaped.split('"')[::2])


def _structure_problem(text: str) -> str | None:
    """Why the frame's shape is refused before parsing it, or None.

    The cheap counts run first and over-count (brackets and commas inside
    strings count too); only a frame they flag is looked at again with its
    strings emptied, so a prompt quoting brackets is never refused for them.
    """
    containers = text.count("[") + text.count("{")
    # A frame holds no more commas than characters: a short one needs no count of them.
    if containers <= MAX_JSON_DEPTH and (
        len(text) <= MAX_JSON_ELEMENTS or text.count(",") <= MAX_JSON_ELEMENTS
    ):
        return None
    # Never more than the strings there are (an escaped quote is not a delimiter), so
    # this refuses no frame wrongly, and it keeps the split below to a bounded list.
    if (text.count('"') - text.count('\\"')) // 2 > MAX_JSON_ELEMENTS:
        return f"frame holds more than {MAX_JSON_ELEMENTS} values"
    skeleton = _skeleton(text)
    containers = skeleton.count("[") + skeleton.count("{")
    if containers > MAX_JSON_CONTAINERS:
        return f"frame holds more than {MAX_JSON_CONTAINERS} arrays and objects"
    if skeleton.count(",") > MAX_JSON_ELEMENTS:
        return f"frame holds more than {MAX_JSON_ELEMENTS} values"
    if containers > MAX_JSON_DEPTH:
        depth = 0
        for match in _BRACKETS.finditer(skeleton):  # at most 2 * MAX_JSON_CONTAINERS
            if match.group() in "[{":
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
            else:
                depth -= 1
    return None


def _leading_id(text: str) -> Any:
    """The request id of a frame refused unparsed, when it can be read without parsing.

    Only an id that comes before anything nested is trusted: one found further
    in could belong to params.
    """
    match = _LEADING_ID.match(text)
    if match is None:
        return None
    try:
        return json.loads(match.group(1))
    except ValueError:
        return None


#: An absolute path as exception texts spell one (POSIX, or a Windows drive or share).
_ABSOLUTE_PATH = re.compile(r"(?:(?<![\w.:/])/|\b[A-Za-z]:[\\/]|\\\\)[^\s'\"]*")


def without_paths(text: str) -> str:
    """``text`` with each absolute path cut to its last part: how the server's disk is laid
    out is not the client's business, and the log keeps the whole text."""

    def last_part(match: re.Match[str]) -> str:
        tail = re.split(r"[\\/]", match.group().rstrip("/\\"))[-1]
        return f"…/{tail}" if tail else "…"

    return _ABSOLUTE_PATH.sub(last_part, text)


#: Escapes that may spell half a surrogate pair (checked precisely only when present).
_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} is out of range")
    return value


#: Built once: json.loads with any option builds a new decoder on every call.
_DECODE = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float).decode

#: What ``_fast_decode`` answers for a frame it leaves to ``_DECODE``.
_UNSURE = object()
#: Every digit as a 9, so that one search finds a run of digits, and every ``{`` as a
#: ``[``, so that one count finds the arrays and objects a frame may open.
_MARKS = bytes.maketrans(b"0123456789{", b"9999999999[")
#: A run of digits this long may be an integer past 64 bits, which orjson reads as a float.
_LONG_DIGITS = b"9" * 19


def _fast_decode(text: str, marked: bytes) -> Any:
    """The frame as orjson reads it (several times faster), or ``_UNSURE``.

    orjson refuses all that ``_DECODE`` refuses (NaN, the infinities, numbers out of
    a float's range, half a surrogate pair, a byte-order mark), and for the rest
    reads the same values but one: an integer past 64 bits, which it makes a
    float. A frame that orjson refuses, or that holds a run of digits that long
    anywhere, goes to ``_DECODE``, which accepts or words its refusal as it always did.
    ``marked`` is the frame's bytes with every digit made a 9 (``_MARKS``).
    """
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _UNSURE
    if _LONG_DIGITS in marked:
        return _UNSURE
    return raw


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
    # One pass marks both what the structure bound counts and what orjson's guard looks for.
    marked = text.encode("utf-8", "surrogatepass").translate(_MARKS)
    if marked.count(b"[") > MAX_JSON_DEPTH or len(marked) > MAX_JSON_ELEMENTS:
        problem = _structure_problem(text)
        if problem is not None:
            ident = _leading_id(text)
            raise ProtocolError(PARSE_ERROR, problem, None if ident is None else {"id": ident})
    raw = _fast_decode(text, marked)
    if raw is _UNSURE:
        raw = _decode_slowly(text)
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


def _decode_slowly(text: str) -> Any:
    """The frame read by the standard decoder, which says why it refuses what it refuses."""
    try:
        if text.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        raw = _DECODE(text)
    except (ValueError, RecursionError) as exc:
        # Text that is not JSON has no id to trust (JSON-RPC answers it with null);
        # JSON holding a number no float can carry still has a readable one.
        ident = None if isinstance(exc, json.JSONDecodeError) else _leading_id(text)
        raise ProtocolError(
            PARSE_ERROR,
            f"frame is not valid JSON: {exc}",
            None if ident is None else {"id": ident},
        ) from None
    if "\\u" in text and _MAYBE_SURROGATE.search(text) and not _encodable(raw):
        # JSON can escape half a UTF-16 pair; such a string cannot be text again.
        # A request whose own id is sound is still answered by that id, or its
        # sender would wait for an answer that never names it.
        ident = raw.get("id") if isinstance(raw, dict) else None
        sound = isinstance(ident, (int, str)) and not isinstance(ident, bool) and _encodable(ident)
        raise ProtocolError(
            PARSE_ERROR,
            "frame holds an unpaired UTF-16 surrogate escape",
            {"id": ident} if sound else None,
        )
    return raw
