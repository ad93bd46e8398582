"""Text between the CLI's pseudo-XML tags, found in linear time.

A lazy ``<tag>(.*?)</tag>`` regex scans to the end of the text from every opening
tag that has no closing one, so a prompt holding thousands of ``<tag>`` took
seconds on the event loop. The first closing tag after the first opening one is
the same answer, found in one pass.
"""

from __future__ import annotations

from collections.abc import Iterator


def every_between(text: str, tag: str) -> Iterator[str]:
    """What stands between each ``<tag>`` and the next ``</tag>``, left to right."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    at = 0
    while (start := text.find(opening, at)) >= 0:
        start += len(opening)
        end = text.find(closing, start)
        if end < 0:
            return  # no later opening tag has a closing one either
        yield text[start:end]
        at = end + len(closing)


def between(text: str, tag: str) -> str | None:
    """What stands between the first ``<tag>`` and the ``</tag>`` after it, or None."""
    return next(every_between(text, tag), None)
