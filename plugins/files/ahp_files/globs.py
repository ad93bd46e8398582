"""Glob matching for resource watches, in time linear in the path and the patterns.

A glob is relative to the watch root: ``*`` and ``?`` stay within a name, ``**``
crosses names, ``**/`` is any number of leading folders, a trailing ``/**`` is
a folder and everything in it, and ``{a,b}`` is one of the literal texts listed.

Translated to a backtracking regex, ``**a**a**a…b`` against a long name of
``a``\\ s tries every way to split the name between the stars: minutes of work
for one file name, with the interpreter held all the while. Here every pattern
is a small automaton run on all its states at once (bit-parallel, one big
integer per state set), so a path costs one step per character whatever the
pattern, and sizes are bounded so a step stays cheap.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ahpcore.protocol.errors import INVALID_PARAMS, ProtocolError

#: Patterns one includes or excludes list may hold.
MAX_PATTERNS = 64
#: Characters one pattern may have.
MAX_PATTERN_LENGTH = 1024
#: Characters all patterns of a list may have once their ``{a,b}`` alternatives
#: are written out one by one, each counting one more for its end: what the
#: largest list without braces has, so braces cannot grow a list past it.
MAX_EXPANDED_LENGTH = MAX_PATTERNS * (MAX_PATTERN_LENGTH + 1)
#: States per automaton: patterns are packed into automata of about this size,
#: which keeps each step's integers small.
_CHUNK_STATES = 4096
#: Characters whose masks an automaton keeps: a mask is as long as the
#: automaton, and a list of patterns in many scripts has thousands of characters.
_CACHED_MASKS = 128
#: Stands for "no literal here" in an automaton's text: no path holds a NUL.
_NO_LITERAL = "\x00"

# Tokens of a pattern, after braces are written out.
_LITERAL = "literal"  # one character, itself
_ONE = "one"  # ?: one character that is not /
_STAR = "star"  # *: any characters but /
_GLOBSTAR = "globstar"  # **: any characters
_FOLDERS = "folders"  # **/: nothing, or anything that ends with /
_CONTENTS = "contents"  # a trailing /**: nothing, or / and anything after it

Token = tuple[str, str]
#: A token, or the literal alternatives of a ``{a,b}``.
Part = Token | tuple[str, tuple[str, ...]]


def _parts(pattern: str) -> list[Part]:
    parts: list[Part] = []
    contents_at = len(pattern) - 3 if pattern.endswith("/**") else -1
    i = 0
    while i < len(pattern):
        closing = pattern.find("}", i) if pattern[i] == "{" else -1
        if i == contents_at:
            parts.append((_CONTENTS, ""))
            i += 3
        elif pattern.startswith("**/", i):
            parts.append((_FOLDERS, ""))
            i += 3
        elif pattern.startswith("**", i):
            parts.append((_GLOBSTAR, ""))
            i += 2
        elif pattern[i] == "*":
            parts.append((_STAR, ""))
            i += 1
        elif pattern[i] == "?":
            parts.append((_ONE, ""))
            i += 1
        elif closing >= 0:
            parts.append(("braces", tuple(pattern[i + 1 : closing].split(","))))
            i = closing + 1
        else:
            parts.append((_LITERAL, pattern[i]))
            i += 1
    return parts


def _spelled_out(parts: list[Part]) -> Iterable[list[Token]]:
    """Each pattern the braces stand for, as tokens."""
    choices: list[list[list[Token]]] = []
    for kind, value in parts:
        if isinstance(value, tuple):
            choices.append([[(_LITERAL, c) for c in option] for option in value])
        else:
            choices.append([[(kind, value)]])
    for picked in itertools.product(*choices):
        yield [token for tokens in picked for token in tokens]


def _expanded_size(parts: list[Part]) -> int:
    """The states the patterns the braces stand for take, counted without writing them out:
    their tokens, and one for the end of each (so ``{,}{,}…``, all empty, counts too)."""
    count, length = 1, 0
    for _, value in parts:
        if isinstance(value, tuple):
            options = len(value)
            length = length * options + count * sum(len(o) for o in value)
            count *= options
        else:
            length += count
    return length + count


#: The masks a token's state belongs to. A ``**/`` is (name* /)*: nothing; or
#: name characters (in the state above), a / back to it, and again. That is
#: (.*/)? and needs no move of two states at once.
_MASKS_OF: dict[str, tuple[str, ...]] = {
    _LITERAL: (),
    _ONE: ("one",),
    _STAR: ("keep_name", "skip"),
    _GLOBSTAR: ("keep_any", "skip"),
    _FOLDERS: ("skip", "keep_slash", "up"),
    _CONTENTS: ("accept", "slash_moves"),
}


def _mask(states: list[int]) -> int:
    """An integer with the bits ``states`` set, in one pass (or-ing bit by bit is quadratic)."""
    if not states:
        return 0
    bitmap = bytearray(max(states) // 8 + 1)
    for state in states:
        bitmap[state >> 3] |= 1 << (state & 7)
    return int.from_bytes(bitmap, "little")


@dataclass
class _Automaton:
    """Patterns laid out one after another, a state per bit.

    State ``i`` means "the tokens before ``i`` are matched". A character moves
    a state on to ``i + 1`` or keeps it where it is; a state may also pass to
    ``i + 1`` without one (a star that matched nothing). A ``**/`` also has a
    state ``width`` bits higher for "inside a folder name", so its moves are
    shifts by ``width`` too. Every move is then a mask and a shift of the whole
    set, and passing on without characters is one addition (the carry runs up
    a row of skippable states).
    """

    width: int = 0
    start: int = 0
    accept: int = 0
    skip: int = 0
    #: The literal character each state moves on, or _NO_LITERAL.
    literals: list[str] = field(default_factory=list)
    text: str = ""
    masks: dict[str, int] = field(default_factory=dict)
    one: int = 0  # moves on any character but /
    slash_moves: int = 0  # moves on / (a trailing /**)
    keep_any: int = 0  # stays on any character
    keep_name: int = 0  # stays on any character but /
    keep_slash: int = 0  # stays on /
    up: int = 0  # goes to its folder-name state on any character but /
    down: int = 0  # comes back from it on /
    _steps: dict[bool, tuple[int, int, int, int]] = field(default_factory=dict)
    #: While patterns are added: the states of each mask, made into integers once.
    _bits: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))

    def add(self, tokens: Sequence[Token], at: int) -> None:
        """Lay ``tokens`` out from state ``at`` (the next free state is ``len(literals)``)."""
        self._bits["start"].append(at)
        i = at
        for kind, char in tokens:
            self.literals.append(char if kind == _LITERAL else _NO_LITERAL)
            for mask in _MASKS_OF[kind]:
                self._bits[mask].append(i)
            if kind == _CONTENTS:  # the folder itself, or / and anything under it
                self._bits["keep_any"].append(i + 1)
            i += 1
        self._bits["accept"].append(i)
        self.literals.append(_NO_LITERAL)

    def finish(self) -> None:
        width = self.width = len(self.literals)
        self.text = "".join(self.literals)
        self.literals = []
        for name, states in self._bits.items():
            setattr(self, name, _mask(states))
        self._bits.clear()
        self.keep_name |= self.up << width  # inside a folder name, more name
        self.down = self.up << width
        self.start = self._closed(self.start)
        self._steps = {
            True: (self.slash_moves, self.keep_any | self.keep_slash, 0, self.down),
            False: (self.one, self.keep_any | self.keep_name, self.up, 0),
        }

    def literal(self, char: str) -> int:
        """The states that move on ``char`` as a literal."""
        mask = self.masks.get(char)
        if mask is None:
            mask = 0
            if char != _NO_LITERAL:
                at = self.text.find(char)
                while at >= 0:
                    mask |= 1 << at
                    at = self.text.find(char, at + 1)
            if len(self.masks) >= _CACHED_MASKS:
                self.masks.clear()
            self.masks[char] = mask
        return mask

    def _closed(self, states: int) -> int:
        # Within each row of skippable states the carry of skip + (states & skip)
        # clears every bit from the lowest held state up and sets the state past
        # the row, so the xor marks all of them.
        skip = self.skip
        return states | ((skip + (states & skip)) ^ skip)

    def matches(self, path: str) -> bool:
        """True when ``path``, or a folder on the way to it, matches a pattern."""
        states = self.start
        accept, width, masks = self.accept, self.width, self.masks
        steps, skip = self._steps, self.skip
        for char in path:
            if char == "/" and states & accept:
                return True
            moves, keeps, up, down = steps[char == "/"]
            mask = masks.get(char)
            moves |= self.literal(char) if mask is None else mask
            held = ((states & moves) << 1) | (states & keeps)
            if up:
                held |= (states & up) << width
            if down:
                held |= (states & down) >> width
            states = held | ((skip + (held & skip)) ^ skip)  # as _closed, inlined
            if not states:
                return False
        return bool(states & accept)


class Globs:
    """A compiled includes or excludes list."""

    def __init__(self, automata: list[_Automaton]) -> None:
        self._automata = automata

    def __bool__(self) -> bool:
        return bool(self._automata)

    def __call__(self, relative: str) -> bool:
        """True when ``relative``, or a folder holding it, matches one of the patterns."""
        return any(automaton.matches(relative) for automaton in self._automata)


def _compiled(patterns: Iterable[list[Part]]) -> Globs:
    automata: list[_Automaton] = []
    current = _Automaton()
    for parts in patterns:
        for tokens in _spelled_out(parts):
            used = len(current.literals)
            if used and used + len(tokens) + 1 > _CHUNK_STATES:
                current.finish()
                automata.append(current)
                current = _Automaton()
            current.add(tokens, len(current.literals))
    if current.literals:
        current.finish()
        automata.append(current)
    return Globs(automata)


def compile_globs(patterns: Iterable[str]) -> Globs:
    """Patterns as :class:`Globs`, without checking their sizes (see :func:`checked_globs`)."""
    return _compiled(_parts(p.strip("/")) for p in patterns if p.strip("/"))


def checked_globs(value: Any, name: str) -> Globs:
    """The ``includes`` or ``excludes`` of a request (``{"items": [...]}``), compiled,
    or -32602 naming the bound it is past."""
    if value is None:
        return Globs([])
    items = value.get("items") if isinstance(value, dict) else None
    if not isinstance(items, list) or not all(isinstance(p, str) for p in items):
        raise ProtocolError(INVALID_PARAMS, f'{name} must be {{"items": [glob patterns]}}')
    if len(items) > MAX_PATTERNS:
        raise ProtocolError(
            INVALID_PARAMS,
            f"{name} holds {len(items)} patterns; a watch takes at most {MAX_PATTERNS}",
        )
    patterns: list[list[Part]] = []
    expanded = 0
    for pattern in items:
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise ProtocolError(
                INVALID_PARAMS,
                f"a pattern in {name} is {len(pattern)} characters long; "
                f"the most a pattern may have is {MAX_PATTERN_LENGTH}",
            )
        if not pattern.strip("/"):
            continue
        patterns.append(_parts(pattern.strip("/")))
        expanded += _expanded_size(patterns[-1])
        if expanded > MAX_EXPANDED_LENGTH:
            raise ProtocolError(
                INVALID_PARAMS,
                f"the {{a,b}} alternatives in {name} stand for more than "
                f"{MAX_EXPANDED_LENGTH} characters of patterns in all",
            )
    return _compiled(patterns)
