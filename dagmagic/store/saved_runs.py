"""The runs a store saves in this process, as its writer sees them: what the writer needs of a run (the run
written whole again, into a store created anew) and what it tells it (no longer saved, waiting for another
program's lock), each on the run's own event loop; and the wait at a run's end for its changes.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from dagmagic.errors import DagError
from dagmagic.events import RunWarning
from dagmagic.store.writer import Change, StoreWriter

if TYPE_CHECKING:
    from dagmagic.models import Exchange
    from dagmagic.store.backend import Location
    from dagmagic.store.live_run import LiveRun

__all__ = ["SavedRuns"]

Whole = Callable[["LiveRun", "list[Exchange]"], Change]
"""The run as it is now, as one change that writes it whole."""


@dataclass
class _Saved:
    run: weakref.ref[LiveRun]
    history: list[Exchange]
    """The conversation the run is planned in (part of the run's row)."""
    loop: asyncio.AbstractEventLoop | None
    """The loop the run lives on: what the writer tells the run is told there."""


class SavedRuns:
    """The runs one store saves (``WriterListener`` of its writer). A run is held weakly: one that is gone is
    forgotten.
    """

    def __init__(self, path: Location, whole: Whole, let_go: Callable[[str], None]) -> None:
        self.path = path
        self.writer: StoreWriter | None = None
        """The store's writer (given once it is made: it is told through this)."""
        self._whole = whole
        self._let_go = let_go
        """Stop holding a run's lease (it is no longer saved: the stored run must not look driven)."""
        self._saved: dict[str, _Saved] = {}

    def add(self, run: LiveRun, history: list[Exchange]) -> None:
        """Save ``run`` from now on (``history``: the conversation it is planned in)."""
        run_id = run.run_id
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self._saved[run_id] = _Saved(weakref.ref(run, lambda _: self._forget(run_id)), history, loop)

    async def settle(self, run: LiveRun, seconds: float) -> None:
        """Wait until what ``run`` did is written and the store checkpointed, so that the ``.sqlite`` file alone
        holds it; after ``seconds`` (another program holds the lock) the run says what is not on disk yet.
        """
        assert self.writer is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            written: asyncio.Future[None] = loop.create_future()
            try:
                self.writer.put(Change(run_id=None, checkpoint=True, after=partial(_resolve, loop, written)))
            except DagError:
                return  # closed: the run was told when its changes stopped being written
            done, _ = await asyncio.wait([written], timeout=max(deadline - loop.time(), 0))
            # the run written whole into a new file (the old one deleted) is given after what asked for it
            if not done or not self.writer.pending(run.run_id):
                break
        if not done and run.durable:
            run.emit(
                RunWarning(
                    message=f"This run's last changes are not on disk yet: {self.why_waiting()} They are written as "
                    "soon as it can be written again; if this kernel ends before then, they are lost."
                )
            )

    def why_waiting(self) -> str:
        """Why changes wait to be written, as a sentence."""
        if self.writer is not None and self.writer.unreachable_since is not None:
            return (
                f"the run store {self.path} cannot be reached (a server restarting?); its changes are kept for "
                f"{self.writer.reconnect_wait:g} s at most."
            )
        if self.writer is not None and self.writer.locked_since is not None:
            return (
                f"the run store {self.path} is locked by another program (a database browser, or a backup, "
                "holding a write transaction?)."
            )
        return f"the run store {self.path} is slow to write."

    # --- what the writer tells, from its thread

    def rewrite(self, run_id: str) -> None:
        """The file lacks ``run_id`` (a new one, after the old was deleted or moved): write the run whole."""
        self._on_loop(run_id, self._rewrite)

    def reopened(self) -> list[str]:
        """A new file at the path: the runs going on are written whole into it; returns them."""
        going_on = [  # one still attaching is not durable yet: it is rewritten once it is (`_on_loop` checks)
            run_id for run_id, saved in list(self._saved.items()) if (run := saved.run()) is not None and not run.done()
        ]
        for run_id in going_on:
            self._on_loop(run_id, self._rewrite)
        return going_on

    def lost(self, run_id: str, reason: str) -> None:
        """``run_id`` cannot be written (``reason``, a sentence): it goes on unsaved, and says so."""
        self._let_go(run_id)
        self._on_loop(run_id, lambda run: run._unsaved(reason))

    def stalled(self, run_ids: set[str]) -> None:
        """Another program has held the lock a while: the runs going on whose changes wait say so."""
        message = (
            f"{self.why_waiting()} This run's changes wait in memory and are written as soon as it can be written "
            "again; if this kernel ends before then, they are lost."
        )
        for run_id in run_ids:
            self._on_loop(run_id, lambda run: None if run.done() else run.emit(RunWarning(message=message)))

    def _on_loop(self, run_id: str, action: Callable[[LiveRun], object]) -> None:
        saved = self._saved.get(run_id)
        if saved is None or saved.loop is None:
            return

        def act() -> None:
            run = saved.run()
            if run is not None and run.durable:
                action(run)

        with suppress(RuntimeError):  # its loop is closed: nobody is left to tell
            saved.loop.call_soon_threadsafe(act)

    def _rewrite(self, run: LiveRun) -> None:
        saved = self._saved.get(run.run_id)
        if saved is not None and self.writer is not None:
            with suppress(DagError):  # closed meanwhile
                self.writer.put(self._whole(run, saved.history))

    def _forget(self, run_id: str) -> None:
        saved = self._saved.get(run_id)
        if saved is not None and saved.run() is None:
            self._saved.pop(run_id, None)


def _resolve(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    """Resolve ``future`` on its loop, from the writer's thread (unless the loop has closed meanwhile)."""
    with suppress(RuntimeError):
        loop.call_soon_threadsafe(lambda: None if future.done() else future.set_result(None))
