"""Every hook is documented where plugin authors look."""

from pathlib import Path

from ahpcore import hookspecs

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def test_every_hook_spec_has_a_docs_entry_and_a_docstring():
    text = DOCS.read_text("utf-8")
    hooks = [name for name in dir(hookspecs) if name.startswith("ahp_")]
    assert len(hooks) == 10
    for name in hooks:
        assert f"### `{name}(" in text, f"docs/plugins.md has no entry for {name}"
        assert (getattr(hookspecs, name).__doc__ or "").strip(), f"{name} has no docstring"


def test_hookimpl_is_where_the_docs_say():
    import ahpcore

    assert ahpcore.hookimpl is hookspecs.hookimpl
