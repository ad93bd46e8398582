"""Pull requests on GitHub: ``prepare-pull-request`` and ``create-pr``.

Offered on the uncommitted changeset when the repository's ``origin`` is on
GitHub and a token is at hand (``GITHUB_TOKEN`` or ``GH_TOKEN``). The API is
``https://api.github.com`` unless ``AHP_GITHUB_API`` names another (a GitHub
Enterprise server, or a test's). Requests go through urllib in a worker
thread: two calls per pull request do not warrant an HTTP client dependency.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread

from ahp_git.repo import Repo
from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError

_REMOTE = re.compile(
    r"^(?:https://(?:[^@/]+@)?github\.com/|ssh://git@github\.com/|git@github\.com:)"
    r"(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)
PR_META = "vscode.pullRequest"


@dataclass(frozen=True)
class GitHubRepo:
    owner: str
    name: str


def token() -> str | None:
    return os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN") or None


def api_base() -> str:
    return os.environ.get("AHP_GITHUB_API", "https://api.github.com").rstrip("/")


async def github_of(repo: Repo) -> GitHubRepo | None:
    """The GitHub repository ``origin`` points at, or None."""
    # The URL as configured: ``remote get-url`` would answer it rewritten by insteadOf.
    done = await repo.run("config", "--get", "remote.origin.url", check=False)
    if done.returncode != 0:
        return None
    match = _REMOTE.match(done.stdout.decode("utf-8", "replace").strip())
    return GitHubRepo(match["owner"], match["repo"]) if match else None


async def _api(method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
    # With http.client and ssl under them: loaded when GitHub is first asked.
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        api_base() + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {token()}",
            "Content-Type": "application/json",
            "User-Agent": "ahp-git",
        },
    )

    def call() -> Any:
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            said = exc.read().decode("utf-8", "replace")
            raise ProtocolError(
                INVALID_PARAMS, f"GitHub answered {exc.code} to {method} {path}: {said}"
            ) from None
        except urllib.error.URLError as exc:
            raise ProtocolError(INVALID_PARAMS, f"cannot reach GitHub: {exc.reason}") from None

    return await anyio.to_thread.run_sync(call)


async def _branches(repo: Repo) -> tuple[str, str]:
    """(the branch the tree is on, the base it merges into)."""
    head = await repo.run("symbolic-ref", "-q", "--short", "HEAD", check=False)
    branch = head.stdout.decode().strip()
    if not branch:
        raise ProtocolError(INVALID_PARAMS, "the tree is on no branch (detached HEAD)")
    base = await repo.run("config", "--get", f"branch.{branch}.vscode-merge-base", check=False)
    named = base.stdout.decode().strip().removeprefix("origin/")
    if named:
        return branch, named
    default = await repo.run(
        "symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD", check=False
    )
    return branch, default.stdout.decode().strip().removeprefix("origin/") or "main"


async def _open_request(hub: GitHubRepo, branch: str) -> Mapping[str, Any] | None:
    found = await _api(
        "GET", f"/repos/{hub.owner}/{hub.name}/pulls?state=open&head={hub.owner}:{branch}"
    )
    return found[0] if isinstance(found, list) and found else None


async def prepare(repo: Repo, hub: GitHubRepo, context: Mapping[str, Any]) -> dict[str, Any]:
    branch, base = await _branches(repo)
    log = await repo.run("log", "--format=- %s", f"origin/{base}..HEAD", check=False)
    if log.returncode != 0:
        log = await repo.run("log", "--format=- %s", "-20", "HEAD")
    title = str(context.get("title") or "").strip() or branch
    form = {
        "title": title,
        "body": log.stdout.decode("utf-8", "replace").strip(),
        "headBranch": branch,
        "baseBranch": base,
        "owner": hub.owner,
        "repo": hub.name,
    }
    data = base64.b64encode(json.dumps(form).encode()).decode()
    return {
        "message": f"A pull request from {branch} into {base}",
        "followUp": {"content": {"uri": f"data:application/json;base64,{data}"}},
    }


async def create(
    repo: Repo, hub: GitHubRepo, meta: Mapping[str, Any], context: Mapping[str, Any]
) -> dict[str, Any]:
    given = meta.get(PR_META)
    form: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    branch, base = await _branches(repo)
    title = str(form.get("title") or context.get("title") or "").strip()
    if not title:
        raise ProtocolError(
            INVALID_PARAMS, f"no title: the session has none and _meta['{PR_META}'].title is empty"
        )
    if branch == base:
        # The work goes on a branch of its own, not onto the base.
        branch = re.sub(r"[^A-Za-z0-9._/-]+", "-", title.lower()).strip("-")[:40] or "ahp-changes"
        await repo.run("switch", "-q", "-c", branch, hooks=True)
    status = await repo.status()
    if status.entries:
        await repo.run("add", "-A", "--", repo.pathspec)
        await repo.run("commit", "-q", "-m", title, hooks=True)
    await repo.run("push", "-q", "-u", "origin", f"HEAD:refs/heads/{branch}", hooks=True)
    existing = await _open_request(hub, branch)
    if existing is not None:
        url = existing.get("html_url", "")
        return {"message": f"The branch already has {url}", "followUp": _link(url)}
    made = await _api(
        "POST",
        f"/repos/{hub.owner}/{hub.name}/pulls",
        {
            "title": title,
            "head": branch,
            "base": str(form.get("base") or base),
            "body": str(form.get("body") or ""),
            "draft": bool(form.get("draft", False)),
        },
    )
    url = made.get("html_url", "") if isinstance(made, Mapping) else ""
    return {"message": f"Opened {url}", "followUp": _link(url)}


def _link(url: str) -> dict[str, Any]:
    return {"content": {"uri": url}, "external": True}


__all__ = ["GitHubRepo", "create", "github_of", "prepare", "token"]
