"""``%%dag`` and ``%dag``: thin magics that parse, then call the library.

A ``%%dag`` cell is rewritten by an input transformer into a top-level ``await`` (see ``transformer.py``),
so it runs on the kernel's own event loop: Interrupt cancels it cleanly and, on ipykernel >= 7.4, the
widget's Stop and follow-up messages arrive while it runs. The kernel's runs, their numbers and the
conversation live in one ``NotebookSession`` (``session.py``); the ``%dag`` subcommands in ``commands/``;
the offers to resume an interrupted run in ``resume_offer.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Float, Int, Unicode

from dagmagic.notebook._arguments import usd
from dagmagic.notebook.preload import modules_ready
from dagmagic.notebook.session import NO_MODEL_HELP, NotebookSession

if TYPE_CHECKING:  # the engine loads on the first %%dag, not with the extension: loading must stay fast
    from dagmagic.engine import DagRun

__all__ = ["NO_MODEL_HELP", "DagMagics", "last_run", "register", "run_dag_cell", "run_dag_line"]

_Result = TypeVar("_Result")

_active: DagMagics | None = None
"""The magics of this kernel (``%load_ext dagmagic`` sets it): what a rewritten cell calls."""


async def run_dag_cell(line: str, cell: str) -> DagRun | None:
    """What a rewritten ``%%dag`` cell awaits (``%%dag eval``: nothing, its grid is shown already)."""
    magics = _magics()
    await _modules_ready()
    if _is_eval(line):
        await magics.run_eval_cell(line, cell)
        return None
    return await _told_in_one_line(magics, magics.run_cell(line, cell))


def _is_eval(line: str) -> bool:
    return line.split(maxsplit=1)[:1] == ["eval"]


async def run_dag_line(command: str, rest: str) -> DagRun | None:
    """What a rewritten ``%dag demo``, ``%dag resume ...``, ``%dag rerun ...`` or ``%dag replay ...`` cell awaits
    (``%dag resume`` of an experiment: nothing, its grid is shown already).
    """
    magics = _magics()
    await _modules_ready()
    from dagmagic.notebook import commands

    awaited = {
        "demo": commands.demo, "resume": commands.resume, "rerun": commands.rerun, "replay": commands.replay,
        "fork": commands.fork, "attach": commands.attach,
    }  # fmt: skip
    work = awaited[command]
    with commands.settings_told_in_one_line():
        return await _told_in_one_line(magics, work(magics.notebook, rest))


async def _modules_ready() -> None:
    """The engine and the views imported, off the loop (the first cell of a kernel imports them in a thread);
    interrupted meanwhile, the cell says so in one line.
    """
    try:
        await modules_ready()
    except asyncio.CancelledError as exc:
        setattr(exc, "_render_traceback_", lambda: ["Interrupted."])  # noqa: B010 (not the class's attribute)
        raise


async def _told_in_one_line(magics: DagMagics, work: Coroutine[Any, Any, _Result]) -> _Result:
    """``work``, whose cancellation by the kernel's Interrupt shows the user one line about the run, not the
    stack of dagmagic's frames it passed through. It stays the same ``CancelledError``: IPython renders an
    exception through its ``_render_traceback_`` when it has one (one set already, by an experiment resumed,
    is kept: it speaks of the experiment, not of one of its runs).
    """
    before = magics.runs[-1] if magics.runs else None
    try:
        return await work
    except asyncio.CancelledError as exc:
        if hasattr(exc, "_render_traceback_"):
            raise
        latest = magics.runs[-1] if magics.runs else None
        told = _interrupted(latest if latest is not before else None)
        setattr(exc, "_render_traceback_", lambda: [told])  # noqa: B010 (not the class's attribute)
        raise


def _interrupted(run: DagRun | None) -> str:
    if run is None or run.status != "cancelled":
        return "Interrupted."
    kept = sum(step.status == "completed" for step in run.all_steps.values())
    resume = f"; `%dag resume {run.run_id}` continues it" if run.durable else ""
    return f"Interrupted: run {run.run_id} was cancelled ({kept} completed step{'s' * (kept != 1)} kept){resume}."


def register(shell: Any) -> DagMagics:
    """Register the magics with ``shell``: this kernel's from now on."""
    global _active
    _active = DagMagics(shell=shell)
    shell.register_magics(_active)
    return _active


def _magics() -> DagMagics:
    if _active is None:
        raise UsageError("dagmagic is not loaded: run %load_ext dagmagic first")
    return _active


def last_run() -> DagRun | None:
    """The most recent run started by ``%%dag`` in this kernel."""
    return _active.runs[-1] if _active is not None and _active.runs else None


@magics_class
class DagMagics(Magics):
    """The ``%%dag`` cell magic and ``%dag`` line magic. Defaults are configurable:
    ``%config DagMagics.max_concurrency = 8``.
    """

    max_concurrency = Int(None, allow_none=True, help="Steps running at once (default: DagSettings).").tag(config=True)
    max_rounds = Int(None, allow_none=True, help="Autonomous rounds at most (default: DagSettings).").tag(config=True)
    step_timeout = Float(None, allow_none=True, help="Seconds a step may run (default: DagSettings).").tag(config=True)
    max_cost = Float(None, allow_none=True, help="Cost budget of a run in USD (default: DagSettings).").tag(config=True)
    smart_model = Unicode(None, allow_none=True, help="litellm model for the smart role.").tag(config=True)
    general_model = Unicode(None, allow_none=True, help="litellm model for the general role.").tag(config=True)
    fast_model = Unicode(None, allow_none=True, help="litellm model for the fast role.").tag(config=True)
    reasoning_model = Unicode(None, allow_none=True, help="litellm model for the reasoning role.").tag(config=True)
    widget = Bool(True, help="Show the live widget (else only the static views).").tag(config=True)
    allow_code = Bool(False, help="Give steps the python tool, which runs model-written code in a subprocess.").tag(
        config=True
    )

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.notebook = NotebookSession(self)
        """The kernel's runs, their numbers, the conversation and the settings ``%dag config`` set."""

    @property
    def runs(self) -> list[DagRun]:
        """The latest runs: every running one and the last ``runs_in_memory`` finished ones (older ones are read
        back from the run store when asked for by number or id).
        """
        return self.notebook.runs

    @property
    def overrides(self) -> dict[str, Any]:
        """Settings set with ``%dag config key=value``."""
        return self.notebook.overrides

    # --- the magic ---------------------------------------------------------------------------------

    @magic_arguments("%dag")  # IPython writes "%" before the name: the usage line reads "%%dag [-o NAME] ..."
    @argument("-o", "--output", metavar="NAME", help="Also bind the DagRun to this variable.")
    @argument("--bg", action="store_true", help="Run in the background: return the DagRun at once.")
    @argument("--smart", metavar="M", help="Model for planning, analysis and the answer (litellm string or variable).")
    @argument("--general", metavar="M", help="Default model for steps.")
    @argument("--fast", metavar="M", help="Model for steps hinted fast, compaction and summaries.")
    @argument("--reasoning", metavar="M", help="Model for steps hinted reasoning.")
    @argument("--models", metavar="VAR", help="A ModelRegistry (or one model, e.g. a ScriptedLLM) in the notebook.")
    @argument("--tools", metavar="a,b", help="Notebook functions (or MCPServer values) the steps may call.")
    @argument("--context", metavar="var1,var2", help="Notebook variables whose short reprs are added to the goal.")
    @argument("--max-rounds", type=int, metavar="N", help="Autonomous rounds at most.")
    @argument("--concurrency", type=int, metavar="N", help="Steps running at once.")
    @argument("--step-timeout", type=float, metavar="S", help="Seconds a step may run.")
    @argument(
        "--max-cost",
        type=usd,
        metavar="USD",
        help="Cost budget of the run: no LLM call starts once it is spent; the answer is made from what completed.",
    )
    @argument("--new", action="store_true", help="Start a new conversation (forget earlier cells' runs).")
    @argument("--approve", action="store_true", help="Pause after each plan for your approval (or an edit).")
    @argument("--break", dest="breaks", metavar="s1,s2", help="Pause before these steps run.")
    @argument("--step-through", action="store_true", help="Pause before every step.")
    @argument(
        "--restart",
        action="store_true",
        help="Start over even when this goal's last run was interrupted (else it is offered for resuming).",
    )
    @argument("--no-widget", action="store_true", help="Show only the static views, no live widget.")
    @argument(
        "--on",
        metavar="URL",
        help="Run on Temporal's workers (temporal://HOST:PORT/NAMESPACE): the run outlives this kernel.",
    )
    @no_var_expand
    @line_cell_magic
    def dag(self, line: str, cell: str | None = None) -> Any:
        """Pursue the goal in the cell: plan it as a DAG, run the steps in parallel, judge, replan, answer.

        Cell magic::

            %%dag [options]
            <goal, taken literally>

        The cell's value is the DagRun (also ``-o NAME``, ``Out[n]`` and ``dagmagic.last_run()``).

        Line magic subcommands::

            %dag models            the models and roles in use
            %dag config key=value  set a DagSettings value for later cells (e.g. max_concurrency=8)
            %dag config models=VAR tools=a,b
                                   the models and tools of later cells that name none of their own
            %dag config mcp=...    MCP servers for later cells: a command line, a URL, or variables
            %dag history [--all]   this notebook's runs (--all: the whole store's), numbered as the
                                   commands take them; then the experiments (%%dag eval)
            %dag show [RUN]        show a run again (RUN: its number in %dag history, or its id)
            %dag resume [RUN] [options]
                                   continue a run that was interrupted (default: the latest one);
                                   takes the cell's model and tool options
            %dag resume EXPERIMENT [--configs VAR] [--scorers a,b] [--concurrency N] [--max-cost USD]
                                   run an experiment's cells that did not end (%%dag eval --resume)
            %dag rerun STEP [--task TEXT] [--model M] [--run RUN] [--bg]
                                   re-run a step of the last run (or RUN) and what depends on it
            %dag approve | reject TEXT
                                   run the plan waiting for approval (--approve), or plan again with TEXT
            %dag continue [STEP] | step [STEP] | skip STEP
                                   a step paused at a breakpoint (--break, --step-through): run it and
                                   go on, run it and pause before the next, or skip it
            %dag replay [RUN] [--timing X] [--tools a,b] [--bg]
                                   run a run again with the code, prompts, tools and settings of now,
                                   its model calls answered from its recording (no provider call): it
                                   stops where it diverges and shows what changed
            %dag attach RUN [--on URL] [--bg] [-o NAME]
                                   follow a run on Temporal's workers (%%dag --on) again, live, with
                                   its controls, from any kernel
            %dag fork [RUN] --at STEP [--task TEXT | --result TEXT] [--bg]
                                   a new run from RUN's state at STEP (its task edited, or its result
                                   written by you): what did not change is kept, not asked again
            %dag diff A B [RUN]    what changed between rounds A and B
            %dag diff RUN          what changed between a replay and the run it replays
            %dag compare A [B] [--rounds N M]
                                   two runs side by side (A alone: its latest round against the round
                                   it re-ran; --rounds: two rounds); %dag compare EXPERIMENT a b: two
                                   configs of an experiment, case by case
            %dag stop              stop the running run gracefully
            %dag followup TEXT     steer the running run with a follow-up
            %dag trace [RUN]       every LLM call of a run: purpose, model, level, tokens, latency, cost
            %dag export PATH       a copy of the run store, safe to move, share or back up
            %dag demo              an offline demonstration (no API key needed)

        Evaluation cell::

            %%dag eval --cases VAR [--configs VAR] [--scorers a,b] [--repeat N] [--max-cost USD]
                       [--concurrency N] [--models VAR] [--name NAME] [--resume NAME] [-o VAR]
            <goal template, e.g. Compare {a} and {b}; empty: the cases' own goals>
        """
        if cell is None:
            from dagmagic.notebook.commands import dispatch

            return dispatch(self.notebook, line)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a terminal without autoawait: run it here, to the end
            return asyncio.run(self.run_eval_cell(line, cell) if _is_eval(line) else self.run_cell(line, cell))
        if _is_eval(line):
            raise UsageError("%%dag eval needs top-level await: turn it on with %autoawait asyncio")
        # a loop is running but this cell was not rewritten into an await (autoawait off): run in the background
        args = self.parse(line)
        args.bg = True
        run = self.notebook.start(self._goal(args, cell), args, line)
        self.show(run, args, line)
        from dagmagic.notebook.display import settle_live_view

        settle_live_view(run)  # nothing awaits this cell: its live view is decided now
        return run

    async def run_cell(self, line: str, cell: str) -> DagRun:
        """What a rewritten ``%%dag`` cell awaits: the run, once it has ended (at once with ``--bg``)."""
        from dagmagic.notebook.resume_offer import interrupted_run, offer_resume

        args = self.parse(line)
        goal = self._goal(args, cell)
        if args.on:  # the workers' models and tools: none needed here
            return await self.present(self.notebook.start(goal, args, line), args, line)
        options = self.notebook.run_options(args)
        if not args.restart and (interrupted := interrupted_run(self.notebook, goal, options)) is not None:
            return offer_resume(self.notebook, goal, interrupted, options, args, line)
        run = self.notebook.start(goal, args, line, options)
        return await self.present(run, args, line)

    async def run_eval_cell(self, line: str, cell: str) -> None:
        """What a rewritten ``%%dag eval`` cell awaits: the experiment's grid, shown and redrawn until it stops."""
        from dagmagic.notebook.evaluation_cell import EvalCell

        options = line.split(maxsplit=1)[1:]  # the word "eval" left out
        await EvalCell(self.notebook, options[0] if options else "", cell).run()

    async def present(self, run: DagRun, args: Any, line: str = "", *, again: bool = False) -> DagRun:
        """Show the run as a cell's (``again``: a re-run of a run shown before) and, unless ``--bg``, await it."""
        from dagmagic.notebook.display import settle_live_view, settle_live_view_once_seen

        self.show(run, args, line, again=again)
        if not getattr(args, "bg", False):
            try:
                await run.wait(cancel_with_waiter=True)
            except BaseException:
                settle_live_view(run)  # interrupted: no waiting, the view still ends readable
                raise
        await settle_live_view_once_seen(run)
        return run

    def show(self, run: DagRun, args: Any, line: str, *, again: bool = False) -> None:
        """Show the run: live above the cell's value (also with ``--bg``: the live view stays up to date, the
        value could not); lines of progress in a terminal. ``present`` settles the live view.
        """
        output = getattr(args, "output", None)
        if output:
            self.notebook.namespace[output] = run
        live = self.widget and not getattr(args, "no_widget", False)
        if not live and not again:
            from dagmagic.notebook.display import render_static

            render_static(run)
        elif live and not again and run.durable:  # Interrupted, the view offers to resume
            from dagmagic.notebook.resume_offer import offer_in_widget

            offer_in_widget(self.notebook, run, args, line)
        if not _in_kernel(self.shell):
            if not getattr(args, "bg", False):
                from dagmagic.notebook.progress import follow_in_terminal

                follow_in_terminal(run)
        elif live:
            from dagmagic.notebook.display import show_live

            try:
                show_live(run, settled_later=True)
            except BaseException:
                run.cancel()  # a run whose view failed must not go on unseen in the background
                raise

    def _goal(self, args: Any, cell: str) -> str:
        goal = cell.strip()
        if not goal:
            raise UsageError("%%dag needs a goal in the cell body, e.g.\n%%dag\nCompare the GDP of France and Spain")
        return goal + self.notebook.context(args.context)

    def parse(self, line: str) -> Any:
        """The options of a ``%%dag`` line (``UsageError`` for bad ones)."""
        try:
            return parse_argstring(self.dag, line)
        except UsageError:
            raise
        except SystemExit:  # argparse's own exit on bad input
            raise UsageError(f"bad %%dag options: {line!r}; see %%dag? for the options") from None


def _in_kernel(shell: Any) -> bool:
    return getattr(shell, "kernel", None) is not None
