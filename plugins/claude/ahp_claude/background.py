"""Work the CLI runs in the background, reported as the chat's background work.

The CLI says what each task is when it starts (``task_started``: its type, the
tool call that started it, whether it runs in the background) and lists the
whole live background set whenever that set changes
(``background_tasks_changed``, which names no tool call and may come first).
A task ends with ``task_notification`` or a terminal ``task_updated``. A task
is listed once both say so, and again only when what it is changes; only
shells and subagents are listed, the kinds the protocol has.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ahp_claude import sdk
from ahp_claude.tagged import every_between
from ahpcore.ports.backend import SessionReporter

#: The CLI's task types the protocol has a kind for.
KINDS = {"local_bash": "shell", "local_agent": "subagent"}
#: Statuses after which a task runs no more (``task_updated`` says ``killed``).
TERMINAL = frozenset({"completed", "failed", "stopped", "killed"})
#: The origin of the entry where the CLI tells itself that background work ended.
NOTIFICATION = "task-notification"
#: How much of a transcript's end is read for the entry a turn of the CLI's began at.
TAIL_BYTES = 1 << 20
SUBTYPES = frozenset(
    {
        "task_started",
        "task_updated",
        "task_progress",
        "task_notification",
        "background_tasks_changed",
    }
)
#: What of a ``task_progress``'s usage goes into the work entry's ``_meta``.
PROGRESS_USAGE = {"tool_uses": "ahp.toolUses", "total_tokens": "ahp.totalTokens"}


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def is_notification(entry: Mapping[str, Any]) -> bool:
    origin = entry.get("origin")
    return isinstance(origin, Mapping) and origin.get("kind") == NOTIFICATION


def notification_message(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The message of the turn a transcript entry began, when the CLI wrote it to say
    background work ended: the same message the live turn was started with."""
    if not is_notification(entry):
        return None
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    said = [line.strip() for line in every_between(str(content or ""), "summary")]
    origin = "systemNotification" if said else "agent"
    return {"text": "\n".join(said), "origin": {"kind": origin}}


def last_notification(path: Path) -> str | None:
    """The uuid of the latest entry saying background work ended (blocking: a file read)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - TAIL_BYTES))
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if NOTIFICATION.encode() not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # cut by the seek, or still being written
        if isinstance(entry, dict) and is_notification(entry) and entry.get("uuid"):
            return str(entry["uuid"])
    return None


@dataclass
class Task:
    kind: str
    label: str
    call_id: str | None
    started_at: str
    #: A shell's command line, read off the call that started it while that call is known.
    command: str | None = None
    #: How far it got, as the CLI last said (``task_progress``): the entry's ``_meta``.
    progress: dict[str, Any] | None = None


class BackgroundTasks:
    """The background tasks of one CLI, told to the chat's session reporter."""

    def __init__(
        self,
        report: SessionReporter | None,
        *,
        command_of: Callable[[str], str | None],
        open_subagent: Callable[[str], None],
        subagent_ended: Callable[[str, bool], None] = lambda call_id, success: None,
        progress: Callable[[str, str], None] = lambda call_id, line: None,
    ) -> None:
        self.report = report
        self.command_of = command_of
        self.open_subagent = open_subagent
        self.subagent_ended = subagent_ended
        self.progress = progress
        self._tasks: dict[str, Task] = {}
        #: Tasks that stopped running, until the CLI says how they ended.
        self._stopped: dict[str, Task] = {}
        self._live: set[str] = set()
        #: Work id -> what the chat was told it is.
        self._said: dict[str, tuple[str, str | None, str | None, Any]] = {}
        #: What the CLI said of tasks that ended since a turn last began.
        self._summaries: list[str] = []
        #: Call id -> whether the CLI runs the subagent it started in the background.
        self._backgrounded: dict[str, bool] = {}

    def on_message(self, message: Any) -> bool:
        """Take a task lifecycle message; False for anything else."""
        if not isinstance(message, sdk.SystemMessage) or message.subtype not in SUBTYPES:
            return False
        data: Mapping[str, Any] = message.data
        task_id = str(data.get("task_id") or "")
        if message.subtype == "task_started" and task_id:
            kind = KINDS.get(str(data.get("task_type")))
            if kind is not None:
                call = str(data["tool_use_id"]) if data.get("tool_use_id") else None
                if kind == "subagent" and call:
                    self._backgrounded[call] = bool(data.get("is_backgrounded"))
                label = str(data.get("description") or kind)
                command = self.command_of(call) if kind == "shell" and call else None
                self._tasks[task_id] = Task(kind, label, call, now_iso(), command)
            if data.get("is_backgrounded"):
                self._live.add(task_id)
            self._tell(task_id)
        elif message.subtype == "background_tasks_changed":
            live = {str(t.get("task_id")) for t in data.get("tasks") or () if t.get("task_id")}
            for gone in self._live - live:
                self._end(gone)
            self._live = live
            for task_id in live:
                self._tell(task_id)
        elif message.subtype == "task_progress":
            self._progressed(task_id, data)
        elif message.subtype == "task_notification":
            self._summaries.append(self._ended(task_id, data))
            self._finished(task_id, str(data.get("status") or ""))
            self._end(task_id)
        elif message.subtype == "task_updated":
            patch = data.get("patch")
            if isinstance(patch, Mapping) and patch.get("status") in TERMINAL:
                self._finished(task_id, str(patch["status"]))
                self._end(task_id)
        return True

    def busy(self) -> bool:
        """Work runs in the background, or ended and the CLI has yet to answer it."""
        return bool(self._live or self._summaries)

    def backgrounded(self, call_id: str) -> bool | None:
        """Whether the CLI said it runs the subagent of ``call_id`` in the background (it may
        whatever the call asked for); None while it has said nothing of that call."""
        return self._backgrounded.get(call_id)

    def take_summaries(self) -> list[str]:
        """What ended since a turn last began, said once: the text of a turn the CLI starts."""
        taken, self._summaries = self._summaries, []
        return taken

    def _ended(self, task_id: str, data: Mapping[str, Any]) -> str:
        """A line saying which task ended how, as the transcript keeps it.

        A subagent's summary here is its whole report; the transcript says the line below.
        """
        summary = str(data.get("summary") or "").strip()
        task = self._tasks.get(task_id) or self._stopped.pop(task_id, None)
        if summary and not data.get("summary_is_report"):
            return summary
        status = str(data.get("status") or "stopped")
        named = f' "{task.label}"' if task is not None else ""
        return f"Agent{named} {'finished' if status == 'completed' else status}"

    def _progressed(self, task_id: str, data: Mapping[str, Any]) -> None:
        """The CLI said what a task does now: on its call (or chat), and on its work entry."""
        line = str(data.get("description") or "").strip()
        task = self._tasks.get(task_id)
        call = str(data.get("tool_use_id") or "") or (task.call_id if task else None)
        if line and call:
            self.progress(call, line)
        if task is None:
            return
        usage = data.get("usage")
        usage = usage if isinstance(usage, Mapping) else {}
        progress: dict[str, Any] = {"ahp.progress": line} if line else {}
        for key, name in PROGRESS_USAGE.items():
            if isinstance(usage.get(key), int):
                progress[name] = usage[key]
        if data.get("last_tool_name"):
            progress["ahp.lastToolName"] = str(data["last_tool_name"])
        task.progress = progress or None
        self._tell(task_id)

    def _finished(self, task_id: str, status: str) -> None:
        """A subagent's task ended: its child chat's turn ends (said once, by the first word)."""
        task = self._tasks.get(task_id) or self._stopped.get(task_id)
        if task is not None and task.kind == "subagent" and task.call_id:
            self.subagent_ended(task.call_id, status == "completed")

    def _tell(self, task_id: str) -> None:
        task = self._tasks.get(task_id)
        if task is None or task_id not in self._live or self.report is None:
            return
        work_id = f"{task.kind}:{task_id}"
        command = task.command
        call_id = task.call_id if task.kind == "subagent" else None
        what = (task.label, command, call_id, task.progress)
        if self._said.get(work_id) == what:
            return
        if call_id is not None:
            self.open_subagent(call_id)  # the worker's chat exists before anything links it
        self._said[work_id] = what
        self.report.background_work_set(
            work_id,
            label=task.label,
            command=command,
            subagent_call_id=call_id,
            started_at=task.started_at,
            meta=task.progress,
        )

    def _end(self, task_id: str) -> None:
        self._live.discard(task_id)
        task = self._tasks.pop(task_id, None)
        if task is None:
            return
        if len(self._stopped) > 100:  # some end without a notification: keep the last few
            self._stopped.clear()
        self._stopped[task_id] = task
        if task.call_id is not None:
            self._backgrounded.pop(task.call_id, None)
        work_id = f"{task.kind}:{task_id}"
        if self._said.pop(work_id, None) is not None and self.report is not None:
            self.report.background_work_removed(work_id)
