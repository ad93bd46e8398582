"""Strict checking of AHP JSON-RPC frames against the protocol's own shapes.

``validate_frame`` classifies a frame (request, notification, success or error
response), checks its JSON-RPC envelope, picks the strict model its payload
must match (by method, by the answered request's method, by action ``type``)
and reports every problem with the JSON path where it sits::

    validate_frame(frame, direction="server", request_method="subscribe")
    # [WireIssue(kind='missing_key', path='$.result.snapshot.state.turns[0].id', ...)]

Validation runs on pydantic's strict models with a few corrections the
generated code cannot carry (see ``_rewrite_type``), and pydantic's errors are
turned back into wire terms: field names become wire keys (``_meta``), union
member names drop out of paths, and of a union that failed as a whole only
the member the value was meant to be (by its tag, else the closest fit) is
reported, instead of one complaint per member.

Importable with pydantic alone; models and validators are built once, lazily.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import (
    Annotated,
    Any,
    ForwardRef,
    Literal,
    NamedTuple,
    Union,
    get_args,
    get_origin,
)

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    RootModel,
    Tag,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo

from ahpcore.protocol import extensions, strict
from ahpcore.protocol.methods import (
    CLIENT_NOTIFICATIONS,
    COMMANDS,
    SERVER_COMMANDS,
    SERVER_NOTIFICATIONS,
    Command,
)

__all__ = [
    "Direction",
    "IssueKind",
    "WireIssue",
    "action_models",
    "assert_valid_frame",
    "channel_literals",
    "classify_frame",
    "format_issues",
    "model_for_action",
    "params_problem",
    "validate_frame",
    "validate_params",
    "validate_value",
]

IssueKind = Literal[
    "unknown_key", "missing_key", "wrong_type", "wrong_value", "unknown_method", "malformed"
]
#: Who sends the frame: the host ("server") or a client.
Direction = Literal["server", "client"]
Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class WireIssue:
    """One problem in a frame: what kind, where (a JSON path such as ``$.params.channel``), why."""

    kind: IssueKind
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.kind}: {self.message}"


# --------------------------------------------------------------------------
# Public entry points


def classify_frame(frame: Any) -> extensions.FrameKind | None:
    """``request``, ``notification``, ``success`` or ``error``; None when it is none of them."""
    return extensions.frame_kind(frame)


def validate_frame(
    frame: Mapping[str, Any] | str | bytes,
    *,
    direction: Direction,
    request_method: str | None = None,
) -> list[WireIssue]:
    """Every problem in ``frame`` (a parsed dict or JSON text); empty when it is valid.

    ``direction`` says who sends it: ``"server"`` frames are the host's (results
    of client commands, host notifications, host->client requests),
    ``"client"`` frames a client's. A response does not name its method, so
    pass the answered request's method as ``request_method`` to check the
    result's shape; without it only the envelope is checked.
    """
    if direction not in ("server", "client"):
        raise ValueError(f"direction must be 'server' or 'client', not {direction!r}")
    if isinstance(frame, str | bytes | bytearray):
        try:
            frame = json.loads(frame, parse_constant=_refuse_constant)
        except ValueError as exc:
            return [WireIssue("malformed", "$", f"not JSON: {exc}")]
    if not isinstance(frame, Mapping):
        return [WireIssue("malformed", "$", f"a frame is a JSON object, not {_show(frame)}")]
    frame = dict(frame)  # strict validation takes a dict, not any mapping
    kind = extensions.frame_kind(frame)
    if kind is None:
        has = "both 'result' and 'error'" if "result" in frame else "no method, result or error"
        return [WireIssue("malformed", "$", f"not a JSON-RPC message: it has {has}")]
    envelope = _ENVELOPES[kind]
    issues = _validate(envelope, frame, ())
    # A payload whose envelope slot is already wrong (params: null) is not
    # checked again, so one mistake gives one issue.
    bad_slots = {issue.path for issue in issues}
    if kind in ("request", "notification"):
        method = frame.get("method")
        if not isinstance(method, str):
            return issues
        params_model = _params_model(kind, method, direction)
        if params_model is None:
            issues.append(_unknown_method(kind, method, direction))
        elif "$.params" not in bad_slots:
            issues.extend(_validate_params_slot(params_model, frame))
    elif kind == "success" and request_method is not None and "$.result" not in bad_slots:
        issues.extend(_validate_result(frame.get("result"), request_method, direction))
    return issues


def assert_valid_frame(
    frame: Mapping[str, Any] | str | bytes,
    *,
    direction: Direction,
    request_method: str | None = None,
) -> None:
    """Raise ``AssertionError`` listing every issue ``validate_frame`` finds."""
    issues = validate_frame(frame, direction=direction, request_method=request_method)
    if issues:
        what = f"{direction} frame" + (f" answering {request_method!r}" if request_method else "")
        raise AssertionError(
            f"invalid {what}: {len(issues)} issue(s)\n{format_issues(issues)}\n"
            f"frame: {_show(frame, 2000)}"
        )


def validate_value(model: str | type[BaseModel], value: Any, *, path: str = "$") -> list[WireIssue]:
    """Check ``value`` against a strict protocol type: a name or a strict model class.

    Names are those of ``ahpcore.protocol.strict`` (``"ChatState"``,
    ``"StateAction"``) or of the envelopes in ``ahpcore.protocol.extensions``.

    ``path`` names where ``value`` sits (e.g. ``$.params.action``); reported paths extend it.
    """
    target = _strict_type(model) if isinstance(model, str) else _rewrite_type(model)
    return _validate(target, value, (), root=path)


def validate_params(
    method: str, params: Any, *, direction: Direction = "client"
) -> list[WireIssue]:
    """Every problem in the params of ``method`` (a request or notification ``direction`` sends).

    ``params`` is the raw value, None when the frame had none. Raises
    ``KeyError`` for a method that ``direction`` does not send.
    """
    for kind in ("request", "notification"):
        model = _params_model(kind, method, direction)
        if model is not None:
            frame = {} if params is None else {"params": params}
            return _validate_params_slot(model, frame)
    raise KeyError(method)


def params_problem(method: str, params: Any) -> str | None:
    """The first problem in a client request's params, phrased for a -32602 message.

    For example ``"params.channel: field required"``; None when the params are
    valid. Raises ``KeyError`` for a method clients do not send.
    """
    issues = validate_params(method, params, direction="client")
    if not issues:
        return None
    first = issues[0]
    where = first.path.removeprefix("$.")
    if first.kind == "missing_key":
        return f"{where}: field required"
    if first.kind == "unknown_key":
        return f"{where}: unknown field"
    return f"{where}: {first.message}"


@functools.cache
def channel_literals() -> dict[str, str]:
    """Client commands whose params pin ``channel`` to one literal URI, and that URI.

    Read from the strict params models (``channel: Literal["ahp-root://"]``);
    commands taking any channel URI are absent.
    """
    out: dict[str, str] = {}
    for method, command in COMMANDS.items():
        info = getattr(strict, command.params).model_fields.get("channel")
        if info is None:
            continue
        tp, _ = _unwrap(info.annotation)
        values = get_args(tp) if get_origin(tp) is Literal else ()
        if len(values) == 1 and isinstance(values[0], str):
            out[method] = values[0]
    return out


def action_models() -> Mapping[str, tuple[type[BaseModel], ...]]:
    """Each state action ``type`` and the strict model(s) of that action.

    Most types have one shape; ``chat/toolCallConfirmed`` has two (approved or
    denied), told apart by ``approved``.
    """
    return _action_shapes()


def model_for_action(action: Any) -> type[BaseModel] | None:
    """The strict model ``action`` should match, picked by its ``type``; None for unknown types.

    For a type with several shapes, the one the action is meant to be.
    """
    return _action_model(action)


def format_issues(issues: Iterable[WireIssue]) -> str:
    """One issue per line, for assertion messages and logs."""
    return "\n".join(f"  - {issue}" for issue in issues)


# --------------------------------------------------------------------------
# Frames: envelopes, methods, payload slots

_ENVELOPES: dict[str, type[BaseModel]] = {
    "request": extensions.StrictJsonRpcRequest,
    "notification": extensions.StrictJsonRpcNotification,
    "success": extensions.StrictJsonRpcSuccessResponse,
    "error": extensions.StrictJsonRpcErrorResponse,
}


def _tables(direction: Direction) -> tuple[Mapping[str, Command], Mapping[str, str]]:
    """The requests and notifications ``direction`` sends."""
    if direction == "client":
        return COMMANDS, CLIENT_NOTIFICATIONS
    return SERVER_COMMANDS, SERVER_NOTIFICATIONS


def _params_model(kind: str, method: str, direction: Direction) -> str | None:
    requests, notifications = _tables(direction)
    if kind == "request":
        command = requests.get(method)
        return command.params if command else None
    return notifications.get(method)


def _unknown_method(kind: str, method: str, direction: Direction) -> WireIssue:
    sender = "the host" if direction == "server" else "a client"
    other: Direction = "client" if direction == "server" else "server"
    requests, notifications = _tables(other)
    hint = ""
    if kind == "request" and method in _tables(direction)[1]:
        hint = " (it is a notification: send it without an id)"
    elif kind == "notification" and method in _tables(direction)[0]:
        hint = " (it is a request: it needs an id)"
    elif method in requests or method in notifications:
        hint = f" (it is sent the other way, by {'a client' if other == 'client' else 'the host'})"
    return WireIssue("unknown_method", "$.method", f"{sender} sends no {kind} {method!r}{hint}")


def _validate_params_slot(model_name: str, frame: Mapping[str, Any]) -> list[WireIssue]:
    if "params" not in frame:
        if _has_required_fields(model_name):
            message = f"required key 'params' is missing (a {model_name} object)"
            return [WireIssue("missing_key", "$.params", message)]
        return []
    return _validate(_strict_type(model_name), frame["params"], ("params",))


def _validate_result(result: Any, request_method: str, direction: Direction) -> list[WireIssue]:
    # The host answers client commands; a client answers the host's requests.
    answered = COMMANDS if direction == "server" else SERVER_COMMANDS
    command = answered.get(request_method)
    if command is None:
        asker = "a client" if direction == "server" else "the host"
        return [
            WireIssue(
                "unknown_method",
                "$",
                f"this answers {request_method!r}, which {asker} does not send",
            )
        ]
    if command.result is None:
        if result is None:
            return []
        return [
            WireIssue(
                "wrong_value", "$.result", f"{request_method} answers null, not {_show(result)}"
            )
        ]
    return _validate(_strict_type(command.result), result, ("result",))


@functools.cache
def _has_required_fields(model_name: str) -> bool:
    model = getattr(strict, model_name)
    return any(info.is_required() for info in model.model_fields.values())


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# --------------------------------------------------------------------------
# Corrected strict types
#
# Validation runs on the strict models with corrections the generated code
# cannot carry, applied by subclassing the models whose fields change:
#
# * an optional key is left out, never null: the schemas declare no nullable
#   properties, yet the generated models read every optional ``T`` as
#   ``T | None``;
# * a union of models told apart by a literal field (StateAction by
#   ``type``, response parts by ``kind``, tool-call states by ``status``...)
#   picks its member by that field: the schemas leave most of them plain,
#   and pydantic then tries every member (StateAction has ~100), slowly, and
#   reports an error from each;
# * ``approved`` of the two chat/toolCallConfirmed shapes is the literal
#   true / false the protocol's TypeScript declares (the schema says "any");
# * SessionStatus, a bitset of flags, is never negative;
# * sequence numbers are integers ("keep them integers on the wire");
# * one optional key may be null: ``activity`` in a root/sessionSummaryChanged
#   partial, where null is how a cleared activity is said (a key left off a
#   partial means "did not move"; the reference client reads null as cleared).

_SEQ_FIELDS = frozenset(
    {"serverSeq", "clientSeq", "fromSeq", "lastSeenServerSeq", "lastAppliedServerSeq"}
)
_BITSET = Annotated[int, Field(ge=0)]
_TOOL_CALL_APPROVAL: dict[type[BaseModel], Any] = {
    strict.ChatToolCallApprovedAction: Literal[True],
    strict.ChatToolCallDeniedAction: Literal[False],
}
_rewritten: dict[type[BaseModel], type[BaseModel]] = {}
_rewriting: list[type[BaseModel]] = []
_rewrite_lock = threading.RLock()  # the first rewrite may race with another thread's
#: Rewritten models that refer to themselves, by the forward-reference names used.
_self_refs: dict[str, type[BaseModel]] = {}
_unresolved: list[type[BaseModel]] = []


def _rewrite_type(tp: Any, *, tag: bool = True) -> Any:
    """``tp`` with the corrections above applied; the same object when nothing changes.

    ``tag=False`` leaves a top-level union untagged (pydantic already
    discriminates it).
    """
    if tp is strict.SessionStatus:
        return _BITSET
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _rewrite_model(tp)
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is None or not args:
        return tp
    if origin is Annotated:
        inner = _rewrite_type(args[0], tag=tag)
        return tp if inner is args[0] else Annotated[(inner, *args[1:])]
    new_args = tuple(_rewrite_type(arg) for arg in args)
    unchanged = all(new is old for new, old in zip(new_args, args, strict=True))
    if origin in (Union, types.UnionType):
        rebuilt = tp if unchanged else Union[new_args]  # noqa: UP007 - from a runtime tuple
        tagged = _TAGGED.get(rebuilt, _tag_union) if tag else None
        return rebuilt if tagged is None else tagged
    if unchanged:
        return tp
    if origin is list:
        return list[new_args[0]]  # type: ignore[valid-type]
    if origin is dict:
        return dict[new_args[0], new_args[1]]  # type: ignore[valid-type]
    return tp


def _rewrite_model(model: type[BaseModel]) -> Any:
    done = _rewritten.get(model)
    if done is not None:
        return done
    with _rewrite_lock:
        return _rewrite_model_locked(model)


def _rewrite_model_locked(model: type[BaseModel]) -> Any:
    done = _rewritten.get(model)
    if done is not None:
        return done
    if model in _rewriting:
        # A recursive shape (the JSON-schema-like config schema): refer to the
        # subclass being built by name and resolve it once it exists.
        return ForwardRef(_ref_name(model))
    _rewriting.append(model)
    try:
        overrides: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            new = _rewrite_field(model, name, info)
            if new is not info.annotation:
                overrides[name] = (new, info)
    finally:
        _rewriting.pop()
    result = model
    if overrides:
        result = create_model(model.__name__, __base__=model, __module__=__name__, **overrides)
        if not result.__pydantic_complete__:
            _unresolved.append(result)
    _rewritten[model] = result
    _self_refs[_ref_name(model)] = result
    if not _rewriting:
        while _unresolved:
            _unresolved.pop().model_rebuild(force=True, _types_namespace=dict(_self_refs))
    return result


def _ref_name(model: type[BaseModel]) -> str:
    return f"_rewritten_{model.__name__}"


def _nullable_fields() -> frozenset[tuple[type[BaseModel], str]]:
    changes = strict.SessionSummaryChangedParams.model_fields["changes"].annotation
    return frozenset({(changes, "activity")}) if isinstance(changes, type) else frozenset()


_NULLABLE = _nullable_fields()


def _rewrite_field(model: type[BaseModel], name: str, info: FieldInfo) -> Any:
    annotation: Any = info.annotation
    if (model, name) in _NULLABLE:
        return annotation
    if not info.is_required() and info.default is None and _is_union(annotation):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) < len(get_args(annotation)):
            annotation = Union[tuple(members)]  # noqa: UP007 - built from a runtime tuple
    if name == "approved" and model in _TOOL_CALL_APPROVAL:
        return _TOOL_CALL_APPROVAL[model]
    if name in _SEQ_FIELDS and _is_number(annotation):
        return int
    return _rewrite_type(annotation, tag=info.discriminator is None)


def _is_number(tp: Any) -> bool:
    return set(get_args(tp)) - {type(None)} == {int, float}


@functools.cache
def _strict_type(name: str) -> Any:
    model = getattr(strict, name, None)
    if model is None:
        model = getattr(extensions, name)
    return _rewrite_type(model)


@functools.cache
def _action_shapes() -> dict[str, tuple[type[BaseModel], ...]]:
    return extensions.literal_tags(strict.StateAction)


def _action_model(action: Any) -> type[BaseModel] | None:
    if not isinstance(action, Mapping) or not isinstance(action.get("type"), str):
        return None
    shapes = _action_shapes().get(action["type"])
    if not shapes:
        return None
    return shapes[0] if len(shapes) == 1 else _closest_shape(shapes, action)


def _closest_shape(
    shapes: tuple[type[BaseModel], ...], value: Mapping[str, Any]
) -> type[BaseModel]:
    # A field whose literal differs between the shapes (``approved``) decides;
    # failing that, the shape whose keys fit the value best is reported.
    members = [_rewrite_model(shape) for shape in shapes]
    for shape, member in zip(shapes, members, strict=True):
        for name, info in member.model_fields.items():
            literal = get_origin(info.annotation) is Literal and name != "type"
            if literal and name in value and value[name] in get_args(info.annotation):
                return shape

    best = max(range(len(shapes)), key=lambda i: _fit(members[i], value))
    return shapes[best]


# --------------------------------------------------------------------------
# Identity caches and tagged unions


class _ByIdentity:
    """A cache keyed by object identity: typing constructs are not all hashable.

    Rewritten types are built once and kept, so the same object comes back
    for every frame; holding the key keeps its id from being reused.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Any, Any]] = {}

    def get(self, key: Any, build: Any) -> Any:
        entry = self._entries.get(id(key))
        if entry is None:
            entry = self._entries[id(key)] = (key, build(key))
        return entry[1]


class _Tagger:
    """pydantic's discriminator for a rewritten union: the member named by the value's tag.

    A nested group (shapes sharing the outer tag, e.g. the approved and denied
    chat/toolCallConfirmed) falls back to the shape the value fits best, so a
    missing inner tag is reported along with the rest of that shape.
    """

    def __init__(
        self, field: str, names: dict[Any, str], fallback: list[tuple[type[BaseModel], str]]
    ) -> None:
        self.__name__ = f"tag_{field}"  # pydantic-core names its validator after it
        self.field = field
        self.names = names
        self.fallback = fallback
        shown = ", ".join(repr(value) for value in list(names)[:8])
        self.expected = shown + (", ..." if len(names) > 8 else "")

    def __call__(self, value: Any) -> str | None:
        if not isinstance(value, Mapping):
            return None
        try:
            name = self.names.get(value.get(self.field, _NO_TAG))
        except TypeError:  # an unhashable tag value: no member has it
            name = None
        if name is None and self.fallback:
            return max(self.fallback, key=lambda item: _fit(item[0], value))[1]
        return name


_NO_TAG = object()
_TAGGED = _ByIdentity()


def _tag_union(union: Any) -> Any | None:
    """``union`` as a union discriminated by a literal field of its models; None if it has none."""
    models = _models_of(union)
    return _tag_models(models, nested=False) if models else None


def _tag_models(models: list[type[BaseModel]], *, nested: bool) -> Any | None:
    if len(models) < 2:
        return None
    common = set.intersection(*(set(_field_aliases(model)) for model in models))
    best: tuple[int, str, dict[Any, list[type[BaseModel]]]] | None = None
    # The field splitting the models into the most groups; `type` and `kind` win ties.
    for field in sorted(common, key=lambda name: (name not in ("type", "kind"), name)):
        groups: dict[Any, list[type[BaseModel]]] = {}
        for model in models:
            values = _literal_values(model, field)
            if not values:
                break
            for value in values:
                groups.setdefault(value, []).append(model)
        else:
            distinct = len({tuple(group) for group in groups.values()})
            if distinct > 1 and (best is None or distinct > best[0]):
                best = (distinct, field, groups)
    if best is None:
        return None
    _, field, groups = best
    names: dict[Any, str] = {}
    choices: list[Any] = []
    for value, group in groups.items():
        name = value if isinstance(value, str) else json.dumps(value)
        names[value] = name
        member: Any = group[0]
        if len(group) > 1:
            member = _tag_models(group, nested=True) or Union[tuple(group)]  # noqa: UP007
        choices.append(Annotated[member, Tag(name)])
    fallback = [(group[0], names[value]) for value, group in groups.items()] if nested else []
    return Annotated[
        Union[tuple(choices)],  # noqa: UP007 - built from a runtime tuple
        Discriminator(
            _Tagger(field, names, fallback),
            custom_error_type="union_tag",
            custom_error_message="no member of this union has that tag",
        ),
    ]


def _models_of(tp: Any) -> list[type[BaseModel]] | None:
    """The plain models ``tp`` is a union of, nested unions flattened; None if not all models."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _models_of(get_args(tp)[0])
    if origin in (Union, types.UnionType):
        out: list[type[BaseModel]] = []
        for arg in get_args(tp):
            models = _models_of(arg)
            if models is None:
                return None
            out.extend(model for model in models if model not in out)
        return out
    if isinstance(tp, type) and issubclass(tp, RootModel):
        return _models_of(tp.model_fields["root"].annotation)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return None


def _fit(model: type[BaseModel], value: Mapping[str, Any]) -> int:
    """How well ``value``'s keys fit ``model``: shared keys, less undeclared and missing ones."""
    fields = _field_aliases(model)
    required = {key for key, info in fields.items() if info.is_required()}
    keys = set(value)
    return len(keys & fields.keys()) - len(keys - fields.keys()) - len(required - keys)


# --------------------------------------------------------------------------
# Running pydantic and translating its errors


_ADAPTERS = _ByIdentity()


def _adapter(tp: Any) -> TypeAdapter[Any]:
    adapter: TypeAdapter[Any] = _ADAPTERS.get(tp, TypeAdapter)
    return adapter


def _validate(tp: Any, value: Any, prefix: Loc, *, root: str = "$") -> list[WireIssue]:
    try:
        _adapter(tp).validate_python(value, strict=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    else:
        return []
    entries = []
    for order, error in enumerate(errors):
        walk = _walk(tp, error["loc"], value)
        issue = _issue(error, walk, prefix, root)
        entries.append(_Entry(order, walk.choices, issue, walk.path))
    return _dedupe(issue for _, issue in _select(entries, prefix, root))


class _Choice(NamedTuple):
    """A union the error went through, and the member it was reported for."""

    key: Loc  # the raw loc up to the union: tells union instances apart
    member: str
    path: Loc  # the JSON path of the union's value
    union: Any
    value: Any
    optional: bool  # the union is an optional field's value


class _Walk(NamedTuple):
    path: Loc
    choices: tuple[_Choice, ...]
    owner: type[BaseModel] | None  # the model the last key was looked up in
    field: FieldInfo | None  # the field the loc ends in, if it ends in one
    tp: Any  # the type at the end of the loc
    value: Any  # the value at the end of the loc


class _Entry(NamedTuple):
    order: int
    choices: tuple[_Choice, ...]
    issue: WireIssue
    path: Loc


def _walk(tp: Any, loc: Loc, value: Any) -> _Walk:
    """Follow pydantic's ``loc`` through the types: JSON path, unions passed, where it ends."""
    path: list[str | int] = []
    choices: list[_Choice] = []
    owner: type[BaseModel] | None = None
    info: FieldInfo | None = None
    for index, segment in enumerate(loc):
        tp, discriminator = _unwrap(tp)
        if _is_union(tp):
            # pydantic names the member it tried; that is no key in the JSON.
            optional = info is not None and not info.is_required()
            choices.append(_Choice(loc[:index], str(segment), tuple(path), tp, value, optional))
            tp = _member(tp, segment, discriminator)
            continue
        info = None
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            owner = tp
            info = _field_aliases(tp).get(str(segment))
            tp = Annotated[info.annotation, info] if info is not None else Any
        elif get_origin(tp) is list:
            tp = (get_args(tp) or (Any,))[0]
        elif get_origin(tp) is dict:
            tp = (get_args(tp) or (Any, Any))[1]
        else:
            tp = Any
        path.append(segment)
        value = _child(value, segment)
    return _Walk(tuple(path), tuple(choices), owner, info, tp, value)


def _unwrap(tp: Any) -> tuple[Any, Any]:
    """Strip Annotated, Optional and RootModel layers; also return the union's discriminator."""
    discriminator: Any = None
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            inner, *metadata = get_args(tp)
            for item in metadata:
                if isinstance(item, Discriminator):
                    discriminator = item
                elif isinstance(item, FieldInfo):
                    discriminator = _discriminator_of(item) or discriminator
            tp = inner
        elif origin in (Union, types.UnionType):
            members = [arg for arg in get_args(tp) if arg is not type(None)]
            if len(members) > 1:
                return tp, discriminator
            tp = members[0]
        elif isinstance(tp, type) and issubclass(tp, RootModel):
            info = tp.model_fields["root"]
            discriminator = _discriminator_of(info)
            tp = info.annotation
        else:
            return tp, discriminator


def _discriminator_of(info: FieldInfo) -> Any:
    # A field name given as Field(discriminator=...) stays on the FieldInfo; a
    # Discriminator object from an Annotated type is moved into its metadata.
    if info.discriminator is not None:
        return info.discriminator
    return next((item for item in info.metadata if isinstance(item, Discriminator)), None)


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _member(union: Any, segment: str | int, discriminator: Any) -> Any:
    """The member of ``union`` that pydantic's loc ``segment`` names (its tag, class or label)."""
    members = [arg for arg in get_args(union) if arg is not type(None)]
    for member in members:
        if get_origin(member) is Annotated:
            tags = [item.tag for item in get_args(member)[1:] if isinstance(item, Tag)]
            if segment in tags:
                return member
    if isinstance(discriminator, str):
        for member in members:
            if segment in _literal_values(member, discriminator):
                return member
    for member in members:
        if _label(member) == segment:
            return member
    return Any


def _label(tp: Any) -> str:
    """The name pydantic gives a union member in an error's loc."""
    tp, _ = _unwrap(tp) if get_origin(tp) is Annotated else (tp, None)
    if isinstance(tp, type):
        return tp.__name__
    origin = get_origin(tp)
    if origin is Literal:
        return f"literal[{','.join(repr(arg) for arg in get_args(tp))}]"
    if origin in (list, dict):
        return f"{origin.__name__}[{','.join(_label(arg).lower() for arg in get_args(tp))}]"
    return str(tp).lower()


def _literal_values(tp: Any, field: str) -> tuple[Any, ...]:
    tp, _ = _unwrap(tp)
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return ()
    info = _field_aliases(tp).get(field)
    if info is None:
        return ()
    annotation, _ = _unwrap(info.annotation)
    return get_args(annotation) if get_origin(annotation) is Literal else ()


@functools.cache
def _field_aliases(model: type[BaseModel]) -> dict[str, FieldInfo]:
    # pydantic reports fields by wire key (``_meta``), not attribute name.
    return {info.alias or name: info for name, info in model.model_fields.items()}


def _child(value: Any, segment: str | int) -> Any:
    if isinstance(value, Mapping):
        return value.get(segment)
    if isinstance(value, list) and isinstance(segment, int) and -len(value) <= segment < len(value):
        return value[segment]
    return None


_KINDS: dict[str, IssueKind] = {
    "extra_forbidden": "unknown_key",
    "missing": "missing_key",
}
_VALUE_ERRORS = (
    "literal_error",
    "enum",
    "union_tag_invalid",
    "greater_than",
    "less_than",
    "multiple_of",
    "string_pattern_mismatch",
    "too_short",
    "too_long",
    "string_too_short",
    "string_too_long",
    "value_error",
    "assertion_error",
)


def _issue(error: Any, walk: _Walk, prefix: Loc, root: str) -> WireIssue:
    etype = error["type"]
    path = prefix + walk.path
    if etype in ("union_tag", "union_tag_not_found", "union_tag_invalid"):
        return _tag_issue(error, walk, path, root)
    kind = _KINDS.get(etype)
    # The envelope twins are named Strict*; the wire knows them as JSON-RPC shapes.
    owner = walk.owner.__name__.removeprefix("Strict") if walk.owner else "this object"
    if kind == "unknown_key":
        message = f"undeclared key {walk.path[-1]!r} ({owner} has no such field)"
    elif kind == "missing_key":
        message = f"required key {walk.path[-1]!r} of {owner} is missing"
    elif etype.startswith(_VALUE_ERRORS):
        kind = "wrong_value"
        message = f"{_lower_first(error['msg'])}, got {_show(error.get('input'))}"
    else:
        kind = "wrong_type"
        optional = walk.field is not None and not walk.field.is_required()
        expected = _TYPE_WORDS.get(etype) or _lower_first(error["msg"])
        message = _wrong_type(expected, error.get("input"), optional)
    return WireIssue(kind, _json_path(path, root), message)


_TYPE_WORDS = {
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected a boolean",
    "list_type": "expected an array",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
}


def _wrong_type(expected: str, got: Any, optional: bool) -> str:
    if got is None and optional:
        return f"{expected}, got null (an optional key is left out, not set to null)"
    return f"{expected}, got {_show(got)}"


def _tag_issue(error: Any, walk: _Walk, path: Loc, root: str) -> WireIssue:
    """A tagged union whose tag is absent or unknown: report it on the tag key itself."""
    ctx = error.get("ctx") or {}
    _, discriminator = _unwrap(walk.tp)
    tagger = getattr(discriminator, "discriminator", None)
    expected = ""
    if isinstance(tagger, _Tagger):
        field, expected = tagger.field, f" (expected one of {tagger.expected})"
    elif isinstance(discriminator, str):
        field = discriminator
    else:
        field = str(ctx.get("discriminator", "type")).strip("'")
    value = walk.value
    if not isinstance(value, Mapping):
        return WireIssue(
            "wrong_type",
            _json_path(path, root),
            f"expected an object with a {field!r}, got {_show(value)}",
        )
    if field not in value:
        return WireIssue(
            "missing_key", _json_path((*path, field), root), f"required key {field!r} is missing"
        )
    if not isinstance(value[field], str):
        return WireIssue(
            "wrong_type",
            _json_path((*path, field), root),
            f"expected a string, got {_show(value[field])}",
        )
    return WireIssue(
        "wrong_value",
        _json_path((*path, field), root),
        f"unknown {field} {_show(value[field])}{expected}",
    )


def _select(entries: list[_Entry], prefix: Loc, root: str) -> list[tuple[int, WireIssue]]:
    """Keep, of each union that failed, only the errors of the member the value was meant to be.

    Tagged unions never get here (they are rewritten to pick by tag), so the
    member is the one that fits best: fewest errors about the value's own
    type, then fewest undeclared or missing keys of its own, then fewest
    errors in all.
    """
    kept: list[tuple[int, WireIssue]] = []
    groups: dict[Loc, dict[str, list[_Entry]]] = {}
    unions: dict[Loc, _Choice] = {}
    for entry in entries:
        if not entry.choices:
            kept.append((entry.order, entry.issue))
            continue
        choice = entry.choices[0]
        unions.setdefault(choice.key, choice)
        groups.setdefault(choice.key, {}).setdefault(choice.member, []).append(
            entry._replace(choices=entry.choices[1:])
        )
    for key, members in groups.items():
        choice = unions[key]
        first = min(e.order for group in members.values() for e in group)
        scored = []
        for member in members:
            chosen = _select(members[member], prefix, root)
            at_root = sum(1 for e in members[member] if e.path == choice.path)
            depth = len(choice.path) + 1
            own_keys = sum(
                1
                for e in members[member]
                if len(e.path) == depth and e.issue.kind in ("unknown_key", "missing_key")
            )
            earliest = min((o for o, _ in chosen), default=first)
            scored.append(((at_root, own_keys, len(chosen), earliest), member, chosen))
        scored.sort(key=lambda item: item[0])
        best = scored[0]
        if best[0][0] and all(s[0][0] == len(members[s[1]]) for s in scored):
            # No member accepts the value's type at all: say what would do.
            labels = dict.fromkeys(_describe(s[1]) for s in sorted(scored, key=lambda s: s[0][3]))
            if "a number" in labels:
                labels.pop("an integer", None)
            expected = "expected " + " or ".join(labels)
            message = _wrong_type(expected, choice.value, choice.optional)
            path = _json_path((*prefix, *choice.path), root)
            kept.append((first, WireIssue("wrong_type", path, message)))
            continue
        kept.extend(best[2])
    kept.sort(key=lambda item: item[0])
    return kept


_LABELS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}


def _describe(label: str) -> str:
    """A union member's loc label in words: ``dict[str,any]`` -> ``an object``."""
    if label in _LABELS:
        return _LABELS[label]
    if label.startswith("dict["):
        return "an object"
    if label.startswith("list["):
        return "an array"
    if label.startswith("literal["):
        return f"one of {label[len('literal[') : -1]}"
    return f"a {label} object"


def _dedupe(issues: Iterable[WireIssue]) -> list[WireIssue]:
    seen: set[WireIssue] = set()
    out = []
    for issue in issues:
        if issue not in seen:
            seen.add(issue)
            out.append(issue)
    return out


_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")


def _json_path(path: Loc, root: str = "$") -> str:
    parts = [root]
    for segment in path:
        if isinstance(segment, int):
            parts.append(f"[{segment}]")
        elif _IDENTIFIER.match(segment):
            parts.append(f".{segment}")
        else:
            parts.append(f"[{json.dumps(segment)}]")
    return "".join(parts)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _show(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
