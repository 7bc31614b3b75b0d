"""Offers to resume: a ``%%dag`` cell whose goal's last run did not end shows that run with Resume and Start
over instead of starting again; a run's view offers Resume when the run is cancelled (its store keeps it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagmagic.notebook._arguments import when

if TYPE_CHECKING:
    from dagmagic.engine import DagRun
    from dagmagic.notebook.session import NotebookSession
    from dagmagic.store import RunSummary

__all__ = ["interrupted_run", "offer_in_widget", "offer_resume"]


def interrupted_run(notebook: NotebookSession, goal: str, options: dict[str, Any]) -> RunSummary | None:
    """The latest stored run of ``goal`` when it did not end (and does not run here); ``options``: the cell's."""
    store = notebook.session(options).store_for(options["settings"])
    if store is None:
        return None
    latest = next(iter(store.runs(1, goal=goal)), None)
    if latest is None or not latest.interrupted or notebook.running_here(latest.run_id):
        return None
    return latest


def offer_resume(
    notebook: NotebookSession, goal: str, summary: RunSummary, options: dict[str, Any], args: Any, line: str
) -> DagRun:
    """Show the interrupted run, read back, with Resume and Start over; the cell ends at once."""
    from dagmagic.engine import DagRun

    store = notebook.session(options).store_for(options["settings"])
    assert store is not None
    stored = store.load(summary.run_id)
    run = DagRun(stored.state, events=stored.events, read_only=True)
    steps = [step for record in run.rounds for step in record.plan.steps]
    done = sum(step.status == "completed" for step in steps)
    print(
        f"The last run of this goal ({run.run_id}, {when(summary.started_at)}) did not end: "
        f"{done} of {len(steps)} steps completed. Resume it with the view's Resume button or "
        f"`%dag resume {run.run_id}`; `%%dag --restart` starts over."
    )
    if notebook.magics.widget and not args.no_widget:
        offer_in_widget(notebook, run, args, line, goal=goal)
    else:
        from dagmagic.notebook.display import render_static

        render_static(run)
    return run


def offer_in_widget(notebook: NotebookSession, run: DagRun, args: Any, line: str, *, goal: str | None = None) -> None:
    """Let the run's view resume it (and start its goal over) when it ends without an end."""
    from dagmagic.notebook.display import widget_for

    widget = widget_for(run)

    def going_on(started: DagRun) -> DagRun:
        if args.output:
            notebook.namespace[args.output] = started
        return started

    def resume() -> DagRun:
        return going_on(notebook.resume(widget.run.run_id, args, line))

    def restart() -> DagRun:
        return going_on(notebook.start(goal or widget.run.goal, args, line))

    widget.on_resume, widget.on_restart = resume, restart
    widget.sync()
