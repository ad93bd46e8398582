"""ahp-git's trigger: a commit landing on the branch of a session's folder makes a run."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from automations_harness import CATALOGUE, create, definition, entry_of, host, until

import ahp_git.plugin as git_plugin
from ahpcore.api import file_uri

pytestmark = pytest.mark.anyio

AUTOMATION = "ahp-automation:/on-commit"


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@example.com", *args],
        cwd=folder,
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout.strip()


def commit(folder: Path, name: str) -> str:
    (folder / name).write_text(name)
    git(folder, "add", name)
    git(folder, "commit", "-q", "-m", f"add {name}")
    return git(folder, "rev-parse", "HEAD")


async def test_a_commit_on_the_branch_runs_the_automation_once(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    git(folder, "init", "-q", "-b", "main")
    commit(folder, "a.txt")
    async with host(tmp_path / "state", extra=(("git", git_plugin),)) as (running, _, _):
        client = await running.connect()
        await client.initialize(subscriptions=["ahp-root://", CATALOGUE])
        offered = await client.request("listAutomationTriggerDefinitions", {})
        assert "ahp.git" in [item["type"] for item in offered["items"]]
        trigger = {
            "id": "landed",
            "kind": "event",
            "type": "ahp.git",
            "title": "?",
            "events": [{"id": "commitLanded", "title": "?"}],
        }
        body = definition(
            session={"provider": "scripted", "workingDirectories": [file_uri(str(folder))]},
            triggers=[trigger],
        )
        await create(client, body, AUTOMATION)

        # A person's session in the folder; watching its uncommitted changes is what
        # makes the host read the folder again when something moves in .git.
        session = f"scripted:/{uuid.uuid4()}"
        await client.request(
            "createSession",
            {
                "channel": session,
                "provider": "scripted",
                "workingDirectories": [file_uri(str(folder))],
            },
        )
        await client.request("subscribe", {"channel": session})
        await client.request("subscribe", {"channel": f"{session}/changeset/uncommitted"})
        await anyio.sleep(0.3)
        assert (await entry_of(client, AUTOMATION))["runs"] == []

        landed = commit(folder, "b.txt")

        async def one_done() -> list[dict[str, Any]] | None:
            runs = (await entry_of(client, AUTOMATION))["runs"]
            return runs if runs and runs[0]["lifecycle"]["status"] == "completed" else None

        runs = await until(one_done, timeout=20)
        assert runs[0]["origin"]["event"] == {
            "type": "ahp.git",
            "id": "commitLanded",
            "branch": "main",
            "commit": landed,
        }
        # Switching to another branch is no commit landing, nor is the run's own session.
        git(folder, "checkout", "-q", "-b", "other", "HEAD~1")
        await anyio.sleep(1.0)
        assert len((await entry_of(client, AUTOMATION))["runs"]) == 1


async def test_a_commit_with_no_session_open_in_the_folder_runs_it(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    git(folder, "init", "-q", "-b", "main")
    commit(folder, "a.txt")
    async with host(tmp_path / "state", extra=(("git", git_plugin),)) as (running, _, _):
        client = await running.connect()
        await client.initialize(subscriptions=[CATALOGUE])
        trigger = {
            "id": "landed",
            "kind": "event",
            "type": "ahp.git",
            "title": "?",
            "events": [{"id": "commitLanded", "title": "?"}],
        }
        body = definition(
            session={"provider": "scripted", "workingDirectories": [file_uri(str(folder))]},
            triggers=[trigger],
        )
        await create(client, body, AUTOMATION)
        # The host reads the folder once before anything lands: that reading is no landing.
        await anyio.sleep(2.5)
        assert (await entry_of(client, AUTOMATION))["runs"] == []
        assert running.host.sessions is not None and not running.host.sessions.sessions

        landed = commit(folder, "b.txt")

        async def ran() -> list[dict[str, Any]] | None:
            runs = (await entry_of(client, AUTOMATION))["runs"]
            return runs or None

        runs = await until(ran, timeout=15)
        assert runs[0]["origin"]["event"] == {
            "type": "ahp.git",
            "id": "commitLanded",
            "branch": "main",
            "commit": landed,
        }
