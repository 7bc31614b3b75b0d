"""``%%dag`` and ``%dag``: thin magics that parse, then call the library.

A ``%%dag`` cell is rewritten by an input transformer into a top-level ``await`` (see ``transformer.py``),
so it runs on the kernel's own event loop: Interrupt cancels it cleanly and, on ipykernel >= 7.4, the
widget's Stop and follow-up messages arrive while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Float, Int, Unicode

from dagmagic.errors import ConfigurationError, DagError

if TYPE_CHECKING:  # the engine loads on the first %%dag, not with the extension: loading must stay fast
    from dagmagic.engine.context import Exchange
    from dagmagic.engine.run import DagRun
    from dagmagic.engine.session import DagSession
    from dagmagic.engine.store import RunStore, RunSummary
    from dagmagic.llm.registry import ModelRegistry
    from dagmagic.settings import DagSettings

__all__ = ["NO_MODEL_HELP", "DagMagics", "last_run", "run_dag_cell", "run_dag_line"]

NO_MODEL_HELP = (
    "No model is configured for %%dag, and none could be picked: no OPENAI_API_KEY, ANTHROPIC_API_KEY or "
    "GEMINI_API_KEY is set, and no Ollama answers at OLLAMA_HOST (default 127.0.0.1:11434). To choose one: "
    "set one of those keys (os.environ works, no restart needed) and models are picked for it; or set "
    "DAG_SMART_MODEL (and optionally DAG_GENERAL_MODEL, DAG_FAST_MODEL, DAG_REASONING_MODEL) to a litellm model "
    "such as openai/gpt-4.1-mini; or pass --models VAR naming a ModelRegistry (or a ScriptedLLM) in the "
    "notebook. `%dag models` shows what is in use. Or try `%dag demo` to see it work offline."
)

_CONTEXT_CHARS = 1000
_SUBCOMMANDS = (
    "models", "config", "history", "show", "resume", "rerun", "approve", "reject", "continue", "step", "skip",
    "diff", "stop", "followup", "trace", "demo",
)  # fmt: skip
_HISTORY_ROWS = 20
_ROLES = ("smart", "general", "fast", "reasoning")

_active: DagMagics | None = None


async def run_dag_cell(line: str, cell: str) -> DagRun:
    """What a rewritten ``%%dag`` cell awaits."""
    magics = _magics()
    return await _told_in_one_line(magics, magics.run_cell(line, cell))


async def run_dag_line(command: str, rest: str) -> DagRun:
    """What a rewritten ``%dag demo``, ``%dag resume ...`` or ``%dag rerun ...`` cell awaits."""
    magics = _magics()
    if command == "demo":
        from dagmagic.notebook.demo import run_demo as demo

        return await _told_in_one_line(magics, demo(magics))
    if command == "resume":
        return await _told_in_one_line(magics, magics.resume(rest))
    return await _told_in_one_line(magics, magics.rerun(rest))


async def _told_in_one_line(magics: DagMagics, work: Coroutine[Any, Any, DagRun]) -> DagRun:
    """``work``, whose cancellation by the kernel's Interrupt shows the user one line about the run, not the
    stack of dagmagic's frames it passed through. It stays the same ``CancelledError``: IPython renders an
    exception through its ``_render_traceback_`` when it has one.
    """
    before = magics.runs[-1] if magics.runs else None
    try:
        return await work
    except asyncio.CancelledError as exc:
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
        self.history: list[Exchange] = []
        self.runs: list[DagRun] = []
        """The latest runs: every running one and the last ``runs_in_memory`` finished ones (older ones are read
        back from the run store when asked for by number or id)."""
        self._numbers: list[str] = []
        """Every run's id, by its number in this kernel (``%dag show 3`` is ``_numbers[2]``)."""
        self.overrides: dict[str, Any] = {}
        """Settings set with ``%dag config key=value``."""
        self._background: set[asyncio.Task[Any]] = set()
        self._options: dict[str, str] = {}
        """The options of the cell that started each run: ``%dag resume RUN`` reuses them."""
        self._last_options = ""

    @property
    def _namespace(self) -> dict[str, Any]:
        """The notebook's variables."""
        shell: Any = self.shell
        namespace: dict[str, Any] = shell.user_ns
        return namespace

    # --- the magic ---------------------------------------------------------------------------------

    @magic_arguments()
    @argument("-o", "--output", metavar="NAME", help="Also bind the DagRun to this variable.")
    @argument("--bg", action="store_true", help="Run in the background: return the DagRun at once.")
    @argument("--smart", metavar="M", help="Model for planning, analysis and the answer (litellm string or variable).")
    @argument("--general", metavar="M", help="Default model for steps.")
    @argument("--fast", metavar="M", help="Model for steps hinted fast, compaction and summaries.")
    @argument("--reasoning", metavar="M", help="Model for steps hinted reasoning.")
    @argument("--models", metavar="VAR", help="A ModelRegistry (or one model, e.g. a ScriptedLLM) in the notebook.")
    @argument("--tools", metavar="a,b", help="Notebook functions the steps may call.")
    @argument("--context", metavar="var1,var2", help="Notebook variables whose short reprs are added to the goal.")
    @argument("--max-rounds", type=int, metavar="N", help="Autonomous rounds at most.")
    @argument("--concurrency", type=int, metavar="N", help="Steps running at once.")
    @argument("--step-timeout", type=float, metavar="S", help="Seconds a step may run.")
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
            %dag history           the stored runs (id, status, when, cost, goal), or this kernel's
            %dag show [RUN]        show a run again (RUN: its number in %dag history, or its id)
            %dag resume [RUN] [options]
                                   continue a run that was interrupted (default: the latest one);
                                   takes the cell's model and tool options
            %dag rerun STEP [--task TEXT] [--model M] [--run RUN] [--bg]
                                   re-run a step of the last run (or RUN) and what depends on it
            %dag approve | reject TEXT
                                   run the plan waiting for approval (--approve), or plan again with TEXT
            %dag continue [STEP] | step [STEP] | skip STEP
                                   a step paused at a breakpoint (--break, --step-through): run it and
                                   go on, run it and pause before the next, or skip it
            %dag diff A B [RUN]    what changed between rounds A and B
            %dag stop              stop the running run gracefully
            %dag followup TEXT     steer the running run with a follow-up
            %dag trace [RUN]       every LLM call of a run: purpose, model, level, tokens, latency, cost
            %dag demo              an offline demonstration (no API key needed)
        """
        if cell is None:
            return self.line(line)
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a terminal without autoawait: run it here, to the end
            return asyncio.run(self.run_cell(line, cell))
        # a loop is running but this cell was not rewritten into an await (autoawait off): run in the background
        args = self._parse(line)
        args.bg = True
        return self.launch(self._session(args), self._goal(args, cell), args)

    async def run_cell(self, line: str, cell: str) -> DagRun:
        """What a rewritten ``%%dag`` cell awaits: the run, once it has ended (at once with ``--bg``)."""
        args = self._parse(line)
        session = self._session(args)
        goal = self._goal(args, cell)
        self._last_options = line
        if not args.restart and (interrupted := self._interrupted(session, goal)) is not None:
            return self._offer_resume(session, goal, interrupted, args)
        run = self.launch(session, goal, args)
        if args.bg:
            return run
        return await run.wait(cancel_with_waiter=True)

    async def resume(self, line: str) -> DagRun:
        """``%dag resume [RUN] [options]``: continue a stored run that did not end, shown like a cell's run."""
        words = shlex.split(line)
        key = words.pop(0) if words and not words[0].startswith("-") else ""
        store = self._store()
        if store is None:
            path = self._settings(self._parse("")).store_path
            problem = _NO_STORE if path is None else f"there is no run store at {path} yet"
            raise UsageError(f"nothing to resume: {problem}")
        run_id = self._stored_id(store, key)
        summary = store.summary(run_id)
        if summary is None:
            raise UsageError(f"no run {run_id!r} in the run store {store.path}; `%dag history` lists the stored runs")
        if not summary.interrupted:
            ended = "is running" if summary.status == "running" else f"ended ({summary.status})"
            raise UsageError(f"run {run_id} {ended}: there is nothing to resume")
        args = self._parse(shlex.join(words) if words else self._options.get(run_id, ""))
        if not words:  # the options of the cell that started it, but awaited here
            args.bg = False
        session = self._session(args)
        run = self._start(lambda: session.start_resume(run_id))
        run.break_before(*_names(getattr(args, "breaks", None)))  # like --approve and --step-through, kept
        self._show(run, session, args)
        if args.bg:
            return run
        return await run.wait(cancel_with_waiter=True)

    def launch(self, session: DagSession, goal: str, args: Any) -> DagRun:
        """Start the run and show it: live above the cell's value, or in the value itself with ``--bg``."""
        run = self._start(lambda: session.start(goal))
        run.break_before(*_names(getattr(args, "breaks", None)))
        self._show(run, session, args)
        return run

    async def rerun(self, line: str) -> DagRun:
        """``%dag rerun STEP [--task TEXT] [--model M] [--run RUN]``: re-run a step, shown like a cell's run."""
        args = _parse_words("rerun", line, ("step",), ("--task", "--model", "--run"), flags=("--bg",))
        run = self._find(args.run or "")
        if run.read_only and run.run_id in self._numbers:  # started here, no longer in memory: taken back
            session = self._session(self._parse(self._options.get(run.run_id, "")))
            try:
                run = session.reopen(run.run_id)
            except DagError as exc:
                raise UsageError(str(exc)) from None
            self.runs.append(run)
        try:
            run.start_rerun(args.step, task=args.task, model=args.model)
        except DagError as exc:
            raise UsageError(str(exc)) from None
        if args.bg:
            return run
        if _in_kernel(self.shell) and self.widget:
            from dagmagic.notebook.display import show_live

            show_live(run)
        elif not _in_kernel(self.shell):
            from dagmagic.notebook.progress import print_progress

            unsubscribe = run.subscribe(print_progress)
            try:
                return await run.wait(cancel_with_waiter=True)
            finally:
                unsubscribe()
        return await run.wait(cancel_with_waiter=True)

    def _start(self, start: Callable[[], DagRun]) -> DagRun:
        try:
            run = start()
        except (ValueError, RuntimeError, DagError) as exc:  # DagError: a resume the store cannot serve
            raise UsageError(str(exc)) from None
        self.runs.append(run)
        self._numbers.append(run.run_id)
        self._options.setdefault(run.run_id, self._last_options)
        self._forget_finished()
        if run._task is not None:
            run._task.add_done_callback(lambda _: self._forget_finished())
        return run

    def _forget_finished(self) -> None:
        """Keep the latest ``runs_in_memory`` finished runs; older ones are read back from the store when asked for."""
        from dagmagic.settings import DagSettings

        finished = [run for run in self.runs if run.done()]
        keep = DagSettings(**self.overrides).runs_in_memory
        dropped = {id(run) for run in finished[: max(len(finished) - keep, 0)]}
        if dropped:
            self.runs[:] = [run for run in self.runs if id(run) not in dropped]

    def _show(self, run: DagRun, session: DagSession, args: Any) -> None:
        if args.output:
            self._namespace[args.output] = run
        if not self.widget or args.no_widget:
            from dagmagic.notebook.display import render_static

            render_static(run)
        elif session.store is not None:  # Interrupted, the view offers to resume
            self._offer_in_widget(run, session, args)
        if args.bg:
            self._keep(run)
        elif not _in_kernel(self.shell):
            from dagmagic.notebook.progress import print_progress

            run.subscribe(print_progress)
        elif self.widget and not args.no_widget:
            from dagmagic.notebook.display import show_live

            try:
                show_live(run)
            except BaseException:
                run.cancel()  # a run whose view failed must not go on unseen in the background
                raise

    def _keep(self, run: DagRun) -> None:
        """Hold the run's task until it ends: the loop keeps tasks only weakly."""
        task = run._task
        if task is not None:
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    # --- resuming an interrupted run ----------------------------------------------------------------

    def _interrupted(self, session: DagSession, goal: str) -> RunSummary | None:
        """The latest stored run of ``goal`` when it did not end (and is not running here)."""
        store = session.store
        if store is None:
            return None
        latest = next(iter(store.runs(1, goal=goal)), None)
        if latest is None or not latest.interrupted:
            return None
        if any(run.run_id == latest.run_id and not run.done() for run in self.runs):
            return None
        return latest

    def _offer_resume(self, session: DagSession, goal: str, summary: RunSummary, args: Any) -> DagRun:
        """Show the interrupted run, read back, with Resume and Start over; the cell ends at once."""
        from dagmagic.engine.run import DagRun

        store = session.store
        assert store is not None
        stored = store.load(summary.run_id)
        run = DagRun(stored.state, events=stored.events, read_only=True)
        steps = [step for record in run.rounds for step in record.plan.steps]
        done = sum(step.status == "completed" for step in steps)
        print(
            f"The last run of this goal ({run.run_id}, {_when(summary.started_at)}) did not end: "
            f"{done} of {len(steps)} steps completed. Resume it with the view's Resume button or "
            f"`%dag resume {run.run_id}`; `%%dag --restart` starts over."
        )
        if self.widget and not args.no_widget:
            self._offer_in_widget(run, session, args, goal=goal)
        else:
            from dagmagic.notebook.display import render_static

            render_static(run)
        return run

    def _offer_in_widget(self, run: DagRun, session: DagSession, args: Any, *, goal: str | None = None) -> None:
        """Let the run's view resume it (and start its goal over) when it ends without an end."""
        from dagmagic.notebook.display import widget_for

        widget = widget_for(run)

        def resume() -> DagRun:
            resumed = self._start(lambda: session.start_resume(widget.run.run_id))
            resumed.break_before(*_names(getattr(args, "breaks", None)))  # as `%dag resume` keeps them
            if args.output:
                self._namespace[args.output] = resumed
            self._keep(resumed)
            return resumed

        def restart() -> DagRun:
            fresh = self._start(lambda: session.start(goal or widget.run.goal))
            fresh.break_before(*_names(getattr(args, "breaks", None)))
            if args.output:
                self._namespace[args.output] = fresh
            self._keep(fresh)
            return fresh

        widget.on_resume, widget.on_restart = resume, restart
        widget.sync()

    def _stored_id(self, store: RunStore, key: str) -> str:
        """The run id ``key`` names: this kernel's run number, a stored run's id (or its start), or, when
        empty, the latest interrupted run.
        """
        if key.isdigit() and 1 <= int(key) <= len(self._numbers):
            return self._numbers[int(key) - 1]
        summaries = store.runs(limit=500)
        if not key:
            for summary in summaries:
                if summary.interrupted and not any(r.run_id == summary.run_id and not r.done() for r in self.runs):
                    return summary.run_id
            raise UsageError("no stored run was interrupted: there is nothing to resume (see %dag history)")
        matches = [summary.run_id for summary in summaries if summary.run_id.startswith(key)]
        if len(matches) == 1 or key in matches:
            return key if key in matches else matches[0]
        if matches:
            raise UsageError(f"{key!r} starts the ids of {len(matches)} runs; give more of it (see %dag history)")
        return key  # not among the latest: the store says whether it is there at all

    def _goal(self, args: Any, cell: str) -> str:
        goal = cell.strip()
        if not goal:
            raise UsageError("%%dag needs a goal in the cell body, e.g.\n%%dag\nCompare the GDP of France and Spain")
        if args.new:
            self.history.clear()
        return goal + self._context(args.context)

    # --- building a session from options ----------------------------------------------------------

    def _parse(self, line: str) -> Any:
        try:
            return parse_argstring(self.dag, line)
        except UsageError:
            raise
        except SystemExit:  # argparse's own exit on bad input
            raise UsageError(f"bad %%dag options: {line!r}; see %%dag? for the options") from None

    def _settings(self, args: Any) -> DagSettings:
        from dagmagic.settings import DagSettings

        values: dict[str, Any] = {
            "max_concurrency": self.max_concurrency,
            "max_replan_rounds": self.max_rounds,
            "step_timeout": self.step_timeout,
        }
        values.update(self.overrides)
        flags = {
            "max_concurrency": args.concurrency,
            "max_replan_rounds": args.max_rounds,
            "step_timeout": args.step_timeout,
        }
        values.update({k: v for k, v in flags.items() if v is not None})
        try:
            return DagSettings(**{k: v for k, v in values.items() if v is not None})
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None

    def _session(self, args: Any) -> DagSession:
        from dagmagic.engine.session import DagSession

        settings = self._settings(args)
        tools = [self._variable(name, "--tools") for name in _names(args.tools)]
        try:
            session = DagSession(
                self._registry(args, settings),
                settings,
                tools=tools,
                allow_code=self.allow_code,
                approve_plans=bool(getattr(args, "approve", False)),
                step_through=bool(getattr(args, "step_through", False)),
            )
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        session.history = self.history  # successive cells share one conversation
        return session

    def _registry(self, args: Any, settings: DagSettings) -> ModelRegistry:
        from dagmagic.llm.registry import ModelRegistry

        flags = {role: getattr(args, role) for role in _ROLES if getattr(args, role)}
        if args.models and flags:
            raise UsageError("use either --models or the role options (--smart, --general, ...), not both")
        if args.models:
            value = self._variable(args.models, "--models")
            if isinstance(value, ModelRegistry):
                return value
            return self._registry_of({"smart": args.models})  # named after its variable, as it shows in views
        configured = {role: getattr(self, f"{role}_model") for role in _ROLES}
        from_settings = {role: getattr(settings, f"{role}_model") for role in _ROLES}
        specs = {role: flags.get(role) or configured[role] or from_settings[role] for role in _ROLES}
        specs = {role: spec for role, spec in specs.items() if spec}
        if not specs:
            return _default_registry()
        return self._registry_of(specs)

    def _registry_of(self, specs: dict[str, Any]) -> ModelRegistry:
        """One entry per distinct model; a spec naming a notebook variable uses that object."""
        from dagmagic.llm.registry import ModelRegistry

        registry = ModelRegistry()
        grouped: dict[int, tuple[str, Any, list[str]]] = {}
        for role, spec in specs.items():
            model = self._namespace.get(spec, spec) if isinstance(spec, str) else spec
            name = spec if isinstance(spec, str) else type(spec).__name__
            grouped.setdefault(id(model), (name, model, []))[2].append(role)
        try:
            for name, model, roles in grouped.values():
                registry.register(name, model, roles=roles)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        return registry

    def _variable(self, name: str, option: str) -> Any:
        if name not in self._namespace:
            raise UsageError(f"{option}: there is no variable named {name!r} in the notebook; define it first")
        return self._namespace[name]

    def _context(self, names: str | None) -> str:
        lines = []
        for name in _names(names):
            text = repr(self._variable(name, "--context"))
            if len(text) > _CONTEXT_CHARS:
                text = f"{text[:_CONTEXT_CHARS]}… ({len(text) - _CONTEXT_CHARS} more characters)"
            lines.append(f"- {name} = {text}")
        return "\n\nContext from the notebook:\n" + "\n".join(lines) if lines else ""

    # --- line subcommands ---------------------------------------------------------------------------

    def line(self, line: str) -> Any:
        """Dispatch ``%dag <subcommand>``."""
        words = shlex.split(line) if line.strip() else []
        if not words:
            raise UsageError(f"%dag needs a subcommand: {', '.join(_SUBCOMMANDS)} (see %dag?)")
        command, rest = words[0], line.strip()[len(words[0]) :].strip()
        handler: Callable[[str], Any] | None = getattr(self, f"_cmd_{command}", None)
        if command not in _SUBCOMMANDS or handler is None:
            raise UsageError(f"unknown %dag subcommand {command!r}; known: {', '.join(_SUBCOMMANDS)}")
        return handler(rest)

    def _cmd_models(self, _: str) -> None:
        from dagmagic.llm.registry import ROLE_ENV
        from dagmagic.settings import DagSettings

        specs = {role: getattr(self, f"{role}_model") for role in _ROLES}
        settings = DagSettings(**self.overrides)
        if not any(specs.values()) and not any(getattr(settings, f"{r}_model") for r in _ROLES):
            try:
                registry = _default_registry()
            except UsageError:
                print(f"No model is configured.\n{NO_MODEL_HELP}")
                return
            for role in _ROLES:
                print(
                    f"{role:10} {registry.for_role(role).name}" + ("" if registry.has_role(role) else "   (falls back)")
                )
            print(f"Picked because {registry.chosen_because}; set DAG_SMART_MODEL (or --smart) to choose.")
            return
        for role in _ROLES:
            spec = specs[role] or getattr(settings, f"{role}_model")
            source = "DagMagics" if specs[role] else ROLE_ENV[role]
            print(f"{role:10} {spec or '(falls back)'}" + (f"   [{source}]" if spec else ""))

    def _cmd_config(self, rest: str) -> None:
        from dagmagic.settings import DagSettings

        if not rest:
            if not self.overrides:
                print("Nothing set with %dag config: the defaults apply, with any DAG_* environment variables.")
            for key, value in sorted(self.overrides.items()):
                print(f"{key} = {value!r}")
            return
        # %dag takes goals literally (no_var_expand), but a setting's value often lives in a variable (a store
        # path): without this, `store=$path` silently named a file '$path' in the working directory.
        rest = _expand_variables(rest, self.shell.user_ns if self.shell is not None else {})
        for pair in shlex.split(rest):
            key, sep, value = pair.partition("=")
            if not sep:
                raise UsageError(f"%dag config takes key=value pairs, got {pair!r}")
            if key not in DagSettings.model_fields:
                raise UsageError(f"unknown setting {key!r}; see the README's configuration table")
            try:
                DagSettings(**{**self.overrides, key: value})
            except ConfigurationError as exc:
                raise UsageError(str(exc)) from None
            self.overrides[key] = value

    def _cmd_history(self, _: str) -> None:
        store = self._store()
        numbers = {run_id: number for number, run_id in enumerate(self._numbers, 1)}
        if store is None:
            if not self.runs:
                print("No runs yet.")
            for run in self.runs:
                cost, started = run.usage.cost, run.state.started_at
                print(_history_line(numbers[run.run_id], run.run_id, run.status, started, cost, run.goal))
            return
        summaries = store.runs(limit=_HISTORY_ROWS)
        if not summaries:
            print(f"No runs yet in {store.path}.")
        for summary in summaries:
            status = "interrupted" if summary.interrupted else summary.status
            number = numbers.get(summary.run_id)
            print(_history_line(number, summary.run_id, status, summary.started_at, summary.cost, summary.goal))
        if any(summary.interrupted for summary in summaries):
            print("`%dag resume RUN` continues an interrupted run.")

    def _store(self) -> RunStore | None:
        """The run store the settings name, when its file exists (reading history creates nothing)."""
        from dagmagic.engine.store import RunStore
        from dagmagic.errors import StoreError
        from dagmagic.settings import DagSettings

        path = DagSettings(**self.overrides).store_path
        if path is None or not path.exists():
            return None
        try:
            return RunStore.open(path)
        except StoreError as exc:
            raise UsageError(str(exc)) from None

    def _cmd_show(self, rest: str) -> Any:
        from dagmagic.notebook.display import show_live

        show_live(self._find(rest))

    def _cmd_trace(self, rest: str) -> None:
        from dagmagic.notebook.progress import trace_table

        print(trace_table(self._find(rest)))

    def _cmd_resume(self, rest: str) -> Any:
        return self._awaited("resume", self.resume, rest)

    def _cmd_rerun(self, rest: str) -> Any:
        return self._awaited("rerun", self.rerun, rest)

    def _awaited(self, command: str, work: Callable[[str], Coroutine[Any, Any, DagRun]], rest: str) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(work(rest))
        raise UsageError(f"run `%dag {command}` alone in its cell (it is awaited there)")

    def _cmd_approve(self, rest: str) -> None:
        self._act(lambda run: run.approve(), self._waiting(rest))

    def _cmd_reject(self, rest: str) -> None:
        if not rest:
            raise UsageError("%dag reject needs the reason, e.g. %dag reject use one step per country")
        self._act(lambda run: run.reject(rest), self._waiting(""))

    def _cmd_continue(self, rest: str) -> None:
        self._act(lambda run: run.resume_step(rest or None), self._running())

    def _cmd_step(self, rest: str) -> None:
        self._act(lambda run: run.step_over(rest or None), self._running())

    def _cmd_skip(self, rest: str) -> None:
        if not rest:
            raise UsageError("%dag skip needs the step's id, e.g. %dag skip s3")
        self._act(lambda run: run.skip(rest), self._running())

    def _cmd_diff(self, rest: str) -> Any:
        args = _parse_words("diff", rest, ("a", "b"), (), optional=("run",))
        run = self._find(args.run or "")
        try:
            return run.diff(int(args.a), int(args.b))
        except ValueError:
            raise UsageError(f"%dag diff takes two round numbers, got {args.a!r} and {args.b!r}") from None
        except DagError as exc:
            raise UsageError(str(exc)) from None

    @staticmethod
    def _act(action: Callable[[DagRun], object], run: DagRun) -> None:
        try:
            action(run)
        except (DagError, ValueError) as exc:
            raise UsageError(str(exc)) from None

    def _waiting(self, key: str) -> DagRun:
        """The run whose plan waits for approval (or ``key``'s)."""
        if key:
            return self._find(key)
        for run in reversed(self.runs):
            if run.awaiting_approval:
                return run
        raise UsageError("no plan is waiting for approval (run a cell with --approve, and --bg to act from here)")

    def _cmd_stop(self, _: str) -> None:
        self._running().stop()

    def _cmd_followup(self, rest: str) -> None:
        if not rest:
            raise UsageError("%dag followup needs the text of the follow-up")
        try:
            self._running().follow_up(rest)
        except DagError as exc:
            raise UsageError(str(exc)) from None

    def _cmd_demo(self, _: str) -> Any:
        from dagmagic.notebook.demo import run_demo as demo

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(demo(self))
        raise UsageError("run `%dag demo` alone in its cell (it is awaited there)")

    def _find(self, key: str) -> DagRun:
        if not key:
            if not self.runs:
                raise UsageError("no runs yet: run a %%dag cell first")
            return self.runs[-1]
        number = int(key) if key.isdigit() and 1 <= int(key) <= len(self._numbers) else None
        if number is not None:
            key = self._numbers[number - 1]
        for run in reversed(self.runs):
            if run.run_id == key:
                return run
        store = self._store()
        if store is None and key in self._numbers:
            raise UsageError(
                f"run {number or key} ({key}) is no longer in memory (only the latest finished runs are kept: "
                f"runs_in_memory) and there is no run store to read it back from: {_NO_STORE}"
            )
        if store is not None:  # a run of another kernel, or one no longer in memory, read back
            from dagmagic.engine.run import DagRun

            try:
                stored = store.load(self._stored_id(store, key))
            except KeyError:
                pass
            else:
                return DagRun(stored.state, events=stored.events, read_only=True)
        raise UsageError(f"no run {key!r}; see %dag history")

    def _running(self) -> DagRun:
        for run in reversed(self.runs):
            if not run.done():
                return run
        raise UsageError("no run is running")


_NO_STORE = "DAG_STORE is none; set it (or `%dag config store=PATH`) before the runs you want to keep"


def _when(timestamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else "-"


def _history_line(
    number: int | None, run_id: str, status: str, started: float | None, cost: float | None, goal: str
) -> str:
    price = f"${cost:.4f}" if cost is not None else "-"
    return f"{number or '':>3}  {run_id}  {status:11}  {_when(started)}  {price:>9}  {goal[:60]!r}"


def _parse_words(
    command: str,
    line: str,
    positional: tuple[str, ...],
    options: tuple[str, ...],
    optional: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
) -> Any:
    """A subcommand's arguments, or a ``UsageError`` that shows its usage."""
    parser = argparse.ArgumentParser(prog=f"%dag {command}", add_help=False, exit_on_error=False)
    for name in positional:
        parser.add_argument(name)
    for name in optional:
        parser.add_argument(name, nargs="?")
    for option in options:
        parser.add_argument(option)
    for flag in flags:
        parser.add_argument(flag, action="store_true")
    try:
        return parser.parse_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit, ValueError) as exc:
        detail = f": {exc}" if isinstance(exc, argparse.ArgumentError) else ""
        raise UsageError(f"{parser.format_usage().strip()}{detail}") from None


def _expand_variables(text: str, namespace: dict[str, Any]) -> str:
    """``$name`` and ``{expression}`` from the notebook's namespace, as IPython expands other magics' lines;
    the text as written when it does not expand.
    """
    from IPython.utils.text import DollarFormatter

    try:
        return DollarFormatter().vformat(text, args=[], kwargs=namespace)
    except Exception:
        return text


def _names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def _default_registry() -> ModelRegistry:
    """The models picked from a provider key or a local Ollama when none is chosen (``dagmagic.llm.defaults``)."""
    from dagmagic.llm.registry import ModelRegistry

    try:
        return ModelRegistry.from_env()
    except ConfigurationError:
        raise UsageError(NO_MODEL_HELP) from None


def _in_kernel(shell: Any) -> bool:
    return getattr(shell, "kernel", None) is not None
