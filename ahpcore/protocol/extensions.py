"""Hand-written protocol models that the AHP JSON Schemas do not contain.

The schemas describe every params, result, state and action shape, but not the
JSON-RPC 2.0 envelope that carries them (request, notification, success and
error response), and they cannot say that a decoder must keep an unknown
action or customization variant as raw JSON (the conformance round-trip
fixtures require it). The generated modules are never edited by hand, so these
pieces live here instead.

Each envelope comes in two flavours: the plain name ignores keys it does not
know, like ``ahpcore.protocol.models``; the ``Strict*`` twin forbids them, like
``ahpcore.protocol.strict``. Importable with pydantic alone. ``OpenStateAction``
and ``OpenCustomization`` (lenient, unknown variants kept as raw JSON) are
built on first access, because they pull in the large generated model module.
"""

from __future__ import annotations

import types
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    StrictInt,
    StrictStr,
    Tag,
)

__all__ = [
    "FrameKind",
    "JsonRpcError",
    "JsonRpcErrorResponse",
    "JsonRpcId",
    "JsonRpcMessage",
    "JsonRpcNotification",
    "JsonRpcRequest",
    "JsonRpcSuccessResponse",
    "StrictJsonRpcError",
    "StrictJsonRpcErrorResponse",
    "StrictJsonRpcNotification",
    "StrictJsonRpcRequest",
    "StrictJsonRpcSuccessResponse",
    "frame_kind",
    "literal_tags",
    "open_union",
]

FrameKind = Literal["request", "notification", "success", "error"]

#: JSON-RPC ids are numbers or strings; StrictInt keeps ``true`` and ``"1"`` out.
JsonRpcId = StrictInt | StrictStr

_LENIENT = ConfigDict(extra="ignore")
_STRICT = ConfigDict(extra="forbid")

# JSON-RPC lets params be omitted, but when present they are structured. An
# unvalidated default keeps "absent" apart from an explicit null, which is
# refused; typed Any so the declared type can stay non-optional.
_ABSENT: Any = None


class JsonRpcError(BaseModel):
    """The ``error`` member of an error response."""

    model_config = _LENIENT
    code: StrictInt
    message: StrictStr
    data: Any = None


class JsonRpcRequest(BaseModel):
    """A call that expects an answer: ``method`` and ``id``."""

    model_config = _LENIENT
    jsonrpc: Literal["2.0"]
    id: JsonRpcId
    method: StrictStr
    params: dict[str, Any] | list[Any] = Field(default=_ABSENT)


class JsonRpcNotification(BaseModel):
    """A one-way message: ``method`` and no ``id``."""

    model_config = _LENIENT
    jsonrpc: Literal["2.0"]
    method: StrictStr
    params: dict[str, Any] | list[Any] = Field(default=_ABSENT)


class JsonRpcSuccessResponse(BaseModel):
    """The answer to a request that succeeded; ``result`` may be JSON null."""

    model_config = _LENIENT
    jsonrpc: Literal["2.0"]
    id: JsonRpcId
    result: Any


class JsonRpcErrorResponse(BaseModel):
    """The answer to a request that failed.

    ``id`` is null only when the request's id could not be read (parse error).
    """

    model_config = _LENIENT
    jsonrpc: Literal["2.0"]
    id: JsonRpcId | None
    error: JsonRpcError


class StrictJsonRpcError(JsonRpcError):
    model_config = _STRICT


class StrictJsonRpcRequest(JsonRpcRequest):
    model_config = _STRICT


class StrictJsonRpcNotification(JsonRpcNotification):
    model_config = _STRICT


class StrictJsonRpcSuccessResponse(JsonRpcSuccessResponse):
    model_config = _STRICT


class StrictJsonRpcErrorResponse(JsonRpcErrorResponse):
    model_config = _STRICT
    error: StrictJsonRpcError


def frame_kind(frame: Any) -> FrameKind | None:
    """Which JSON-RPC message ``frame`` is, by the keys it carries; None if it cannot tell.

    A frame with ``method`` is a request (with ``id``) or a notification; one
    without is a response, success or error. A response carrying both
    ``result`` and ``error`` (or neither) is no message at all.
    """
    if isinstance(frame, BaseModel):
        # Serialising a JsonRpcMessage hands the model back to the discriminator.
        return _MODEL_KINDS.get(type(frame))
    if not isinstance(frame, Mapping):
        return None
    if "method" in frame:
        return "request" if "id" in frame else "notification"
    if ("result" in frame) == ("error" in frame):
        return None
    return "success" if "result" in frame else "error"


_MODEL_KINDS: dict[type[BaseModel], FrameKind] = {
    JsonRpcRequest: "request",
    JsonRpcNotification: "notification",
    JsonRpcSuccessResponse: "success",
    JsonRpcErrorResponse: "error",
    StrictJsonRpcRequest: "request",
    StrictJsonRpcNotification: "notification",
    StrictJsonRpcSuccessResponse: "success",
    StrictJsonRpcErrorResponse: "error",
}


class JsonRpcMessage(
    RootModel[
        Annotated[
            Annotated[JsonRpcRequest, Tag("request")]
            | Annotated[JsonRpcNotification, Tag("notification")]
            | Annotated[JsonRpcSuccessResponse, Tag("success")]
            | Annotated[JsonRpcErrorResponse, Tag("error")],
            Discriminator(frame_kind),
        ]
    ]
):
    """Any JSON-RPC message, told apart by its keys (lenient)."""


def literal_tags(union: Any, field: str = "type") -> dict[Any, tuple[type[BaseModel], ...]]:
    """Map each value ``field`` may take to the member models of ``union`` declaring it.

    ``union`` may be a union type, a RootModel around one (nested ones are
    flattened) or a single model. Members whose ``field`` is not a Literal are
    left out. A value two members share maps to both, in declaration order.
    """
    tags: dict[Any, tuple[type[BaseModel], ...]] = {}
    for model in _members(union):
        info = model.model_fields.get(field)
        if info is None or get_origin(info.annotation) is not Literal:
            continue
        for value in get_args(info.annotation):
            tags[value] = (*tags.get(value, ()), model)
    return tags


def _members(tp: Any) -> list[type[BaseModel]]:
    origin = get_origin(tp)
    if origin is Annotated:
        return _members(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in get_args(tp) for m in _members(arg)]
    if isinstance(tp, type) and issubclass(tp, RootModel):
        return _members(tp.model_fields["root"].annotation)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return []


def open_union(union: Any, known: Collection[Any], field: str = "type") -> Any:
    """``union`` for values whose ``field`` is in ``known``; any other object kept as raw JSON.

    The protocol's conformance fixtures require a decoder to keep a variant it
    does not know (a newer peer's action, say) verbatim instead of failing.
    Values that are not objects, or lack ``field``, still go to ``union`` so
    they fail with its own errors.
    """
    known = frozenset(known)

    def pick(value: Any) -> str:
        # Serialising hands back a decoded model (known) or the kept dict.
        if isinstance(value, Mapping) and field in value and value[field] not in known:
            return "unknown"
        return "known"

    return Annotated[
        Annotated[union, Tag("known")] | Annotated[dict[str, Any], Tag("unknown")],
        Discriminator(pick),
    ]


_OPEN: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    # Built lazily: the lenient generated models are large and most users of
    # this module only need the envelopes.
    if name not in ("OpenStateAction", "OpenCustomization"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _OPEN:
        from ahpcore.protocol import models

        union = models.StateAction if name == "OpenStateAction" else models.Customization
        _OPEN[name] = open_union(union, literal_tags(union))
    return _OPEN[name]
