"""Pull requests against a local stand-in for the GitHub API, pushing to a local bare repository."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from git_harness import SESSION, Repo, open_session, subscribe

pytestmark = pytest.mark.anyio

UNCOMMITTED = f"{SESSION}/changeset/uncommitted"


class FakeGitHub(BaseHTTPRequestHandler):
    pulls: list[dict[str, Any]]
    seen: list[tuple[str, str, str | None]]

    def _answer(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization")))
        self._answer(200, [p for p in self.pulls if p["head"]["ref"] in self.path])

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("POST", self.path, self.headers.get("Authorization")))
        made = {
            "number": len(self.pulls) + 1,
            "html_url": f"https://github.com/octo/demo/pull/{len(self.pulls) + 1}",
            "head": {"ref": body["head"]},
            "base": {"ref": body["base"]},
            "title": body["title"],
        }
        self.pulls.append(made)
        self._answer(201, made)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeGitHub]]:
    handler = type("Handler", (FakeGitHub,), {"pulls": [], "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AHP_GITHUB_API", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("GITHUB_TOKEN", "lent-token")
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def on_github(repo: Repo, tmp_path: Path) -> Path:
    remote = tmp_path / "remote.git"
    repo.git("init", "-q", "--bare", str(remote))
    repo.git("remote", "add", "origin", "https://github.com/octo/demo.git")
    repo.git("config", f"url.{remote}.insteadOf", "https://github.com/octo/demo.git")
    repo.write("a.txt", "a\n")
    repo.commit()
    repo.git("push", "-q", "origin", "main")
    repo.git("fetch", "-q", "origin")
    return remote


async def test_prepare_and_create_a_pull_request(git_host, repo: Repo, github, tmp_path) -> None:
    remote = on_github(repo, tmp_path)
    repo.write("a.txt", "changed by the agent\n")
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        state = await subscribe(client, "uncommitted")
        ops = {op["id"]: op for op in state["operations"]}
        assert {"prepare-pull-request", "create-pr"} <= set(ops)
        assert "confirmation" in ops["create-pr"]

        prepared = await client.request(
            "invokeChangesetOperation",
            {"channel": UNCOMMITTED, "operationId": "prepare-pull-request"},
        )
        uri = prepared["followUp"]["content"]["uri"]
        assert uri.startswith("data:application/json;base64,")
        form = json.loads(base64.b64decode(uri.split(",", 1)[1]))
        assert form["baseBranch"] == "main" and form["headBranch"] == "main"

        made = await client.request(
            "invokeChangesetOperation",
            {
                "channel": UNCOMMITTED,
                "operationId": "create-pr",
                "_meta": {"vscode.pullRequest": {"title": "Agent work", "body": "Why"}},
            },
        )
        assert made["followUp"] == {
            "content": {"uri": "https://github.com/octo/demo/pull/1"},
            "external": True,
        }
        # On the base branch: the work went onto a branch of its own, committed and pushed.
        branch = repo.git("branch", "--show-current").strip().decode()
        assert branch == "agent-work"
        assert repo.git("status", "--porcelain") == b""
        pushed = Repo(remote).git("log", "-1", "--format=%s", "agent-work").strip()
        assert pushed == b"Agent work"
        post = [s for s in github.seen if s[0] == "POST"]
        assert post == [("POST", "/repos/octo/demo/pulls", "Bearer lent-token")]
        assert github.pulls[0]["base"]["ref"] == "main"

        # Asked again, the branch's open request is the answer.
        again = await client.request(
            "invokeChangesetOperation",
            {
                "channel": UNCOMMITTED,
                "operationId": "create-pr",
                "_meta": {"vscode.pullRequest": {"title": "Agent work"}},
            },
        )
        assert "already has" in again["message"] and len(github.pulls) == 1


async def test_no_pull_requests_without_github_or_a_token(
    git_host, repo: Repo, tmp_path, monkeypatch
) -> None:
    on_github(repo, tmp_path)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GH_TOKEN", raising=False)
    async with git_host() as (running, _):
        client = await running.connect()
        await client.initialize()
        await open_session(client, repo)
        ops = {op["id"] for op in (await subscribe(client, "uncommitted"))["operations"]}
        assert "create-pr" not in ops and "prepare-pull-request" not in ops
