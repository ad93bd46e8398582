"""The committed models are exactly what the generator makes of the schemas."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ahpcore.protocol import codegen

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
    if not (schema / "state.schema.json").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"CI must have the protocol schemas at {schema}")
        pytest.skip(f"protocol schemas not found at {schema} (set AHP_SHARED to check freshness)")
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
