"""The object ids this plugin put into before-side URIs, per repository.

An ``ahp-git:`` URI names a path and an object id, and git would read any
path of any repository at any id it can resolve. ``resourceRead`` of one is
answered only when the id was issued here, in a changeset row, for the
repository the path is in, and one of the sessions it was issued to is live.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

#: Ids remembered per repository; the oldest go first. Reading a changeset again
#: issues its ids again, so only rows nobody has read for that long go stale.
PER_REPOSITORY = 4096


@dataclass
class _Issued:
    #: The session directories the ids were issued to.
    directories: set[str] = field(default_factory=set)
    refs: OrderedDict[str, None] = field(default_factory=OrderedDict)


class IssuedRefs:
    def __init__(self, limit: int = PER_REPOSITORY) -> None:
        self._limit = limit
        self._by_top: dict[bytes, _Issued] = {}

    def add(self, top: bytes, directory: str, refs: Iterable[str | None]) -> None:
        """``refs`` went out in rows of the session in ``directory``, of the repository at ``top``."""
        held = self._by_top.setdefault(top, _Issued())
        held.directories.add(directory)
        for ref in refs:
            if ref is None:
                continue
            held.refs[ref] = None
            held.refs.move_to_end(ref)
        while len(held.refs) > self._limit:
            held.refs.popitem(last=False)

    def top_for(self, path: bytes, ref: str, live: Collection[str]) -> bytes | None:
        """The top level of the repository ``path`` is in, when ``ref`` was issued for that
        repository to a session whose directory is in ``live``; None otherwise."""
        found: bytes | None = None
        for top, held in self._by_top.items():
            if not path.startswith(top + b"/") or ref not in held.refs:
                continue
            if held.directories.isdisjoint(live):
                continue
            if found is None or len(top) > len(found):  # a nested repository is the nearer one
                found = top
        return found
