"""The response cache (``DAG_CACHE``): a request answered once is answered again from a SQLite file, for any
backend, with no provider call and no cost.

A request is known by the sha256 of the canonical JSON of what decides its answer: the model asked (the entry's
target), the messages, tools, tool choice, response format and temperature. Not by its ``options`` (the endpoint
and key it goes to), nor by whether it is streamed (a streamed request and a whole one share an answer), nor by
its purpose, round or step. Only good answers are kept: not an error, not a stream that failed or was cancelled,
not an empty reply. The file holds the hash and the reply, never the request; and a reply that ``mask_secrets``
would change (it shows a key, or a name shaped like one: ``api_base_url``) is not kept at all, since masked it
would be another answer (code whose names were masked no longer runs).

``ResponseCache`` is the file, ``CachingBackend`` the backend that answers from it, ``cached_registry`` what a
session applies to a run's models.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

from dagmagic._secrets import mask_secrets
from dagmagic.errors import ConfigurationError
from dagmagic.llm.protocol import ChatBackend, ChatRequest, ChatResponse, StreamChunk, response_pieces
from dagmagic.llm.registry import ModelEntry, ModelRegistry
from dagmagic.llm.wrapping import WrappingBackend
from dagmagic.settings import DagSettings

__all__ = ["CachingBackend", "ResponseCache", "cached_registry", "request_key"]

log = logging.getLogger("dagmagic")

_APPLICATION_ID = 0x44414743  # "DAGC": marks the file as a dagmagic response cache
_SCHEMA_VERSION = 1
_KEYED_FIELDS = ("messages", "tools", "tool_choice", "response_format", "temperature", "max_tokens")
_WAIT_SECONDS = 10.0
"""How long a write waits for another process writing the same file."""


def request_key(request: ChatRequest) -> str:
    """The sha256 (hex) of the canonical JSON of what decides ``request``'s answer."""
    keyed = {"model": request.model, **{name: getattr(request, name) for name in _KEYED_FIELDS}}
    canonical = json.dumps(keyed, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class ResponseCache:
    """Replies by request key, in a SQLite file (WAL: any number of processes read and write it at once).

    Lookups read on the caller's thread (a read under WAL waits for no writer, and takes tens of microseconds);
    ``put`` may wait for another process's write, so ``CachingBackend`` calls it in a worker thread.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._reader: sqlite3.Connection | None = _connect(self.path)
        self._writer: sqlite3.Connection | None = _connect(self.path)
        self._reading = threading.Lock()
        self._writing = threading.Lock()
        self._inode = self.path.stat().st_ino

    _opened: ClassVar[dict[Path, ResponseCache]] = {}
    _opening: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ResponseCache:
        """The cache at ``path``, opened once per process (every run of every session shares it), and again when
        the file was deleted or replaced meanwhile (the way to empty it; a run still going on keeps the one it
        had).
        """
        where = Path(path).absolute()
        with cls._opening:
            cache = cls._opened.get(where)
            if cache is None or cache.closed or not cache._same_file():
                cache = cls._opened[where] = cls(where)
            return cache

    def _same_file(self) -> bool:
        try:
            return self.path.stat().st_ino == self._inode
        except OSError:
            return False

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._reader is None

    def get(self, key: str) -> ChatResponse | None:
        """The reply stored under ``key``; None when there is none, or it cannot be read (the call is made)."""
        with self._reading:
            db = self._open(self._reader)
            try:
                row = db.execute("SELECT response FROM responses WHERE key = ?", (key,)).fetchone()
                return None if row is None else ChatResponse.model_validate_json(row[0])
            except (sqlite3.Error, ValueError) as exc:  # a damaged file or row: a miss, not a failed call
                log.warning("dagmagic: the response cache %s could not be read (%s)", self.path, exc)
                return None

    def put(self, key: str, model: str, response: ChatResponse) -> bool:
        """Store ``response`` under ``key`` (a later answer to the same key replaces it); False when it shows a key
        or something shaped like one, which is not stored.
        """
        stored = response.model_copy(update={"cached": False, "saved_cost": None})
        text = stored.model_dump_json()
        if mask_secrets(text) != text:
            return False
        with self._writing, self._open(self._writer) as db:
            db.execute(
                "INSERT OR REPLACE INTO responses (key, model, response, stored_at) VALUES (?, ?, ?, ?)",
                (key, model, text, time.time()),
            )
        return True

    def __len__(self) -> int:
        with self._reading:
            return int(self._open(self._reader).execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Close the file's connections."""
        with self._reading, self._writing:
            for db in (self._reader, self._writer):
                if db is not None:
                    db.close()
            self._reader = self._writer = None

    def _open(self, db: sqlite3.Connection | None) -> sqlite3.Connection:
        if db is None:
            raise ValueError(f"the response cache {self.path} is closed")
        return db

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"


class CachingBackend(WrappingBackend):
    """Answers a request the cache has without calling ``inner``; any other it passes on, and keeps the answer."""

    def __init__(self, inner: ChatBackend, cache: ResponseCache) -> None:
        super().__init__(inner)
        self.cache = cache

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The cached reply, else the inner backend's (kept when good)."""
        key = request_key(request)
        hit = self._hit(key)
        if hit is not None:
            return hit
        response = await self.inner.complete(request)
        await self._keep(key, request, response)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The cached reply in pieces, else the inner backend's stream (its whole reply kept when it ended well)."""
        key = request_key(request)
        hit = self._hit(key)
        if hit is not None:
            for piece in response_pieces(hit):
                yield piece
            yield StreamChunk(final=hit)
            return
        text: list[str] = []
        async for chunk in self.inner.stream(request):
            if chunk.final is not None:  # the last piece: the stream ended well
                whole = chunk.final
                if not whole.content:
                    whole = whole.model_copy(update={"content": "".join(text)})
                await self._keep(key, request, whole)
            else:
                text.append(chunk.text)
            yield chunk

    def _hit(self, key: str) -> ChatResponse | None:
        stored = self.cache.get(key)
        if stored is None:
            return None
        return stored.model_copy(update={"cached": True, "cost": 0.0, "saved_cost": stored.cost})

    async def _keep(self, key: str, request: ChatRequest, response: ChatResponse) -> None:
        if not response.content.strip() and not response.tool_calls:
            return  # an empty reply is a failure the model may not repeat
        try:
            await asyncio.to_thread(self.cache.put, key, request.model, response)
        except sqlite3.Error as exc:  # the answer is good; only the next identical request will cost again
            log.warning("dagmagic: the response cache %s could not keep a reply (%s)", self.cache.path, exc)


def cached_registry(models: ModelRegistry, settings: DagSettings) -> ModelRegistry:
    """``models`` answered through the response cache ``settings.cache`` names; ``models`` itself when it is off."""
    path = settings.cache_path
    if path is None:
        return models
    cache = ResponseCache.open(path)
    wrappers: list[tuple[ChatBackend, CachingBackend]] = []  # one per backend, by identity: warmed up once

    def wrap(entry: ModelEntry) -> ChatBackend:
        for inner, wrapper in wrappers:
            if inner is entry.backend:
                return wrapper
        wrappers.append((entry.backend, CachingBackend(entry.backend, cache)))
        return wrappers[-1][1]

    return models.wrapped(wrap)


def _connect(path: Path) -> sqlite3.Connection:
    """A connection to the cache at ``path``, created owner-only when missing; refuses a file that is not one."""
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True)
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # owner-only before SQLite writes a byte
        db = sqlite3.connect(path, timeout=_WAIT_SECONDS, isolation_level=None, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigurationError(_unusable(path, f"it cannot be opened: {exc}")) from None
    try:
        _prepare(db, path)
    except sqlite3.Error as exc:
        db.close()
        raise ConfigurationError(_unusable(path, str(exc))) from None
    except ConfigurationError:
        db.close()
        raise
    db.isolation_level = "DEFERRED"  # `with db:` opens and commits a transaction
    return db


def _prepare(db: sqlite3.Connection, path: Path) -> None:
    """WAL and the table, for a new file; a file that is another program's (or a newer dagmagic's) is refused."""
    application_id = db.execute("PRAGMA application_id").fetchone()[0]
    tables = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    if application_id != _APPLICATION_ID and (tables or application_id):
        raise ConfigurationError(_unusable(path, "it is another program's SQLite file; it was left as it is"))
    if db.execute("PRAGMA user_version").fetchone()[0] > _SCHEMA_VERSION:
        raise ConfigurationError(_unusable(path, "it was written by a newer dagmagic"))
    deadline = time.monotonic() + _WAIT_SECONDS
    while db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        try:
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:  # another process switching it at this moment: SQLite does not wait
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    db.execute("PRAGMA synchronous = NORMAL")  # with WAL: a crash of the process loses nothing committed
    if tables == 0:
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "CREATE TABLE IF NOT EXISTS responses ("
            "key TEXT PRIMARY KEY, model TEXT NOT NULL, response TEXT NOT NULL, stored_at REAL NOT NULL)"
        )
        db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
        db.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
        db.execute("COMMIT")


def _unusable(path: Path, why: str) -> str:
    return (
        f"The response cache {path} cannot be used ({why}). Set DAG_CACHE (or `%dag config cache=...`) to another "
        "path, or to off."
    )
