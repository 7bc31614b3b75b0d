"""litellm's import, started by ``%load_ext dagmagic`` in a background thread so the first run plans at once.

Importing litellm takes seconds of CPU (7 s before the first phase in a fresh kernel, measured). The extension
starts it in a daemon thread and returns at once; a run that begins meanwhile waits for that import in its
warm-up (``dagmagic.llm._litellm`` imports once, under a lock, whichever thread asks first), off the event
loop. A failure here is silent: the run's warm-up imports again and reports it as it always did. Runs on
scripted models never wait for it; they only share the CPU with it for those seconds.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading

__all__ = ["import_litellm_in_background"]

THREAD_NAME = "dagmagic:litellm-import"

_started: threading.Thread | None = None
_starting = threading.Lock()


def import_litellm_in_background() -> threading.Thread:
    """Start importing litellm in a daemon thread, once per process; the thread (started now or before)."""
    global _started
    with _starting:
        if _started is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else the import fetches a price list
            _started = threading.Thread(target=_import_quietly, name=THREAD_NAME, daemon=True)
            _started.start()
        return _started


def _import_quietly() -> None:
    # the LLM layer's package first, as a run imports it: a thread that took a submodule's import lock before
    # its package's could meet the run's thread holding the package's (Python breaks that tie with an error)
    with contextlib.suppress(Exception):  # the run's warm-up imports again, and says what went wrong
        importlib.import_module("dagmagic.llm")
        from dagmagic.llm._litellm import import_litellm

        import_litellm()
