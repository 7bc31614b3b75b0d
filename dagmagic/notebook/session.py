"""``NotebookSession``: dagmagic's state in one kernel.

One ``DagSession`` serves every cell: the conversation (each cell's answer is history for the next), the runs
in memory with their tasks, the history summaries. A cell's options (models, tools, settings, approval,
breakpoints) apply to its run only. Besides the session, the kernel keeps each run's number (``%dag show 3``),
the options of the cell that started it (``%dag resume`` reuses them) and what ``%dag config`` set: settings, and
the models and tools of every cell that names none of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from IPython.core.error import UsageError

from dagmagic.errors import ConfigurationError, DagError
from dagmagic.notebook._arguments import names

if TYPE_CHECKING:  # the engine loads on the first %%dag, not with the extension: loading must stay fast
    from dagmagic.engine import DagRun, MCPServer
    from dagmagic.evaluation import Experiment
    from dagmagic.llm import ModelRegistry
    from dagmagic.session import DagSession
    from dagmagic.settings import DagSettings
    from dagmagic.store import RunStore

__all__ = [
    "NO_MODEL_HELP",
    "NO_STORE",
    "CellMagics",
    "NotebookSession",
    "in_memory",
    "names",
    "run_number",
    "take_back",
]

NO_MODEL_HELP = (
    "No model is configured for %%dag, and none could be picked: no OPENAI_API_KEY, ANTHROPIC_API_KEY or "
    "GEMINI_API_KEY is set, and no Ollama answers at OLLAMA_HOST (default 127.0.0.1:11434). To choose one: "
    "set one of those keys (os.environ works, no restart needed) and models are picked for it; or set "
    "DAG_SMART_MODEL (and optionally DAG_GENERAL_MODEL, DAG_FAST_MODEL, DAG_REASONING_MODEL) to a litellm model "
    "such as openai/gpt-4.1-mini; or pass --models VAR naming a ModelRegistry (or a ScriptedLLM) in the "
    "notebook, or set it once for every later cell with `%dag config models=VAR`. `%dag models` shows what is in "
    "use. Or try `%dag demo` to see it work offline."
)
NO_STORE = "DAG_STORE is none; set it (or `%dag config store=PATH`) before the runs you want to keep"
ROLES = ("smart", "general", "fast", "reasoning")
_CONTEXT_CHARS = 1000


class CellMagics(Protocol):
    """What the kernel's state and the subcommands use of the ``%%dag`` magics (``DagMagics``, which sit above
    them): the shell, the defaults ``%config DagMagics`` sets (and ``{role}_model``, read by name), how a cell's
    options are parsed and how a run is shown as a cell's.
    """

    shell: Any
    allow_code: bool
    widget: bool

    @property
    def max_concurrency(self) -> int | None:
        """Steps running at once (None: the settings')."""
        ...

    @property
    def max_rounds(self) -> int | None:
        """Autonomous rounds at most (None: the settings')."""
        ...

    @property
    def step_timeout(self) -> float | None:
        """Seconds a step may run (None: the settings')."""
        ...

    @property
    def max_cost(self) -> float | None:
        """Cost budget of a run in USD (None: the settings')."""
        ...

    def parse(self, line: str) -> Any:
        """The options of a ``%%dag`` line."""
        ...

    async def present(self, run: DagRun, args: Any, line: str = "", *, again: bool = False) -> DagRun:
        """Show the run as a cell's and, unless ``--bg``, await it."""
        ...


class NotebookSession:
    """The kernel's runs, their numbers, each one's cell options, the settings ``%dag config`` set, and the
    one ``DagSession`` that runs them all.
    """

    def __init__(self, magics: CellMagics) -> None:
        self.magics = magics
        self.overrides: dict[str, Any] = {}
        """Settings set with ``%dag config key=value``."""
        self.mcp_servers: list[MCPServer] = []
        """MCP servers set with ``%dag config mcp=...``: every later cell's steps may call their tools."""
        self.default_models: tuple[str, ModelRegistry] | None = None
        """``%dag config models=VAR``: the variable's name and its models, for every cell that chooses none."""
        self.default_tools: tuple[str, list[Any]] | None = None
        """``%dag config tools=a,b``: the names and the tools, for every cell without ``--tools``."""
        self.numbers: list[str] = []
        """Every run's id, by its number in this kernel (``%dag show 3`` is ``numbers[2]``)."""
        self.options: dict[str, str] = {}
        """The options of the cell that started each run: ``%dag resume RUN`` reuses them."""
        self._session: DagSession | None = None
        self.detached: list[DagRun] = []
        """Runs this kernel follows on Temporal's workers (``%%dag --on``, ``%dag attach``)."""
        global _kernel
        _kernel = self

    @property
    def runs(self) -> list[DagRun]:
        """The runs in memory: every running one and the latest finished ones, oldest first (those followed on
        Temporal's workers among them).
        """
        own = self._session.runs if self._session is not None else []
        if not self.detached:
            return own
        return sorted([*own, *self.detached], key=lambda run: run.state.started_at)

    @property
    def experiments(self) -> list[Experiment]:
        """The experiments this kernel's session started or resumed, oldest first."""
        return self._session.experiments if self._session is not None else []

    @property
    def namespace(self) -> dict[str, Any]:
        """The notebook's variables."""
        shell: Any = self.magics.shell
        namespace: dict[str, Any] = shell.user_ns if shell is not None else {}
        return namespace

    def session(self, options: dict[str, Any] | None = None) -> DagSession:
        """The kernel's ``DagSession``, made on first use; ``options``: a run's, whose settings become the
        session's (how many finished runs it keeps in memory follows ``%dag config``).
        """
        if self._session is None:
            from dagmagic.session import DagSession

            options = options or self.run_options(self.magics.parse(""))
            self._session = DagSession(options["models"], options["settings"])
        elif options is not None:
            self._session.settings = options["settings"]
        return self._session

    # --- a cell's options, as a run's

    def run_options(self, args: Any) -> dict[str, Any]:
        """What ``DagSession.start`` takes for a cell with these options."""
        settings = self.settings(args)
        return {
            "models": self.registry(args, settings),
            "settings": settings,
            "tools": [*self.tools(args), *self.mcp_servers],
            "allow_code": self.magics.allow_code,
            "approve_plans": bool(getattr(args, "approve", False)),
            "step_through": bool(getattr(args, "step_through", False)),
        }

    def tools(self, args: Any) -> list[Any]:
        """The cell's tools: ``--tools``, else those ``%dag config tools=...`` set (MCP servers aside)."""
        if getattr(args, "tools", None) or self.default_tools is None:
            return self.tools_of(getattr(args, "tools", None), "--tools")
        return list(self.default_tools[1])

    def tools_of(self, text: str | None, option: str) -> list[Any]:
        """The notebook variables ``text`` names (``a,b``), as ``--tools`` takes them."""
        return [self.variable(name, option) for name in names(text)]

    def settings(self, args: Any) -> DagSettings:
        """The magic's defaults, then ``%dag config``, then the cell's flags."""
        from dagmagic.settings import DagSettings

        magics = self.magics
        values: dict[str, Any] = {
            "max_concurrency": magics.max_concurrency,
            "max_replan_rounds": magics.max_rounds,
            "step_timeout": magics.step_timeout,
            "max_cost": magics.max_cost,
        }
        values.update(self.overrides)
        flags = {
            "max_concurrency": getattr(args, "concurrency", None),
            "max_replan_rounds": getattr(args, "max_rounds", None),
            "step_timeout": getattr(args, "step_timeout", None),
            "max_cost": getattr(args, "max_cost", None),
        }
        values.update({k: v for k, v in flags.items() if v is not None})
        try:
            return DagSettings(**{k: v for k, v in values.items() if v is not None})
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None

    def registry(self, args: Any, settings: DagSettings) -> ModelRegistry:
        """The cell's models: ``--models``, else the role options, else ``%dag config models=...``, else the
        magic's traits, ``DAG_*_MODEL``, else the models picked from a provider key or a local Ollama.
        """
        flags = {role: getattr(args, role, None) for role in ROLES if getattr(args, role, None)}
        if getattr(args, "models", None) and flags:
            raise UsageError("use either --models or the role options (--smart, --general, ...), not both")
        if getattr(args, "models", None):
            return self.models_of(args.models, "--models")
        if not flags and self.default_models is not None:
            return self.default_models[1]
        configured = {role: getattr(self.magics, f"{role}_model") for role in ROLES}
        from_settings = {role: getattr(settings, f"{role}_model") for role in ROLES}
        specs = {role: flags.get(role) or configured[role] or from_settings[role] for role in ROLES}
        specs = {role: spec for role, spec in specs.items() if spec}
        if not specs:
            return default_registry()
        return self._registry_of(specs)

    def models_of(self, name: str, option: str) -> ModelRegistry:
        """The models the notebook variable ``name`` holds, as ``--models`` takes them: a ``ModelRegistry``, or
        one model for every role, named after its variable (as it shows in views).
        """
        from dagmagic.llm import ModelRegistry

        value = self.variable(name, option)
        if isinstance(value, ModelRegistry):
            return value
        return self._registry_of({"smart": name})

    def _registry_of(self, specs: dict[str, Any]) -> ModelRegistry:
        """One entry per distinct model; a spec naming a notebook variable uses that object."""
        from dagmagic.llm import ModelRegistry

        registry = ModelRegistry()
        grouped: dict[int, tuple[str, Any, list[str]]] = {}
        for role, spec in specs.items():
            model = self.namespace.get(spec, spec) if isinstance(spec, str) else spec
            name = spec if isinstance(spec, str) else type(spec).__name__
            grouped.setdefault(id(model), (name, model, []))[2].append(role)
        try:
            for name, model, roles in grouped.values():
                registry.register(name, model, roles=roles)
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        return registry

    def variable(self, name: str, option: str) -> Any:
        """The notebook variable ``name`` (``UsageError`` naming ``option`` when there is none)."""
        if name not in self.namespace:
            raise UsageError(f"{option}: there is no variable named {name!r} in the notebook; define it first")
        return self.namespace[name]

    def context(self, variables: str | None) -> str:
        """``--context``: the short reprs of these notebook variables, to add to the goal."""
        lines = []
        for name in names(variables):
            text = repr(self.variable(name, "--context"))
            if len(text) > _CONTEXT_CHARS:
                text = f"{text[:_CONTEXT_CHARS]}… ({len(text) - _CONTEXT_CHARS} more characters)"
            lines.append(f"- {name} = {text}")
        return "\n\nContext from the notebook:\n" + "\n".join(lines) if lines else ""

    # --- starting runs

    def start(self, goal: str, args: Any, line: str, options: dict[str, Any] | None = None) -> DagRun:
        """Start a cell's run of ``goal`` (``line``: the cell's options, kept for ``%dag resume``; ``options``:
        the run's, when they were made already).
        """
        if getattr(args, "on", None):
            return self.numbered(lambda: self._start_detached(goal, args), args, line)
        options = options or self.run_options(args)
        session = self.session(options)
        if getattr(args, "new", False):
            session.reset()
        return self.numbered(lambda: session.start(goal, **options), args, line)

    def _start_detached(self, goal: str, args: Any) -> DagRun:
        """``%%dag --on temporal://…``: the goal sent to Temporal's workers, followed here (their models and tools)."""
        from dagmagic.temporal import TemporalAddress, require_sdk, start_detached

        given = [
            f"--{name}"
            for name in ("models", "tools", "smart", "general", "fast", "reasoning")
            if getattr(args, name, None)
        ]
        if given:
            raise UsageError(
                f"--on sends the run to Temporal's workers, whose FILE gives the models and tools: {', '.join(given)} "
                "cannot travel with it"
            )
        address = TemporalAddress.parse(args.on)
        require_sdk()
        settings = self.settings(args)
        from dagmagic.store import RunStore

        path = settings.store_path
        store = RunStore.open(path) if path is not None else None
        history = self._session.history if self._session is not None and not getattr(args, "new", False) else []
        run = start_detached(
            address,
            goal,
            store,
            history=history,
            settings=settings,
            approve_plans=bool(getattr(args, "approve", False)),
            step_through=bool(getattr(args, "step_through", False)),
        )
        self.detached.append(run)
        return run

    def attach(self, run_id: str, on: str | None) -> DagRun:
        """``%dag attach RUN``: a run on Temporal's workers followed again here, live, with its controls."""
        from dagmagic.temporal import attach

        store = self.store()
        if store is None:
            raise UsageError(f"nothing to attach to: there is no run store ({NO_STORE})")
        try:
            run = attach(self.stored_id(store, run_id), store, on)
        except (DagError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        self.detached = [kept for kept in self.detached if kept.run_id != run.run_id]
        self.detached.append(run)
        return run

    def resume(self, run_id: str, args: Any, line: str) -> DagRun:
        """Continue the stored run ``run_id`` with these options."""
        options = self.run_options(args)
        session = self.session(options)
        return self.numbered(lambda: session.start_resume(run_id, **options), args, line)

    def numbered(self, start: Any, args: Any, line: str) -> DagRun:
        """The run ``start()`` starts, numbered in this kernel, with the cell's breakpoints."""
        try:
            run: DagRun = start()
        except (ValueError, RuntimeError, DagError) as exc:  # DagError: a resume the store cannot serve
            raise UsageError(str(exc)) from None
        if run.run_id not in self.numbers:
            self.numbers.append(run.run_id)
        self.options.setdefault(run.run_id, line)
        if breaks := names(getattr(args, "breaks", None)):
            run.break_before(*breaks)
        return run

    def reopen(self, run: DagRun) -> DagRun:
        """A run of this kernel no longer in memory, taken back so that its steps can be re-run."""
        args = self.magics.parse(self.options.get(run.run_id, ""))
        try:
            return self.session().reopen(run.run_id, **self.run_options(args))
        except DagError as exc:
            raise UsageError(str(exc)) from None

    def taken_back(self, run_id: str) -> DagRun:
        """The run ``run_id`` that a view shows, for its controls: the one in memory, else, when the session let
        it go (only the latest finished runs stay: ``runs_in_memory``), taken back from the run store with the
        options of the cell that started it (its steps can be re-run, its calls read).
        """
        for run in reversed(self.runs):
            if run.run_id == run_id:
                return run
        store = self.store()
        if store is not None and (summary := store.summary(run_id)) is not None and summary.detached_on:
            return self.attach(run_id, None)  # its workers re-run its steps, never this kernel
        if self.store() is None:
            kept = self._session.settings.runs_in_memory if self._session is not None else "latest"
            raise UsageError(
                f"run {run_id} is no longer in memory (only the {kept} latest finished runs are kept: "
                f"runs_in_memory) and there is no run store to read it back from: {NO_STORE}"
            )
        line = self.options.get(run_id)
        options = self.run_options(self.magics.parse(line)) if line is not None else {}
        try:
            return self.session().reopen(run_id, **options)
        except DagError as exc:
            raise UsageError(str(exc)) from None

    # --- finding runs

    def store(self) -> RunStore | None:
        """The run store the settings name, when its file exists (reading history creates nothing); a
        PostgreSQL store, when it can be reached.
        """
        from pathlib import Path

        from dagmagic.errors import DagError
        from dagmagic.settings import DagSettings
        from dagmagic.store import RunStore

        path = DagSettings(**self.overrides).store_path
        if path is None or (isinstance(path, Path) and not path.exists()):
            return None
        try:
            return RunStore.open(path)
        except DagError as exc:
            raise UsageError(str(exc)) from None

    def find(self, key: str) -> DagRun:
        """The run ``key`` names: its number here, its id (or the start of it); the latest when empty. Runs no
        longer in memory, and other kernels' runs, are read back from the store.
        """
        if not key:
            if not self.runs:
                raise UsageError("no runs yet: run a %%dag cell first")
            return self.runs[-1]
        number = int(key) if key.isdigit() and 1 <= int(key) <= len(self.numbers) else None
        if number is not None:
            key = self.numbers[number - 1]
        for run in reversed(self.runs):
            if run.run_id == key:
                return run
        store = self.store()
        if store is None and key in self.numbers:
            raise UsageError(
                f"run {number or key} ({key}) is no longer in memory (only the latest finished runs are kept: "
                f"runs_in_memory) and there is no run store to read it back from: {NO_STORE}"
            )
        if store is not None:
            from dagmagic.engine import DagRun

            try:
                stored = store.load(self.stored_id(store, key))
            except KeyError:
                pass
            else:
                return DagRun(stored.state, events=stored.events, read_only=True)
        raise UsageError(f"no run {key!r}; see %dag history")

    def stored_id(self, store: RunStore, key: str) -> str:
        """The run id ``key`` names: this kernel's run number, a stored run's id (or its start), or, when
        empty, the latest interrupted run.
        """
        if key.isdigit() and 1 <= int(key) <= len(self.numbers):
            return self.numbers[int(key) - 1]
        summaries = store.runs(limit=500)
        if not key:
            for summary in summaries:
                if summary.interrupted and not self.running_here(summary.run_id):
                    return summary.run_id
            raise UsageError("no stored run was interrupted: there is nothing to resume (see %dag history)")
        matches = [summary.run_id for summary in summaries if summary.run_id.startswith(key)]
        if len(matches) == 1 or key in matches:
            return key if key in matches else matches[0]
        if matches:
            raise UsageError(f"{key!r} starts the ids of {len(matches)} runs; give more of it (see %dag history)")
        return key  # not among the latest: the store says whether it is there at all

    def running_here(self, run_id: str) -> bool:
        """Whether the run ``run_id`` runs in this kernel now."""
        return any(run.run_id == run_id and not run.done() for run in self.runs)

    def running(self) -> DagRun:
        """The latest run still running."""
        for run in reversed(self.runs):
            if not run.done():
                return run
        raise UsageError("no run is running")

    def waiting(self, key: str) -> DagRun:
        """The run whose plan waits for approval (or ``key``'s)."""
        if key:
            return self.find(key)
        for run in reversed(self.runs):
            if run.awaiting_approval:
                return run
        raise UsageError("no plan is waiting for approval (run a cell with --approve, and --bg to act from here)")


_kernel: NotebookSession | None = None
"""The kernel's ``NotebookSession`` (the latest made): where a view takes back a run its session let go."""


def take_back(run_id: str) -> DagRun:
    """The run ``run_id`` of this kernel for a view's controls (``NotebookSession.taken_back``)."""
    if _kernel is None:
        raise UsageError(f"run {run_id} is no longer in memory; dagmagic is not loaded here to read it back")
    return _kernel.taken_back(run_id)


def in_memory(run_id: str) -> DagRun | None:
    """Run ``run_id`` if this kernel's session holds it in memory (a view follows it live), else None."""
    runs = _kernel.runs if _kernel is not None else []
    return next((run for run in runs if run.run_id == run_id), None)


def run_number(run_id: str) -> int | None:
    """The run's number in this kernel (``%dag show N``), or None."""
    numbers = _kernel.numbers if _kernel is not None else []
    return numbers.index(run_id) + 1 if run_id in numbers else None


def default_registry() -> ModelRegistry:
    """The models picked from a provider key or a local Ollama when none is chosen (``dagmagic.llm.defaults``)."""
    from dagmagic.llm import ModelRegistry

    try:
        return ModelRegistry.from_env()
    except ConfigurationError:
        raise UsageError(NO_MODEL_HELP) from None
