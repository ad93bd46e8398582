"""The plugin manager: discovery through real distribution metadata, trimming, failures."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import textwrap
from pathlib import Path

import pytest

from ahpcore.hookspecs import hookimpl
from ahpcore.host import Host, HostSettings
from ahpcore.plugins import PluginError, PluginManager, Selection


def make_distribution(
    root: Path, dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]
) -> None:
    """Write an installed-looking distribution (a dist-info directory and its modules)."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = ["[ahp]"] + [f"{name} = {target}" for name, target in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


GOOD = """
    from ahpcore.hookspecs import hookimpl

    @hookimpl
    def ahp_root_config(host):
        return {"goodKey": {"type": "string", "title": "Good"}}
"""
OTHER = """
    from ahpcore.hookspecs import hookimpl

    @hookimpl
    def ahp_rpc_methods(host, register):
        register("other/hello", lambda client, params: {"hello": "world"})
"""
BROKEN = "raise RuntimeError('this plugin is broken on purpose')\n"
MISSPELLED = """
    from ahpcore.hookspecs import hookimpl

    @hookimpl
    def ahp_backendz(host):
        return None
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A temporary site directory on sys.path holding a few plugin distributions."""
    root = tmp_path / "site"
    make_distribution(
        root, "ahp-good", "1.2.3", {"good": "ahp_good_plugin"}, {"ahp_good_plugin": GOOD}
    )
    make_distribution(
        root, "ahp-other", "0.4.0", {"other": "ahp_other_plugin"}, {"ahp_other_plugin": OTHER}
    )
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    yield root
    for name in [
        m for m in sys.modules if m.startswith(("ahp_good", "ahp_other", "ahp_broken", "ahp_typo"))
    ]:
        del sys.modules[name]


def load(**selection) -> PluginManager:
    return PluginManager(selection=Selection(**selection)).load()


def test_entry_points_are_discovered_with_their_distribution(site):
    manager = load()
    infos = {info.name: info for info in manager.plugins()}
    assert infos["good"].distribution == "ahp-good"
    assert infos["good"].version == "1.2.3"
    assert infos["good"].hooks == ("ahp_root_config",)
    assert infos["other"].distribution == "ahp-other"
    assert infos["core"].essential and infos["core"].distribution == "ahpcore"
    assert manager.names()[0] == "core"


def test_a_plugins_name_and_version_come_from_its_metadata_headers_alone(site):
    # Headers in another order, a folded header, and a body that looks like headers:
    # what is read is what the metadata parser reads.
    info = next(site.glob("ahp_good-*.dist-info"))
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nVersion: 1.2.3\nSummary: a plugin\n  Name: folded-decoy\n"
        "name: ahp-good\nVersion: 9.9.9\n\nName: body-decoy\nVersion: 0.0.0\n"
    )
    (next(site.glob("ahp_other-*.dist-info")) / "METADATA").write_text(
        "Metadata-Version: 2.1\nSummary: headers without a name\n\nName: body-decoy\n"
    )
    infos = {info.name: info for info in load().plugins()}
    assert (infos["good"].distribution, infos["good"].version) == ("ahp-good", "1.2.3")
    found = importlib.metadata.distribution("ahp-good")
    assert (found.name, found.version) == ("ahp-good", "1.2.3")
    # Nothing to read in the headers: left to the parser, which finds nothing either.
    assert (infos["other"].distribution, infos["other"].version) == (None, None)


def test_entry_points_are_read_only_when_loaded(site):
    manager = PluginManager()
    assert manager.names() == []
    assert "ahp_good_plugin" not in sys.modules
    manager.load()
    assert "good" in manager.names()


def test_allowlist_keeps_only_the_named_and_the_essentials(site):
    assert load(allow={"good"}).names() == ["core", "good"]


def test_empty_allowlist_means_none(site):
    selection = Selection.from_options(env={"AHP_PLUGINS": ""})
    assert PluginManager(selection=selection).load().names() == ["core"]


def test_environment_allowlist_and_blocklist(site):
    env = {"AHP_PLUGINS": "good,other", "AHP_DISABLE_PLUGINS": "other"}
    manager = PluginManager(selection=Selection.from_options(env=env)).load()
    assert manager.names() == ["core", "good"]


def test_cli_options_win_over_the_environment(site):
    selection = Selection.from_options("other", env={"AHP_PLUGINS": "good"})
    assert PluginManager(selection=selection).load().names() == ["core", "other"]


def test_protocol_only_loads_the_essentials_alone(site):
    manager = PluginManager(
        plugins=[("explicit", object())], selection=Selection(protocol_only=True)
    )
    assert manager.load().names() == ["core"]


def test_disabling_an_essential_plugin_is_refused_by_name(site):
    with pytest.raises(PluginError, match=r"cannot disable essential plugin.*core"):
        PluginManager(selection=Selection.from_options(env={"AHP_DISABLE_PLUGINS": "core"})).load()


def test_a_broken_plugin_is_reported_and_left_out(site):
    make_distribution(
        site, "ahp-broken", "0.0.1", {"broken": "ahp_broken_plugin"}, {"ahp_broken_plugin": BROKEN}
    )
    importlib.invalidate_caches()
    manager = load()
    assert "broken" not in manager.names()
    assert "good" in manager.names()
    (failure,) = manager.failures
    assert failure.name == "broken"
    assert failure.distribution == "ahp-broken"
    assert "broken on purpose" in failure.error


def test_a_plugin_that_fails_to_register_is_reported_and_left_out():
    class BadSignature:
        @hookimpl
        def ahp_root_config(self, host, unexpected):
            return {}

    manager = PluginManager(plugins=[("bad", BadSignature())], entry_points=False).load()
    assert manager.names() == ["core"]
    assert manager.failures[0].name == "bad"
    assert "unexpected" in manager.failures[0].error


def test_a_misspelled_hook_is_an_error_naming_it(site):
    make_distribution(
        site, "ahp-typo", "0.0.1", {"typo": "ahp_typo_plugin"}, {"ahp_typo_plugin": MISSPELLED}
    )
    importlib.invalidate_caches()
    with pytest.raises(PluginError, match=r"typo.*ahp_backendz"):
        load()


def test_explicit_plugins_need_no_entry_points():
    class Explicit:
        @hookimpl
        def ahp_root_config(self, host):
            return {"explicitKey": {"type": "boolean"}}

    manager = PluginManager(plugins=[("explicit", Explicit())], entry_points=False).load()
    assert manager.names() == ["core", "explicit"]


def test_two_managers_share_nothing():
    class One:
        @hookimpl
        def ahp_root_config(self, host):
            return {}

    first = PluginManager(plugins=[("one", One())], entry_points=False).load()
    second = PluginManager(entry_points=False).load()
    assert "one" in first.names() and "one" not in second.names()


@pytest.mark.anyio
async def test_hooks_may_answer_values_or_awaitables_and_the_host_resolves_both():
    class Sync:
        @hookimpl
        def ahp_root_config(self, host):
            return {"syncKey": {"type": "string"}}

    class Async:
        @hookimpl
        def ahp_root_config(self, host):
            async def later():
                return {"asyncKey": {"type": "number"}}

            return later()

    manager = PluginManager(plugins=[("sync", Sync()), ("async", Async())], entry_points=False)
    host = await Host(manager, HostSettings(sessions="memory")).start()
    properties = host.engine_or_fail.root.state["config"]["schema"]["properties"]
    assert {"syncKey", "asyncKey", "clientQueueBytes", "replayBytes"} <= set(properties)


@pytest.mark.anyio
async def test_two_plugins_declaring_one_config_key_is_an_error_naming_both():
    class A:
        @hookimpl
        def ahp_root_config(self, host):
            return {"shared": {"type": "string"}}

    class B:
        @hookimpl
        def ahp_root_config(self, host):
            return {"shared": {"type": "string"}}

    manager = PluginManager(plugins=[("first", A()), ("second", B())], entry_points=False)
    with pytest.raises(PluginError, match=r"'shared'.*'first'.*'second'"):
        await Host(manager, HostSettings(sessions="memory")).start()


def test_register_plugin_fixture_unregisters_on_teardown(register_plugin):
    class Late:
        @hookimpl
        def ahp_root_config(self, host):
            return {}

    host = Host(PluginManager(entry_points=False).load(), HostSettings(sessions="memory"))
    name = register_plugin(host, Late(), "late")
    assert name in host.plugins.names()
