"""Checking the handshake's params without pydantic.

A host's first answer is to ``initialize``; importing pydantic and building a
validator for it was about a quarter of the CPU from process start to that
answer. The handshake's params are a few strings and lists, so they are checked
here against the schema itself (``_generated/shapes.py``), with the verdicts
and wording of the lenient pydantic models (``tests/protocol/test_shapes.py``
holds the two to the same answers).
"""

from __future__ import annotations

from typing import Any

from ahpcore.protocol._generated.shapes import ROOTS, SHAPES

#: A problem: where (keys and list indexes, as pydantic's ``loc``) and what.
Problem = tuple[tuple[str | int, ...], str]

CHECKED: frozenset[str] = frozenset(ROOTS)


def literal_channel(model_name: str) -> str | None:
    """The one channel ``model_name``'s params may name, if the schema fixes one."""
    channel = SHAPES[model_name].get("properties", {}).get("channel", {})
    values = channel.get("enum", ())
    return str(values[0]) if len(values) == 1 else None


def problem(model_name: str, value: Any) -> Problem | None:
    """The first thing wrong with ``value`` as ``model_name``, or None when it is fine."""
    return _check(SHAPES[model_name], value, (), model_name)


def _expected(values: list[Any]) -> str:
    said = [repr(v) for v in values]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


def _check(
    shape: dict[str, Any], value: Any, loc: tuple[str | int, ...], name: str | None
) -> Problem | None:
    ref = shape.get("$ref")
    if ref is not None:
        return _check(SHAPES[ref], value, loc, ref)
    kind = shape.get("type")
    values = shape.get("enum")
    if values is not None:
        # A literal: anything else, of any type, is "not one of these".
        if not (isinstance(value, str) and value in values):
            return loc, f"Input should be {_expected(values)}"
        return None
    if kind == "string":
        if not isinstance(value, str):
            return loc, "Input should be a valid string"
        return None
    if kind == "array":
        if not isinstance(value, list):
            return loc, "Input should be a valid list"
        items = shape.get("items")
        if items is not None:
            for index, item in enumerate(value):
                found = _check(items, item, (*loc, index), None)
                if found is not None:
                    return found
        return None
    if kind == "object":
        if not isinstance(value, dict):
            # A declared type is a model; a bare object is a free-form map.
            if name is not None and "properties" in shape:
                return loc, f"Input should be a valid dictionary or instance of {name}"
            return loc, "Input should be a valid dictionary"
        required = shape.get("required", ())
        for key, field in shape.get("properties", {}).items():
            if key not in value:
                if key in required:
                    return (*loc, key), "Field required"
                continue
            if value[key] is None and key not in required:
                continue  # an optional field may be sent as null
            found = _check(field, value[key], (*loc, key), None)
            if found is not None:
                return found
        return None
    raise ValueError(f"plain shape of type {kind!r} is not supported")
