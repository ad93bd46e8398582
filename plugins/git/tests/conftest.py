"""Fixtures for the git plugin's tests (helpers live in git_harness)."""

from git_harness import git_host, repo

__all__ = ["git_host", "repo"]
