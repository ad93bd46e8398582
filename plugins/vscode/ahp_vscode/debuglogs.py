"""The window's "collect debug logs": this host's log files, bundled and read back in chunks.

``ahp serve`` keeps a log file in its state folder (``logs/ahp.log``), or where
``--log-file`` says: the bundle is that file and its rotations, newest first,
with every line redacted as the log itself is. An artifact lives in the
plugin's owner-only folder for ten minutes, and only a file the plugin made and
still holds can be read back.
"""

from __future__ import annotations

import base64
import logging
import logging.handlers
import os
import shutil
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import anyio.to_thread

from ahpcore.api import file_uri, path_of_file_uri, private_folder, redact
from ahpcore.protocol.errors import INVALID_PARAMS, NOT_FOUND, ProtocolError

COLLECT = "vscode/collectAgentHostDebugLogs"
READ = "vscode/readAgentHostDebugLogsChunk"

#: What the window accepts of one chunk, decoded.
CHUNK_BYTES = 1 << 20
#: A bundle holds at most this much of the log (the newest); older files are left out.
MAX_BYTES = 64 << 20
#: How long an artifact can be read back.
LIFETIME_SECONDS = 600.0


def log_files() -> list[Path]:
    """The host's log file and its rotations, newest first; empty when it logs to no file."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            base = Path(handler.baseFilename)
            backups = getattr(handler, "backupCount", 0)
            found = [base] + [Path(f"{base}.{n}") for n in range(1, backups + 1)]
            # A handler writing to /dev/null (a test runner's) is no log file.
            if base.is_file():
                return [path for path in found if path.is_file()]
    return []


class DebugLogs:
    def __init__(self, folder: Path) -> None:
        self._folder = folder
        # Artifacts of an earlier run cannot be read back: they go.
        shutil.rmtree(folder, ignore_errors=True)
        #: Artifact path -> when it expires.
        self._held: dict[str, float] = {}

    def _expire(self) -> None:
        now = time.monotonic()
        for path, until in list(self._held.items()):
            if until <= now:
                del self._held[path]
                target = Path(path)
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)

    async def collect(self, client: Any, params: dict[str, Any]) -> dict[str, Any]:
        kind = params.get("kind")
        if kind not in ("archive", "directory"):
            raise ProtocolError(
                INVALID_PARAMS, f"{COLLECT}: params.kind must be 'archive' or 'directory'"
            )
        for key in ("session", "chat"):
            if params.get(key) is not None and not isinstance(params[key], str):
                raise ProtocolError(INVALID_PARAMS, f"{COLLECT}: params.{key} must be a string")
        self._expire()
        files = log_files()
        if not files:
            raise ProtocolError(
                NOT_FOUND,
                f"{COLLECT}: this host writes no log file (ahp serve keeps one in its state "
                "folder, or where --log-file says)",
            )
        return await anyio.to_thread.run_sync(self._bundle, files, kind)

    def _bundle(self, files: list[Path], kind: str) -> dict[str, Any]:
        private_folder(self._folder)
        stage = private_folder(self._folder / uuid.uuid4().hex)
        entries: list[dict[str, Any]] = []
        budget = MAX_BYTES
        for source in files:
            if budget <= 0:
                break
            try:
                text = source.read_bytes().decode("utf-8", "replace")
            except OSError:
                continue  # rotated away meanwhile
            data = redact(text).encode("utf-8")
            if len(data) > budget:
                data = data[len(data) - budget :]  # the newest lines of the oldest file kept
            budget -= len(data)
            target = stage / source.name
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            entries.append({"path": source.name, "size": len(data)})
        uncompressed = sum(entry["size"] for entry in entries)
        until = time.monotonic() + LIFETIME_SECONDS
        if kind == "directory":
            self._held[str(stage)] = until
            resource, size = stage, uncompressed
        else:
            resource = self._folder / f"{stage.name}.zip"
            fd = os.open(resource, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle, zipfile.ZipFile(handle, "w") as bundle:
                for entry in entries:
                    bundle.write(stage / entry["path"], entry["path"], zipfile.ZIP_DEFLATED)
            shutil.rmtree(stage, ignore_errors=True)
            self._held[str(resource)] = until
            size = resource.stat().st_size
        return {
            "kind": kind,
            "resource": file_uri(str(resource)),
            "providerLogsIncluded": False,
            "size": size,
            "uncompressedSize": uncompressed,
            "entries": entries,
        }

    async def read(self, client: Any, params: dict[str, Any]) -> dict[str, Any]:
        resource, position = params.get("resource"), params.get("position")
        if not isinstance(resource, str):
            raise ProtocolError(INVALID_PARAMS, f"{READ}: params.resource must be a file URI")
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise ProtocolError(
                INVALID_PARAMS, f"{READ}: params.position must be a non-negative integer"
            )
        self._expire()
        path = path_of_file_uri(resource)
        if path is None or not self._holds(path):
            raise ProtocolError(
                NOT_FOUND, f"{READ}: Unknown or expired Agent Host debug-log artifact: {resource}"
            )
        return await anyio.to_thread.run_sync(self._chunk, path, position)

    def _holds(self, path: str) -> bool:
        """A file this plugin made and holds: the archive itself, or one file of a directory."""
        if os.path.normpath(path) != path or os.path.islink(path) or not os.path.isfile(path):
            return False
        return path in self._held or (
            os.path.dirname(path) in self._held and os.path.basename(path) not in ("", ".", "..")
        )

    @staticmethod
    def _chunk(path: str, position: int) -> dict[str, Any]:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(position)
            data = handle.read(CHUNK_BYTES)
        return {
            "data": base64.b64encode(data).decode("ascii"),
            "eof": position + len(data) >= size,
        }
