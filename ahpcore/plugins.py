"""The per-host plugin manager: entry points, explicit plugins, trimming, provenance.

Plugins come from three places, in this order: the essential core plugins
(always loaded, never disabled), plugins handed over explicitly (tests,
embedders), and the ``ahp`` entry-point group of installed distributions,
read only when ``load()`` runs. Trimming applies to everything but the
essentials: an allowlist (``--plugins a,b`` / ``AHP_PLUGINS``; empty means
none), a blocklist (``AHP_DISABLE_PLUGINS``) and protocol-only
(``--no-plugins``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pluggy

from ahpcore import hookspecs
from ahpcore.hookspecs import PluginError as PluginError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "ahp"
#: Plugins that ship inside ahpcore and load on every host: plugin name -> module.
ESSENTIAL_PLUGINS: dict[str, str] = {"core": "ahpcore.builtins.core"}
ENV_ALLOW = "AHP_PLUGINS"
ENV_BLOCK = "AHP_DISABLE_PLUGINS"
#: Set to 1 to log every hook call: which plugins ran, with what, and what they answered.
ENV_TRACE = "AHP_TRACE_PLUGINS"


@dataclass(frozen=True)
class Implementation:
    """One plugin's implementation of a hook, callable on its own through pluggy."""

    plugin: str
    caller: Any
    firstresult: bool

    def __call__(self, **kwargs: Any) -> Any:
        """The plugin's answer (None when it answered nothing)."""
        answer = self.caller(**kwargs)
        if self.firstresult:
            return answer
        return answer[0] if answer else None


def trace(pm: pluggy.PluginManager) -> None:
    """Log each hook call pluggy makes (its own tracing), at INFO on ``ahpcore.plugins.trace``."""
    tracer = logging.getLogger(f"{__name__}.trace")
    pm.trace.root.setwriter(lambda text: tracer.info("%s", text.rstrip()))
    pm.enable_tracing()


@dataclass
class _Found:
    """A plugin found for loading, before it is registered."""

    name: str
    plugin: object
    distribution: str | None
    version: str | None = None
    essential: bool = False


@dataclass(frozen=True)
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    essential: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
            "essential": self.essential,
        }


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded or registered, and why."""

    name: str
    distribution: str | None
    error: str


def _split_names(text: str | None) -> set[str] | None:
    if text is None:
        return None
    return {part.strip() for part in text.split(",") if part.strip()}


@dataclass
class Selection:
    """Which non-essential plugins may load."""

    allow: set[str] | None = None  # None: everything
    block: set[str] = field(default_factory=set)
    protocol_only: bool = False

    @classmethod
    def from_options(
        cls,
        plugins: str | Sequence[str] | None = None,
        no_plugins: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> Selection:
        """Combine CLI options with ``AHP_PLUGINS`` / ``AHP_DISABLE_PLUGINS``; options win."""
        env = os.environ if env is None else env
        if isinstance(plugins, str):
            allow = _split_names(plugins)
        elif plugins is not None:
            allow = set(plugins)
        else:
            allow = _split_names(env.get(ENV_ALLOW))
        block = _split_names(env.get(ENV_BLOCK)) or set()
        if no_plugins and allow:
            raise PluginError(
                f"--no-plugins contradicts --plugins {','.join(sorted(allow))} (or {ENV_ALLOW}): "
                "the first loads no plugin, the second names some; give one of them"
            )
        return cls(allow=allow, block=block, protocol_only=no_plugins)

    def admits(self, name: str) -> bool:
        if self.protocol_only or name in self.block:
            return False
        return self.allow is None or name in self.allow

    def check_essentials(self, essentials: Iterable[str]) -> None:
        refused = sorted(set(essentials) & self.block)
        if refused:
            raise PluginError(
                f"cannot disable essential plugin(s) {', '.join(refused)}: the host "
                "needs them to speak the protocol; use --no-plugins for a protocol-only host"
            )


class PluginManager:
    """One host's plugins. Build one per host; nothing here is global."""

    def __init__(
        self,
        *,
        plugins: Iterable[object | tuple[str, object]] = (),
        entry_points: bool = True,
        selection: Selection | None = None,
    ) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._explicit = list(plugins)
        self._use_entry_points = entry_points
        self.selection = selection or Selection()
        self._info: dict[str, PluginInfo] = {}
        self.failures: list[PluginFailure] = []
        self._loaded = False
        #: Hook name -> its implementations, each callable alone (see ``implementations``);
        #: emptied whenever a plugin comes or goes.
        self._callers: dict[str, list[Implementation]] = {}
        if os.environ.get(ENV_TRACE, "").strip() not in ("", "0"):
            trace(self._pm)

    @property
    def hook(self) -> Any:
        return self._pm.hook

    def implementations(self, hook: str) -> list[Implementation]:
        """The plugins implementing ``hook``, in the order pluggy calls them.

        That is tryfirst implementations first and trylast ones last, and otherwise
        the order ``load`` documents. Each is called through pluggy on its own, with
        every hookwrapper around it and tracing on, so a caller can tell whose answer
        it holds and keep one plugin's failure from costing another's.
        """
        found = self._callers.get(hook)
        if found is None:
            caller = getattr(self._pm.hook, hook)
            impls = caller.get_hookimpls()
            wrappers = {impl.plugin for impl in impls if impl.hookwrapper or impl.wrapper}
            plain = [impl for impl in impls if not (impl.hookwrapper or impl.wrapper)]
            everyone = {impl.plugin for impl in plain}
            first = bool(caller.spec and caller.spec.opts.get("firstresult"))
            found = [
                Implementation(
                    impl.plugin_name,
                    self._pm.subset_hook_caller(
                        hook, remove_plugins=everyone - {impl.plugin} - wrappers
                    ),
                    first,
                )
                for impl in reversed(plain)  # pluggy's own calling order
            ]
            self._callers[hook] = found
        return found

    def load(self) -> PluginManager:
        """Register every plugin the selection admits. Idempotent."""
        if self._loaded:
            return self
        self.selection.check_essentials(ESSENTIAL_PLUGINS)
        self._check_blocklist()
        found: list[_Found] = [
            _Found(name, importlib.import_module(module), "ahpcore", essential=True)
            for name, module in ESSENTIAL_PLUGINS.items()
        ]
        if not self.selection.protocol_only:
            for item in self._explicit:
                name, plugin = item if isinstance(item, tuple) else (_plugin_name(item), item)
                if self.selection.admits(name):
                    found.append(_Found(name, plugin, _distribution_of(plugin)))
            if self._use_entry_points:
                taken = {each.name for each in found}  # one handed over explicitly wins
                found.extend(self._entry_point_plugins(skip=taken))
            self._check_allowlist()
        names = [each.name for each in found]
        for each in found:
            if names.count(each.name) > 1:
                raise PluginError(
                    f"two plugins are named {each.name!r}; plugin names must be unique"
                )
        # pluggy calls the plugin registered last first: registering in reverse keeps the
        # documented order (essentials, explicit plugins, entry points by name) as the
        # order hooks run in, unless an implementation says tryfirst or trylast.
        for each in reversed(found):
            self._register(
                each.name,
                each.plugin,
                each.distribution,
                version=each.version,
                essential=each.essential,
            )
        self._check_pending()
        self._loaded = True
        return self

    def config_tables(self) -> dict[str, Any]:
        """The config file tables the loaded plugins declare (``ahp_config_tables``):
        table name -> pydantic model; two plugins naming one table is an error."""
        declared: dict[str, Any] = {}
        owners: dict[str, str] = {}
        for impl in self.implementations("ahp_config_tables"):
            for name, model in (impl() or {}).items():
                if name in owners:
                    raise PluginError(
                        f"config table [{name}] is declared by both {owners[name]!r} "
                        f"and {impl.plugin!r}"
                    )
                owners[name] = impl.plugin
                declared[name] = model
        return declared

    def installed_names(self) -> set[str]:
        """Every plugin this manager could load, loaded this time or not."""
        return self._installed()

    def _installed(self) -> set[str]:
        """The names of every plugin this manager could load."""
        installed = set(ESSENTIAL_PLUGINS)
        installed.update(
            item[0] if isinstance(item, tuple) else _plugin_name(item) for item in self._explicit
        )
        if self._use_entry_points:
            installed.update(
                ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
            )
        return installed

    def _check_allowlist(self) -> None:
        """A name in the allowlist that no installed plugin has is a typo, not a choice."""
        allow = self.selection.allow
        if not allow:
            return
        installed = self._installed()
        unknown = sorted(allow - installed)
        if unknown:
            raise PluginError(
                f"no plugin named {', '.join(unknown)} is installed "
                f"(installed: {', '.join(sorted(installed))})"
            )

    def _check_blocklist(self) -> None:
        """A name in the blocklist no installed plugin has is a typo too: the plugin meant
        would load all the same."""
        block = self.selection.block
        if not block:
            return
        installed = self._installed()
        unknown = sorted(block - installed)
        if unknown:
            raise PluginError(
                f"{ENV_BLOCK} names {', '.join(unknown)}, but no plugin of that name is "
                f"installed (installed: {', '.join(sorted(installed))})"
            )

    def _entry_point_plugins(self, skip: set[str]) -> list[_Found]:
        found = []
        for ep in sorted(
            importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name
        ):
            if not self.selection.admits(ep.name) or ep.name in skip:
                continue
            dist, version = _name_and_version(ep.dist) if ep.dist is not None else (None, None)
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not stop the host
                self._fail(ep.name, dist, f"failed to import {ep.value}: {exc!r}")
                continue
            found.append(_Found(ep.name, plugin, dist, version))
        return found

    def _register(
        self,
        name: str,
        plugin: object,
        distribution: str | None,
        *,
        version: str | None = None,
        essential: bool = False,
    ) -> None:
        if name in self._info:
            raise PluginError(f"two plugins are named {name!r}; plugin names must be unique")
        try:
            self._pm.register(plugin, name=name)
        except Exception as exc:
            if essential:
                raise
            self._fail(name, distribution, f"failed to register: {exc}")
            return
        if version is None and distribution is not None:
            version = _version_of(distribution)
        self._callers.clear()
        hooks = tuple(sorted(caller.name for caller in self._pm.get_hookcallers(plugin) or ()))
        self._info[name] = PluginInfo(name, distribution, version, hooks, essential)

    def _fail(self, name: str, distribution: str | None, error: str) -> None:
        log.warning("plugin %s left out: %s", name, error)
        self.failures.append(PluginFailure(name, distribution, error))

    def _check_pending(self) -> None:
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            raise PluginError(
                f"plugin {self._pm.get_name(exc.plugin)!r} implements a hook the host "
                f"does not have: {exc}"
            ) from exc

    def register(self, plugin: object, name: str | None = None) -> str:
        """Add a plugin after load (tests); returns the name it was registered under."""
        name = name or _plugin_name(plugin)
        self._register(name, plugin, _distribution_of(plugin))
        self._check_pending()
        return name

    def register_service(self, name: str, service: object) -> None:
        """Add one of the core's services: it takes part in the hooks its ``@hookimpl``
        methods name, and is not listed among the plugins."""
        self._pm.register(service, name=name)
        self._callers.clear()
        self._check_pending()

    def unregister(self, name: str) -> None:
        if self._info.get(name, None) is not None and self._info[name].essential:
            raise PluginError(f"cannot unregister essential plugin {name!r}")
        self._pm.unregister(name=name)
        self._info.pop(name, None)
        self._callers.clear()

    def plugins(self) -> list[PluginInfo]:
        """What loaded, essentials first, then by name."""
        return sorted(self._info.values(), key=lambda p: (not p.essential, p.name))

    def get(self, name: str) -> object | None:
        return self._pm.get_plugin(name)

    def names(self) -> list[str]:
        return [p.name for p in self.plugins()]


def hook_names() -> list[str]:
    """Every hook a plugin may implement."""
    return sorted(name for name in dir(hookspecs) if name.startswith("ahp_"))


def _plugin_name(plugin: object) -> str:
    name = getattr(plugin, "__name__", None) or type(plugin).__name__
    return str(name).rsplit(".", 1)[-1].removeprefix("ahp_")


def _distribution_of(plugin: object) -> str | None:
    module = inspect.getmodule(plugin)
    if module is None:
        return None
    top = module.__name__.split(".", 1)[0]
    dists = importlib.metadata.packages_distributions().get(top)
    return dists[0] if dists else None


def _version_of(distribution: str) -> str | None:
    try:
        return _name_and_version(importlib.metadata.distribution(distribution))[1]
    except importlib.metadata.PackageNotFoundError:
        return None


def _name_and_version(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    """A distribution's ``Name`` and ``Version``, read from the first lines of its metadata.

    ``Distribution.name`` and ``.version`` run the whole file through the email parser
    on every call, twice per plugin at each start; both are single-line headers near
    the top, so a plain read of the headers finds them. Anything unusual (a header
    missing from where it belongs) is left to the parser.
    """
    found: dict[str, str] = {}
    for line in (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").splitlines():
        if not line:
            break  # the headers end at the first blank line
        key, colon, value = line.partition(":")
        key = key.lower()
        if colon and key in ("name", "version") and key not in found:
            found[key] = value.strip()
            if len(found) == 2:
                break
    name = found.get("name") or dist.name
    version = found.get("version") or dist.version
    return name, version
