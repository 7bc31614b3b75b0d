"""What ``%load_ext dagmagic`` imports in background threads, so that the first ``%%dag`` imports nothing on the
kernel's event loop and a real model's first run does not wait for an import that could have begun earlier.

- The modules a ``%%dag`` cell uses (the engine, the session, the views: about 0.3 s of CPU, 230 modules, measured)
  are imported at the first pause between cells: once the loading cell has ended, ``GRACE_SECONDS`` more have
  passed and no cell runs. A ``%%dag`` cell that comes first awaits ``modules_ready()``, which imports them in a
  worker thread: on the loop they stalled it for up to 0.5 s, and a widget's clock, Stop button and other runs
  with it. One thread imports them at a time (a lock).
- A cell started while the background thread imports them waits in its ``pre_run_cell`` for that import to end
  (a fraction of a second, and only then): two threads importing the same interdependent modules can meet in
  Python's module locks, and Python then hands one of them a module half made. A ``%%dag`` cell does not wait
  there: it awaits ``modules_ready()``, off the loop.
- litellm (3-4 s of CPU) is imported as soon as a litellm model is in sight: at the load when the environment
  or the configuration names one (``DAG_*_MODEL``, a provider key, ``%config DagMagics.smart_model``: the models
  a cell without ``--models`` gets), else after the first cell that brings one (a ``ModelRegistry`` holding a
  litellm model among the notebook's variables, a key set with ``os.environ``, a model set with ``%dag
  config``). Never while only other models (``ScriptedLLM``) are in sight: though in a thread, its import holds
  the interpreter's lock in native code for up to 0.25 s at a time (measured: litellm's Rust router, its
  generated types, tiktoken's encodings), which would stall the loop under a run that does not need it. A run
  whose models need it and finds it not imported yet imports it in its warm-up, off the loop, as before. Only
  litellm itself is imported here (no module of dagmagic's: a cell may be importing those meanwhile); the LLM
  layer sets it up when a run first uses it (``dagmagic.llm.import_litellm``), waiting for this import if it
  is still under way.

Nothing here prints or raises: a failed import is tried again where it is needed, and reported there.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "MODEL_VARIABLES",
    "PROVIDER_KEYS",
    "Preloader",
    "import_modules",
    "litellm_model_in_sight",
    "modules_ready",
    "names_a_litellm_model",
    "preload_in_background",
]

MODULES_THREAD = "dagmagic:import-modules"
LITELLM_THREAD = "dagmagic:import-litellm"

GRACE_SECONDS = 1.0
"""How long after the loading cell's end the modules' import waits for a next cell to start (and then end)."""
GATE_SECONDS = 10.0
"""The longest a cell waits in its ``pre_run_cell`` for the background import of the modules to end."""

MODEL_VARIABLES = ("DAG_SMART_MODEL", "DAG_GENERAL_MODEL", "DAG_FAST_MODEL", "DAG_REASONING_MODEL")
"""Variables that name a litellm model (``dagmagic.llm.ROLE_ENV``'s, read here without importing it)."""
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")
"""Keys that bring default litellm models (``dagmagic.llm.defaults.KEY_DEFAULTS``'s)."""
_ROLES = ("smart", "general", "fast", "reasoning")

_modules_lock = threading.Lock()
"""Held by the thread importing the modules a ``%%dag`` cell uses."""
_modules_imported = threading.Event()

_started: Preloader | None = None
_starting = threading.Lock()


def import_modules() -> None:
    """Import the modules a ``%%dag`` cell uses, once, in the calling thread (never the event loop's)."""
    if _modules_imported.is_set():
        return
    with _modules_lock:
        if not _modules_imported.is_set():
            _import_cell_modules()
            _modules_imported.set()


def _import_cell_modules() -> None:
    # through the top-level modules and the notebook's own, as a cell imports them: the session brings the engine,
    # the LLM layer, the store's front, evaluation and tracing; the views bring anywidget and ipywidgets
    from dagmagic import session, tracing  # noqa: F401
    from dagmagic.notebook import display, resume_offer, widget  # noqa: F401

    tracing.import_api()  # OpenTelemetry's API, which each run's start reads when it is installed


async def modules_ready() -> None:
    """Return once the modules a ``%%dag`` cell uses are imported: at once when they are; else after importing them
    in a worker thread (or waiting there for the background import under way), while the loop goes on.
    """
    if not _modules_imported.is_set():
        await asyncio.to_thread(import_modules)


def names_a_litellm_model(magics: Any = None) -> bool:
    """Whether a cell without ``--models`` would run a litellm model: ``DAG_*_MODEL`` or a provider key is set, or
    ``magics`` (``DagMagics``) has a role's model configured, by ``%config`` or ``%dag config``.
    """
    if any(os.environ.get(name, "").strip() for name in (*MODEL_VARIABLES, *PROVIDER_KEYS)):
        return True
    overrides: Mapping[str, Any] = getattr(getattr(magics, "notebook", None), "overrides", {})
    return any(getattr(magics, f"{role}_model", None) or overrides.get(f"{role}_model") for role in _ROLES)


def litellm_model_in_sight(namespace: Mapping[str, Any], magics: Any = None) -> bool:
    """``names_a_litellm_model``, or a ``ModelRegistry`` holding a litellm model among the notebook's variables."""
    if names_a_litellm_model(magics):
        return True
    llm = sys.modules.get("dagmagic.llm")  # no registry exists before it is imported
    registry, backend = getattr(llm, "ModelRegistry", None), getattr(llm, "LiteLLMBackend", None)
    if registry is None or backend is None:
        return False
    return any(
        isinstance(value, registry) and any(isinstance(entry.backend, backend) for entry in value)
        for value in list(namespace.values())
    )


class _CellsRunning:
    """Whether a cell runs in an IPython shell, from its ``pre_execute`` and ``post_execute`` events."""

    def __init__(self, shell: Any) -> None:
        self._changed = threading.Condition()
        # loaded by a cell (``%load_ext``), whose pre_execute has passed and whose post_execute is to come;
        # not by one when the kernel loads the extension at startup
        self._running = 0 if getattr(getattr(shell, "displayhook", None), "exec_result", None) is None else 1

    def started(self) -> None:
        with self._changed:
            self._running += 1

    def ended(self) -> None:
        with self._changed:
            self._running = max(self._running - 1, 0)  # a cell that ended without starting (an event missed)
            self._changed.notify_all()

    def wait_for_the_loading_cell(self) -> None:
        """Return once the cell running now (the one that loaded the extension) has ended."""
        with self._changed:
            self._changed.wait_for(lambda: self._running == 0)

    def wait_for_a_pause(self, grace: float, then: Callable[[], None]) -> None:
        """Return once the cell running now has ended, ``grace`` seconds have passed, and no cell runs; ``then()``
        is called while no cell can start, so a cell starting next sees what it did.
        """
        self.wait_for_the_loading_cell()
        time.sleep(grace)
        with self._changed:
            self._changed.wait_for(lambda: self._running == 0)
            then()


class Preloader:
    """The background imports of one process (``preload_in_background``): the modules at the first pause, litellm
    once a litellm model is in sight. With an IPython ``shell``, they follow its cells as the module's docstring
    says; without, both begin at once.
    """

    def __init__(
        self,
        shell: Any = None,
        magics: Any = None,
        *,
        import_the_modules: Callable[[], None] = import_modules,
        import_litellm: Callable[[], None] | None = None,
    ) -> None:
        self._shell, self._magics = shell, magics
        self._import_the_modules = import_the_modules
        self._import_litellm = import_litellm or _import_litellm_only
        self._importing_modules = threading.Event()
        """The modules thread imports them now: a cell starting waits for it (``_cell_starts``)."""
        self._modules_done = threading.Event()
        self._cells = _CellsRunning(shell) if shell is not None else None
        self._hooks: list[tuple[str, Callable[..., None]]] = []
        self.litellm: threading.Thread | None = None
        """The thread importing litellm, once a litellm model came in sight."""
        if self._cells is not None:
            self._hooks = [
                ("pre_execute", self._cells.started),
                ("post_execute", self._cells.ended),
                ("pre_run_cell", self._cell_starts),
                ("post_run_cell", self._cell_ended),
            ]
            for event, callback in self._hooks:
                shell.events.register(event, callback)
        self.modules = threading.Thread(target=self._modules, name=MODULES_THREAD, daemon=True)
        """The thread importing the modules a ``%%dag`` cell uses."""
        self.modules.start()
        if shell is None or litellm_model_in_sight({}, magics):
            self._start_litellm(after_the_loading_cell=shell is not None)

    def _modules(self) -> None:
        try:
            if self._cells is not None:
                self._cells.wait_for_a_pause(GRACE_SECONDS, then=self._importing_modules.set)
            else:
                self._importing_modules.set()
            with contextlib.suppress(Exception):  # a %%dag cell imports them again, and says what went wrong
                self._import_the_modules()
        finally:
            self._modules_done.set()
            self._importing_modules.clear()
            self._stop_listening()

    def _cell_starts(self, info: Any) -> None:
        """``pre_run_cell``: a cell started while the modules thread imports them waits for it; a cell the input
        transformer turns into an ``await`` (``%%dag``) awaits them off the loop instead.
        """
        if not self._importing_modules.is_set():
            return
        from dagmagic.notebook.transformer import awaited

        if not awaited(getattr(info, "raw_cell", "") or ""):
            self._modules_done.wait(GATE_SECONDS)

    def _cell_ended(self, result: Any = None) -> None:
        """``post_run_cell``: the cell may have brought a litellm model (a registry, a key, a setting)."""
        with contextlib.suppress(Exception):  # a variable that cannot be looked at: no traceback under the cell
            if self.litellm is None and litellm_model_in_sight(getattr(self._shell, "user_ns", {}), self._magics):
                self._start_litellm(after_the_loading_cell=False)

    def _start_litellm(self, *, after_the_loading_cell: bool) -> None:
        cells = self._cells if after_the_loading_cell else None
        self.litellm = threading.Thread(target=self._litellm, args=(cells,), name=LITELLM_THREAD, daemon=True)
        self.litellm.start()
        self._stop_listening()

    def _litellm(self, cells: _CellsRunning | None) -> None:
        if cells is not None:
            cells.wait_for_the_loading_cell()
        with contextlib.suppress(Exception):  # the run's warm-up imports it again, and says what went wrong
            self._import_litellm()

    def _stop_listening(self) -> None:
        """Once the modules are imported and litellm's import has begun, the shell's events need not be heard."""
        if self._modules_done.is_set() and self.litellm is not None:
            self.stop()

    def stop(self) -> None:
        """Stop listening to the shell's cells (an import under way goes on)."""
        for event, callback in self._hooks:
            with contextlib.suppress(ValueError):
                self._shell.events.unregister(event, callback)


def _import_litellm_only() -> None:
    # litellm alone, into sys.modules: no module of dagmagic's is imported here (a cell may be importing them);
    # dagmagic.llm sets litellm up when a run first uses it, and its import waits for this one if it is under way
    importlib.import_module("litellm")


def preload_in_background(shell: Any = None, magics: Any = None) -> Preloader:
    """Start the background imports, once per process; the ``Preloader`` (started now or before)."""
    global _started
    with _starting:
        if _started is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else the import fetches a price list
            _started = Preloader(shell, magics)
        return _started
