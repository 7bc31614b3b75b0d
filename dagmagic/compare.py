"""Two runs side by side (``dagmagic.compare(a, b)``): what differs in their goals and settings, their plans aligned
step by step (matched as ``RoundDiff`` matches them: task, tool, arguments), each pair's results with the words that
differ marked, statuses, models, tokens, cost and time with their deltas, the verdicts, the answers and the calls
per purpose. Two rounds of one run compare the same way (``compare(run, rounds=(1, 2))``).

A ``RunComparison`` is plain data: the compare widget draws it, its Markdown and HTML views stand in for the widget
in a saved notebook.
"""

from __future__ import annotations

import difflib
import functools
import html
import re
import sys
import time
import types
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import zip_longest
from typing import Any, Literal, Protocol, cast

from pydantic import BaseModel, Field

from dagmagic.diff import _markdown_text, _value, _verdict_words, matched_steps
from dagmagic.engine import DagRun
from dagmagic.errors import ConfigurationError, DagError
from dagmagic.evaluation import Cell, Experiment
from dagmagic.events import Event, RunStarted
from dagmagic.models import AnalysisResult, LLMCall, PlanStep, RoundRecord, RunState, Usage
from dagmagic.models._text import cut, no_math
from dagmagic.settings import DagSettings
from dagmagic.store import RunStore

__all__ = [
    "Comparable",
    "ExperimentComparison",
    "Piece",
    "RoundPair",
    "RunComparison",
    "Side",
    "SideStep",
    "StepPair",
    "compare",
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


class RunComparison(BaseModel):
    """Two runs, or two rounds of one run, side by side (``dagmagic.compare``)."""

    a: Side
    b: Side
    differences: dict[str, tuple[Any, Any]] = Field(default_factory=dict)
    """What differs before anything runs: ``goal`` and each setting, as (a's, b's)."""
    rounds: list[RoundPair] = Field(default_factory=list)
    answer: list[Piece] = Field(default_factory=list)
    """The answers word by word."""

    @property
    def changed_steps(self) -> list[StepPair]:
        """The pairs that differ (added, removed or changed), round by round."""
        return [pair for pair in (p for r in self.rounds for p in r.steps) if pair.change != "same"]

    @property
    def live(self) -> bool:
        """Whether either run is still going (compare again for where they stand now)."""
        return self.a.live or self.b.live

    @property
    def answer_changed(self) -> bool:
        """Whether the answers differ."""
        return any(piece.op != "same" for piece in self.answer)

    @classmethod
    def between(
        cls,
        a: Comparable,
        b: Comparable,
        *,
        rounds: tuple[int, int] | None = None,
        labels: tuple[str, str] | None = None,
        settings: tuple[dict[str, Any], dict[str, Any]] | None = None,
    ) -> RunComparison:
        """Compare run ``a`` with run ``b`` (their rounds paired by number), or round ``rounds[0]`` of ``a`` with
        round ``rounds[1]`` of ``b`` (``between(run, run, rounds=(1, 2))``: two rounds of one run).

        Reads the runs' state as it is now: a run still going is compared so far (``live``); compare again for
        more. ``labels`` and ``settings`` name the sides and say what they ran with, when the runs do not (an
        experiment's configs); by default a side is ``run ID`` (``round N``) with the settings its start recorded.
        """
        state_a, state_b = _state(a), _state(b)
        if rounds is not None:
            records = (_round(state_a, rounds[0]), _round(state_b, rounds[1]))
            same_ids = state_a.run_id == state_b.run_id and records[1].rerun_of == records[0].index
            pairs = [_round_pair(records[0], records[1], same_ids=same_ids)]
        else:
            same_ids = _related(state_a, state_b)
            pairs = [
                _round_pair(first, second, same_ids=same_ids)
                for first, second in zip_longest(state_a.rounds, state_b.rounds)
            ]
        given = settings or (_settings(a), _settings(b))
        sides = [
            _side(run, state, None if rounds is None else rounds[i], given[i], labels[i] if labels else None)
            for i, (run, state) in enumerate(((a, state_a), (b, state_b)))
        ]
        differences: dict[str, tuple[Any, Any]] = {}
        if sides[0].goal != sides[1].goal:
            differences["goal"] = (sides[0].goal, sides[1].goal)
        for name in dict.fromkeys([*given[0], *given[1]]):
            values = tuple(given[i][name] if name in given[i] else _default(name) for i in (0, 1))
            if values[0] != values[1]:
                differences[name] = values
        return cls(
            a=sides[0], b=sides[1], differences=differences, rounds=pairs,
            answer=word_pieces(sides[0].answer, sides[1].answer),
        )  # fmt: skip

    # --- views -------------------------------------------------------------------------------------

    def _title(self) -> str:
        return f"{self.a.label} vs {self.b.label}"

    def _counts(self) -> str:
        counts = Counter(pair.change for pair in (p for r in self.rounds for p in r.steps))
        steps = ", ".join(f"{counts[c]} {c}" for c in ("same", "changed", "added", "removed") if counts[c])
        rounds = f"{len(self.rounds)} round{'s' if len(self.rounds) != 1 else ''}"
        answer = "answer changed" if self.answer_changed else "the same answer"
        return f"{rounds}; steps: {steps or 'none'}; {answer}"

    def __repr__(self) -> str:  # deterministic: no timings, no addresses (nbval compares it)
        live = ", live" if self.live else ""
        return f"RunComparison({self._title()}: {self._counts()}{live})"

    def _figures(self) -> list[tuple[str, str, str, str]]:
        """(what, a's, b's, b - a) for the figures both sides have."""
        a, b = self.a, self.b
        return [
            ("status", a.status + (" (live)" if a.live else ""), b.status + (" (live)" if b.live else ""), ""),
            ("models", ", ".join(a.models) or "-", ", ".join(b.models) or "-", ""),
            ("tokens", str(a.usage.total_tokens), str(b.usage.total_tokens),
             f"{b.usage.total_tokens - a.usage.total_tokens:+d}"),
            ("cost", _money(a.cost), _money(b.cost), _delta(a.cost, b.cost, money=True)),
            ("seconds", _seconds(a.seconds), _seconds(b.seconds), _delta(a.seconds, b.seconds)),
            ("calls", _calls(a.calls), _calls(b.calls), ""),
        ]  # fmt: skip

    def __str__(self) -> str:
        width = max(len(self.a.label), len(self.b.label), 12)
        lines = [f"{self._title()}: {self._counts()}", f"{'':8} {self.a.label:<{width}} {self.b.label:<{width}} b - a"]
        lines += [
            f"{what:8} {cut(x, width):<{width}} {cut(y, width):<{width}} {d}" for what, x, y, d in self._figures()
        ]
        lines += [
            f"{name} differs: {cut(str(x), 60)!s} -> {cut(str(y), 60)!s}" for name, (x, y) in self.differences.items()
        ]
        for pair in self.rounds:
            lines.append(f"{_round_name(pair)}:")
            for step in pair.steps:
                what = step.change + (f" ({', '.join(step.fields)})" if step.fields else "")
                lines.append(f"  {_ref(step):10} {what:30} {cut(_task(step), 60)}")
        lines.append("answer: " + ("changed" if self.answer_changed else "the same"))
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        md = _markdown_text
        lines = [f"**dagmagic compare** · {md(self._title())}", "", md(self._counts()), ""]
        lines += [f"| | {md(self.a.label)} | {md(self.b.label)} | b − a |", "|---|---|---|---|"]
        lines += [f"| {what} | {md(x)} | {md(y)} | {md(d)} |" for what, x, y, d in self._figures()]
        if self.differences:
            lines += ["", "**Differences before anything ran**", ""]
            lines += [f"- {md(name)}: {md(cut(str(x), 200))} → {md(cut(str(y), 200))}"
                      for name, (x, y) in self.differences.items()]  # fmt: skip
        for pair in self.rounds:
            lines += ["", f"**{_round_name(pair)}**", "", "| step | change | task | result | tokens | s |",
                      "|---|---|---|---|---|---|"]  # fmt: skip
            for step in pair.steps:
                what = step.change + (f" ({', '.join(step.fields)})" if step.fields else "")
                result = _pieces_html(step.result, 600) if step.result else md(cut(_result(step), 300))
                figures = (_tokens_cell(step), _seconds_cell(step))
                lines.append(f"| {md(_ref(step))} | {what} | {md(cut(_task(step), 200))} | {result} | "
                             + " | ".join(md(f) for f in figures) + " |")  # fmt: skip
            lines += _verdict_lines(pair)
        lines += ["", "**Answers**" + ("" if self.answer_changed else " (the same)"), ""]
        lines.append(_pieces_html(self.answer, 4000) or "(none)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        head = f"<tr><th></th><th>{e(self.a.label)}</th><th>{e(self.b.label)}</th><th>b − a</th></tr>"
        figures = "".join(
            f"<tr><th style='text-align:left'>{what}</th>" + "".join(f"<td>{e(c)}</td>" for c in (x, y, d)) + "</tr>"
            for what, x, y, d in self._figures()
        )
        differences = "".join(
            f"<li>{e(name)}: {e(cut(str(x), 200))} → {e(cut(str(y), 200))}</li>"
            for name, (x, y) in self.differences.items()
        )
        rounds = "".join(_round_html(pair) for pair in self.rounds)
        answer = _pieces_html(self.answer, 4000) or "(none)"
        same = "" if self.answer_changed else " (the same)"
        return no_math(
            f'<div class="dagmagic-compare" style="color: var(--jp-content-font-color1, inherit)">'
            f"<p><b>dagmagic compare</b> · {e(self._title())}</p><p>{e(self._counts())}</p>"
            f"<table>{head}{figures}</table>"
            + (f"<p><b>Differences before anything ran</b></p><ul>{differences}</ul>" if differences else "")
            + f"{rounds}<p><b>Answers</b>{same}</p><div style='white-space: pre-wrap'>{answer}</div></div>"
        )


class ExperimentComparison(BaseModel):
    """Two configs of an experiment case by case (``dagmagic.compare(experiment, "a", "b")``): one
    ``RunComparison`` per case (its first repetition), sides named ``config NAME``.
    """

    experiment: str
    """The experiment's name."""
    a: str
    """The first config's name."""
    b: str
    """The second config's name."""
    cases: dict[str, RunComparison] = Field(default_factory=dict)
    """Case id -> the comparison of its two cells."""
    missing: dict[str, str] = Field(default_factory=dict)
    """Case id -> why it could not be compared (a cell not run yet, its run not kept)."""

    def __repr__(self) -> str:
        changed = sum(1 for c in self.cases.values() if c.changed_steps or c.answer_changed)
        missing = f", {len(self.missing)} not compared" if self.missing else ""
        return (f"ExperimentComparison({self.experiment!r}, config {self.a} vs config {self.b}: "
                f"{len(self.cases)} cases, {changed} differ{missing})")  # fmt: skip

    def __str__(self) -> str:
        parts = [repr(self)]
        parts += [f"--- case {case}\n{comparison}" for case, comparison in self.cases.items()]
        parts += [f"--- case {case}: {why}" for case, why in self.missing.items()]
        return "\n".join(parts)

    def _repr_markdown_(self) -> str:
        md = _markdown_text
        parts = [f"**{md(repr(self))}**"]
        parts += [f"### case {md(case)}\n\n{comparison._repr_markdown_()}" for case, comparison in self.cases.items()]
        parts += [f"- case {md(case)}: {md(why)}" for case, why in self.missing.items()]
        return "\n\n".join(parts)

    def _repr_html_(self) -> str:
        e = html.escape
        parts = [f"<p><b>{e(repr(self))}</b></p>"]
        parts += [f"<details><summary>case {e(case)}</summary>{comparison._repr_html_()}</details>"
                  for case, comparison in self.cases.items()]  # fmt: skip
        parts += [f"<p>case {e(case)}: {e(why)}</p>" for case, why in self.missing.items()]
        return no_math("".join(parts))


# --- dagmagic.compare ---------------------------------------------------------------------------------

RunLike = DagRun | RunState | str | Any
"""What ``dagmagic.compare`` takes for a run: a ``DagRun`` (live or finished), a run read back (``load_run``, a
``StoredRun``), or a run id (read from the run store)."""


def compare(
    a: RunLike | Experiment,
    b: RunLike | Cell | int | None = None,
    c: str | Cell | int | None = None,
    *,
    rounds: tuple[int, int] | None = None,
    store: str | None = None,
    repetition: int = 0,
) -> RunComparison | ExperimentComparison:
    """Two runs side by side: their goals and settings, their plans step by step (matched by task, tool and
    arguments), results word by word, statuses, models, tokens, cost and time with the deltas, verdicts, answers.

    - ``compare(a, b)``: two runs (``DagRun``s, runs read back, or run ids read from ``store``, default
      ``DAG_STORE``), round by round. A run still going is compared as it stands (``live``): compare again for
      more.
    - ``compare(run, rounds=(1, 2))``: two rounds of one run; ``compare(a, b, rounds=(1, 2))``: a's round 1 with
      b's round 2.
    - ``compare(run)``: a run whose latest round re-ran or continued from an earlier one (``run.rerun``,
      ``run.what_if``), that round with the round it came from.
    - ``compare(experiment, "small", "large")``: two configs of an experiment, case by case (an
      ``ExperimentComparison``; ``repetition=`` which one); ``compare(experiment, cell, cell)``: two of its cells
      (``Cell``s or their indexes).
    """
    if isinstance(a, Experiment):
        return _experiment(a, b, c, repetition=repetition, rounds=rounds)
    if c is not None:
        raise TypeError("compare(a, b) takes two runs; three arguments are for an experiment: compare(experiment, "
                        "'config_a', 'config_b')")  # fmt: skip
    first = _run(a, store)
    if b is None:
        if rounds is None:
            rounds = _came_from(first)
        return RunComparison.between(first, first, rounds=rounds)
    return RunComparison.between(first, _run(b, store), rounds=rounds)


def _run(run: object, store: str | None) -> Comparable:
    if isinstance(run, DagRun | RunState):
        return run
    if isinstance(run, str):
        path = store if store is not None else DagSettings().store_path
        if path is None:
            raise ConfigurationError(f"cannot read run {run}: there is no run store (DAG_STORE is none); pass store=")
        try:
            stored = RunStore.open(path).load(run)
        except KeyError:
            raise DagError(f"no run {run!r} in the run store {path}: `%dag history` lists its runs") from None
        return DagRun(stored.state, events=stored.events, read_only=True)
    if isinstance(getattr(run, "state", None), RunState):  # a StoredRun
        return cast("Comparable", run)
    raise TypeError(
        f"cannot compare a {type(run).__name__}: give runs (a DagRun, dagmagic.load_run(id)) or run ids; for an "
        "experiment, compare(experiment, 'config_a', 'config_b')"
    )


def _came_from(run: Comparable) -> tuple[int, int]:
    """(the round the latest round came from, the latest round), for ``compare(run)``."""
    state = _state(run)
    latest = state.rounds[-1] if state.rounds else None
    if latest is None or latest.rerun_of is None:
        raise DagError(
            f"run {state.run_id}'s latest round did not re-run or continue from an earlier one: compare two of its "
            "rounds, compare(run, rounds=(1, 2)), or another run, compare(run, other)"
        )
    return latest.rerun_of, latest.index


def _experiment(
    experiment: Experiment, b: object, c: object, *, repetition: int, rounds: tuple[int, int] | None
) -> RunComparison | ExperimentComparison:
    configs = experiment.definition.configs
    if isinstance(b, str) and isinstance(c, str):
        for name in (b, c):
            if name not in configs:
                raise DagError(f"no config {name!r} in experiment {experiment.name!r}; it has {', '.join(configs)}")
        comparison = ExperimentComparison(experiment=experiment.name, a=b, b=c)
        for case in experiment.cases:
            cells = [_cell(experiment, case.id, name, repetition) for name in (b, c)]
            try:
                comparison.cases[case.id] = _cells(experiment, cells[0], cells[1], rounds=rounds)
            except KeyError as exc:  # a cell not run yet, or its run kept nowhere
                comparison.missing[case.id] = str(exc.args[0] if exc.args else exc)
        return comparison
    if isinstance(b, Cell | int) and isinstance(c, Cell | int) and not isinstance(b, bool) and not isinstance(c, bool):
        cells = [experiment.cells[x] if isinstance(x, int) else x for x in (b, c)]
        return _cells(experiment, cells[0], cells[1], rounds=rounds)
    raise TypeError(
        "compare(experiment, a, b) takes two config names, compare(experiment, 'small', 'large'), or two of its "
        "cells (Cells or their indexes)"
    )


def _cell(experiment: Experiment, case_id: str, config: str, repetition: int) -> Cell:
    for cell in experiment.cells:
        if (cell.case_id, cell.config, cell.repetition) == (case_id, config, repetition):
            return cell
    raise DagError(f"experiment {experiment.name!r} has no repetition {repetition} (repetitions start at 0)")


def _cells(experiment: Experiment, first: Cell, second: Cell, *, rounds: tuple[int, int] | None) -> RunComparison:
    runs = (experiment.run_of(first), experiment.run_of(second))
    described = experiment.definition.config_descriptions
    labels = [f"config {cell.config}" for cell in (first, second)]
    if labels[0] == labels[1]:  # two cells of one config: its repetitions, or two cases
        labels = [
            f"{label} · {cell.case_id} #{cell.repetition}" for label, cell in zip(labels, (first, second), strict=True)
        ]
    settings = [
        _config_settings(described[cell.config]) if cell.config in described else {} for cell in (first, second)
    ]
    return RunComparison.between(
        runs[0], runs[1], rounds=rounds, labels=(labels[0], labels[1]), settings=(settings[0], settings[1])
    )


def _config_settings(description: Any) -> dict[str, Any]:
    """A config's definition as settings: each role's model, the settings, the tools."""
    settings: dict[str, Any] = {f"{role} model": name for role, name in description.models.items()}
    settings.update(description.settings)
    if description.tools is not None:
        settings["tools"] = description.tools
    return settings


class _CallableModule(types.ModuleType):
    """The module, callable as ``compare``: importing ``dagmagic.compare`` puts the module where the package's
    ``compare`` function was (Python sets a package's attribute to its submodule); ``dagmagic.compare(a, b)``
    must work either way.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> RunComparison | ExperimentComparison:
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


# --- reading the runs -----------------------------------------------------------------------------


def _state(run: Comparable) -> RunState:
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


def _settings(run: Comparable) -> dict[str, Any]:
    """The settings the run's start recorded (those not the defaults, secrets masked); {} for a state alone."""
    events: Sequence[Event] = getattr(run, "events", None) or ()
    started = next((e for e in events if isinstance(e, RunStarted) and not e.depth), None)
    return dict(started.settings) if started is not None else {}


def _default(name: str) -> Any:
    """A setting's default, as a run's start records settings (JSON); None for a name that is no setting."""
    field = DagSettings.model_fields.get(name)
    return None if field is None else field.get_default(call_default_factory=True)


def _side(run: Comparable, state: RunState, index: int | None, settings: dict[str, Any], label: str | None) -> Side:
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
        answer = (record.analysis.final_answer if record.analysis is not None else None) or ""
    usage = Usage.total(call.usage for call in calls)
    status = getattr(run, "status_words", state.status)
    return Side(
        label=label or (f"round {index}" if index is not None else f"run {state.run_id}"),
        run_id=state.run_id, round=index, goal=state.goal, status=str(status), live=live, settings=settings,
        models=list(dict.fromkeys(call.model for call in calls)), usage=usage, cost=usage.cost, seconds=seconds,
        answer=answer or "", calls=dict(Counter(call.purpose for call in calls)),
        forked_from=getattr(state, "forked_from", None),
    )  # fmt: skip


def _round_seconds(record: RoundRecord, calls: list[LLMCall]) -> float | None:
    starts = [s.started_at for s in record.plan.steps if s.started_at] + [c.started_at for c in calls if c.started_at]
    ends = [s.completed_at for s in record.plan.steps if s.completed_at]
    ends += [c.started_at + c.latency for c in calls if c.started_at]
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


@functools.lru_cache(maxsize=1024)  # a live comparison is made again on every update: the same texts, mostly
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


# --- view helpers -------------------------------------------------------------------------------------

_DEL = "background: var(--jp-error-color3, #fdd); color: var(--jp-content-font-color1, inherit)"
_INS = "background: var(--jp-success-color3, #dfd); color: var(--jp-content-font-color1, inherit)"


def _pieces_html(pieces: Iterable[Piece], limit: int) -> str:
    """The pieces as escaped HTML, removed words in ``<del>``, added ones in ``<ins>`` (about ``limit`` chars)."""
    out, left = [], limit
    for piece in pieces:
        if left <= 0:
            out.append("…")
            break
        text = html.escape(" ".join(piece.text.split()) + (" " if piece.text[-1:].isspace() else ""))[:left]
        left -= len(text)
        tag = {"same": "", "removed": "del", "added": "ins"}[piece.op]
        out.append(f"<{tag} style='{_DEL if tag == 'del' else _INS}'>{text}</{tag}>" if tag else text)
    return "".join(out).replace("|", "&#124;")


def _round_name(pair: RoundPair) -> str:
    if pair.a is None:
        return f"round {pair.b}: only in b"
    if pair.b is None:
        return f"round {pair.a}: only in a"
    return f"round {pair.a}" if pair.a == pair.b else f"round {pair.a} vs round {pair.b}"


def _ref(pair: StepPair) -> str:
    a, b = pair.a.ref if pair.a else None, pair.b.ref if pair.b else None
    return a or b or "" if a == b or not (a and b) else f"{a} / {b}"


def _task(pair: StepPair) -> str:
    step = pair.b or pair.a
    return step.task if step is not None else ""


def _result(pair: StepPair) -> str:
    step = pair.b or pair.a
    return (step.result or step.error or "") if step is not None else ""


def _tokens_cell(pair: StepPair) -> str:
    """The tokens' delta when both ran, else the tokens of the one step there is."""
    if pair.tokens_delta is not None:
        return f"{pair.tokens_delta:+d}"
    step = pair.b or pair.a
    return str(step.tokens) if step is not None else ""


def _seconds_cell(pair: StepPair) -> str:
    return f"{pair.seconds_delta:+.1f}" if pair.seconds_delta is not None else ""


def _verdict_lines(pair: RoundPair) -> list[str]:
    a, b = _verdict_words(pair.verdict_a), _verdict_words(pair.verdict_b)
    return ["", f"Verdict: {a}" + ("" if a == b else f" → {b}")]


def _round_html(pair: RoundPair) -> str:
    e = html.escape
    rows = []
    for step in pair.steps:
        what = step.change + (f" ({', '.join(step.fields)})" if step.fields else "")
        result = _pieces_html(step.result, 2000) if step.result else e(cut(_result(step), 1000))
        cells = (
            e(_ref(step)),
            e(what),
            e(cut(_task(step), 300)),
            result,
            e(_tokens_cell(step)),
            e(_seconds_cell(step)),
        )
        rows.append(
            "<tr>" + "".join(f"<td style='text-align:left; vertical-align:top'>{c}</td>" for c in cells) + "</tr>"
        )
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in ("step", "change", "task", "result", "tokens", "s")) + "</tr>"
    verdict = _verdict_lines(pair)[1]
    return f"<p><b>{e(_round_name(pair))}</b></p><table>{head}{''.join(rows)}</table><p>{e(verdict)}</p>"


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _delta(a: float | None, b: float | None, *, money: bool = False) -> str:
    if a is None or b is None:
        return ""
    return f"{'+' if b >= a else '-'}${abs(b - a):.4f}" if money else f"{b - a:+.1f}"


def _calls(calls: dict[str, int]) -> str:
    return ", ".join(f"{purpose} {count}" for purpose, count in calls.items()) or "-"
