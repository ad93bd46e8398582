"""Reading scripts from JSON and YAML, with errors that say where and what.

The file format, in YAML::

    name: My agent
    rules:
      - prefix: "echo "
        steps:
          - say: "Echoing."
          - tool: echo
            input: {text: "${rest}"}
            approval: true
            result: "${input.text}"
    default:
      - say: "Try `echo hi`."

A step is a mapping with one kind key (say, think, tool, ask, usage, title,
activity, wait, fail, crash). Its value is the step's main field (the text,
the tool's name, the questions, the seconds or gate name of a wait) or a
mapping of all its fields; other fields sit beside the kind key. Keys are the
step dataclasses' field names.

This module reads text and files. The mappings themselves are parsed in
``ahp_scripted.script`` (``parse_step``, ``parse_rule``, ``parse_script``, named
here too), since its classes take them wherever they take steps or rules.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from ahp_scripted.script import (
    FIELDS,
    KINDS,
    Check,
    Script,
    ScriptError,
    _check_shapes,
    parse_rule,
    parse_script,
    parse_step,
)

__all__ = [
    "FIELDS",
    "KINDS",
    "SUFFIXES",
    "Check",
    "load_script",
    "loads_script",
    "parse_rule",
    "parse_script",
    "parse_step",
]

SUFFIXES = (".json", ".yaml", ".yml")


def _yaml() -> Any:
    # Imported by name so the module's missing type stubs do not matter.
    return importlib.import_module("yaml")


def loads_script(
    text: str, *, format: str = "json", source: str = "<script>", check_shapes: bool = True
) -> Script:
    """A script from JSON or YAML text (``format`` is "json" or "yaml").

    ``check_shapes=False`` leaves protocol shapes embedded in the script
    (questions) unchecked: only for scripts whose tests check them.
    """
    if format == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScriptError(f"{source}: not valid JSON: {exc}") from None
    elif format == "yaml":
        yaml = _yaml()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ScriptError(f"{source}: not valid YAML: {exc}") from None
    else:
        raise ScriptError(f"{source}: unknown script format {format!r} (json or yaml)")
    token = _check_shapes.set(check_shapes)
    try:
        return parse_script(data, source)
    finally:
        _check_shapes.reset(token)


def load_script(path: str | Path) -> Script:
    """A script from a .json, .yaml or .yml file, or every such file of a directory in name order."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES)
        if not files:
            raise ScriptError(f"{path}: no {', '.join(SUFFIXES)} script files in this directory")
        scripts = [load_script(file) for file in files]
        combined = scripts[0]
        for script in scripts[1:]:
            combined = combined.combine(script)
        return combined
    if path.suffix not in SUFFIXES:
        raise ScriptError(f"{path}: a script file ends in {', '.join(SUFFIXES)}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"{path}: cannot read the script: {exc.strerror or exc}") from None
    return loads_script(text, format="json" if path.suffix == ".json" else "yaml", source=str(path))
