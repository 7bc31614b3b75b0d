"""The parts of a comparison of two runs (``dagmagic.compare``), read from the runs' state: each side (``Side``:
status, models, usage, cost, time, answer, calls per purpose, the settings it was started with), each pair of rounds
with its steps matched as ``RoundDiff`` matches them (task, tool, arguments; ids too where they keep their
meaning) and their results word by word (``Piece``). Plain data over a ``RunState``: a live run is read as it
stands, cheaply enough to read again on every update.
"""

from __future__ import annotations

import difflib
import functools
import re
import time
from collections import Counter
from collections.abc import Sequence
from itertools import zip_longest
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from dagmagic.diff import _value, matched_steps
from dagmagic.errors import DagError
from dagmagic.events import Event, RunStarted
from dagmagic.models import AnalysisResult, LLMCall, PlanStep, RoundRecord, RunState, Usage
from dagmagic.settings import DagSettings

__all__ = [
    "Comparable",
    "Piece",
    "RoundPair",
    "Side",
    "SideStep",
    "StepPair",
    "compared_rounds",
    "differences",
    "settings_of",
    "side_of",
    "state_of",
    "word_pieces",
]


class Piece(BaseModel):
    """A stretch of text in a word-level difference: in both texts, only in the first, or only in the second."""

    op: Literal["same", "removed", "added"]
    text: str


class Side(BaseModel):
    """One side of a comparison: a run (or one round of it), as the comparison reads it."""

    label: str
    """How the views name this side: ``run 3f2a19c0``, ``round 2``, ``config small``."""
    run_id: str
    round: int | None = None
    """The round compared, when two rounds of one run are (None: the whole run)."""
    goal: str
    status: str
    """As the views say it (``stopped by you`` for a run the user's Stop ended)."""
    live: bool = False
    """Whether the run is still going (the comparison fills in as it does)."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The settings the run was started with that are not the defaults (secrets masked), or a config's."""
    models: list[str] = Field(default_factory=list)
    """The models the run called, by name."""
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    seconds: float | None = None
    """Wall time from start to end (so far, for a live run)."""
    answer: str = ""
    calls: dict[str, int] = Field(default_factory=dict)
    """Calls per purpose (``plan``, ``step``, ``analyze``...)."""
    forked_from: str | None = None
    """The run this one was forked from (``run.fork``)."""


class SideStep(BaseModel):
    """One step as one side has it."""

    ref: str
    """Its id, or ``rN.id`` for a step of another round than the one compared."""
    task: str
    tool: str | None = None
    tool_args: dict[str, Any] | None = None
    status: str
    result: str | None = None
    error: str | None = None
    edited: bool = False
    """The user wrote this result (``what_if`` or a fork with ``result=``)."""
    model: str | None = None
    tokens: int = 0
    cost: float | None = None
    seconds: float | None = None


class StepPair(BaseModel):
    """Two steps matched as the same step, or a step only one side has."""

    a: SideStep | None = None
    b: SideStep | None = None
    change: Literal["same", "changed", "added", "removed"]
    """``added``: only ``b`` has it; ``removed``: only ``a``."""
    fields: list[str] = Field(default_factory=list)
    """For ``changed``: which of task, tool, arguments, model, status, result differ."""
    result: list[Piece] = Field(default_factory=list)
    """The two results word by word, when both have one (empty otherwise)."""
    tokens_delta: int | None = None
    """``b`` minus ``a``, when both ran."""
    cost_delta: float | None = None
    seconds_delta: float | None = None


class RoundPair(BaseModel):
    """Round ``index`` of each side (or the two rounds compared, for two rounds of one run)."""

    a: int | None
    b: int | None
    steps: list[StepPair] = Field(default_factory=list)
    """In ``b``'s order, ``a``'s unmatched steps after."""
    verdict_a: AnalysisResult | None = None
    verdict_b: AnalysisResult | None = None


class _HasState(Protocol):
    """A run as ``between`` reads it: a live ``DagRun``, a run read back (``load_run``, ``StoredRun``)."""

    state: RunState


Comparable = RunState | _HasState
"""What ``RunComparison.between`` takes: a ``DagRun`` (live or finished), a ``StoredRun``, or a ``RunState``."""


def compared_rounds(a: RunState, b: RunState, rounds: tuple[int, int] | None) -> list[RoundPair]:
    """The rounds of ``a`` and ``b`` paired by number, or round ``rounds[0]`` of ``a`` with ``rounds[1]`` of ``b``."""
    if rounds is not None:
        first, second = _round(a, rounds[0]), _round(b, rounds[1])
        same_ids = a.run_id == b.run_id and second.rerun_of == first.index
        return [_round_pair(first, second, same_ids=same_ids)]
    same_ids = _related(a, b)
    return [_round_pair(first, second, same_ids=same_ids) for first, second in zip_longest(a.rounds, b.rounds)]


def differences(a: Side, b: Side) -> dict[str, tuple[Any, Any]]:
    """What differs before anything runs: the goals, and each setting (a default where a side does not say it)."""
    found: dict[str, tuple[Any, Any]] = {}
    if a.goal != b.goal:
        found["goal"] = (a.goal, b.goal)
    for name in dict.fromkeys([*a.settings, *b.settings]):
        values = tuple(side.settings[name] if name in side.settings else _default(name) for side in (a, b))
        if values[0] != values[1]:
            found[name] = values
    return found


def state_of(run: Comparable) -> RunState:
    """The run's state (``TypeError`` for anything that is not a run)."""
    if isinstance(run, RunState):
        return run
    state = getattr(run, "state", None)
    if not isinstance(state, RunState):
        raise TypeError(
            f"cannot compare a {type(run).__name__}: compare runs (a DagRun, dagmagic.load_run(id)) or run ids"
        )
    return state


def _round(state: RunState, index: int) -> RoundRecord:
    for record in state.rounds:
        if record.index == index:
            return record
    have = f"rounds 1 to {len(state.rounds)}" if state.rounds else "no round yet"
    raise DagError(f"run {state.run_id} has no round {index}: it has {have}")


def _related(a: RunState, b: RunState) -> bool:
    """Whether a step id names the same step in both runs: one replays or was forked from the other."""
    linked = {a.replay_of, getattr(a, "forked_from", None)}, {b.replay_of, getattr(b, "forked_from", None)}
    return a.run_id in linked[1] or b.run_id in linked[0]


def settings_of(run: Comparable) -> dict[str, Any]:
    """The settings the run's start recorded (those not the defaults, secrets masked); {} for a state alone."""
    events: Sequence[Event] = getattr(run, "events", None) or ()
    started = next((e for e in events if isinstance(e, RunStarted) and not e.depth), None)
    return dict(started.settings) if started is not None else {}


def _default(name: str) -> Any:
    """A setting's default, as a run's start records settings (JSON); None for a name that is no setting."""
    return _defaults().get(name)


@functools.cache
def _defaults() -> dict[str, Any]:
    defaults: dict[str, Any] = DagSettings.model_construct().model_dump(mode="json")  # the fields' own: no env
    return defaults


def side_of(run: Comparable, state: RunState, index: int | None, settings: dict[str, Any], label: str | None) -> Side:
    """One side: the run (``state``), or its round ``index``; ``label`` by default ``run ID`` or ``round N``."""
    live = state.status == "running"
    calls: list[LLMCall] = list(state.calls)
    if index is None:
        end = state.finished_at if state.finished_at is not None else (time.time() if live else None)
        seconds = end - state.started_at if end is not None and state.started_at else None
        answer = state.answer
    else:
        calls = [call for call in calls if call.round == index]
        record = _round(state, index)
        seconds = _round_seconds(record, calls)
        answer = _round_answer(state, record, calls)
    usage = Usage.total(call.usage for call in calls)
    status = getattr(run, "status_words", state.status)
    return Side(
        label=label or (f"round {index}" if index is not None else f"run {state.run_id}"),
        run_id=state.run_id, round=index, goal=state.goal, status=str(status), live=live, settings=settings,
        models=list(dict.fromkeys(call.model for call in calls)), usage=usage, cost=usage.cost, seconds=seconds,
        answer=answer or "", calls=dict(Counter(call.purpose for call in calls)),
        forked_from=getattr(state, "forked_from", None),
    )  # fmt: skip


def _round_answer(state: RunState, record: RoundRecord, calls: list[LLMCall]) -> str:
    """The answer round ``record`` gave: the run's own for its last round, else the one its synthesis wrote (a later
    round's answer replaced it), else its verdict's.
    """
    if state.rounds and record is state.rounds[-1]:
        return state.answer
    written = [call.reply for call in calls if call.purpose == "synthesize" and call.status == "ok"]
    verdict = record.analysis.final_answer if record.analysis is not None else None
    return written[-1] if written else verdict or ""


def _round_seconds(record: RoundRecord, calls: list[LLMCall]) -> float | None:
    """From the round's first call to its last reply (a re-run round's kept steps ran in the round it re-ran); from
    its steps' times when it made no call.
    """
    timed = [(c.started_at, c.started_at + c.latency) for c in calls if c.started_at]
    if not timed:
        timed = [(s.started_at, s.completed_at) for s in record.plan.steps if s.started_at and s.completed_at]
    starts, ends = [start for start, _ in timed], [end for _, end in timed]
    return max(ends) - min(starts) if starts and ends else None


# --- steps ------------------------------------------------------------------------------------------


def _round_pair(first: RoundRecord | None, second: RoundRecord | None, *, same_ids: bool) -> RoundPair:
    old = first.plan.steps if first is not None else []
    new = second.plan.steps if second is not None else []
    matched = matched_steps(old, new, same_ids=same_ids)
    taken = {id(pair[0]) for pair in matched.values()}
    steps = [_step_pair(matched[s.id][0], s) if s.id in matched else _step_pair(None, s) for s in new]
    steps += [_step_pair(s, None) for s in old if id(s) not in taken]
    return RoundPair(
        a=first.index if first is not None else None, b=second.index if second is not None else None, steps=steps,
        verdict_a=first.analysis if first is not None else None,
        verdict_b=second.analysis if second is not None else None,
    )  # fmt: skip


_FIELDS: dict[str, Any] = {
    "task": lambda step: _value(step, "task"),
    "tool": lambda step: step.tool_hint,
    "arguments": lambda step: step.tool_args,
    "model": lambda step: step.model,
    "status": lambda step: step.status,
    "result": lambda step: step.result,
}
"""What a pair of steps is compared on, and how each is read (a task by its words, case and spacing aside)."""


def _step_pair(old: PlanStep | None, new: PlanStep | None) -> StepPair:
    a, b = _side_step(old), _side_step(new)
    if old is None or new is None or a is None or b is None:
        return StepPair(a=a, b=b, change="added" if old is None else "removed")
    fields = [name for name, read in _FIELDS.items() if read(old) != read(new)]
    both_ran = old.completed_at is not None and new.completed_at is not None
    return StepPair(
        a=a, b=b, change="changed" if fields else "same", fields=fields,
        result=word_pieces(old.result, new.result) if old.result is not None and new.result is not None else [],
        tokens_delta=b.tokens - a.tokens if both_ran else None,
        cost_delta=b.cost - a.cost if both_ran and a.cost is not None and b.cost is not None else None,
        seconds_delta=b.seconds - a.seconds if a.seconds is not None and b.seconds is not None else None,
    )  # fmt: skip


def _side_step(step: PlanStep | None) -> SideStep | None:
    if step is None:
        return None
    return SideStep(
        ref=step.id, task=step.task, tool=step.tool_hint, tool_args=step.tool_args, status=step.status,
        result=step.result, error=step.error, edited=bool(getattr(step, "edited", False)), model=step.model,
        tokens=step.usage.total_tokens, cost=step.usage.cost, seconds=step.run_time,
    )  # fmt: skip


# --- words ------------------------------------------------------------------------------------------

_WORD = re.compile(r"\S+\s*|\s+")
"""A word with the whitespace after it (or leading whitespace): joined back, the pieces are the texts as written."""


def word_pieces(first: str | None, second: str | None) -> list[Piece]:
    """``first`` and ``second`` word by word: the stretches both have, and those only one has (removed: only
    ``first``; added: only ``second``). Whitespace stays with the word before it, so the pieces read as written.
    """
    return list(_pieces(first or "", second or ""))


@functools.lru_cache(maxsize=256)  # a live comparison is made again on every update: the same texts, mostly
def _pieces(first: str, second: str) -> tuple[Piece, ...]:
    old, new = _WORD.findall(first), _WORD.findall(second)
    matcher = difflib.SequenceMatcher(None, [w.strip() for w in old], [w.strip() for w in new], autojunk=False)
    pieces: list[Piece] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            _add(pieces, "same", "".join(new[j1:j2]))
        else:
            _add(pieces, "removed", "".join(old[i1:i2]))
            _add(pieces, "added", "".join(new[j1:j2]))
    return tuple(pieces)


def _add(pieces: list[Piece], op: Literal["same", "removed", "added"], text: str) -> None:
    if not text:
        return
    if pieces and pieces[-1].op == op:
        pieces[-1] = Piece(op=op, text=pieces[-1].text + text)
    else:
        pieces.append(Piece(op=op, text=text))
