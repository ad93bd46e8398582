"""Checking request params without pydantic.

Importing pydantic and building a request's validator was about a quarter of the
CPU from a host's start to its first answer, and most of a first listing's. Most
requests' params are strings, numbers and lists of them, so they are checked here
against the schema itself (``_generated/shapes.py``), with the verdicts and wording
of the lenient pydantic models. Where pydantic's lax conversions make the answer
subtle (a number sent as a string, a boolean as anything but a boolean), this
checker does not guess: it says ``Undecided`` and the caller asks pydantic.
``tests/protocol/test_shapes.py`` holds the two to the same answers.

Actions are read here too, for a narrower question (``exact``): is this action
already what pydantic's lenient model would make of it? Most are (a client sends
what the schema declares), and then it is relayed as it came, without being
validated into a model and dumped back; any other is left to pydantic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ahpcore.protocol._generated.shapes import ACTIONS, NUMBER, ROOTS, SHAPES

#: A problem: where (keys and list indexes, as pydantic's ``loc``) and what.
Problem = tuple[tuple[str | int, ...], str]


class Undecided(Exception):
    """A value this checker leaves to pydantic (lax conversions it does not copy)."""


CHECKED: frozenset[str] = frozenset(ROOTS)
#: Action type -> the definition to read it against with ``exact``.
ACTION_SHAPES: dict[str, str] = ACTIONS


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


#: A compiled ``exact`` check of one shape.
Exact = Callable[[Any], bool]
#: Definition name -> its compiled check, made on first use.
_exact_checks: dict[str, Exact] = {}


def exact(model_name: str, value: Any) -> bool:
    """Whether ``value`` is valid as ``model_name`` and its lenient model's dump
    (by alias, unset fields left out, JSON mode) would be ``value`` itself.

    False says nothing more: a problem, a key the model would drop, a value its
    lax rules would convert, a part this checker does not read (a union). Each
    definition is compiled once into closures: this runs for every action.
    """
    check = _exact_checks.get(model_name)
    if check is None:
        check = _compile_ref(model_name)
    return check(value)


def _compile_ref(name: str) -> Exact:
    found = _exact_checks.get(name)
    if found is not None:
        return found
    # A definition may reach itself: until it is compiled, a reference forwards.
    _exact_checks[name] = lambda value: _exact_checks[name](value)
    check = _exact_checks[name] = _compile(SHAPES[name])
    return check


def _is_str(value: Any) -> bool:
    return type(value) is str


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _is_bool(value: Any) -> bool:
    return type(value) is bool


def _is_map(value: Any) -> bool:
    return type(value) is dict  # a free-form map is dumped as it is


def _never(value: Any) -> bool:
    return False


def _compile(shape: dict[str, Any]) -> Exact:
    ref = shape.get("$ref")
    if ref is not None:
        return _compile_ref(ref)
    values = shape.get("enum")
    if values is not None:
        allowed = frozenset(values)
        return lambda value: type(value) is str and value in allowed
    kind = shape.get("type")
    if kind == "string":
        return _is_str
    if kind == "object":
        properties = shape.get("properties")
        if properties is None:
            return _is_map
        return _object({k: _compile(v) for k, v in properties.items()}, shape.get("required", ()))
    if kind == "array":
        items = shape.get("items")
        each = _compile(items) if items is not None else None
        return lambda value: (
            type(value) is list and (each is None or all(each(item) for item in value))
        )
    if "minimum" in shape or "maximum" in shape:
        return _never  # a bound: left to pydantic
    if kind == "integer":
        return _is_int
    if kind == NUMBER:
        return _is_number
    if kind == "boolean":
        return _is_bool
    return _never  # undecided: a union, a typed map, a keyword not read here


def _object(fields: dict[str, Exact], required: tuple[str, ...] | list[str]) -> Exact:
    needed = tuple(required)

    def check(value: Any) -> bool:
        if type(value) is not dict:
            return False
        for key, item in value.items():
            field = fields.get(key)
            if field is None:
                return False  # the dump would drop it
            if item is None:
                if key in needed:
                    return False
            elif not field(item):
                return False
        return all(key in value for key in needed)

    return check
