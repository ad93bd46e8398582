"""ahp-scripted: the scripted reference backend of ahp, and the demo agent ``ahp serve`` offers.

A deterministic agent that follows a script (JSON, YAML or Python) of what it
does each turn: stream text and reasoning, call tools with and without
approval, ask questions, spend usage, wait, fail or crash.
"""

from ahp_scripted.backend import PROVIDER, ScriptedAgent, ScriptedBackend
from ahp_scripted.demo import demo_script, host_variables
from ahp_scripted.loader import load_script, loads_script, parse_script, parse_step
from ahp_scripted.runner import AgentCrashed, Gates, ScriptedTurnFailed
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
