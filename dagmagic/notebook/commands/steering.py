"""The user's word to a running run: ``%dag approve``, ``reject``, ``continue``, ``step``, ``skip``, ``stop`` and
``followup``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from dagmagic.errors import DagError
from dagmagic.notebook.session import NotebookSession

if TYPE_CHECKING:
    from dagmagic.engine import DagRun

__all__ = ["act", "approve", "continue_", "followup", "reject", "skip", "step", "stop"]


def act(action: Callable[[DagRun], object], run: DagRun) -> None:
    """Do ``action`` to ``run``; what the run refuses is the user's to fix: a ``UsageError``."""
    try:
        action(run)
    except (DagError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def approve(notebook: NotebookSession, rest: str) -> None:
    """``%dag approve [RUN]``: run the plan waiting for approval."""
    act(lambda run: run.approve(), notebook.waiting(rest))


def reject(notebook: NotebookSession, rest: str) -> None:
    """``%dag reject WHY``: plan again, told why."""
    if not rest:
        raise UsageError("%dag reject needs the reason, e.g. %dag reject use one step per country")
    act(lambda run: run.reject(rest), notebook.waiting(""))


def continue_(notebook: NotebookSession, rest: str) -> None:
    """``%dag continue [STEP]``: run the paused step, on to the next breakpoint."""
    act(lambda run: run.resume_step(rest or None), notebook.running())


def step(notebook: NotebookSession, rest: str) -> None:
    """``%dag step [STEP]``: run the paused step, then pause before the next one."""
    act(lambda run: run.step_over(rest or None), notebook.running())


def skip(notebook: NotebookSession, rest: str) -> None:
    """``%dag skip STEP``: skip a paused step, or one not started."""
    if not rest:
        raise UsageError("%dag skip needs the step's id, e.g. %dag skip s3")
    act(lambda run: run.skip(rest), notebook.running())


def stop(notebook: NotebookSession, _: str) -> None:
    """``%dag stop``: answer now from what completed."""
    act(lambda run: run.stop(), notebook.running())


def followup(notebook: NotebookSession, rest: str) -> None:
    """``%dag followup TEXT``: steer the running run."""
    if not rest:
        raise UsageError("%dag followup needs the text of the follow-up")
    run = notebook.running()
    outlook = run.follow_up_outlook  # for the phase it arrives in: the run moves on once it is taken
    act(lambda run: run.follow_up(rest), run)
    print(outlook)
