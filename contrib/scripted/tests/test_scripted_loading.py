"""Scripts from JSON, YAML and Python, and errors that say where and what."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ahp_scripted import (
    Activity,
    Ask,
    Crash,
    Fail,
    Rule,
    Say,
    Script,
    ScriptError,
    Step,
    Think,
    Title,
    Tool,
    Usage,
    Wait,
    load_script,
    loads_script,
    parse_script,
    parse_step,
)

EVERY_STEP: list[dict[str, Any]] = [
    {"say": "hi", "delay": 0.5, "words": 2},
    {"think": {"text": "hmm"}},
    {"tool": "echo", "input": {"text": "${rest}"}, "approval": True, "result": "ok"},
    {"tool": "rm", "fail": "nope", "title": "Remove?", "on_deny": [{"say": "fine"}]},
    {"tool": "open", "client": True},
    {"ask": "Name?", "say_answer": True},
    {"usage": {"input_tokens": 3, "output_tokens": 4, "model": "m"}},
    {"title": "T"},
    {"activity": None},
    {"wait": 1.5},
    {"wait": "gate-a"},
    {"fail": "bad"},
    {"crash": "dead"},
]
PARSED: list[Step] = [
    Say("hi", delay=0.5, words=2),
    Think("hmm"),
    Tool("echo", input={"text": "${rest}"}, approval=True, result="ok"),
    Tool("rm", fail="nope", title="Remove?", on_deny=(Say("fine"),)),
    Tool("open", client=True),
    Ask("Name?", say_answer=True),
    Usage(input_tokens=3, output_tokens=4, model="m"),
    Title("T"),
    Activity(None),
    Wait(seconds=1.5),
    Wait(gate="gate-a"),
    Fail("bad"),
    Crash("dead"),
]


def test_every_step_kind_from_its_file_form() -> None:
    assert [parse_step(step) for step in EVERY_STEP] == PARSED


def test_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    data = {
        "name": "Mine",
        "rules": [{"prefix": "do ", "steps": EVERY_STEP}],
        "default": [{"say": "?"}],
    }
    path.write_text(json.dumps(data))
    script = load_script(path)
    assert script.name == "Mine"
    assert script.rules == (Rule(prefix="do ", steps=tuple(PARSED)),)
    assert script.default == (Say("?"),)


def test_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        "rules:\n"
        "  - regex: '^echo (?P<text>.+)$'\n"
        "    ignore_case: true\n"
        "    steps:\n"
        "      - tool: echo\n"
        "        input: {text: '${text}'}\n"
        "        approval: true\n"
        "      - say: done\n"
    )
    script = load_script(path)
    [rule] = script.rules
    assert rule.match("ECHO hi") == {"match": "ECHO hi", "text": "hi"}
    assert rule.steps == (Tool("echo", input={"text": "${text}"}, approval=True), Say("done"))
    assert script.default is None


def test_a_directory_combines_its_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text("rules: [{exact: b, steps: [{say: b}]}]\ndefault: [{say: B}]")
    (tmp_path / "a.json").write_text(json.dumps({"rules": [{"exact": "a", "steps": []}]}))
    (tmp_path / "notes.txt").write_text("ignored")
    script = load_script(tmp_path)
    assert [rule.exact for rule in script.rules] == ["a", "b"]
    assert script.default == (Say("B"),)


def test_python_scripts_take_plain_dicts_for_steps() -> None:
    script = Script(
        rules=[Rule(exact="x", steps=[{"say": "hi"}, Think("t")]), {"prefix": "y", "steps": []}],
        default=[{"wait": "g"}],
    )
    assert script.rules[0].steps == (Say("hi"), Think("t"))
    assert script.rules[1] == Rule(prefix="y", steps=())
    assert script.default == (Wait(gate="g"),)
    assert Ask({"id": "q", "kind": "boolean", "message": "ok?"}).questions == (
        {"id": "q", "kind": "boolean", "message": "ok?"},
    )


def _error(tmp_path: Path, data: Any, name: str = "bad.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(ScriptError) as caught:
        load_script(path)
    return str(caught.value)


def _steps(*steps: Any) -> dict[str, Any]:
    return {"rules": [{"exact": "go", "steps": [{"say": "fine"}, *steps]}]}


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (
            {"tool": "x", "aproval": True},
            "rules[0].steps[1] (tool): unknown key 'aproval' (did you mean 'approval'?)",
        ),
        (
            {"tool": "x", "approval": "yes"},
            "rules[0].steps[1] (tool): 'approval' must be true or false, not \"yes\"",
        ),
        ({"say": 3}, "rules[0].steps[1] (say): 'text' must be a string, not 3"),
        ({"usage": {"input_tokens": 1}}, "rules[0].steps[1] (usage): missing 'output_tokens'"),
        ({"wait": -1}, "rules[0].steps[1] (wait): 'seconds' must be a number of seconds"),
        ({"say": "a", "think": "b"}, "rules[0].steps[1]: a step has one kind, this one names"),
        ({"sing": "la"}, "rules[0].steps[1]: a step needs one of say, think, tool"),
        ("say hi", "rules[0].steps[1]: a step must be a mapping"),
        (
            {"tool": "x", "approval": True, "on_deny": [{"say": None}]},
            "rules[0].steps[1] (tool).on_deny[0] (say): 'text' must be a string, not null",
        ),
        (
            {"ask": [{"id": "q", "kind": "single-select", "message": "?"}]},
            "rules[0].steps[1] (ask): 'questions' not a ChatInputQuestion",
        ),
        ({"wait": {"seconds": 1, "gate": "g"}}, "(wait): wait needs either seconds or a gate"),
    ],
)
def test_step_errors_name_the_file_the_step_and_the_problem(
    tmp_path: Path, steps: Any, expected: str
) -> None:
    message = _error(tmp_path, _steps(steps))
    assert message.startswith(f"{tmp_path / 'bad.json'}: ")
    assert expected in message


def test_rule_and_file_errors(tmp_path: Path) -> None:
    assert "rules[0]: regex '(' does not compile" in _error(
        tmp_path, {"rules": [{"regex": "(", "steps": []}]}
    )
    assert "rules[0]: a rule needs exactly one of exact, prefix or regex" in _error(
        tmp_path, {"rules": [{"exact": "a", "prefix": "b", "steps": []}]}
    )
    assert "rules[0]: missing 'steps'" in _error(tmp_path, {"rules": [{"exact": "a"}]})
    assert "unknown key 'rule' (did you mean 'rules'?)" in _error(tmp_path, {"rule": []})
    assert "not valid JSON" in _error(tmp_path, "{")
    assert "not valid YAML" in _error(tmp_path, "rules: [", name="bad.yaml")
    assert "a script must be a mapping" in _error(tmp_path, [])
    assert "a script file ends in" in _error(tmp_path, "{}", name="bad.txt")
    with pytest.raises(ScriptError, match="cannot read"):
        load_script(tmp_path / "missing.json")


def test_text_and_data_forms() -> None:
    assert loads_script('{"default": [{"say": "x"}]}').default == (Say("x"),)
    assert loads_script("default: [{say: x}]", format="yaml").default == (Say("x"),)
    with pytest.raises(ScriptError, match="<mine>: 'rules' must be a list"):
        parse_script({"rules": {}}, "<mine>")
