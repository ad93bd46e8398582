"""The plugin API is documented member by member, and its page is generated from it."""

from __future__ import annotations

import inspect

from ahpcore import api, docgen


def test_every_public_member_of_the_plugin_api_is_documented():
    undocumented = [
        name
        for name, member in docgen.api_members()
        if not isinstance(member, (int, str)) and not docgen._doc_of(member).strip()
    ]
    assert undocumented == []


def test_the_plugin_host_offers_no_public_attribute_but_its_documented_members():
    # An attribute set in __init__ would escape the page: everything public is a
    # method or a property of the class.
    host = api.PluginHost(
        engine=lambda: None,  # type: ignore[arg-type,return-value]
        settings=api.HostSettings(),
        tasks=None,  # type: ignore[arg-type]
        ports={},
        plugin_names=list,
        method_names=list,
    )
    public = {name for name in vars(host) if not name.startswith("_")}
    assert public == set()
    members = {name for name in vars(api.PluginHost) if not name.startswith("_")}
    assert {"spawn", "ports", "settings", "session_folders", "change_row_meta"} <= members
    page = docgen.api_page()
    for name in members:
        assert f"`host.{name}" in page


def test_the_plugin_api_page_is_current():
    path = docgen.DOCS / "plugin-api.md"
    assert path.read_text("utf-8") == docgen.api_page(), "run: uv run python -m ahpcore.docgen"


def test_ports_seen_by_plugins_cannot_be_replaced():
    host = api.PluginHost(
        engine=lambda: None,  # type: ignore[arg-type,return-value]
        settings=api.HostSettings(),
        tasks=None,  # type: ignore[arg-type]
        ports={"changes": object()},
        plugin_names=list,
        method_names=list,
    )
    try:
        host.ports["changes"] = object()  # type: ignore[index]
    except TypeError:
        pass
    else:  # pragma: no cover - the failure this test exists for
        raise AssertionError("a plugin replaced a port")
    assert inspect.isclass(api.PluginHost)


def test_every_served_method_names_one_real_handler():
    # A wrapper made inside a function shows as <locals>: each method's handler is a
    # method or function of the part that owns it.
    from ahpcore import compat
    from ahpcore.plugins import PluginManager, Selection

    rows = compat.table(PluginManager(selection=Selection.from_options(None, False)))
    commands = [row for row in rows if row.kind == "command" and row.handler]
    assert len(commands) > 20
    odd = [(row.name, row.handler) for row in commands if "<" in row.handler]
    assert odd == []
