"""Running a turn's steps against a reporter: what the scripted agent does, one step at a time."""

from __future__ import annotations

import itertools
import json
import re
import string
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from ahp_scripted.gates import Gates
from ahp_scripted.script import (
    Activity,
    Ask,
    Background,
    Crash,
    Drain,
    Fail,
    Meta,
    Say,
    ScriptError,
    Step,
    Subagent,
    Think,
    Title,
    Tool,
    Usage,
    Wait,
)
from ahpcore.ports.backend import (
    ApprovalOption,
    Cost,
    InputAnswer,
    PendingEdit,
    ServerTools,
    SessionReporter,
    ToolAnswer,
    TurnReporter,
)


class ScriptedTurnFailed(RuntimeError):
    """A ``fail`` step: the script says this turn ends in error."""


class AgentCrashed(RuntimeError):
    """A ``crash`` step: the agent died in the middle of a turn."""


class _Template(string.Template):
    # `${input.text}` reaches into a tool's JSON input.
    idpattern = r"(?a:[_a-z][_a-z0-9]*(?:\.[_a-z0-9]+)*)"
    flags = re.IGNORECASE


def fill(text: str, variables: Mapping[str, str]) -> str:
    """``${name}`` replaced by its variable; unknown names stay as written."""
    return _Template(text).safe_substitute(variables)


def fill_json(value: Any, variables: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return fill(value, variables)
    if isinstance(value, list):
        return [fill_json(item, variables) for item in value]
    if isinstance(value, dict):
        return {key: fill_json(item, variables) for key, item in value.items()}
    return value


#: A word: nothing after it to backtrack into, so finding them all is linear.
_WORD = re.compile(r"\S+")
#: The most pieces one text streams in: a longer text puts more words in each, so a
#: person's megabyte echoed back is not a quarter of a million deltas.
MAX_PIECES = 256


def chunks(text: str, words: int) -> list[str]:
    """Split text into pieces of ``words`` words (more for a long text), keeping every
    character.

    A piece runs from its first word to the next piece's (the first from the
    start of the text). The text is often the person's own, so it is split in
    one pass: a pattern with whitespace on both sides of the word took time
    growing with the square of a run of spaces.
    """
    starts = [found.start() for found in _WORD.finditer(text)]
    if not starts:
        return [text] if text else []
    starts[0] = 0
    words = max(words, -(-len(starts) // MAX_PIECES))
    bounds = [*starts[::words], len(text)]
    return [text[begin:end] for begin, end in itertools.pairwise(bounds)]


def answer_text(questions: Sequence[Mapping[str, Any]], answers: Mapping[str, Any]) -> str:
    """The answers as a person would read them back: option labels, lists joined."""
    said: list[str] = []
    for question in questions:
        answer = answers.get(str(question.get("id")))
        if not isinstance(answer, Mapping) or answer.get("state") == "skipped":
            continue
        value = answer.get("value")
        raw = value.get("value") if isinstance(value, Mapping) else value
        labels = {o.get("id"): o.get("label") for o in question.get("options") or ()}
        items = raw if isinstance(raw, list) else [raw]
        extra = list(value.get("freeformValues") or ()) if isinstance(value, Mapping) else []
        shown = [str(labels.get(item, item)) for item in items] + [str(x) for x in extra]
        said.append(", ".join(shown))
    return "; ".join(said)


class _Stop(Exception):
    """The turn ends here, complete (after a denial or a declined question)."""


@dataclass
class TurnRun:
    """One turn being run: the steps, its variables and where it is."""

    report: TurnReporter
    variables: dict[str, str]
    gates: Gates
    call_ids: Iterator[str]
    #: Full names of the client tools the chat started with.
    client_tools: Sequence[str] = ()
    #: The host's own tools (None: the host offers none).
    server_tools: ServerTools | None = None
    #: Returns a steering message's text when one arrived, else None.
    steering: Callable[[], str | None] = lambda: None
    #: Steps and variables for a steering message's text.
    redirect: Callable[[str], tuple[tuple[Step, ...], dict[str, str]]] | None = None
    #: Index of the top-level step running now (a resumed turn starts after it).
    position: int = 0
    #: Where background work and the agent's own turns go (None: nowhere).
    session: SessionReporter | None = None
    #: Runs an agent-started turn for a follow-up text (the agent's own).
    follow_up: Callable[[str, str], Awaitable[None]] | None = None
    activity_set: bool = field(default=False, init=False)
    #: Seconds a cancel takes to land (``drain``), 0 for at once.
    drain: float = field(default=0.0, init=False)

    async def run(self, steps: Sequence[Step], start: int = 0) -> None:
        try:
            await self._run(steps, start)
        except anyio.get_cancelled_exc_class():
            if self.drain:
                # A slow agent: it keeps streaming to the end of its turn before it stops.
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(self.drain / 2)
                    self.report.text(" (draining)")
                    await anyio.sleep(self.drain / 2)
            raise

    async def _run(self, steps: Sequence[Step], start: int) -> None:
        index = start
        current: Sequence[Step] = steps
        try:
            while index < len(current):
                if self.redirect is not None and (steered := self.steering()) is not None:
                    # Steering redirects the agent: the rest of the script gives way.
                    current, found = self.redirect(steered)
                    self.variables.update({"message": steered, **found})
                    index = 0
                    continue
                self.position = index
                await self.step(current[index])
                index += 1
        except _Stop:
            pass
        finally:
            if self.activity_set:
                # An agent that finishes is idle, however its turn ended.
                self.report.activity(None)

    async def run_branch(self, steps: Sequence[Step]) -> None:
        for step in steps:
            await self.step(step)
        raise _Stop

    async def step(self, step: Step) -> None:
        if isinstance(step, Say | Think):
            await self.stream(step)
        elif isinstance(step, Tool):
            await self.tool(step)
        elif isinstance(step, Ask):
            await self.ask(step)
        elif isinstance(step, Usage):
            self.report.usage(
                input_tokens=step.input_tokens,
                output_tokens=step.output_tokens,
                model=step.model,
                cache_read_tokens=step.cache_read_tokens,
                cache_write_tokens=step.cache_write_tokens,
                reasoning_tokens=step.reasoning_tokens,
                context_used=step.context_used,
                context_size=step.context_size,
                cost=Cost(step.cost, step.currency) if step.cost is not None else None,
            )
        elif isinstance(step, Subagent):
            await self.subagent(step)
        elif isinstance(step, Background):
            self.background(step)
        elif isinstance(step, Drain):
            self.drain = step.seconds
        elif isinstance(step, Meta):
            if self.session is not None:
                self.session.meta(fill_json(dict(step.values), self.variables))
        elif isinstance(step, Title):
            self.report.title(self.fill(step.text))
        elif isinstance(step, Activity):
            text = None if step.text is None else self.fill(step.text)
            self.activity_set = text is not None
            self.report.activity(text)
        elif isinstance(step, Wait):
            if step.gate is not None:
                await self.gates.wait(self.fill(step.gate))
            else:
                await anyio.sleep(step.seconds or 0)
        elif isinstance(step, Fail):
            raise ScriptedTurnFailed(self.fill(step.message))
        elif isinstance(step, Crash):
            raise AgentCrashed(f"the scripted agent crashed: {self.fill(step.message)}")
        else:  # pragma: no cover - the loader makes only the steps above
            raise ScriptError(f"not a step: {step!r}")

    def fill(self, text: str) -> str:
        return fill(text, self.variables)

    async def stream(self, step: Say | Think) -> None:
        send = self.report.text if isinstance(step, Say) else self.report.reasoning
        for index, piece in enumerate(chunks(self.fill(step.text), step.words)):
            if index and step.delay:
                await anyio.sleep(step.delay)
            else:
                # A checkpoint between chunks lets a cancel land mid-stream.
                await anyio.lowlevel.checkpoint()
            send(piece)

    def _client_tool_name(self, name: str) -> str:
        if name in self.client_tools:
            return name
        owned = [tool for tool in self.client_tools if tool.endswith(f"__{name}")]
        return owned[0] if owned else name

    def _remember_input(self, tool_input: str) -> None:
        self.variables["input"] = tool_input
        try:
            decoded = json.loads(tool_input)
        except ValueError:
            return
        if isinstance(decoded, dict):
            for key, value in decoded.items():
                text = value if isinstance(value, str) else json.dumps(value)
                self.variables[f"input.{key}"] = text

    async def tool(self, step: Tool) -> None:
        call_id = next(self.call_ids)
        name = self.fill(step.name)
        if step.client:
            name = self._client_tool_name(name)
        tool_input = json.dumps(fill_json(step.input, self.variables))
        self._remember_input(tool_input)
        report = self.report
        report.tool_start(
            call_id,
            name,
            display_name=self.fill(step.display_name) if step.display_name else None,
            intention=self.fill(step.intention) if step.intention else None,
            meta={"toolKind": step.kind} if step.kind else None,
        )
        half = len(tool_input) // 2
        for piece in (tool_input[:half], tool_input[half:]):
            if piece:
                report.tool_input(call_id, piece)
        bare = name.rsplit("__", 1)[-1]
        invocation = self.fill(step.invocation) if step.invocation else f"Running `{bare}`"
        if step.client:
            result = await report.client_tool(
                call_id, name, tool_input=tool_input, invocation_message=invocation
            )
            content = result.get("content") or ()
            texts = [c.get("text", "") for c in content if isinstance(c, Mapping)]
            self.variables["result"] = "".join(str(t) for t in texts)
            return
        if step.server:
            await self._server_tool(call_id, name, tool_input, invocation)
            return
        # Whether it asks is known only now, as with an agent that asks when it asks.
        report.tool_ready(call_id, tool_input=tool_input, invocation_message=invocation)
        if step.approval:
            approval = await report.tool_approval(
                call_id,
                tool_input=tool_input,
                invocation_message=invocation,
                title=self.fill(step.title) if step.title else None,
                options=[
                    ApprovalOption(
                        str(o["id"]),
                        self.fill(str(o.get("label", o["id"]))),
                        o.get("kind", "approve"),
                    )
                    for o in step.options
                ],
                edits=[
                    PendingEdit(
                        self.fill(str(e["path"])),
                        self.fill(str(e.get("after", ""))),
                        self.fill(str(e["before"])) if e.get("before") is not None else None,
                    )
                    for e in step.edits
                ],
            )
            self.variables["option"] = approval.selected_option_id or ""
            if not approval.approved:
                # The reducer has already cancelled the call: nothing more to report on it.
                self.variables["suggestion"] = approval.suggestion or ""
                await self.run_branch(step.on_deny)
            if approval.edited_input is not None:
                self._remember_input(approval.edited_input)
        else:
            report.tool_running(call_id, tool_input=tool_input, invocation_message=invocation)
        if step.fail is not None:
            error = self.fill(step.fail)
            past = self.fill(step.past_tense) if step.past_tense else f"`{bare}` failed"
            report.tool_complete(call_id, success=False, past_tense_message=past, error=error)
            self.variables["result"] = error
            return
        result_text = self.fill(step.result)
        past = self.fill(step.past_tense) if step.past_tense else f"Ran `{bare}`"
        content = [{"type": "text", "text": result_text}] if result_text else None
        report.tool_complete(call_id, success=True, past_tense_message=past, content=content)
        self.variables["result"] = result_text

    async def _server_tool(self, call_id: str, name: str, tool_input: str, invocation: str) -> None:
        report = self.report
        report.tool_running(call_id, tool_input=tool_input, invocation_message=invocation)
        if self.server_tools is None:
            answer = ToolAnswer("this host offers no server tools", success=False)
        else:
            answer = await self.server_tools.call(name, json.loads(tool_input))
        content = [{"type": "text", "text": answer.text}]
        if answer.success:
            report.tool_complete(
                call_id, success=True, past_tense_message=f"Ran `{name}`", content=content
            )
        else:
            report.tool_complete(
                call_id, success=False, past_tense_message=f"`{name}` failed", error=answer.text
            )
        self.variables["result"] = answer.text

    async def subagent(self, step: Subagent) -> None:
        call_id = next(self.call_ids)
        report = self.report
        description = self.fill(step.description)
        tool_input = json.dumps({"description": description, "subagent_type": step.name})
        report.tool_start(
            call_id, "Task", display_name=f"Subagent {step.name}", meta={"toolKind": "subagent"}
        )
        report.tool_input(call_id, tool_input)
        report.tool_running(
            call_id, tool_input=tool_input, invocation_message=f"Running {step.name}"
        )
        child = report.subagent(call_id, step.name, description)
        for line in step.progress:
            report.tool_progress(call_id, self.fill(line))
        inner = TurnRun(
            report=child,
            variables=dict(self.variables),
            gates=self.gates,
            call_ids=(f"{call_id}.{n}" for n in itertools.count(1)),
        )
        await inner.run(step.steps)
        result = self.fill(step.result)
        report.tool_complete(
            call_id,
            success=True,
            past_tense_message=f"{step.name} finished",
            content=[{"type": "text", "text": result}] if result else None,
        )
        self.variables["result"] = result

    def background(self, step: Background) -> None:
        session, follow_up = self.session, self.follow_up
        if session is None:
            return
        work_id = self.fill(step.id)
        session.background_work_set(
            work_id,
            label=self.fill(step.label),
            command=self.fill(step.command) if step.command else None,
        )
        text = self.fill(step.follow_up) if step.follow_up else None
        gates = self.gates

        async def finish() -> None:
            if step.gate is not None:
                await gates.wait(step.gate)
            else:
                await anyio.sleep(step.seconds or 0)
            session.background_work_removed(work_id)
            if text is not None and follow_up is not None:
                await follow_up(text, step.origin)

        session.start_soon(finish)

    async def ask(self, step: Ask) -> None:
        questions = [fill_json(dict(q), self.variables) for q in step.questions]
        message = self.fill(step.message) if step.message else None
        answer: InputAnswer = await self.report.ask(questions, message=message)
        if answer.response != "accept":
            await self.run_branch(step.on_decline)
        self.variables["answer"] = answer_text(questions, answer.answers)
        if step.say_answer:
            template = (
                step.say_answer if isinstance(step.say_answer, str) else "You answered: ${answer}"
            )
            await self.stream(Say(template))
