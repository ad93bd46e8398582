"""The slash-command menu is built from a session's customizations."""

from ahpcore.sessions import composer

CUSTOMIZATIONS = [
    {
        "type": "directory",
        "id": "d1",
        "uri": "file:///repo/.claude/commands",
        "name": "commands",
        "enabled": True,
        "contents": "prompt",
        "writable": True,
        "children": [
            {
                "type": "prompt",
                "id": "p1",
                "uri": "file:///c/compact.md",
                "name": "compact",
                "_meta": {"description": "Compact the context", "argumentHint": "<focus>"},
            },
            {
                "type": "prompt",
                "id": "p2",
                "uri": "file:///c/off.md",
                "name": "off",
                "enabled": False,
            },
        ],
    },
    {
        "type": "plugin",
        "id": "pl",
        "uri": "file:///plugins/x",
        "name": "x",
        "children": [{"type": "skill", "id": "s1", "uri": "file:///s/review", "name": "review"}],
    },
]


def test_slash_items_carry_command_meta_and_skills_say_so():
    items = composer.command_items(CUSTOMIZATIONS, 0, "/")
    by_name = {item["attachment"]["_meta"]["command"]: item for item in items}
    assert set(by_name) == {"compact", "review"}  # a disabled one is not offered
    compact = by_name["compact"]
    assert compact["insertText"] == "/compact "
    assert compact["attachment"]["_meta"] == {
        "command": "compact",
        "description": "Compact the context",
        "argumentHint": "<focus>",
    }
    assert by_name["review"]["attachment"]["_meta"]["isSkill"] is True


def test_slash_items_filter_on_what_was_typed():
    assert [i["insertText"] for i in composer.command_items(CUSTOMIZATIONS, 0, "/rev")] == [
        "/review "
    ]


def test_resolving_config_keeps_what_was_answered():
    properties = {
        "mode": {"type": "string", "title": "Mode", "enum": ["a", "b"], "default": "a"},
        "depth": {"type": "number", "title": "Depth", "default": 1},
    }
    resolved = composer.resolve_config(properties, {"mode": "b", "stray": 1})
    assert resolved["values"] == {"mode": "b", "depth": 1}
    assert resolved["schema"]["properties"] == properties


def test_a_skill_only_the_agent_invokes_is_not_offered_and_a_declared_description_is_used():
    children = [
        {
            "type": "skill",
            "id": "s1",
            "uri": "file:///s/a",
            "name": "agentonly",
            "disableUserInvocation": True,
        },
        {
            "type": "skill",
            "id": "s2",
            "uri": "file:///s/b",
            "name": "asked",
            "description": "Declared on the skill",
        },
    ]
    container = {"type": "plugin", "id": "p", "uri": "file:///p", "name": "p", "children": children}
    items = composer.command_items([container], 0, "/")
    assert [i["attachment"]["_meta"]["command"] for i in items] == ["asked"]
    assert items[0]["attachment"]["_meta"]["description"] == "Declared on the skill"
