"""The committed models are exactly what the generator makes of the schemas."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ahpcore.protocol import codegen, reference

GENERATED = Path(codegen.__file__).parent / "_generated"


def test_protocol_imports_with_pydantic_alone():
    code = (
        "import sys, ahpcore.protocol, ahpcore.protocol.models, ahpcore.protocol.strict,"
        " ahpcore.protocol.state, ahpcore.protocol.uris, ahpcore.protocol.versions\n"
        "bad = [m for m in ('websockets', 'anyio', 'pluggy', 'typer') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_committed_models_match_the_generator(tmp_path):
    schema = codegen.default_schema_dir()
    assert (schema / "state.schema.json").is_file(), f"the checkout keeps the schemas at {schema}"
    pytest.importorskip("datamodel_code_generator", reason="needs the dev dependency group")
    codegen.generate(schema, tmp_path)
    made = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*.py"))
    stale = [
        name
        for name in made
        if (tmp_path / name).read_text("utf-8") != (GENERATED / name).read_text("utf-8")
    ]
    assert not stale, (
        f"generated modules out of date: {stale}; run python -m ahpcore.protocol.codegen"
    )
    assert made == sorted(str(path.relative_to(GENERATED)) for path in GENERATED.rglob("*.py"))


def test_the_checkout_keeps_the_reference_data_as_the_reference_folder_makes_it():
    """``spec/`` is what ``python -m ahpcore.protocol.reference`` makes of the reference
    folder, file for file (checked where that folder is at hand: beside a checkout)."""
    source = reference.default_source()
    if not (source / reference.SCHEMA_DIR).is_dir():
        pytest.skip(f"no reference folder at {source} to compare spec/ with")
    made = dict(reference.reduced(source))
    kept = {
        str(path.relative_to(reference.SPEC_DIR)) for path in reference.SPEC_DIR.rglob("*.json")
    }
    assert kept == set(made), "spec/ is stale: run python -m ahpcore.protocol.reference"
    stale = [n for n, text in made.items() if (reference.SPEC_DIR / n).read_text("utf-8") != text]
    assert not stale, f"spec/ is stale ({stale[:3]}): run python -m ahpcore.protocol.reference"


PROSE_KEYS = ("description", "$comment", "title")


def _prose_in_schema(node, where="$"):
    """Every prose keyword left in a schema, by where it stands."""
    if isinstance(node, list):
        for n, item in enumerate(node):
            yield from _prose_in_schema(item, f"{where}[{n}]")
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in PROSE_KEYS and isinstance(value, str):
                yield f"{where}.{key}"
            elif key in reference.NAMED_SCHEMAS and isinstance(value, dict):
                for name, schema in value.items():
                    yield from _prose_in_schema(schema, f"{where}.{key}.{name}")
            elif key in reference.SUBSCHEMAS:
                yield from _prose_in_schema(value, f"{where}.{key}")


def test_no_prose_of_the_protocol_is_kept_in_the_repository():
    for path in sorted((reference.SPEC_DIR / "schema").glob("*.json")):
        found = list(_prose_in_schema(json.loads(path.read_text("utf-8"))))
        assert not found, f"{path.name} keeps prose at {found[:3]}"
    for path in sorted(reference.SPEC_DIR.glob("fixtures-*/*/*.json")):
        assert "description" not in json.loads(path.read_text("utf-8")), path.name
    # The models are generated from those schemas: what they describe, the generator's
    # own words say.
    own = Path(codegen.__file__).read_text("utf-8")
    for path in GENERATED.rglob("*.py"):
        for said in re.findall(r'description="([^"]*)"', path.read_text("utf-8")):
            assert said[:40] in own, f"{path.name}: {said[:60]!r}"
