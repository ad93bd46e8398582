"""Requests' plain checks give the lenient pydantic models' verdicts, word for word."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from ahpcore.protocol import shapes
from ahpcore.protocol._generated.shapes import ROOTS, SHAPES
from ahpcore.protocol.methods import cut_module

#: One of every JSON type, and values near the edges of the shapes' constraints.
VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.5,
    2**60,
    "",
    "s",
    "5",
    "ahp-root://",
    [],
    ["s"],
    [1],
    [None],
    {},
    {"a": 1},
]


def _example(shape: dict[str, Any]) -> Any:
    """A valid value of ``shape``, every optional field filled in."""
    if "$ref" in shape:
        return _example(SHAPES[shape["$ref"]])
    if "enum" in shape:
        return shape["enum"][0]
    kind = shape.get("type")
    if kind == "object":
        return {key: _example(field) for key, field in shape.get("properties", {}).items()}
    if kind == "array":
        return [_example(shape["items"])] if "items" in shape else []
    if kind == "integer":
        return max(shape.get("minimum", 1), 1)
    return {"string": "s", "boolean": True}.get(kind, 1) if kind != shapes.NUMBER else 2.5


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*path, key)
            yield from _paths(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield (*path, index)
            yield from _paths(inner, (*path, index))


def _replaced(value: Any, path: tuple[Any, ...], new: Any, *, drop: bool = False) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    head, rest = path[0], path[1:]
    if drop and not rest:
        del copy[head]
    else:
        copy[head] = _replaced(value[head], rest, new, drop=drop)
    return copy


def _cases(model_name: str) -> Iterator[Any]:
    valid = _example(SHAPES[model_name])
    yield valid
    yield {}
    yield {"unknown": 1, **valid}
    for path in _paths(valid):
        if isinstance(path[-1], str):
            yield _replaced(valid, path, None, drop=True)
        for value in VALUES:
            yield _replaced(valid, path, value)


@pytest.fixture(scope="module")
def adapters() -> dict[str, TypeAdapter[Any]]:
    found = {}
    for name in ROOTS:
        module = importlib.import_module(f"ahpcore.protocol._generated.commands.{cut_module(name)}")
        found[name] = TypeAdapter(getattr(module, name))
    return found


def _pydantic(adapter: TypeAdapter[Any], value: Any) -> shapes.Problem | None:
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        return tuple(first["loc"]), first["msg"]
    return None


def test_the_handshake_and_the_first_requests_are_checked_plainly():
    assert {"InitializeParams", "PingParams", "ListSessionsParams", "SubscribeParams"} <= set(ROOTS)
    assert shapes.literal_channel("InitializeParams") == "ahp-root://"
    assert shapes.literal_channel("SubscribeParams") is None


@pytest.mark.parametrize("model_name", ROOTS)
def test_plain_checks_agree_with_the_lenient_models(model_name, adapters):
    decided = refused = undecided = 0
    for value in _cases(model_name):
        try:
            ours = shapes.problem(model_name, value)
        except shapes.Undecided:
            undecided += 1
            continue
        theirs = _pydantic(adapters[model_name], value)
        assert ours == theirs, value
        decided += 1
        refused += theirs is not None
    # The corpus exercises both verdicts, and most of it is decided here.
    assert 0 < refused < decided
    assert undecided < decided


def test_lax_conversions_are_left_to_pydantic():
    with pytest.raises(shapes.Undecided):
        shapes.problem("ListSessionsParams", {"channel": "ahp-root://", "limit": "5"})
    with pytest.raises(shapes.Undecided):
        shapes.problem(
            "AuthenticateParams",
            {"channel": "ahp-root://", "resource": "r", "token": "t", "expiresIn": 5.0},
        )


def test_an_unsupported_keyword_stops_the_generator():
    from ahpcore.protocol.codegen import plain_shapes

    defs = {"P": {"type": "object", "properties": {"n": {"type": "null"}}}}
    with pytest.raises(ValueError, match=r"P\.n: type"):
        plain_shapes(defs, ("P",))
    defs = {"P": {"type": "object", "properties": {"n": {"oneOf": []}}}}
    with pytest.raises(ValueError, match="oneOf"):
        plain_shapes(defs, ("P",))
