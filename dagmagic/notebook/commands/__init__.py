"""The ``%dag`` subcommands: each a function of the kernel's ``NotebookSession`` and the rest of the line.

``config`` says and sets what is configured, ``history`` lists, shows and compares runs, ``steering`` passes the
user's word to a running run, ``running`` holds the subcommands that run the loop (``resume``, ``rerun``,
``replay``, ``demo``): alone in a cell they are awaited there (the input transformer rewrites them, like a
``%%dag`` cell), elsewhere ``COMMANDS`` runs them to the end in a terminal or says to run them alone (the demo,
which needs nothing of the user, starts in the background instead: the cell that loads dagmagic may hold it).
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from IPython.core.error import UsageError

from dagmagic.errors import ConfigurationError
from dagmagic.notebook.commands.comparing import compare, comparison
from dagmagic.notebook.commands.config import config, models
from dagmagic.notebook.commands.history import diff, export, history, show, trace
from dagmagic.notebook.commands.running import (
    attach,
    demo,
    demo_in_background,
    fork,
    replay,
    replay_line,
    rerun,
    resume,
)
from dagmagic.notebook.commands.steering import approve, continue_, followup, reject, skip, step, stop
from dagmagic.notebook.session import NotebookSession

__all__ = [
    "COMMANDS",
    "attach",
    "comparison",
    "demo",
    "dispatch",
    "fork",
    "replay",
    "replay_line",
    "rerun",
    "resume",
    "settings_told_in_one_line",
]

Command = Callable[[NotebookSession, str], Any]


def dispatch(notebook: NotebookSession, line: str) -> Any:
    """Run ``%dag <subcommand> ...``."""
    words = shlex.split(line) if line.strip() else []
    if not words:
        raise UsageError(f"%dag needs a subcommand: {', '.join(COMMANDS)} (see %dag?)")
    command, rest = words[0], line.strip()[len(words[0]) :].strip()
    handler = COMMANDS.get(command)
    if handler is None:
        raise UsageError(f"unknown %dag subcommand {command!r}; known: {', '.join(COMMANDS)}")
    with settings_told_in_one_line():
        return handler(notebook, rest)


@contextmanager
def settings_told_in_one_line() -> Iterator[None]:
    """A bad ``DAG_*`` value met by any subcommand is the user's to fix: one line, as ``%%dag`` says it."""
    try:
        yield
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


def _awaited(
    command: str,
    work: Callable[[NotebookSession, str], Coroutine[Any, Any, Any]],
    in_background: Command | None = None,
) -> Command:
    """``work`` for a cell the transformer did not rewrite into an ``await``: run to the end where no loop runs
    (a terminal), else started ``in_background`` when it can be, else refused with what to do.
    """

    def run_here(notebook: NotebookSession, rest: str) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a terminal without autoawait: run it here, to the end
            return asyncio.run(work(notebook, rest))
        if in_background is not None:
            return in_background(notebook, rest)
        raise UsageError(f"run `%dag {command}` alone in its cell (it is awaited there)")

    return run_here


COMMANDS: dict[str, Command] = {
    "models": models,
    "config": config,
    "history": history,
    "show": show,
    "resume": _awaited("resume", resume),
    "rerun": _awaited("rerun", rerun),
    "replay": _awaited("replay", replay),
    "fork": _awaited("fork", fork),
    "attach": _awaited("attach", attach),
    "approve": approve,
    "reject": reject,
    "continue": continue_,
    "step": step,
    "skip": skip,
    "diff": diff,
    "compare": compare,
    "stop": stop,
    "followup": followup,
    "trace": trace,
    "export": export,
    "demo": _awaited("demo", demo, demo_in_background),
}
"""Every subcommand, in the order ``%dag?`` lists them."""
