"""``%dag history``, ``show``, ``trace``, ``diff`` and ``export``: the runs listed, shown again, compared, copied."""

from __future__ import annotations

import os
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from dagmagic.errors import DagError
from dagmagic.notebook._arguments import expand_variables, parse_words, when
from dagmagic.notebook.session import NO_STORE, NotebookSession

if TYPE_CHECKING:
    from dagmagic.store import ExperimentSummary

__all__ = ["diff", "export", "history", "show", "trace"]

_HISTORY_ROWS = 20
_STORE_ROWS = 1000
"""Runs read from the store to find this notebook's (and to count the store's: ``1000+`` beyond)."""
_GOAL_CHARS = 60
_EXPERIMENT_ROWS = 10
_NOT_DONE = ("failed", "running", "cancelled", "pending", "not_started")
"""Cell statuses ``%dag history`` counts after the done ones, in this order."""


def history(notebook: NotebookSession, rest: str) -> None:
    """``%dag history [--all]``: this notebook's stored runs (``--all``, or a kernel that does not know its
    notebook: the whole store's; without a store, this kernel's), a table numbered as the other commands take
    them, then the experiments.
    """
    from dagmagic.engine import STOPPED_BY_YOU
    from dagmagic.store import HOST, ExperimentSummary

    every = parse_words("history", rest, (), (), flags=("--all",)).all
    store = notebook.store()
    if store is None:
        rows = [
            _Row(
                run.run_id,
                run.status_words,
                run.state.started_at,
                run.cost,
                _forked(run.goal, run.forked_from, run.forked_at),
            )
            for run in notebook.runs
        ]
        print(f"Runs of this kernel: {len(rows)} (no run store keeps them)." if rows else "No runs yet.")
        _print_runs(notebook, rows)
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
    summaries = store.runs(limit=_STORE_ROWS)
    stored = f"{len(summaries)}{'+' if len(summaries) == _STORE_ROWS else ''}"
    path = this_notebook()
    if every or path is None:  # a kernel that does not know its notebook (a console, a script) lists them all
        listed = summaries
        print(f"All runs in the store {store.path}: {stored}." if summaries else f"No runs yet in {store.path}.")
    else:
        here = set(notebook.numbers) | {  # an experiment's cells are runs of this kernel too
            cell.run_id for experiment in notebook.experiments for cell in experiment.cells if cell.run_id
        }
        listed = [s for s in summaries if s.run_id in here or s.notebook == path]
        print(f"Runs of this notebook: {len(listed)}; %dag history --all for the whole store ({stored}).")
    shared = any(summary.host != HOST for summary in listed)  # a team's store: say which machine ran each
    rows = [
        _Row(
            summary.run_id,
            "interrupted" if summary.interrupted else STOPPED_BY_YOU if summary.stopped_by_user else summary.status,
            summary.started_at,
            summary.cost,
            _forked(summary.goal, summary.forked_from, summary.forked_at),
            summary.host if shared else None,
        )
        for summary in listed[:_HISTORY_ROWS]
    ]
    _print_runs(notebook, rows)
    if len(listed) > _HISTORY_ROWS:
        print(f"(the latest {_HISTORY_ROWS} of {len(listed)})")
    if any(summary.interrupted for summary in listed[:_HISTORY_ROWS]):
        print("`%dag resume N` continues an interrupted run.")
    _experiments_history(store.experiments(limit=_EXPERIMENT_ROWS))


def _forked(goal: str, parent: str | None, at: str | None) -> str:
    """A fork's goal as the history lists it: where it comes from first."""
    return f"(fork of {parent} at {at}) {goal}" if parent else goal


def this_notebook() -> str | None:
    """The path of this kernel's notebook, as Jupyter names it to the kernel (None outside a notebook's kernel);
    a run records it (``RunStarted.notebook``).
    """
    return os.environ.get("JPY_SESSION_NAME") or None


@dataclass
class _Row:
    """One run as ``%dag history`` lists it."""

    run_id: str
    status: str
    started: float | None
    cost: float | None
    goal: str
    host: str | None = None


def _print_runs(notebook: NotebookSession, rows: list[_Row]) -> None:
    """The runs as a table with a header, each numbered as ``%dag show N`` (``replay``, ``trace``...) takes it:
    a run this kernel has no number for yet gets the next one.
    """
    if not rows:
        return
    for row in rows:
        if row.run_id not in notebook.numbers:
            notebook.numbers.append(row.run_id)
    numbers = {run_id: number for number, run_id in enumerate(notebook.numbers, 1)}
    number_width = max(len("#"), *(len(str(numbers[row.run_id])) for row in rows))
    id_width = max(len("run"), *(len(row.run_id) for row in rows))
    status_width = max(len("status"), *(len(row.status) for row in rows))
    machines = any(row.host is not None for row in rows)
    host_width = max(len("machine"), *(len(row.host or "") for row in rows)) if machines else 0
    machine = f"{'machine':{host_width}}  " if machines else ""
    header = f"  {'#':>{number_width}}  {'run':{id_width}}  {'status':{status_width}}  {'started':16}  {'cost':>9}"
    print(f"{header}  {machine}goal")
    for row in rows:
        price = f"${row.cost:.4f}" if row.cost is not None else "-"
        host = f"{row.host or '':{host_width}}  " if machines else ""
        goal = " ".join(row.goal.split())
        goal = goal if len(goal) <= _GOAL_CHARS else f"{goal[: _GOAL_CHARS - 1]}…"
        print(
            f"  {numbers[row.run_id]:>{number_width}}  {row.run_id:{id_width}}  {row.status:{status_width}}  "
            f"{when(row.started):16}  {price:>9}  {host}{goal}"
        )


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
