"""Every hook is documented where plugin authors look."""

from pathlib import Path

import pytest

from ahpcore import hookspecs

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def test_every_hook_spec_has_a_docs_entry_and_a_docstring():
    text = DOCS.read_text("utf-8")
    hooks = [name for name in dir(hookspecs) if name.startswith("ahp_")]
    assert "ahp_backends" in hooks and "ahp_session_disposed" in hooks
    for name in hooks:
        # A startup hook has a section of its own; a lifecycle hook a row of the table.
        entry = f"### `{name}(" in text or f"| `{name}(" in text
        assert entry, f"docs/plugins.md has no entry for {name}"
        assert (getattr(hookspecs, name).__doc__ or "").strip(), f"{name} has no docstring"


def test_hookimpl_is_where_the_docs_say():
    import ahpcore

    assert ahpcore.hookimpl is hookspecs.hookimpl


# -- the documentation site ------------------------------------------------------------

ROOT = DOCS.parents[1]
SITE_DOCS = ROOT / "docs"


def _code_blocks(page: str, language: str) -> list[str]:
    import re

    text = (SITE_DOCS / page).read_text("utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_the_site_builds_strictly_offline(tmp_path):
    import os
    import subprocess
    import sys

    pytest.importorskip("mkdocs", reason="needs the dev tools")
    pytest.importorskip("material", reason="needs the dev tools")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    index = (tmp_path / "site" / "index.html").read_text("utf-8")
    assert "fonts.googleapis" not in index, "the site must not need the network to read"
    for page in ("getting-started", "configuration", "hooks", "write-a-backend", "compatibility"):
        assert (tmp_path / "site" / page / "index.html").exists(), page


def test_the_generated_pages_are_current():
    from ahpcore import docgen

    stale = [str(path.relative_to(ROOT)) for path in docgen.stale()]
    assert not stale, f"{stale} are stale: run 'uv run python -m ahpcore.docgen'"


def test_the_hook_reference_has_every_hook():
    text = (SITE_DOCS / "hooks.md").read_text("utf-8")
    for name in (n for n in dir(hookspecs) if n.startswith("ahp_")):
        assert f"## `{name}(" in text, name


def test_the_nav_lists_pages_that_exist_and_only_those(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("nav", SITE_DOCS / "_hooks" / "nav.py")
    assert spec is not None and spec.loader is not None
    nav = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nav)
    for name in ("index.md", "plugins.md", "extra-page.md"):
        (tmp_path / name).write_text("# x\n")
    assert nav.build_nav(tmp_path) == [
        {"Home": "index.md"},
        {"Plugins": [{"Writing plugins": "plugins.md"}]},
        {"Extra page": "extra-page.md"},
    ]
    (tmp_path / "security.md").write_text("# Security\n")
    assert {"Security": "security.md"} in nav.build_nav(tmp_path)


def test_write_a_backend_quotes_the_template_as_it_renders(tmp_path):
    cookiecutter_main = pytest.importorskip("cookiecutter.main", reason="needs the dev tools")
    project = Path(
        cookiecutter_main.cookiecutter(
            str(ROOT / "cookiecutter" / "backend"),
            no_input=True,
            output_dir=str(tmp_path),
            extra_context={"plugin_name": "my agent"},
        )
    )
    rendered = "\n".join(p.read_text("utf-8") for p in project.rglob("*") if p.is_file())
    blocks = _code_blocks("write-a-backend.md", "python") + _code_blocks(
        "write-a-backend.md", "toml"
    )
    assert len(blocks) >= 8
    for block in blocks:
        assert block.strip("\n") in rendered, f"not in the template any more:\n{block}"


@pytest.mark.anyio
async def test_the_python_client_in_getting_started_works(ahp_host, tmp_path):
    import subprocess
    import sys

    import anyio

    from ahp_scripted import plugin as scripted_plugin

    [client] = _code_blocks("getting-started.md", "python")
    script = tmp_path / "hello.py"
    script.write_text(client, "utf-8")
    assert len(client.strip().splitlines()) <= 12, "keep the example short"
    async with ahp_host([("scripted", scripted_plugin)], token="secret") as running:
        ran = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, str(script), f"{running.url}?token=secret"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "['Demo agent']"
