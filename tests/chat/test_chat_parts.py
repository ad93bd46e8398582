"""The pieces of ``ahp chat`` that need no terminal: what an answer means in the protocol,
which commands complete, and that nothing an agent says can drive the terminal."""

from __future__ import annotations

import io

import pytest
import typer
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from rich.console import Console
from typer.testing import CliRunner

from ahpcore.chat import answers
from ahpcore.chat.app import SlashCompleter
from ahpcore.chat.cli import register
from ahpcore.chat.model import Model
from ahpcore.chat.render import TurnView, clean, settled
from ahpcore.protocol.wire import assert_valid_frame

#: A tool call as the Claude backend offers it: allow, allow always, deny.
OFFERED = {
    "toolCallId": "t1.call1",
    "toolName": "Bash",
    "displayName": "Bash",
    "invocationMessage": "Run ls",
    "status": "pending-confirmation",
    "options": [
        {"id": "allow", "label": "Allow", "kind": "approve"},
        {"id": "allow-always", "label": "Allow always", "kind": "approve"},
        {"id": "deny", "label": "Deny", "kind": "deny"},
    ],
}
PLAIN = {k: v for k, v in OFFERED.items() if k != "options"}


def dispatched(fields: dict) -> dict:
    """The frame the chat sends for a confirmation, held to the protocol's schema."""
    frame = {
        "jsonrpc": "2.0",
        "method": "dispatchAction",
        "params": {
            "channel": "ahp-chat://default/x",
            "clientSeq": 1,
            "action": {
                "type": "chat/toolCallConfirmed",
                "turnId": "t1",
                "toolCallId": "t1.call1",
                **fields,
            },
        },
    }
    assert_valid_frame(frame, direction="client")
    return fields


@pytest.mark.parametrize(
    ("typed", "fields", "remember"),
    [
        ("y", {"approved": True, "confirmed": "user-action", "selectedOptionId": "allow"}, False),
        ("YES", {"approved": True, "confirmed": "user-action", "selectedOptionId": "allow"}, False),
        (
            "a",
            {"approved": True, "confirmed": "user-action", "selectedOptionId": "allow-always"},
            False,
        ),
        ("n", {"approved": False, "reason": "denied", "selectedOptionId": "deny"}, False),
        ("3", {"approved": False, "reason": "denied", "selectedOptionId": "deny"}, False),
        (
            "2",
            {"approved": True, "confirmed": "user-action", "selectedOptionId": "allow-always"},
            False,
        ),
    ],
)
def test_answers_map_onto_the_offered_options(typed: str, fields: dict, remember: bool) -> None:
    decision = answers.decide(OFFERED, typed)
    assert decision is not None
    assert dispatched(decision.fields) == fields
    assert decision.remember is remember


def test_without_options_always_is_kept_by_the_client() -> None:
    decision = answers.decide(PLAIN, "always")
    assert decision is not None and decision.remember
    assert dispatched(decision.fields) == {"approved": True, "confirmed": "user-action"}
    # Later calls of the same tool: approved by this client's setting, not by a person.
    assert dispatched(answers.auto_approval(PLAIN)) == {"approved": True, "confirmed": "setting"}


def test_a_denial_can_say_what_to_do_instead() -> None:
    decision = answers.decide(PLAIN, "n use git status instead")
    assert decision is not None
    assert dispatched(decision.fields) == {
        "approved": False,
        "reason": "denied",
        "userSuggestion": {"text": "use git status instead", "origin": {"kind": "user"}},
    }


@pytest.mark.parametrize("typed", ["", "maybe", "4", "0", "y please", "1"])
def test_anything_else_asks_again(typed: str) -> None:
    call = PLAIN if typed == "1" else OFFERED  # a number means nothing without options
    assert answers.decide(call, typed) is None


def test_question_answers_take_the_protocol_shapes() -> None:
    text = {"id": "name", "kind": "text", "message": "Name?"}
    assert answers.answer(text, " Ada ") == {
        "state": "submitted",
        "value": {"kind": "text", "value": "Ada"},
    }
    assert answers.answer(text, "") is None  # skipped: not required
    with pytest.raises(answers.Invalid):
        answers.answer({**text, "required": True}, "")
    boolean = {"id": "ok", "kind": "boolean", "message": "OK?"}
    assert answers.answer(boolean, "n")["value"] == {"kind": "boolean", "value": False}
    number = {"id": "n", "kind": "integer", "message": "How many?", "min": 1, "max": 3}
    assert answers.answer(number, "2")["value"] == {"kind": "number", "value": 2}
    with pytest.raises(answers.Invalid):
        answers.answer(number, "7")
    options = [{"id": "r", "label": "Red"}, {"id": "g", "label": "Green"}]
    single = {"id": "c", "kind": "single-select", "message": "Colour?", "options": options}
    assert answers.answer(single, "2")["value"] == {"kind": "selected", "value": "g"}
    assert answers.answer(single, "red")["value"] == {"kind": "selected", "value": "r"}
    with pytest.raises(answers.Invalid):
        answers.answer(single, "blue")
    free = {**single, "allowFreeformInput": True}
    assert answers.answer(free, "blue")["value"] == {
        "kind": "selected",
        "value": "",
        "freeformValues": ["blue"],
    }
    many = {**single, "kind": "multi-select"}
    assert answers.answer(many, "1, 2")["value"] == {"kind": "selected-many", "value": ["r", "g"]}


SKILLS = [
    {
        "type": "plugin",
        "id": "p",
        "uri": "file:///p",
        "name": "p",
        "children": [
            {
                "type": "skill",
                "id": "s1",
                "uri": "file:///s1",
                "name": "review",
                "description": "Review",
            },
            {"type": "prompt", "id": "s2", "uri": "file:///s2", "name": "release"},
            {"type": "skill", "id": "s3", "uri": "file:///s3", "name": "rebase", "enabled": False},
            {
                "type": "skill",
                "id": "s4",
                "uri": "file:///s4",
                "name": "rules",
                "disableUserInvocation": True,
            },
            {"type": "rule", "id": "s5", "uri": "file:///s5", "name": "readme"},
        ],
    }
]


def completions(model: Model, text: str) -> list[str]:
    completer = SlashCompleter(model.slash_commands)
    found = completer.get_completions(Document(text, len(text)), CompleteEvent())
    return [c.text for c in found]


def test_slash_completes_the_sessions_commands() -> None:
    model = Model("me", session={"provider": "x", "customizations": SKILLS})
    assert completions(model, "/re") == ["/review ", "/release "]
    assert completions(model, "/rev") == ["/review "]
    assert completions(model, "/review now") == []  # past the first word
    assert completions(model, "re") == []


def test_before_the_session_lists_its_own_the_agents_commands_complete() -> None:
    model = Model(
        "me",
        root={"agents": [{"provider": "x", "customizations": SKILLS}]},
        session={"provider": "x"},
    )
    assert completions(model, "/") == ["/review ", "/release "]


def test_nothing_an_agent_says_reaches_the_terminal_as_a_command() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    hostile = "Hi \x1b]0;owned\x07 there \x1b[2J\x9b31m\r"
    turn = {
        "id": "t",
        "state": "complete",
        "message": {"text": "x", "origin": {"kind": "user"}},
        "responseParts": [
            {"kind": "markdown", "id": "p1", "content": hostile},
            {
                "kind": "toolCall",
                "toolCall": {
                    **PLAIN,
                    "displayName": "Bad\x1b[8m",
                    "status": "completed",
                    "success": True,
                    "pastTenseMessage": "Ran \x1b[1A",
                    "content": [{"type": "text", "text": "\x1b[5mout"}],
                },
            },
        ],
    }
    TurnView(console, "t").finish(turn)
    shown = out.getvalue()
    for sequence in ("\x1b]0;", "\x1b[2J", "\x9b", "\x1b[8m", "\x1b[1A", "\x1b[5m", "\x07"):
        assert sequence not in shown
    assert "\\x1b]0;owned" in shown and "\\x1b[2J" in shown
    assert clean("a\nb\tc\x1b") == "a\nb\tc\\x1b"


def test_only_whole_markdown_blocks_settle() -> None:
    assert settled("one\n\ntwo") == len("one\n\n")
    assert settled("one") == 0
    # A blank line inside a code fence does not end a block.
    assert settled("```\na\n\nb\n") == 0
    assert settled("```\na\n\nb\n```\n\nafter") == len("```\na\n\nb\n```\n\n")


def test_register_adds_the_chat_command() -> None:
    app = typer.Typer()
    register(app)

    @app.command()
    def other() -> None:  # a group with two commands, as ahp is
        pass

    done = CliRunner().invoke(app, ["chat", "--help"])
    assert done.exit_code == 0, done.output
    for option in ("--session", "--agent", "--folder", "--list", "--url", "--token"):
        assert option in done.output
