"""litellm's import, started by ``%load_ext dagmagic`` in a background thread so the first run plans at once.

Importing litellm takes seconds of CPU (7 s before the first phase in a fresh kernel, measured). The extension
starts a daemon thread and returns at once; the thread waits until the cell that loaded the extension has
ended, a moment more, and no cell runs, then imports. So a cell run right behind the load (the next
Shift-Enter, or Run All: ``%dag demo`` in the first tutorial) has the CPU and the import locks to itself and
shows its view at once, where sharing them with the import delayed it by seconds. A run that needs litellm
meanwhile imports it in its warm-up (``dagmagic.llm._litellm`` imports once, under a lock, whichever thread
asks first), off the event loop. A failure here is silent: the run's warm-up imports again and reports it as
it always did.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["import_litellm_in_background"]

THREAD_NAME = "dagmagic:litellm-import"

GRACE_SECONDS = 1.0
"""How long after the loading cell's end the import waits for a next cell to start (and then to end)."""

_started: threading.Thread | None = None
_starting = threading.Lock()


class _CellsRunning:
    """Whether a cell runs in an IPython shell, from its ``pre_execute`` and ``post_execute`` events."""

    def __init__(self, shell: Any) -> None:
        self._shell = shell
        self._changed = threading.Condition()
        # loaded by a cell (``%load_ext``), whose pre_execute has passed and whose post_execute is to come;
        # not by one when the kernel loads the extension at startup
        self._running = 0 if getattr(getattr(shell, "displayhook", None), "exec_result", None) is None else 1
        shell.events.register("pre_execute", self._cell_started)
        shell.events.register("post_execute", self._cell_ended)

    def _cell_started(self) -> None:
        with self._changed:
            self._running += 1

    def _cell_ended(self) -> None:
        with self._changed:
            self._running = max(self._running - 1, 0)  # a cell that ended without starting (an event missed)
            self._changed.notify_all()

    def wait_for_a_pause(self, grace: float) -> None:
        """Return once the cell running now has ended, ``grace`` seconds have passed, and no cell runs; then
        stop listening to the shell.
        """
        with self._changed:
            self._changed.wait_for(lambda: self._running == 0)
        time.sleep(grace)
        with self._changed:
            self._changed.wait_for(lambda: self._running == 0)
        for event, callback in (("pre_execute", self._cell_started), ("post_execute", self._cell_ended)):
            with contextlib.suppress(ValueError):
                self._shell.events.unregister(event, callback)


def import_litellm_in_background(shell: Any = None) -> threading.Thread:
    """Start importing litellm in a daemon thread, once per process; the thread (started now or before).

    With an IPython ``shell``, the import waits for a pause between its cells; without, it starts at once.
    """
    global _started
    with _starting:
        if _started is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else the import fetches a price list
            cells = _CellsRunning(shell) if shell is not None else None
            _started = threading.Thread(
                target=_import_after, args=(cells, _import_quietly), name=THREAD_NAME, daemon=True
            )
            _started.start()
        return _started


def _import_after(cells: _CellsRunning | None, do_import: Callable[[], None]) -> None:
    if cells is not None:
        cells.wait_for_a_pause(GRACE_SECONDS)
    do_import()


def _import_quietly() -> None:
    # through the LLM layer's package, as a run imports it: a thread that took a submodule's import lock before
    # its package's could meet the run's thread holding the package's (Python breaks that tie with an error)
    with contextlib.suppress(Exception):  # the run's warm-up imports again, and says what went wrong
        from dagmagic.llm import import_litellm

        import_litellm()
