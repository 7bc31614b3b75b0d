"""A stdio MCP server's stderr: a pipe whose last bytes are kept, read back when the server fails.

Not a file: a server may write without end (a debug log in a loop), and a file would keep all of it. A thread
reads the pipe as the server writes and keeps the last ``_KEPT_BYTES``; it ends when every process holding the
pipe (the server, its children) has ended.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import TextIO

from dagmagic._secrets import mask_secrets

__all__ = ["StderrTail"]

_KEPT_BYTES = 256 * 1024
_READ_BYTES = 65536
_LINES = 12
_CHARS = 2000


class StderrTail:
    """Give ``file`` to the server as its stderr, ``closed_here()`` once it started, ``text()`` when it failed."""

    def __init__(self) -> None:
        read, write = os.pipe()
        self.file: TextIO = os.fdopen(write, "w", encoding="utf-8", errors="replace")
        """The pipe's write end, for the server's process."""
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, args=(read,), name="dagmagic:mcp-stderr", daemon=True)
        self._reader.start()

    def _read(self, descriptor: int) -> None:
        with open(descriptor, "rb", buffering=0) as pipe:
            while chunk := pipe.read(_READ_BYTES):
                with self._lock:
                    self._kept += chunk
                    del self._kept[: max(0, len(self._kept) - _KEPT_BYTES)]

    @property
    def kept(self) -> int:
        """Bytes held now (at most ``_KEPT_BYTES``)."""
        with self._lock:
            return len(self._kept)

    def closed_here(self) -> None:
        """The server holds its own copy now (or never will): ours would keep the pipe open after it ended."""
        if not self.file.closed:
            self.file.close()

    async def settled(self, wait: float) -> None:
        """Wait up to ``wait`` seconds for the end of what the server wrote (once it ended), off the loop."""
        self.closed_here()
        if self._reader.is_alive():
            await asyncio.to_thread(self._reader.join, wait)

    def text(self) -> str:
        """Its last non-blank lines (a few, a key in them masked)."""
        with self._lock:
            text = self._kept.decode("utf-8", errors="replace")
        lines = [line for line in text.strip().splitlines() if line.strip()][-_LINES:]
        return mask_secrets("\n".join(lines)[-_CHARS:])
