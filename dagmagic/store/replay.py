"""A stored run as a recording: ``recording_of`` (its calls as a cassette) and ``replay`` (a ``ModelRegistry``
answering every call as the run was answered), for tests and for ``DagSession``'s replays.

``dagmagic.testing`` re-exports both: there, next to the test doubles, is where users find them.
"""

from __future__ import annotations

from typing import Any

from dagmagic.errors import ConfigurationError
from dagmagic.events import Event, ModelsReady
from dagmagic.llm.cassette import Cassette, Interaction
from dagmagic.llm.registry import ModelRegistry
from dagmagic.llm.replay_backend import replay_registry
from dagmagic.models import RunState
from dagmagic.settings import DagSettings
from dagmagic.store.run_store import RunStore

__all__ = ["recording_of", "replay"]


def recording_of(run: Any, *, store: Any = None) -> Cassette:
    """The calls of a finished run as a cassette (``.save(path)`` writes it): ``run`` is a ``DagRun``, a run
    read back (``dagmagic.load_run``), a ``RunState``, or a run id read from ``store`` (a ``RunStore`` or a path;
    default ``DAG_STORE``).
    """
    state, events = _state_and_events(run, store)
    cards = next((e.models for e in reversed(events) if isinstance(e, ModelsReady) and not e.depth), [])
    return Cassette((Interaction.from_call(call) for call in state.calls), cards)


def replay(
    run: Any,
    *,
    store: Any = None,
    strict: bool = True,
    fallback: ModelRegistry | None = None,
    timing: float | None = None,
) -> ModelRegistry:
    """A ``ModelRegistry`` answering every call the way the recorded ``run`` was answered: same model names,
    roles and capabilities, each model a ``ReplayLLM`` over the run's calls (``run``: as for ``recording_of``).

    A request is matched by its purpose, step and normalized messages and tools, in whatever order parallel steps
    ask. One the run did not make raises ``ReplayMismatch`` (which ends a run that meets it), naming the call and
    showing the closest recorded one and what changed; with ``strict=False`` it goes to ``fallback``'s model of
    the same name (else of its role). ``timing``: None replays at once; 1.0 with the recorded delays; 0.1 ten
    times faster.

    In a test::

        run = await DagSession(models=replay(recorded_run_id, store="runs.sqlite")).run(goal)
        assert run.answer == expected
    """
    return replay_registry(recording_of(run, store=store), strict=strict, fallback=fallback, timing=timing)


def _state_and_events(run: Any, store: Any) -> tuple[RunState, list[Event]]:
    if isinstance(run, RunState):
        return run, []
    if isinstance(run, str):
        if store is None:
            store = DagSettings().store_path
            if store is None:
                raise ConfigurationError("there is no run store to read the run from (DAG_STORE is none): pass store=")
        opened = store if isinstance(store, RunStore) else RunStore.open(store)
        try:
            loaded = opened.load(run)
        except KeyError:
            raise ConfigurationError(f"no run {run!r} in the run store {opened.path}") from None
        return loaded.state, list(loaded.events)
    state = getattr(run, "state", None)
    if isinstance(state, RunState):
        return state, list(getattr(run, "events", []))
    raise ConfigurationError(f"replay() takes a run, a RunState or a run id, got {type(run).__name__}")
