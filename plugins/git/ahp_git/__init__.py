"""Changesets of what agents changed, and their operations, read from git."""

from ahp_git.port import GitChanges

__all__ = ["GitChanges"]
