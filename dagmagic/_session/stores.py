"""The run stores a session saves its runs to: each opened once, and why one cannot be written."""

from __future__ import annotations

from pathlib import Path

from dagmagic.errors import DagError
from dagmagic.settings import DagSettings
from dagmagic.store import RunStore, StoredRun, StoreUnavailable
from dagmagic.store_url import StoreURL

__all__ = ["SessionStores"]


class SessionStores:
    """The stores runs with given settings are saved to (``DAG_STORE``), opened on first use."""

    def __init__(self) -> None:
        self._stores: dict[Path | StoreURL, RunStore] = {}
        self._problems: dict[Path | StoreURL | None, str] = {}

    def store_for(self, settings: DagSettings) -> RunStore | None:
        """The run store ``settings`` name, opened once; None when it is off or cannot be written."""
        path = settings.store_path
        if path is None:
            self._problems[None] = "DAG_STORE is none"
            return None
        if path in self._stores and self._stores[path].closed:  # closed meanwhile (by a test, say): open again
            del self._stores[path]
        if path not in self._stores and path not in self._problems:
            try:
                self._stores[path] = RunStore.open(path)
            except StoreUnavailable as exc:
                self._problems[path] = str(exc)
        store = self._stores.get(path)
        if store is not None:  # one store per process and path: the settings of the run starting now
            store.reconnect_wait = settings.store_reconnect_wait
        return store

    def problem(self, settings: DagSettings) -> str | None:
        """Why runs with ``settings`` are not saved, None when they are."""
        return None if self.store_for(settings) is not None else self._problems.get(settings.store_path)

    def load(self, run_id: str, settings: DagSettings, verb: str, what: str) -> StoredRun:
        """The stored run ``run_id``; a ``DagError`` saying what could not be done (``verb`` ``what``) otherwise."""
        store = self.store_for(settings)
        if store is None:
            raise DagError(f"there is no run store to {verb} {what} ({self.problem(settings)})")
        try:
            return store.load(run_id)
        except KeyError:
            hint = "; `%dag history` lists the stored runs" if verb in ("resume", "replay", "fork") else ""
            raise DagError(f"no run {run_id!r} in the run store {store.path}{hint}") from None

    def checkpoint(self, wait: float) -> None:
        """Checkpoint every store opened (waiting ``wait`` seconds at most for what is still being written)."""
        for store in self._stores.values():
            store.checkpoint(wait)
