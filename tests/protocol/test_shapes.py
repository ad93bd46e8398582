"""The handshake's plain checks give the lenient pydantic models' verdicts, word for word."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from ahpcore.protocol import shapes
from ahpcore.protocol.methods import PLAIN_PARAMS, cut_module

#: One of every JSON type, and of the shapes the handshake's fields take.
VALUES: list[Any] = [
    None,
    True,
    0,
    1.5,
    "",
    "ahp-root://",
    "ahp-session:/x",
    [],
    ["1.0.0"],
    [1],
    ["a", None],
    {},
    {"name": "n"},
    {"name": 1},
    {"name": "n", "version": 2},
    {"mcpApps": {}},
    {"mcpApps": []},
    {"mcpApps": None},
    {"anything": 1},
]

VALID: dict[str, dict[str, Any]] = {
    "InitializeParams": {
        "channel": "ahp-root://",
        "protocolVersions": ["1.0.0"],
        "clientId": "c",
        "clientInfo": {"name": "n", "version": "1", "title": "t"},
        "initialSubscriptions": ["ahp-root://"],
        "locale": "en",
        "capabilities": {"mcpApps": {}},
        "_meta": {"k": 1},
    },
    "PingParams": {"channel": "ahp-root://", "_meta": {}},
}


def _pydantic(model_name: str, value: Any) -> shapes.Problem | None:
    module = importlib.import_module(
        f"ahpcore.protocol._generated.commands.{cut_module(model_name)}"
    )
    try:
        TypeAdapter(getattr(module, model_name)).validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        return tuple(first["loc"]), first["msg"]
    return None


def _cases(model_name: str) -> list[Any]:
    valid = VALID[model_name]
    cases: list[Any] = [valid, {}, {"unknown": 1, **valid}]
    for key in valid:
        cases.append({k: v for k, v in valid.items() if k != key})
        cases.extend({**valid, key: value} for value in VALUES)
    # Nested fields, each wrong in turn.
    for key, inner in valid.items():
        if isinstance(inner, dict):
            for sub in ("name", "version", "title", "mcpApps"):
                cases.extend({**valid, key: {**inner, sub: value}} for value in VALUES)
        if isinstance(inner, list):
            cases.extend({**valid, key: [*inner, value]} for value in VALUES)
    return cases


def test_plain_shapes_cover_the_handshake():
    assert shapes.CHECKED == frozenset(PLAIN_PARAMS) == {"InitializeParams", "PingParams"}
    assert shapes.literal_channel("InitializeParams") == "ahp-root://"


@pytest.mark.parametrize("model_name", PLAIN_PARAMS)
def test_plain_checks_agree_with_the_lenient_models(model_name):
    cases = _cases(model_name)
    refused = 0
    for value in cases:
        ours = shapes.problem(model_name, value)
        theirs = _pydantic(model_name, value)
        assert ours == theirs, value
        refused += theirs is not None
    # The corpus exercises both verdicts, not just one.
    assert 0 < refused < len(cases)


def test_an_unsupported_keyword_stops_the_generator():
    from ahpcore.protocol.codegen import plain_shapes

    defs = {"P": {"type": "object", "properties": {"n": {"type": ["integer", "number"]}}}}
    with pytest.raises(ValueError, match=r"P\.n: type"):
        plain_shapes(defs, ("P",))
    defs = {"P": {"type": "object", "properties": {"n": {"oneOf": []}}}}
    with pytest.raises(ValueError, match="oneOf"):
        plain_shapes(defs, ("P",))
