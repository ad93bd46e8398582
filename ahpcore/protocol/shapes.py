"""Checking request params without pydantic.

Importing pydantic and building a request's validator was about a quarter of the
CPU from a host's start to its first answer, and most of a first listing's. Most
requests' params are strings, numbers and lists of them, so they are checked here
against the schema itself (``_generated/shapes.py``), with the verdicts and wording
of the lenient pydantic models. Where pydantic's lax conversions make the answer
subtle (a number sent as a string, a boolean as anything but a boolean), this
checker does not guess: it says ``Undecided`` and the caller asks pydantic.
``tests/protocol/test_shapes.py`` holds the two to the same answers.
"""

from __future__ import annotations

from typing import Any

from ahpcore.protocol._generated.shapes import NUMBER, ROOTS, SHAPES

#: A problem: where (keys and list indexes, as pydantic's ``loc``) and what.
Problem = tuple[tuple[str | int, ...], str]


class Undecided(Exception):
    """A value this checker leaves to pydantic (lax conversions it does not copy)."""


CHECKED: frozenset[str] = frozenset(ROOTS)


def literal_channel(model_name: str) -> str | None:
    """The one channel ``model_name``'s params may name, if the schema fixes one."""
    channel = SHAPES[model_name].get("properties", {}).get("channel", {})
    values = channel.get("enum", ())
    return str(values[0]) if len(values) == 1 else None


def problem(model_name: str, value: Any) -> Problem | None:
    """The first thing wrong with ``value`` as ``model_name``, or None when it is fine.

    Raises ``Undecided`` for a value only pydantic's lax rules can judge.
    """
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
    if kind == NUMBER:
        if isinstance(value, str) or "minimum" in shape or "maximum" in shape:
            raise Undecided
        if isinstance(value, int | float):
            return None
        return (*loc, "int"), "Input should be a valid integer"
    if kind == "integer":
        if isinstance(value, bool | float | str):
            raise Undecided
        if not isinstance(value, int):
            return loc, "Input should be a valid integer"
        if "minimum" in shape and value < shape["minimum"]:
            return loc, f"Input should be greater than or equal to {shape['minimum']}"
        if "maximum" in shape and value > shape["maximum"]:
            return loc, f"Input should be less than or equal to {shape['maximum']}"
        return None
    if kind == "boolean":
        if isinstance(value, bool):
            return None
        raise Undecided
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
            if "properties" not in shape:
                return loc, "Input should be a valid dictionary"
            if name is None:
                raise Undecided  # an inline model: its class name is the generator's choice
            return loc, f"Input should be a valid dictionary or instance of {name}"
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
