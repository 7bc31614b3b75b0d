"""``%dag history``, ``show``, ``trace``, ``diff`` and ``export``: the runs listed, shown again, compared, copied."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from dagmagic.errors import DagError
from dagmagic.notebook._arguments import expand_variables, parse_words, when
from dagmagic.notebook.session import NO_STORE, NotebookSession

if TYPE_CHECKING:
    from dagmagic.store import ExperimentSummary

__all__ = ["diff", "export", "history", "show", "trace"]

_HISTORY_ROWS = 20
_EXPERIMENT_ROWS = 10
_NOT_DONE = ("failed", "running", "cancelled", "pending", "not_started")
"""Cell statuses ``%dag history`` counts after the done ones, in this order."""


def history(notebook: NotebookSession, _: str) -> None:
    """``%dag history``: the stored runs (or, without a store, this kernel's), then the experiments."""
    from dagmagic.engine import STOPPED_BY_YOU
    from dagmagic.store import HOST, ExperimentSummary

    store = notebook.store()
    numbers = {run_id: number for number, run_id in enumerate(notebook.numbers, 1)}
    if store is None:
        if not notebook.runs:
            print("No runs yet.")
        for run in notebook.runs:
            print(
                _history_line(
                    numbers.get(run.run_id), run.run_id, run.status_words, run.state.started_at, run.cost, run.goal
                )
            )
        _experiments_history(
            ExperimentSummary(
                experiment.id,
                experiment.name,
                experiment.definition.created_at,
                dict(Counter(cell.status for cell in experiment.cells)),
                _total(cell.cost for cell in experiment.cells),
            )
            for experiment in reversed(notebook.experiments[-_EXPERIMENT_ROWS:])
        )
        return
    summaries = store.runs(limit=_HISTORY_ROWS)
    if not summaries:
        print(f"No runs yet in {store.path}.")
    shared = any(summary.host != HOST for summary in summaries)  # a team's store: say which machine ran each
    for summary in summaries:
        status = "interrupted" if summary.interrupted else STOPPED_BY_YOU if summary.stopped_by_user else summary.status
        number = numbers.get(summary.run_id)
        host = summary.host if shared else None
        print(_history_line(number, summary.run_id, status, summary.started_at, summary.cost, summary.goal, host))
    if any(summary.interrupted for summary in summaries):
        print("`%dag resume RUN` continues an interrupted run.")
    _experiments_history(store.experiments(limit=_EXPERIMENT_ROWS))


def _experiments_history(summaries: Iterable[ExperimentSummary]) -> None:
    """The second part of ``%dag history``: the latest experiments (none: nothing is said)."""
    listed = list(summaries)
    if not listed:
        return
    print("Experiments:")
    for summary in listed:
        statuses = summary.statuses
        others = "".join(
            f" · {statuses[status]} {status.replace('_', ' ')}" for status in _NOT_DONE if statuses.get(status)
        )
        cells = f"{statuses.get('done', 0)} of {summary.cells} cells done{others}"
        price = f"${summary.cost:.4f}" if summary.cost is not None else "-"
        print(f"     {summary.experiment_id}  {summary.name[:24]:24}  {when(summary.created_at)}  {price:>9}  {cells}")
    unfinished = next((summary for summary in listed if summary.finished < summary.cells), None)
    if unfinished is not None:
        print(f"`%dag resume {unfinished.name}` runs the cells of an experiment that did not end.")


def _total(costs: Iterable[float | None]) -> float | None:
    known = [cost for cost in costs if cost is not None]
    return sum(known) if known else None


def show(notebook: NotebookSession, rest: str) -> None:
    """``%dag show [RUN]``: the run's view again."""
    from dagmagic.notebook.display import show_live

    show_live(notebook.find(rest))


def trace(notebook: NotebookSession, rest: str) -> None:
    """``%dag trace [RUN]``: every LLM call of the run."""
    from dagmagic.notebook.progress import trace_table

    print(trace_table(notebook.find(rest)))


def diff(notebook: NotebookSession, rest: str) -> Any:
    """``%dag diff A B [RUN]``: what changed between two rounds; ``%dag diff RUN``: between a replay and the run
    it replays.
    """
    words = shlex.split(rest)
    if len(words) == 1:
        replayed = notebook.find(words[0])
        if replayed.replay_of is None:
            raise UsageError(
                f"run {replayed.run_id} replays no run: `%dag diff RUN` compares a replay with its original; "
                "`%dag diff A B [RUN]` compares two rounds"
            )
        return replayed.diff(notebook.find(replayed.replay_of))
    args = parse_words("diff", rest, ("a", "b"), (), optional=("run",))
    run = notebook.find(args.run or "")
    try:
        return run.diff(int(args.a), int(args.b))
    except ValueError:
        raise UsageError(f"%dag diff takes two round numbers, got {args.a!r} and {args.b!r}") from None
    except DagError as exc:
        raise UsageError(str(exc)) from None


def export(notebook: NotebookSession, rest: str) -> None:
    """``%dag export PATH``: a copy of the run store that is safe to move, share or back up."""
    args = parse_words("export", expand_variables(rest, notebook.namespace), ("PATH",), ())
    store = notebook.store()
    if store is None:
        path = notebook.settings(notebook.magics.parse("")).store_path
        raise UsageError(f"nothing to export: {NO_STORE if path is None else f'there is no run store at {path} yet'}")
    try:
        target = store.export(args.PATH)
    except DagError as exc:
        raise UsageError(str(exc)) from None
    print(f"Copied the run store {store.path} to {target}.")


def _history_line(
    number: int | None,
    run_id: str,
    status: str,
    started: float | None,
    cost: float | None,
    goal: str,
    host: str | None = None,
) -> str:
    price = f"${cost:.4f}" if cost is not None else "-"
    machine = f"{host[:20]:20}  " if host is not None else ""
    return f"{number or '':>3}  {run_id}  {status:14}  {when(started)}  {price:>9}  {machine}{goal[:60]!r}"
