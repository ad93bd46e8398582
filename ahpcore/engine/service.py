"""The protocol's own commands: initialize, ping, subscribe, unsubscribe, reconnect,
dispatchAction, and the root channel's config.

Everything here works on a host with no plugins at all.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ahpcore.defaults import MAX_BUFFER_BYTES
from ahpcore.engine.clients import Client
from ahpcore.engine.core import Dispatch, Engine, Refused
from ahpcore.engine.router import Router
from ahpcore.notes import note
from ahpcore.protocol.errors import ALREADY_EXISTS, INVALID_PARAMS, ProtocolError
from ahpcore.protocol.uris import ROOT_CHANNEL
from ahpcore.protocol.versions import SERVED_WIRE, negotiate
from ahpcore.rpc.peer import Reply
from ahpcore.version import __version__

log = logging.getLogger(__name__)
#: close_reason of a connection whose clientId a newer connection of the same person took.
CLIENT_ID_TAKEN_OVER = "its clientId reconnected on a newer connection"

SERVER_NAME = "ahp"
KIB = 1 << 10
MIB = 1 << 20
#: The core's byte budgets' ceilings (declared with the keys), applied again where
#: the values are read.
BYTE_BUDGET_CEILINGS = {"clientQueueBytes": MAX_BUFFER_BYTES, "replayBytes": MAX_BUFFER_BYTES}
#: Words a plugin may put in a root config property of type number to bound it.
#: The protocol's ConfigPropertySchema has no such fields, so the host keeps them
#: (``ProtocolService.config_bounds``) and takes them out of the schema clients see.
BOUND_WORDS = ("minimum", "maximum")


@dataclass(frozen=True)
class ConfigBounds:
    """The range a root config number must fall in; None where a plugin declared no bound."""

    minimum: float | None = None
    maximum: float | None = None


def take_config_bounds(root_state: dict[str, Any]) -> dict[str, ConfigBounds]:
    """The bounds declared on root config numbers, removed from ``root_state``'s schema."""
    config = root_state.get("config", {})
    schema = config.get("schema", {})
    properties = schema.get("properties", {})
    bounds: dict[str, ConfigBounds] = {}
    kept: dict[str, Any] = {}
    for key, declared in properties.items():
        kept[key] = {word: value for word, value in declared.items() if word not in BOUND_WORDS}
        if declared.get("type") != "number":
            continue
        bounds[key] = ConfigBounds(declared.get("minimum"), declared.get("maximum"))
        if bounds[key].maximum is None:
            # Any client may set root config: a number with no ceiling is memory or
            # work a client can ask the host for without end.
            log.warning("root config key %s is a number with no declared maximum", key)
    root_state["config"] = {**config, "schema": {**schema, "properties": kept}}
    return bounds


def _amount(key: str, value: float) -> str:
    """A bound as a refusal shows it: bytes also in KiB or MiB when they are whole."""
    text = str(int(value)) if float(value).is_integer() else str(value)
    if key.endswith("Bytes") and float(value).is_integer() and value > 0:
        for unit, size in (("MiB", MIB), ("KiB", KIB)):
            if value % size == 0:
                return f"{text} ({int(value) // size} {unit})"
    return text


def number_problem(key: str, value: Any, bounds: ConfigBounds) -> str | None:
    """Why ``value`` may not be set for root config number ``key``, or None when it may."""
    minimum, maximum = bounds.minimum, bounds.maximum
    finite = (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    )
    if not finite or (minimum is not None and value < minimum):
        unit = " of bytes" if key.endswith("Bytes") else ""
        floor = f" of at least {_amount(key, minimum)}" if minimum is not None else ""
        return f"{key} must be a number{unit}{floor}"
    if maximum is not None and value > maximum:
        return f"{key} may not exceed {_amount(key, maximum)}, this host's ceiling"
    return None


class ProtocolService:
    def __init__(
        self,
        engine: Engine,
        router: Router,
        before_subscribe: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.engine = engine
        self.router = router
        #: Awaited with the channel a client subscribes to, before its snapshot is taken
        #: (the host's ``channel_subscribing`` moment).
        self.before_subscribe = before_subscribe
        #: Each root config number's declared range, checked on every root/configChanged.
        #: Taken now, before any client has seen the root state.
        self.config_bounds = take_config_bounds(engine.root.state)
        #: Extra InitializeResult fields a feature adds (``terminalCommandPrefix``).
        self.initialize_fields: dict[str, Any] = {}
        router.add("initialize", self.initialize)
        router.add("ping", self.ping)
        router.add("subscribe", self.subscribe)
        router.add("reconnect", self.reconnect)
        router.add_notification("unsubscribe", self.unsubscribe)
        router.add_notification("dispatchAction", self.dispatch_action)
        engine.on_action("root/configChanged", self.config_changed)

    async def _subscribe_all(
        self, client: Client, spellings: list[str]
    ) -> tuple[list[dict[str, Any]], list[str], list[str]]:
        """Snapshots for every channel that has one; frames for them held until the answer."""
        snapshots: list[dict[str, Any]] = []
        held: list[str] = []
        missing: list[str] = []
        for spelling in spellings:
            try:
                snapshot = await self.engine.subscribe(client, spelling, hold=True)
            except ProtocolError as error:
                log.info("client %s: %s not subscribed: %s", client.label, spelling, error.message)
                missing.append(spelling)
                continue
            if snapshot is not None:  # a stateless channel is watched with no snapshot
                snapshots.append(snapshot)
            held.append(self.engine.canonical(spelling))
        return snapshots, held, missing

    @staticmethod
    def _releasing(client: Client, uris: list[str], result: Any) -> Reply:
        def release() -> None:
            for uri in uris:
                client.release(uri)

        return Reply(result, release)

    @note(
        "initialize",
        text="Negotiates 1.0.0, 0.10.0 and 0.9.0; initialSubscriptions that cannot be "
        "snapshotted are left out.",
    )
    async def initialize(self, client: Client, params: dict[str, Any]) -> Reply:
        negotiated = negotiate(params["protocolVersions"])
        self._claim_client_id(client, params["clientId"])
        client.protocol_version = negotiated.protocol_version
        client.served_as = negotiated.served_as
        snapshots, held, _ = await self._subscribe_all(
            client, list(params.get("initialSubscriptions") or [])
        )
        result = {
            "protocolVersion": negotiated.protocol_version,
            "serverSeq": self.engine.server_seq,
            "serverInfo": {"name": SERVER_NAME, "version": __version__},
            "snapshots": snapshots,
            **self.initialize_fields,
        }
        return self._releasing(client, held, result)

    def _claim_client_id(self, client: Client, client_id: str) -> None:
        """A clientId is one live connection's: its echoes, its sessions' active client.

        Another person's connection presenting it is refused. The same person's is
        that client come back before its old link was seen to drop (a laptop that
        changed networks): the old connection is closed and the new one has it.
        """
        for other in list(self.engine.clients):
            if other is client or other.client_id != client_id or other.peer.closed:
                continue
            if other.identity != client.identity:
                raise ProtocolError(
                    ALREADY_EXISTS,
                    f"clientId {client_id!r} is in use by another person's connection; "
                    "choose another",
                )
            log.info(
                "client %s: its clientId reconnected on %s; closing it", other.label, client.peer.id
            )
            other.peer.close(CLIENT_ID_TAKEN_OVER)
        client.client_id = client_id

    @staticmethod
    def ping(client: Client, params: dict[str, Any]) -> None:
        return None

    async def subscribe(self, client: Client, params: dict[str, Any]) -> Reply:
        if self.before_subscribe is not None:
            await self.before_subscribe(params["channel"])
        snapshot = await self.engine.subscribe(client, params["channel"], hold=True)
        # A stateless channel (ahp-otlp:) answers an empty result.
        return self._releasing(
            client,
            [self.engine.canonical(params["channel"])],
            {} if snapshot is None else {"snapshot": snapshot},
        )

    def unsubscribe(self, client: Client, params: dict[str, Any]) -> None:
        self.engine.unsubscribe(client, params["channel"])

    @note(
        "reconnect",
        text="Replays from the buffer (1000 actions, replayBytes) when it covers the gap; "
        "snapshots otherwise.",
    )
    async def reconnect(self, client: Client, params: dict[str, Any]) -> Reply:
        self._claim_client_id(client, params["clientId"])
        client.protocol_version = client.protocol_version or SERVED_WIRE
        client.served_as = client.served_as or SERVED_WIRE
        last_seen = params["lastSeenServerSeq"]
        if isinstance(last_seen, float) and last_seen.is_integer():
            last_seen = int(last_seen)
        if not isinstance(last_seen, int) or isinstance(last_seen, bool):
            raise ProtocolError(INVALID_PARAMS, "params.lastSeenServerSeq must be an integer")
        engine = self.engine
        if engine.replay.covers(last_seen, engine.server_seq):
            # Everything missed is buffered: replay it for the channels asked about.
            wanted: dict[str, str] = {}
            missing: list[str] = []
            for spelling in params["subscriptions"]:
                channel = await engine.open_channel(spelling)
                if channel is None:
                    missing.append(spelling)
                else:
                    wanted[channel.uri] = spelling
            actions = [
                engine.spell(
                    engine.channels[item.channel],
                    engine.viewed(client, item.channel, item.envelope),
                    wanted[item.channel],
                )
                for item in engine.replay.since(last_seen)
                if item.channel in wanted and item.channel in engine.channels
            ]
            held: list[str] = []
            for uri, spelling in wanted.items():
                await engine.subscribe(client, spelling, hold=True)
                held.append(uri)
            result = {"type": "replay", "actions": actions, "missing": missing}
            engine.reconnected(client, held)
            return self._releasing(client, held, result)
        snapshots, held, _ = await self._subscribe_all(client, list(params["subscriptions"]))
        engine.reconnected(client, held)
        return self._releasing(client, held, {"type": "snapshot", "snapshots": snapshots})

    def dispatch_action(self, client: Client, params: Any) -> Awaitable[None]:
        # The engine's coroutine itself, awaited by the router: no frame of its own
        # on every action a client sends.
        return self.engine.dispatch_from_client(client, params)

    @note(
        "root/configChanged",
        text="Unknown keys are refused by name; numbers must be within their declared "
        "bounds (byte budgets from 1 MiB to 256 MiB).",
    )
    async def config_changed(self, dispatch: Dispatch) -> dict[str, Any] | None:
        """root/configChanged from a client: unknown keys refused by name, the rest applied."""
        action = dispatch.action
        config = action.get("config") or {}
        root = dispatch.engine.root.state
        declared = root.get("config", {}).get("schema", {}).get("properties", {})
        unknown = sorted(key for key in config if key not in declared)
        problems = []
        for key in sorted(set(config) & set(self.config_bounds)):
            problem = number_problem(key, config[key], self.config_bounds[key])
            if problem is not None:
                problems.append(problem)
        if problems:
            raise Refused("; ".join(problems))
        if unknown and len(unknown) == len(config):
            raise Refused(f"no config key named {', '.join(unknown)} on this host")
        if unknown:
            kept = {key: value for key, value in config.items() if key not in unknown}
            dispatch.engine.answer_sender(
                dispatch.client,
                dispatch.channel.uri,
                {**action, "config": {key: config[key] for key in unknown}},
                {"clientId": dispatch.client.client_id or "", "clientSeq": dispatch.client_seq},
                rejection=f"no config key named {', '.join(unknown)} on this host; "
                "the rest of the change was applied",
            )
            return {**action, "config": kept}
        return action


_NO_CONFIG: dict[str, Any] = {}


def root_config_value(engine: Engine, key: str, default: int) -> int:
    """A root config value as the host reads it where it is used.

    Read once per config: a change of config is a new object (the reducers copy
    on write), so what was read from the last one holds while it is the same.
    """
    config = engine.channels[ROOT_CHANNEL].state.get("config", _NO_CONFIG)
    held, values = engine.config_read
    if held is not config:
        values = {}
        engine.config_read = (config, values)
    found = values.get((key, default))
    if found is None:
        found = values[key, default] = _config_value(config, key, default)
    return found


def _config_value(config: dict[str, Any], key: str, default: int) -> int:
    value = config.get("values", {}).get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= MIB:
        return int(min(value, BYTE_BUDGET_CEILINGS.get(key, value)))
    return default
