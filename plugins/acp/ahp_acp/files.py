"""``fs/read_text_file`` and ``fs/write_text_file``, inside the session's folders only.

A path is resolved first (``..`` and every symlink, the file's own included),
then it must lie inside one of the session's working directories, resolved the
same way: a link inside the folder that points out of it is refused like the
path it points to.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from acp import RequestError


def inside(path: str, roots: Sequence[str]) -> Path:
    """``path`` resolved, or a ``RequestError`` saying why the agent may not touch it."""
    if not os.path.isabs(path):
        raise RequestError.invalid_params(
            {"path": path, "reason": "ACP file paths are absolute; this one is not"}
        )
    resolved = os.path.realpath(path)
    for root in roots:
        real_root = os.path.realpath(root)
        if resolved == real_root or resolved.startswith(real_root.rstrip(os.sep) + os.sep):
            return Path(resolved)
    raise RequestError.invalid_params(
        {
            "path": path,
            "reason": "outside the session's working directories "
            f"({', '.join(roots) or 'none'}); this host serves files there only",
        }
    )


def read_text(path: Path, line: int | None, limit: int | None) -> str:
    """The file's text, from 1-based ``line`` for ``limit`` lines when given (blocking)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RequestError.resource_not_found(str(path)) from None
    except IsADirectoryError:
        raise RequestError.invalid_params({"path": str(path), "reason": "a directory"}) from None
    except UnicodeDecodeError:
        raise RequestError.invalid_params({"path": str(path), "reason": "not UTF-8 text"}) from None
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = len(lines) if limit is None else start + max(limit, 0)
    return "".join(lines[start:end])


def write_text(path: Path, content: str) -> None:
    """Write ``content`` whole (blocking); missing folders inside the root are made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise RequestError.invalid_params({"path": str(path), "reason": "a directory"})
    path.write_text(content, encoding="utf-8")
