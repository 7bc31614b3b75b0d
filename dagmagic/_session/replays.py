"""Which run a replay re-executes, the conversation it was planned in, and that conversation as its planner read
it (its summary, made outside the run, is not made again: the replay reads what the run read).
"""

from __future__ import annotations

from typing import Any

from dagmagic._session.stores import SessionStores
from dagmagic.engine.calls.context import past_of
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.errors import DagError
from dagmagic.models import Exchange
from dagmagic.settings import DagSettings
from dagmagic.store import StoredRun

__all__ = ["forkable", "history_read", "replayable"]


def replayable(
    run: str | DagRun | StoredRun, stores: SessionStores, settings: DagSettings
) -> tuple[Any, list[Exchange]]:
    """The run to replay (with its state, events and calls) and the conversation it was planned in; a
    ``DagError`` when it has not ended or made no model call.
    """
    original, history = _original(run, stores, settings, "replay")
    run_id = original.state.run_id
    if original.state.status == "running":
        raise DagError(f"run {run_id} has not ended: replay it once it has (or resume it first)")
    if not original.state.calls:
        raise DagError(f"run {run_id} made no model call: there is nothing to replay")
    return original, history


def forkable(run: str | DagRun | StoredRun, stores: SessionStores, settings: DagSettings) -> tuple[Any, list[Exchange]]:
    """The run to fork (with its state, events and calls) and the conversation it was planned in."""
    return _original(run, stores, settings, "fork")


def history_read(original: Any) -> str | None:
    """The conversation as the planner of ``original`` (a run, or a run read back) read it: what its first plan's
    query held before the goal; None when it held none.
    """
    rounds = original.state.rounds
    return past_of(rounds[0].plan.query, rounds[0].plan.goal) if rounds else None


def _original(
    run: str | DagRun | StoredRun, stores: SessionStores, settings: DagSettings, verb: str
) -> tuple[Any, list[Exchange]]:
    if isinstance(run, str):
        stored = stores.load(run, settings, verb, f"run {run!r} from")
        return stored, stored.history
    if isinstance(run, StoredRun):
        return run, run.history
    if not isinstance(run, DagRun):
        raise TypeError(f"{verb}() takes a run, a run read back or a run id, got {type(run).__name__}")
    conversation = run.conversation
    if conversation is None:  # read back: the store holds the conversation it was planned in
        conversation = stores.load(run.run_id, settings, verb, f"run {run.run_id!r} from").history
    return run, conversation
