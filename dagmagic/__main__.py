"""``python -m dagmagic``: the goal loop from a terminal. ``demo`` runs ``%dag demo``'s scripted run offline;
``worker --temporal HOST:PORT FILE`` is a worker on Temporal, running experiment cells and runs sent with ``on=``.
"""

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
    temporal = commands.add_parser(
        "worker",
        help="be a worker on Temporal: run experiment cells and detached runs sent with on=temporal://…",
        description=(
            "Run a dagmagic worker on Temporal until SIGTERM or Ctrl-C. FILE is Python defining what the worker "
            "offers: `models` (a ModelRegistry), and optionally `tools` (what DagSession(tools=) takes), `settings` "
            "(a DagSettings), `configs` (named configs, as session.evaluate takes them) and `allow_code = True` (the "
            "sandboxed python tool). Its run store is DAG_STORE, which must be the one the notebooks use (a "
            "PostgreSQL URL, or a path every worker reaches). On SIGTERM its MCP servers and code sandbox stop with it."
        ),
    )
    temporal.add_argument("file", metavar="FILE", help="what the worker offers, a Python file")
    temporal.add_argument("--temporal", required=True, metavar="HOST:PORT", help="the Temporal service's frontend")
    temporal.add_argument("--namespace", default="default", metavar="NS", help="its namespace (default: default)")
    temporal.add_argument("--task-queue", default="dagmagic", metavar="Q", help="the queue to poll (default: dagmagic)")
    temporal.add_argument("--concurrency", type=int, metavar="N", help="cells and runs this worker runs at once")
    args = parser.parse_args(argv)
    if args.command == "worker":
        return _temporal_worker(parser, args)
    if args.command == "demo":
        return _demo()
    parser.error(f"unknown command {args.command!r}")  # argparse refuses it first; kept for new subcommands


def _temporal_worker(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import runpy

    from dagmagic.errors import DagError
    from dagmagic.temporal import TemporalAddress, require_sdk

    try:
        address = TemporalAddress.parse(f"temporal://{args.temporal}/{args.namespace}?task_queue={args.task_queue}")
        require_sdk()
    except (ValueError, DagError) as exc:
        parser.error(str(exc))
    if args.concurrency is not None and args.concurrency < 1:
        parser.error("--concurrency takes a whole number of at least 1")
    try:
        spec = runpy.run_path(args.file)
    except OSError as exc:
        parser.error(f"cannot read {args.file}: {exc}")
    try:
        asyncio.run(_serve(address, spec, args.concurrency))
    except DagError as exc:
        print(f"dagmagic worker: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


async def _serve(address: object, spec: dict[str, object], concurrency: int | None) -> None:
    from dagmagic.llm import ModelRegistry
    from dagmagic.session import DagSession
    from dagmagic.settings import DagSettings
    from dagmagic.temporal import TemporalAddress, serve

    assert isinstance(address, TemporalAddress)
    models, settings, tools = spec.get("models"), spec.get("settings"), spec.get("tools")
    session = DagSession(
        models if isinstance(models, ModelRegistry) else None,
        settings if isinstance(settings, DagSettings) else None,
        tools=list(tools) if isinstance(tools, list | tuple) else (),
        allow_code=bool(spec.get("allow_code")),
    )
    configs = spec.get("configs")

    def ready() -> None:
        store = session.store
        where = store.path if store is not None else "none (set DAG_STORE)"
        print(f"dagmagic worker on {address}: polling, run store {where}", flush=True)

    await serve(
        address,
        session,
        close=session.aclose,
        concurrency=concurrency,
        configs=configs if isinstance(configs, dict) else None,
        ready=ready,
    )


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
