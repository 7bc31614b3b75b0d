"""Two runs side by side (``dagmagic.compare(a, b)``): what differs in their goals and settings, their plans aligned
step by step (matched as ``RoundDiff`` matches them: task, tool, arguments), each pair's results with the words that
differ marked, statuses, models, tokens, cost and time with their deltas, the verdicts, the answers and the calls
per purpose. Two rounds of one run compare the same way (``compare(run, rounds=(1, 2))``), and two configs of an
experiment case by case (``compare(experiment, "small", "large")``).

A ``RunComparison`` is plain data: the compare widget draws it, its Markdown and HTML views stand in for the widget
in a saved notebook. Its parts are read in ``dagmagic.comparison``, its views written in
``dagmagic.comparison_views``; this module takes what the user gives (runs, ids, an experiment).
"""

from __future__ import annotations

import html
from typing import Any, cast

from pydantic import BaseModel, Field

from dagmagic import comparison_views as views
from dagmagic.comparison import (
    Comparable,
    Piece,
    RoundPair,
    Side,
    SideStep,
    StepPair,
    compared_rounds,
    differences,
    settings_of,
    side_of,
    state_of,
    word_pieces,
)
from dagmagic.diff import _markdown_text
from dagmagic.engine import DagRun
from dagmagic.errors import ConfigurationError, DagError
from dagmagic.evaluation import Cell, Experiment
from dagmagic.evaluation.configs import ConfigDescription
from dagmagic.models import RunState
from dagmagic.models._text import no_math
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
        states = (state_of(a), state_of(b))
        given = settings or (settings_of(a), settings_of(b))
        sides = [
            side_of(run, states[i], None if rounds is None else rounds[i], given[i], labels[i] if labels else None)
            for i, run in enumerate((a, b))
        ]
        return cls(
            a=sides[0], b=sides[1], differences=differences(sides[0], sides[1]),
            rounds=compared_rounds(states[0], states[1], rounds), answer=word_pieces(sides[0].answer, sides[1].answer),
        )  # fmt: skip

    def __repr__(self) -> str:  # deterministic: no timings, no addresses (nbval compares it)
        live = ", live" if self.live else ""
        return f"RunComparison({views.title(self)}: {views.counts(self)}{live})"

    def __str__(self) -> str:
        return views.text(self)

    def _repr_markdown_(self) -> str:
        return views.markdown(self)

    def _repr_html_(self) -> str:
        return views.page(self)


class ExperimentComparison(BaseModel):
    """Two configs of an experiment case by case (``dagmagic.compare(experiment, "a", "b")``): one
    ``RunComparison`` per case (one repetition, the first by default), sides named ``config NAME``.
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

    def _rows(self) -> list[tuple[str, ...]]:
        return [(case, *views.summary(comparison)) for case, comparison in self.cases.items()] + [
            (case, f"not compared: {why}", "", "", "", "", "") for case, why in self.missing.items()
        ]

    def __str__(self) -> str:
        lines = [repr(self), " | ".join(("case", *views.SUMMARY_COLUMNS))]
        lines += [" | ".join(row) for row in self._rows()]
        lines += [f"--- case {case}\n{comparison}" for case, comparison in self.cases.items()]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        md = _markdown_text
        head = ("case", *views.SUMMARY_COLUMNS)
        table = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
        table += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in self._rows()]
        parts = [f"**{md(repr(self))}**", "\n".join(table)]
        parts += [f"### case {md(case)}\n\n{comparison._repr_markdown_()}" for case, comparison in self.cases.items()]
        return "\n\n".join(parts)

    def _repr_html_(self) -> str:
        e = html.escape
        head = "".join(f"<th>{e(name)}</th>" for name in ("case", *views.SUMMARY_COLUMNS))
        rows = "".join("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>" for row in self._rows())
        parts = [f"<p><b>{e(repr(self))}</b></p><table><tr>{head}</tr>{rows}</table>"]
        parts += [f"<details><summary>case {e(case)}</summary>{comparison._repr_html_()}</details>"
                  for case, comparison in self.cases.items()]  # fmt: skip
        return no_math("".join(parts))


RunLike = Comparable | str
"""What ``dagmagic.compare`` takes for a run: a ``DagRun`` (live or finished), a run read back (``load_run``, a
``StoredRun``), or a run id (read from the run store)."""


def compare(
    a: RunLike | Experiment,
    b: RunLike | Cell | int | None = None,
    c: str | Cell | int | None = None,
    *,
    rounds: tuple[int, int] | None = None,
    store: str | None = None,
    repetition: int = 1,
) -> RunComparison | ExperimentComparison:
    """Two runs side by side: their goals and settings, their plans step by step (matched by task, tool and
    arguments), results word by word, statuses, models, tokens, cost and time with the deltas, verdicts, answers.

    - ``compare(a, b)``: two runs (``DagRun``s, runs read back, or run ids read from ``store``, default
      ``DAG_STORE``), round by round. A run still going is compared as it stands (``live``): compare again for
      more.
    - ``compare(run, rounds=(1, 2))``: two rounds of one run; ``compare(a, b, rounds=(1, 2))``: a's round 1 with
      b's round 2.
    - ``compare(run)``: a run whose latest round re-ran or continued from an earlier one (``run.rerun``,
      ``run.what_if``), that round with the round it came from; a fork (``run.fork``), with the run it was
      forked from (read from ``store``).
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
        state = state_of(first)
        if rounds is None and state.forked_from and not (state.rounds and state.rounds[-1].rerun_of is not None):
            return RunComparison.between(_parent(state, store), first)
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


def _parent(state: RunState, store: str | None) -> Comparable:
    """The run a fork was forked from, read from ``store`` (default ``DAG_STORE``)."""
    assert state.forked_from is not None
    try:
        return _run(state.forked_from, store)
    except (ConfigurationError, DagError):
        raise DagError(
            f"run {state.run_id} was forked from run {state.forked_from}, which no run store here holds: compare the "
            "two as compare(original, forked)"
        ) from None


def _came_from(run: Comparable) -> tuple[int, int]:
    """(the round the latest round came from, the latest round), for ``compare(run)``."""
    state = state_of(run)
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
        for index in (x for x in (b, c) if isinstance(x, int) and not 0 <= x < len(experiment.cells)):
            raise DagError(
                f"experiment {experiment.name!r} has no cell {index}: its cells are 0 to {len(experiment.cells) - 1}"
            )
        cells = [experiment.cells[x] if isinstance(x, int) else x for x in (b, c)]
        try:
            return _cells(experiment, cells[0], cells[1], rounds=rounds)
        except KeyError as exc:  # a cell not run yet, or its run kept nowhere
            raise DagError(str(exc.args[0] if exc.args else exc)) from None
    raise TypeError(
        "compare(experiment, a, b) takes two config names, compare(experiment, 'small', 'large'), or two of its "
        "cells (Cells or their indexes)"
    )


def _cell(experiment: Experiment, case_id: str, config: str, repetition: int) -> Cell:
    for cell in experiment.cells:
        if (cell.case_id, cell.config, cell.repetition) == (case_id, config, repetition):
            return cell
    raise DagError(f"experiment {experiment.name!r} has no repetition {repetition} (they are numbered from 1)")


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


def _config_settings(description: ConfigDescription) -> dict[str, Any]:
    """A config's definition as settings: each role's model, the settings, the tools."""
    settings: dict[str, Any] = {f"{role} model": name for role, name in description.models.items()}
    settings.update(description.settings)
    if description.tools is not None:
        settings["tools"] = description.tools
    return settings
