"""Params of the wrong type are refused -32602 naming the field, before any handler runs:
never -32603 with a traceback in the log, for any method of the protocol."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest

import ahp_files.plugin
import ahp_git.plugin
import ahp_scripted.plugin
import ahp_terminals.plugin
from ahpcore.engine.params import EXEMPT_FROM_CHANNEL_CHECK, _model
from ahpcore.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from ahpcore.protocol.methods import CLIENT_NOTIFICATIONS, COMMANDS
from ahpcore.protocol.uris import ROOT_CHANNEL

pytestmark = pytest.mark.anyio
SESSION = "scripted:/00000000-0000-4000-8000-000000000001"
#: A value of each JSON type, and the schema types it does not fit.
WRONG: list[tuple[Any, frozenset[str]]] = [
    (5, frozenset({"string", "object", "array", "boolean"})),
    ("x", frozenset({"object", "array", "integer", "number", "boolean"})),
    ([], frozenset({"string", "object", "integer", "number", "boolean"})),
    ({}, frozenset({"string", "array", "integer", "number", "boolean"})),
    ([5], frozenset({"string", "object", "integer", "number", "boolean"})),
]


def _resolved(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _types(schema: dict[str, Any], defs: dict[str, Any]) -> set[str] | None:
    """The JSON types a field takes, or None when it takes anything (or is not plain)."""
    schema = _resolved(schema, defs)
    if "const" in schema or "enum" in schema:
        return {"string"}
    if "anyOf" in schema:
        found: set[str] = set()
        for option in schema["anyOf"]:
            types = _types(option, defs)
            if types is None:
                return None
            found |= types
        return found - {"null"}
    kind = schema.get("type")
    if kind is None:
        return {"object"} if "properties" in schema else None
    kinds = set(kind) if isinstance(kind, list) else {kind}
    if kinds & {"integer", "number"}:
        kinds |= {"integer", "number"}
    return kinds


def _sample(schema: dict[str, Any], defs: dict[str, Any], name: str) -> Any:
    """A value of the field's type, so the one wrong field is what the check sees."""
    schema = _resolved(schema, defs)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        return _sample(options[0], defs, name)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {key: _sample(properties[key], defs, key) for key in schema.get("required", ())}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return True
    return SESSION if name == "channel" else "file:///nowhere/x"


def _params_schema(model_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = _model(model_name).model_json_schema()
    return schema, schema.get("$defs", {})


def _mistakes(method: str, model_name: str) -> list[tuple[str, dict[str, Any], Any]]:
    """(field, params with that field of a wrong type, the wrong value), for every field."""
    schema, defs = _params_schema(model_name)
    base = _sample(schema, defs, "")
    found = []
    for field, field_schema in schema.get("properties", {}).items():
        types = _types(field_schema, defs)
        if types is None:
            continue
        if field == "channel" and method in EXEMPT_FROM_CHANNEL_CHECK:
            continue  # whatever channel they name, these two are answered on the root
        for value, misfits in WRONG:
            if types <= misfits:
                params = copy.deepcopy(base)
                params[field] = value
                found.append((field, params, value))
    return found


class _Tracebacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture
def tracebacks():
    handler = _Tracebacks()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)


async def test_every_command_refuses_wrong_types_with_invalid_params(
    ahp_host, tmp_path: Path, tracebacks
):
    work = tmp_path / "work"
    work.mkdir()
    plugins = [
        ("scripted", ahp_scripted.plugin),
        ("files", ahp_files.plugin),
        ("terminals", ahp_terminals.plugin),
        ("git", ahp_git.plugin),
    ]
    async with ahp_host(plugins=plugins) as running:
        client = await running.connect("typist", validate=False, conformance=False)
        await client.initialize()
        await client.request(
            "createSession",
            {"channel": SESSION, "provider": "scripted", "workingDirectories": [work.as_uri()]},
        )
        tried = 0
        for method, command in COMMANDS.items():
            for field, params, value in _mistakes(method, command.params):
                answer = await client.request_frame(method, params)
                tried += 1
                error = answer.get("error")
                where = f"{method} with {field}={value!r}: {answer}"
                assert error is not None, where
                assert error["code"] != INTERNAL_ERROR, where
                if error["code"] != METHOD_NOT_FOUND:  # no plugin here serves it
                    assert error["code"] == INVALID_PARAMS, where
                    assert field in error["message"], where
        assert tried > 200
        # Notifications are never answered, but are not served with bad params either.
        for method, model_name in CLIENT_NOTIFICATIONS.items():
            for _field, params, _value in _mistakes(method, model_name):
                await client.send({"jsonrpc": "2.0", "method": method, "params": params})
        assert not tracebacks, [record.getMessage() for record in tracebacks]
        await client.sync()
        assert (await client.request("ping", {"channel": ROOT_CHANNEL})) is None
        assert not (work / "x").exists()
