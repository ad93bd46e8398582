"""Checking what a client sent against the protocol's shapes, with errors naming the field.

Client params are checked with the lenient models: a key this host does not
know is a newer client's business, not an error; a missing or mistyped one is
-32602 naming it.
"""

from __future__ import annotations

import importlib
import typing
from functools import cache
from types import ModuleType
from typing import Any

import anyio.to_thread

from ahpcore.protocol import shapes
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError
from ahpcore.protocol.methods import CUT_PARAMS, cut_module

if typing.TYPE_CHECKING:
    from pydantic import BaseModel, TypeAdapter
    from pydantic_core import ValidationError

# pydantic itself is imported by the first check that needs it: most requests are
# checked without it (ahpcore.protocol.shapes), so a host answers its first client,
# and that client's first listing, without paying for pydantic's import.

EXEMPT_FROM_CHANNEL_CHECK = frozenset({"initialize", "ping"})
#: Other spellings taken for a literal channel (an older client's authority form).
CHANNEL_SPELLINGS: dict[str, frozenset[str]] = {
    "ahp-automations://": frozenset({"ahp-automations://", "ahp-automations://catalog"}),
}


@cache
def _models() -> ModuleType:
    # Several hundred generated classes: loaded when the first params are checked,
    # not when the host starts, so start-up and idle memory do not pay for them.
    global _built
    module = importlib.import_module("ahpcore.protocol.models")
    _built = True
    return module


#: True once ``_models`` has built them (read per frame, so a plain flag).
_built = False


def models_built() -> bool:
    """Whether the full models are built (``load_models`` then has nothing to wait for)."""
    return _built


async def load_models(model_name: str) -> None:
    """Build the classes ``model_name`` needs in a worker thread, the first time only.

    A request's params come from a small module of their own; anything else (an
    action) needs the full models, whose 0.2-0.4 s of class building would
    otherwise hold the event loop, and every other client with it.
    """
    if model_name in CUT_PARAMS:
        if model_name not in _cuts:
            await anyio.to_thread.run_sync(_cut, model_name)
    elif not _built:
        await anyio.to_thread.run_sync(_models)


#: Params model name -> the generated module holding it, once imported.
_cuts: dict[str, ModuleType] = {}


def _cut(model_name: str) -> ModuleType:
    module = _cuts.get(model_name)
    if module is None:
        name = f"ahpcore.protocol._generated.commands.{cut_module(model_name)}"
        module = _cuts[model_name] = importlib.import_module(name)
    return module


def _model(model_name: str) -> Any:
    if model_name in CUT_PARAMS:
        return getattr(_cut(model_name), model_name)
    return getattr(_models(), model_name, None)


def _describe(error: dict[str, Any], prefix: str) -> str:
    path = prefix
    for part in error.get("loc", ()):
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return f"{path}: {error.get('msg', 'invalid')}"


@cache
def literal_channel(model_name: str) -> str | None:
    """The channel a params model declares as a literal, if it declares one."""
    if model_name in shapes.CHECKED:
        return shapes.literal_channel(model_name)
    from pydantic import BaseModel

    model = _model(model_name)
    if not isinstance(model, type) or not issubclass(model, BaseModel):
        return None
    field = model.model_fields.get("channel")
    if field is None or typing.get_origin(field.annotation) is not typing.Literal:
        return None
    (value,) = typing.get_args(field.annotation)
    return str(value)


@cache
def _adapter(model_name: str) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(_model(model_name))


async def checked(
    method: str, model_name: str, params: Any, *, prefix: str = "params"
) -> dict[str, Any]:
    """Validate ``params`` for ``method``; returns them (with a literal channel filled in).

    Plainly where the schema allows (``ahpcore.protocol.shapes``); otherwise, or for a
    value only pydantic's lax rules can judge, with the params' model, built first
    in a worker thread.
    """
    if model_name in shapes.CHECKED:
        try:
            return check(method, model_name, params, prefix=prefix)
        except shapes.Undecided:
            pass
    await load_models(model_name)
    return check(method, model_name, params, prefix=prefix, plain=False)


def check(
    method: str, model_name: str, params: Any, *, prefix: str = "params", plain: bool = True
) -> dict[str, Any]:
    """``checked`` once the model is built (``load_models``), or with ``plain`` where
    ``shapes`` checks it; raises ``shapes.Undecided`` when that cannot tell."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ProtocolError(INVALID_PARAMS, f"{prefix} of {method} must be an object")
    literal = literal_channel(model_name)
    if literal is not None:
        named = params.get("channel")
        if method in EXEMPT_FROM_CHANNEL_CHECK or named is None:
            # initialize and ping are how a client learns it can talk at all;
            # naming no channel names nothing wrong.
            params = {**params, "channel": literal}
        elif not isinstance(named, str):
            # Checked before the set lookup below, which a list or an object cannot take.
            raise ProtocolError(
                INVALID_PARAMS, f"{method}: {prefix}.channel: Input should be a valid string"
            )
        elif named not in CHANNEL_SPELLINGS.get(literal, {literal}):
            raise ProtocolError(
                INVALID_PARAMS,
                f"{method} is addressed to channel {literal!r}, not {named!r}",
            )
    if plain and model_name in shapes.CHECKED:
        found = shapes.problem(model_name, params)
        if found is not None:
            loc, msg = found
            said = _describe({"loc": loc, "msg": msg}, prefix)
            raise ProtocolError(INVALID_PARAMS, f"{method}: {said}")
        return params
    from pydantic import ValidationError

    try:
        _adapter(model_name).validate_python(params)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise ProtocolError(INVALID_PARAMS, f"{method}: {_describe(dict(first), prefix)}") from None
    return params


@cache
def action_models(module: ModuleType | None = None) -> dict[str, tuple[type[BaseModel], ...]]:
    """Action type string -> the model(s) declaring it, read off the generated classes."""
    from pydantic import BaseModel

    found: dict[str, list[type[BaseModel]]] = {}
    for value in vars(module or _models()).values():
        if not (isinstance(value, type) and issubclass(value, BaseModel)):
            continue
        if not value.__name__.endswith("Action"):
            continue
        field = value.model_fields.get("type")
        if field is None or typing.get_origin(field.annotation) is not typing.Literal:
            continue
        for tag in typing.get_args(field.annotation):
            found.setdefault(str(tag), []).append(value)
    return {tag: tuple(classes) for tag, classes in found.items()}


@cache
def _validation_error() -> type[ValidationError]:
    # Looked up once: an import statement in check_action ran on every action.
    from pydantic_core import ValidationError as error

    return error


def check_action(action: Any, *, prefix: str = "action") -> dict[str, Any]:
    """Validate one state action by its ``type`` and return it as the protocol reads it.

    What comes back is the model's own dump: keys the protocol does not declare
    are dropped and lax values ("false", "5") become what they mean, so an
    action is reduced and relayed exactly as every client will read it.
    ProtocolError names what is wrong.
    """
    if not isinstance(action, dict):
        raise ProtocolError(INVALID_PARAMS, f"{prefix} must be an object")
    kind = action.get("type")
    if isinstance(kind, str):
        shape = shapes.ACTION_SHAPES.get(kind)
        if shape is not None and shapes.exact(shape, action):
            # Already what the dump below would return: a draft a client sends many of
            # a second is not validated into a model and dumped back (a third of the
            # CPU its check took).
            return action
    candidates = action_models().get(kind) if isinstance(kind, str) else None
    if not candidates:
        raise ProtocolError(INVALID_PARAMS, f"{prefix}.type: unknown action type {kind!r}")
    failures: list[str] = []
    for model in candidates:
        # pydantic-core's own validator and serializer, as model_validate and model_dump
        # call them, without their Python wrappers: this runs for every action a client sends.
        try:
            parsed = model.__pydantic_validator__.validate_python(action)
        except _validation_error() as exc:
            failures.append(_describe(dict(exc.errors(include_url=False)[0]), prefix))
        else:
            dumped: dict[str, Any] = model.__pydantic_serializer__.to_python(
                parsed, by_alias=True, exclude_unset=True, mode="json"
            )
            return dumped
    raise ProtocolError(INVALID_PARAMS, f"{kind}: {failures[0]}")
