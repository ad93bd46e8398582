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


# -- actions: relayed as they came when already what the lenient model makes of them ------
def _fixture_actions() -> Iterator[dict[str, Any]]:
    import json

    from ahpcore.protocol import reference

    for path in sorted((reference.data_dir() / "fixtures-0.8.0" / "reducers").glob("*.json")):
        for action in json.loads(path.read_text("utf-8")).get("actions", ()):
            if isinstance(action, dict):
                yield action


def _dumped(model: Any, value: Any) -> Any:
    """The lenient model's dump of ``value`` (as ``check_action`` makes it), or an error."""
    try:
        parsed = model.__pydantic_validator__.validate_python(value)
    except ValidationError:
        return ValidationError
    return model.__pydantic_serializer__.to_python(
        parsed, by_alias=True, exclude_unset=True, mode="json"
    )


def test_an_action_said_exact_is_its_own_dump():
    from ahpcore.engine.params import action_models

    models = action_models()
    exact = other = 0
    seen: set[str] = set()
    for kind, name in shapes.ACTION_SHAPES.items():
        (model,) = models[kind]
        cases = [*_cases(name), *(a for a in _fixture_actions() if a.get("type") == kind)]
        for value in cases:
            if shapes.exact(name, value):
                assert _dumped(model, value) == value, (kind, value)
                exact += 1
                seen.add(kind)
            else:
                other += 1
    # Both verdicts are exercised, and most action types have cases read here alone.
    assert exact > 1000 and other > 1000
    assert len(seen) > len(shapes.ACTION_SHAPES) / 2
    assert {"chat/draftChanged", "chat/turnStarted", "session/titleChanged"} <= seen


def test_what_the_plain_reading_does_not_decide_is_left_to_pydantic():
    draft = {"type": "chat/draftChanged", "draft": {"text": "t", "origin": {"kind": "user"}}}
    assert shapes.exact("ChatDraftChangedAction", draft)
    # A key the model drops, a lax value, a union (attachments), a null for a required key.
    assert not shapes.exact("ChatDraftChangedAction", {**draft, "unknown": 1})
    assert not shapes.exact(
        "ChatDraftChangedAction", {**draft, "draft": {**draft["draft"], "text": 5}}
    )
    attachment = {"type": "simple", "label": "x"}
    assert not shapes.exact(
        "ChatDraftChangedAction",
        {**draft, "draft": {**draft["draft"], "attachments": [attachment]}},
    )
    assert not shapes.exact("ChatDraftChangedAction", {**draft, "type": None})
    # Left to pydantic is not refused: check_action still takes each as the model reads it.
    from ahpcore.engine.params import check_action

    assert check_action(draft) is draft
    assert check_action({**draft, "unknown": 1}) == draft
    assert check_action({**draft, "draft": {**draft["draft"], "_meta": None}}) == {
        **draft,
        "draft": {**draft["draft"], "_meta": None},
    }


def test_a_part_the_plain_checker_cannot_read_is_marked_undecided_for_actions():
    from ahpcore.protocol.codegen import UNDECIDED, plain_shapes

    defs = {
        "A": {
            "type": "object",
            "properties": {"type": {"const": "a/b"}, "n": {"oneOf": []}, "s": {"type": "string"}},
        }
    }
    made = plain_shapes(defs, ("A",), partial=True)["A"]["properties"]
    assert made == {"type": {"enum": ["a/b"]}, "n": UNDECIDED, "s": {"type": "string"}}
