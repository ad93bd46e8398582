"""ahp-scripted: the scripted reference backend of ahp, and the demo agent ``ahp serve`` offers.

A deterministic agent that follows a script (JSON, YAML or Python) of what it
does each turn: stream text and reasoning, call tools with and without
approval, ask questions, spend usage, wait, fail or crash.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ahp_scripted.backend import PROVIDER, ScriptedAgent, ScriptedBackend
    from ahp_scripted.demo import demo_script, host_variables
    from ahp_scripted.gates import Gates
    from ahp_scripted.loader import load_script, loads_script, parse_script, parse_step
    from ahp_scripted.runner import AgentCrashed, ScriptedTurnFailed
    from ahp_scripted.script import (
        Activity,
        Ask,
        Background,
        Crash,
        Drain,
        Fail,
        Meta,
        Rule,
        Say,
        Script,
        ScriptError,
        Step,
        Subagent,
        Think,
        Title,
        Tool,
        Usage,
        Wait,
    )
    from ahp_scripted.store import Conversation, ConversationStore, TurnRecord
    from ahp_scripted.transcript import RecordingReporter, replay

__all__ = [
    "PROVIDER",
    "Activity",
    "AgentCrashed",
    "Ask",
    "Background",
    "Conversation",
    "ConversationStore",
    "Crash",
    "Drain",
    "Fail",
    "Gates",
    "Meta",
    "RecordingReporter",
    "Rule",
    "Say",
    "Script",
    "ScriptError",
    "ScriptedAgent",
    "ScriptedBackend",
    "ScriptedTurnFailed",
    "Step",
    "Subagent",
    "Think",
    "Title",
    "Tool",
    "TurnRecord",
    "Usage",
    "Wait",
    "demo_script",
    "host_variables",
    "load_script",
    "loads_script",
    "parse_script",
    "parse_step",
    "replay",
]

#: Where each name lives: loaded when first asked for, so registering the plugin (which
#: needs the backend alone) does not load the runner, the loader and every step's class.
_HOME = {
    "Activity": "ahp_scripted.script",
    "AgentCrashed": "ahp_scripted.runner",
    "Ask": "ahp_scripted.script",
    "Background": "ahp_scripted.script",
    "Conversation": "ahp_scripted.store",
    "ConversationStore": "ahp_scripted.store",
    "Crash": "ahp_scripted.script",
    "Drain": "ahp_scripted.script",
    "Fail": "ahp_scripted.script",
    "Gates": "ahp_scripted.gates",
    "Meta": "ahp_scripted.script",
    "PROVIDER": "ahp_scripted.backend",
    "RecordingReporter": "ahp_scripted.transcript",
    "Rule": "ahp_scripted.script",
    "Say": "ahp_scripted.script",
    "Script": "ahp_scripted.script",
    "ScriptError": "ahp_scripted.script",
    "ScriptedAgent": "ahp_scripted.backend",
    "ScriptedBackend": "ahp_scripted.backend",
    "ScriptedTurnFailed": "ahp_scripted.runner",
    "Step": "ahp_scripted.script",
    "Subagent": "ahp_scripted.script",
    "Think": "ahp_scripted.script",
    "Title": "ahp_scripted.script",
    "Tool": "ahp_scripted.script",
    "TurnRecord": "ahp_scripted.store",
    "Usage": "ahp_scripted.script",
    "Wait": "ahp_scripted.script",
    "demo_script": "ahp_scripted.demo",
    "host_variables": "ahp_scripted.demo",
    "load_script": "ahp_scripted.loader",
    "loads_script": "ahp_scripted.loader",
    "parse_script": "ahp_scripted.loader",
    "parse_step": "ahp_scripted.loader",
    "replay": "ahp_scripted.transcript",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
