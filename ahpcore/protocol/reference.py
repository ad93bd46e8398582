"""The protocol's reference data, reduced to facts, kept in ``spec/`` in the repository.

A clone must run every conformance test on its own, so the repository keeps the
protocol's JSON Schemas and its official fixtures, made from the reference folder
(``../shared/ahp`` beside a checkout, or ``--source DIR``) by::

    python -m ahpcore.protocol.reference

Only facts are kept: the names, types, required fields, enums, constants and
bounds of every definition, and the fixtures' data. Every ``description``,
``$comment`` and ``title`` a schema writes about itself, and each fixture's
``description``, are dropped; the protocol's own documentation is a link away.
``tests/protocol/test_codegen.py`` checks the copy is what this module makes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: Where the reduced copy lives in a checkout.
SPEC_DIR = REPO / "spec"
#: What is copied from the reference folder.
SCHEMA_DIR = "schema"
FIXTURE_DIRS = ("fixtures-0.8.0/reducers", "fixtures-0.8.0/round-trips")

#: Keywords whose values are prose about the schema, not facts of the shape.
PROSE = frozenset({"description", "$comment", "title", "markdownDescription", "examples"})
#: Keywords whose value is a map from names to schemas.
NAMED_SCHEMAS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
#: Keywords whose value is one schema, or a list of them.
SUBSCHEMAS = frozenset(
    {
        "items",
        "additionalProperties",
        "not",
        "if",
        "then",
        "else",
        "contains",
        "propertyNames",
        "unevaluatedProperties",
        "unevaluatedItems",
        "oneOf",
        "anyOf",
        "allOf",
        "prefixItems",
    }
)
#: A fixture's own words.
FIXTURE_PROSE = frozenset({"description"})


def data_dir() -> Path:
    """Where tests read the reference data: ``$AHP_SHARED`` when set (the full
    reference folder), else the reduced copy in the checkout."""
    shared = os.environ.get("AHP_SHARED")
    return Path(shared) if shared else SPEC_DIR


def default_source() -> Path:
    """The reference folder: ``$AHP_SHARED`` or ``../shared/ahp`` beside the checkout."""
    shared = os.environ.get("AHP_SHARED")
    return Path(shared) if shared else REPO.parent / "shared" / "ahp"


def facts_of_schema(node: Any) -> Any:
    """``node`` (a JSON Schema) with every prose keyword dropped, at every depth.

    Keywords are told from property names by where they stand, so a property that
    is itself called ``description`` or ``title`` is kept.
    """
    if isinstance(node, list):
        return [facts_of_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in PROSE:
            continue
        if key in NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: facts_of_schema(schema) for name, schema in value.items()}
        elif key in SUBSCHEMAS:
            out[key] = facts_of_schema(value)
        else:
            out[key] = value  # const, enum, default, required, type, $ref: data as it is
    return out


def facts_of_fixture(case: Any) -> Any:
    if isinstance(case, dict):
        return {k: v for k, v in case.items() if k not in FIXTURE_PROSE}
    return case


def _dump(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False, sort_keys=False) + "\n"


def reduced(source: Path) -> Iterator[tuple[str, str]]:
    """Each file of the reduced copy: (path relative to ``spec/``, text)."""
    for path in sorted((source / SCHEMA_DIR).glob("*.schema.json")):
        schema = json.loads(path.read_text("utf-8"))
        yield f"{SCHEMA_DIR}/{path.name}", _dump(facts_of_schema(schema))
    for folder in FIXTURE_DIRS:
        for path in sorted((source / folder).glob("*.json")):
            case = json.loads(path.read_text("utf-8"))
            yield f"{folder}/{path.name}", _dump(facts_of_fixture(case))


def write(source: Path, target: Path = SPEC_DIR) -> int:
    """Make ``target`` the reduced copy of ``source``; the number of files written."""
    made = dict(reduced(source))
    if not made:
        raise FileNotFoundError(f"no AHP reference data in {source}")
    for folder in (SCHEMA_DIR, *FIXTURE_DIRS):
        shutil.rmtree(target / folder, ignore_errors=True)  # a file gone upstream goes here
    for name, text in made.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")
    return len(made)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ahpcore.protocol.reference")
    parser.add_argument("--source", type=Path, default=None, help="the reference folder")
    parser.add_argument("--target", type=Path, default=SPEC_DIR)
    args = parser.parse_args(argv)
    source = args.source or default_source()
    if not (source / SCHEMA_DIR).is_dir():
        parser.error(f"no AHP schemas in {source / SCHEMA_DIR} (pass --source or set AHP_SHARED)")
    count = write(source, args.target)
    print(f"wrote {count} files to {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
