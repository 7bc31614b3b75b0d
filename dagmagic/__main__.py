"""``python -m dagmagic``: the goal loop from a terminal. ``demo`` runs ``%dag demo``'s scripted run offline."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagmagic.engine import DagRun
    from dagmagic.events import Event

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (the command line when None), run the subcommand, return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m dagmagic",
        description="dagmagic: plan a goal as a DAG of steps, run them in parallel, judge, replan, answer.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands.add_parser(
        "demo",
        help="watch a whole run offline: a scripted model, two tools, a failing step and a replan (no API key)",
        description="Run the scripted demo of `%dag demo` in this terminal: no network, no API key.",
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo()
    parser.error(f"unknown command {args.command!r}")  # argparse refuses it first; kept for new subcommands


def _demo() -> int:
    from dagmagic.notebook.demo import DEMO_GOAL  # the goal alone: the engine loads after it is on screen

    print(f"Goal: {DEMO_GOAL}\n(offline: a scripted model plays every role)\n", flush=True)
    run = asyncio.run(_run_demo())
    return 0 if run.status == "done" else 1


async def _run_demo() -> DagRun:
    from dagmagic.notebook.demo import DEMO_GOAL, demo_session

    run = demo_session().start(DEMO_GOAL)
    unsubscribe = run.subscribe(_print_demo_progress)
    try:
        return await run.wait(cancel_with_waiter=True)
    finally:
        unsubscribe()


def _print_demo_progress(event: Event) -> None:
    """The progress lines, and one when a model call begins that prints nothing until it ends (planning,
    judging): a terminal that shows nothing for seconds looks stuck.
    """
    from dagmagic.events import AnswerReady, PhaseChanged
    from dagmagic.notebook.progress import print_progress
    from dagmagic.notebook.terminal_text import terminal_text

    if isinstance(event, PhaseChanged) and not event.depth and event.round is not None:
        doing = {"planning": "planning…", "analyzing": "judging the round…"}.get(event.phase)
        if doing:
            print(f"[round {event.round}] {doing}", flush=True)
    if isinstance(event, AnswerReady):  # Markdown, as a terminal shows it (no ** or |---|)
        event = event.model_copy(update={"answer": terminal_text(event.answer)})
    print_progress(event)


if __name__ == "__main__":
    sys.exit(main())
