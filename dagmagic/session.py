"""``DagSession``: the conversation runs belong to; it starts runs, drives them, and remembers their answers."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypedDict, Unpack

from dagmagic.engine.calls.guard import HistoryDigests
from dagmagic.engine.loop.driver import GoalLoop
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.engine.steps.agent import StepAgent
from dagmagic.engine.steps.runner import StepRunner
from dagmagic.engine.tools.code import CodeWorkspace
from dagmagic.engine.tools.functions import Tool, as_tools
from dagmagic.engine.tools.mcp.connections import MCPConnections
from dagmagic.engine.tools.mcp.server import MCPServer
from dagmagic.errors import ConfigurationError, DagError
from dagmagic.events import RunWarning
from dagmagic.llm import ModelRegistry
from dagmagic.llm.cache import cached_registry
from dagmagic.llm.replay import cassette_registry
from dagmagic.messages import Origin, Rerun
from dagmagic.models import Exchange, RunState
from dagmagic.settings import DagSettings
from dagmagic.store import RunStore, StoredRun, StoreUnavailable
from dagmagic.store_url import StoreURL
from dagmagic.tracing import RunTracer, run_tracer

if TYPE_CHECKING:
    from dagmagic.evaluation.experiment import Experiment
    from dagmagic.evaluation.runner import CellListener, Evaluation
    from dagmagic.evaluation.scorers import ScoreFunction

__all__ = ["DagSession", "RunOptions"]

log = logging.getLogger("dagmagic")

ToolLike = Tool | Callable[..., Any] | MCPServer

_CLOSE_SECONDS = 5.0
"""How long closing a session outside an event loop waits for its stores' writes (another program's lock)."""


class RunOptions(TypedDict, total=False):
    """What one run may have of its own instead of its session's (``start``, ``run``, ``start_resume``)."""

    models: ModelRegistry
    settings: DagSettings
    tools: Iterable[ToolLike]
    allow_code: bool
    approve_plans: bool
    step_through: bool


class DagSession:
    """Runs goals with one set of models, settings and tools; each finished run becomes history for the next.

    ``models`` defaults to ``ModelRegistry.from_settings(settings)`` (the ``DAG_*_MODEL`` variables; with none
    set, models picked from a provider key or a local Ollama, see ``ModelRegistry.from_env``);
    ``tools`` are ``@tool`` functions, plain callables or MCP servers (``MCPServer.stdio(...)``,
    ``MCPServer.http(...)``: started on the first run that needs them, or on ``async with``, shared by every
    step, stopped by ``close()``); ``allow_code=True`` adds the ``python`` tool,
    which runs model-written code in a separate process, in a working directory of the session's own that
    ``close()`` removes (``with DagSession(...) as session:`` closes it too). ``approve_plans=True`` makes
    every plan wait for ``run.approve()`` or ``run.reject(why)``; ``step_through=True`` pauses before every step.

    ``start``, ``run`` and ``start_resume`` take any of these for one run only (the notebook's cells do):
    the run still belongs to this session's conversation. ``replay`` re-executes a stored run with the code,
    prompts and tools of now, its model calls answered from its recording. ``evaluate`` runs goals × named
    configurations, each cell a run of its own outside the conversation, and scores them (an ``Experiment``).
    """

    def __init__(
        self,
        models: ModelRegistry | None = None,
        settings: DagSettings | None = None,
        *,
        tools: Iterable[ToolLike] = (),
        allow_code: bool = False,
        step_runner: StepRunner | None = None,
        approve_plans: bool = False,
        step_through: bool = False,
    ) -> None:
        self.settings = settings or DagSettings()
        self.models = models if models is not None else ModelRegistry.from_settings(self.settings)
        self.models.for_role("smart")  # an empty registry fails here, with the message that says what to set
        self.allow_code = allow_code
        """Steps may run model-written code with the ``python`` tool."""
        self._code: CodeWorkspace | None = None
        self._warned_without_sandbox = False
        self._tools = list(tools)
        self._mcp = MCPConnections()
        self._step_runner = step_runner
        self.approve_plans = approve_plans
        """Every plan waits for ``run.approve()`` (perhaps with an edited plan) or ``run.reject(why)``."""
        self.step_through = step_through
        """Every step pauses before it runs until ``run.step_over()``, ``run.resume_step()`` or ``run.skip(id)``."""
        self.history: list[Exchange] = []
        self.runs: list[DagRun] = []
        """Runs started here, the latest ``settings.runs_in_memory`` finished ones and every running one; older
        ones are read back with ``dagmagic.load_run(run_id)`` (or taken back with ``reopen(run_id)``)."""
        self._digests: HistoryDigests = {}
        self._active: set[asyncio.Task[None]] = set()
        self._stores: dict[Path | StoreURL, RunStore] = {}
        self._store_problems: dict[Path | StoreURL | None, str] = {}
        self._in_history: dict[str, int] = {}
        """Where each run's exchange sits in the history (a re-run replaces it)."""
        self._outside: set[str] = set()
        """Runs started outside the conversation: their answers do not join it."""
        self._evaluations: dict[str, Evaluation] = {}
        """Experiments started here, by id, with their configs and scorers (``resume_evaluation`` needs them)."""

    @property
    def tools(self) -> list[Tool]:
        """The tools steps may call (``python`` only with ``allow_code=True``); an MCP server's join each run
        once the server started.
        """
        return self._toolset(self._tools, self.allow_code)

    @property
    def step_runner(self) -> StepRunner:
        """What runs each step: a ``StepAgent`` over the session's tools, unless one was given."""
        return self._step_runner or StepAgent(self.tools)

    # --- runs

    def start(self, goal: str, *, conversation: bool = True, **options: Unpack[RunOptions]) -> DagRun:
        """Start pursuing ``goal`` as a task on the running loop; ``await`` the returned run for its end.
        ``options`` replace the session's own for this run; ``conversation=False``: the run neither sees the
        conversation so far nor joins it.
        """
        goal = _check_goal(goal)
        _running_loop("DagSession.start()", "asyncio.run(session.run(goal))")
        driver = self._driver(list(self.history) if conversation else [], options)
        driver.check_store()
        state = RunState(run_id=uuid.uuid4().hex[:12], goal=goal, started_at=time.time())
        if not conversation:
            self._outside.add(state.run_id)
        step_through = options.get("step_through", self.step_through)
        return self._keep(DagRun(state, driver=driver, origin="new", step_through=step_through))

    async def run(self, goal: str, **options: Any) -> DagRun:
        """Pursue ``goal`` to its end and return the finished run (``options``: as ``start``'s). Cancelling
        this cancels the run.
        """
        return await self.start(goal, **options).wait(cancel_with_waiter=True)

    def start_resume(self, run_id: str, **options: Unpack[RunOptions]) -> DagRun:
        """Continue a run that did not end (its kernel restarted, its process died, it was cancelled), as a
        task on the running loop: completed steps are kept, the others run again, and the loop goes on from
        the round it was in. The session's models and tools serve it (or those given); ``await`` the run.
        """
        _running_loop("DagSession.start_resume()", "asyncio.run(session.resume(run_id))")
        if any(run.run_id == run_id and not run.done() for run in self.runs):
            raise DagError(f"run {run_id} is running in this session already")
        stored = self._stored(run_id, options.get("settings"), "resume", f"{run_id!r} from")
        if stored.state.status in ("done", "failed"):
            raise DagError(f"run {run_id} ended ({stored.state.status}): there is nothing to resume")
        state = stored.state.model_copy(
            update={"status": "running", "finished_at": None, "error": None, "answer": "", "phase": "starting"}
        )
        driver = self._driver(stored.history, options)
        step_through = options.get("step_through", self.step_through)
        run = DagRun(state, events=stored.events, driver=driver, origin="resume", step_through=step_through)
        return self._keep(run)

    async def resume(self, run_id: str, **options: Any) -> DagRun:
        """Continue the stored run ``run_id`` to its end (see ``start_resume``) and return it."""
        return await self.start_resume(run_id, **options).wait(cancel_with_waiter=True)

    def start_replay(
        self,
        run: str | DagRun | StoredRun,
        *,
        strict: bool = True,
        fallback: ModelRegistry | None = None,
        timing: float | None = None,
        **options: Unpack[RunOptions],
    ) -> DagRun:
        """Start re-executing the run that ended ``run`` (its id in the session's store, a ``DagRun``, or a run
        read back) with this session's code, prompts, tools and settings now, each model call answered from
        what the run recorded: no provider is called. The replay pursues the same goal in the conversation the
        run was planned in, and fails at the first call the recording has no answer for
        (``ReplayMismatch``; ``run.divergence`` says where and shows what changed): "what did my prompt change
        do?". ``replayed.diff(original)`` compares the two runs.

        ``strict=False`` sends a call the recording lacks to ``fallback`` (default: the session's models)
        instead; ``timing``: None replays at once, 1.0 with the recorded delays. ``options``: as ``start``'s,
        except ``models``; plans are not held for approval and steps do not pause unless asked. The replay is
        a run of its own (kept in ``runs`` and the store, ``replay_of`` naming the original) outside the
        conversation: its answer does not join it. A run the user steered (follow-ups, a re-run, an edited
        plan) diverges where the user acted.
        """
        from dagmagic.store.replay import replay  # a recording answers: the same seam as in a test

        _running_loop("DagSession.start_replay()", "asyncio.run(session.replay(run_id))")
        if "models" in options:
            raise TypeError("a replay's models answer from the recording; pass fallback= for calls it lacks")
        original, history = self._original(run, options.get("settings"))
        run_id = original.state.run_id
        if original.state.status == "running":
            raise DagError(f"run {run_id} has not ended: replay it once it has (or resume it first)")
        if not original.state.calls:
            raise DagError(f"run {run_id} made no model call: there is nothing to replay")
        if fallback is None and not strict:
            fallback = self.models
        models = replay(original, strict=strict, fallback=fallback, timing=timing)
        own: RunOptions = {"approve_plans": False, "step_through": False, **options, "models": models}
        driver = self._driver(history, own, replaying=True)
        driver.check_store()
        state = RunState(run_id=uuid.uuid4().hex[:12], goal=original.state.goal, started_at=time.time())
        state.replay_of = run_id
        self._outside.add(state.run_id)
        step_through = own.get("step_through", False)
        return self._keep(DagRun(state, driver=driver, origin="new", step_through=step_through))

    async def replay(self, run: str | DagRun | StoredRun, **options: Any) -> DagRun:
        """Replay the run ``run`` to the end (see ``start_replay``) and return the replay."""
        return await self.start_replay(run, **options).wait(cancel_with_waiter=True)

    def _original(self, run: str | DagRun | StoredRun, settings: DagSettings | None) -> tuple[Any, list[Exchange]]:
        """The run to replay (with its state, events and calls) and the conversation it was planned in."""
        if isinstance(run, str):
            stored = self._stored(run, settings, "replay", f"run {run!r} from")
            return stored, stored.history
        if isinstance(run, StoredRun):
            return run, run.history
        if not isinstance(run, DagRun):
            raise TypeError(f"replay() takes a run, a run read back or a run id, got {type(run).__name__}")
        conversation = run.conversation
        if conversation is None:  # read back: the store holds the conversation it was planned in
            conversation = self._stored(run.run_id, settings, "replay", f"run {run.run_id!r} from").history
        return run, conversation

    def reopen(self, run_id: str, **options: Unpack[RunOptions]) -> DagRun:
        """A stored run that ended, taken back into this session so that its steps can be re-run
        (``run.rerun``): for a run no longer in memory (see ``DagSettings.runs_in_memory``). Nothing runs yet.
        ``options``: as ``start``'s, for its re-runs.
        """
        stored = self._stored(run_id, options.get("settings"), "read", f"run {run_id!r} back from")
        if stored.state.status == "running":
            raise DagError(f"run {run_id} did not end: continue it with `session.resume({run_id!r})`")
        driver = self._driver(stored.history, options)
        step_through = options.get("step_through", self.step_through)
        return self._keep(DagRun(stored.state, events=stored.events, driver=driver, step_through=step_through))

    # --- evaluations

    def start_evaluation(
        self,
        cases: Any,
        *,
        goal: str | None = None,
        configs: Mapping[str, Any] | None = None,
        scorers: Iterable[ScoreFunction] = (),
        repeat: int = 1,
        concurrency: int | None = None,
        max_cost: float | None = None,
        name: str | None = None,
        on_cell: CellListener | None = None,
        shard: tuple[int, int] | None = None,
    ) -> Experiment:
        """Start evaluating this session's workflow over ``cases`` as a task on the running loop; the
        ``Experiment`` at once (``await`` it for the end). See ``evaluate``.
        """
        from dagmagic.evaluation.runner import Evaluation  # the evaluation package builds on the session

        _running_loop("DagSession.start_evaluation()", "asyncio.run(session.evaluate(cases))")
        evaluation = Evaluation.new(
            self,
            cases,
            goal=goal,
            configs=configs,
            scorers=scorers,
            repeat=repeat,
            max_cost=max_cost,
            name=name,
            shard=shard,
        )
        self._evaluations[evaluation.experiment.id] = evaluation
        return evaluation.start(concurrency, on_cell)

    async def evaluate(self, cases: Any, **options: Any) -> Experiment:
        """Run every cell (case × config × repetition) of an experiment and score it; the experiment once all ended.

        ``cases``: goals, dicts with a ``goal`` (and ``expected``, ``metadata``, ``id``), or a pandas DataFrame
        whose rows fill the template ``goal="Compare {a} and {b}"``. ``configs``: named variations of this
        session's models, settings and tools (``{"small": {"models": {"smart": "openai/gpt-4o-mini"}}}``; default:
        the session's own, named ``default``). ``scorers``: callables ``(case, run) -> float | bool | dict``, sync or
        async; one that raises scores that cell as an error. ``concurrency``: cells at once (default
        ``settings.max_concurrency``); ``max_cost``: USD after which no cell starts (the experiment says so);
        ``on_cell``: told of each cell's change. Each cell is an ordinary stored run outside the conversation.
        ``shard=(i, n)``: this process is worker ``i`` of ``n`` sharing the experiment ``name`` through the run
        store (each started with the same cases, configs and scorers): each cell is claimed before it runs, so each
        runs once; worker ``i`` starts with the cells whose index is ``i`` modulo ``n``, then takes any other not
        ended whose worker is gone (its cut run resumed), and returns once every cell ended, all of them shown.
        Cancelling this interrupts the experiment: finished cells are kept, and ``resume_evaluation`` runs the rest.
        """
        return await self.start_evaluation(cases, **options).wait()

    @property
    def experiments(self) -> list[Experiment]:
        """The experiments this session started or resumed (each once, as it is now), oldest first."""
        return [evaluation.experiment for evaluation in self._evaluations.values()]

    def start_resume_evaluation(
        self,
        name_or_id: str,
        *,
        configs: Mapping[str, Any] | None = None,
        scorers: Iterable[ScoreFunction] | None = None,
        concurrency: int | None = None,
        max_cost: float | None = None,
        on_cell: CellListener | None = None,
    ) -> Experiment:
        """Start running the cells of the experiment ``name_or_id`` that did not end, as a task on the running
        loop; the ``Experiment`` at once (``await`` it for the end). See ``resume_evaluation``.
        """
        from dagmagic.evaluation.runner import Evaluation

        _running_loop("DagSession.start_resume_evaluation()", "asyncio.run(session.resume_evaluation(name))")
        mine = [
            evaluation
            for evaluation in self._evaluations.values()
            if name_or_id in (evaluation.experiment.id, evaluation.experiment.name)
        ]
        if mine:
            latest = max(mine, key=lambda found: found.experiment.definition.created_at)
            evaluation = Evaluation.again(self, latest.experiment, configs, scorers, previous=latest)
        else:
            evaluation = Evaluation.stored(self, name_or_id, configs, scorers)
        self._evaluations[evaluation.experiment.id] = evaluation
        if max_cost is not None:
            evaluation.raise_budget(max_cost)
        return evaluation.start(concurrency, on_cell)

    async def resume_evaluation(self, name_or_id: str, **options: Any) -> Experiment:
        """Run the cells of the experiment ``name_or_id`` that did not end (a cell cut mid-run is resumed like any
        run; one ``max_cost`` left unstarted is started) and return it. ``options``: ``configs``, ``scorers``,
        ``concurrency``, ``max_cost``, ``on_cell``. An experiment of this session keeps its configs and scorers; one
        read back from the store (another session, a restarted kernel) needs them again, by the same names.
        ``max_cost``: a new budget for the whole experiment (default: the one it had).
        """
        return await self.start_resume_evaluation(name_or_id, **options).wait()

    def _stored(self, run_id: str, settings: DagSettings | None, verb: str, what: str) -> StoredRun:
        store = self.store_for(settings or self.settings)
        if store is None:
            raise DagError(f"there is no run store to {verb} {what} ({self.store_problem(settings)})")
        try:
            return store.load(run_id)
        except KeyError:
            hint = "; `%dag history` lists the stored runs" if verb in ("resume", "replay") else ""
            raise DagError(f"no run {run_id!r} in the run store {store.path}{hint}") from None

    @property
    def store(self) -> RunStore | None:
        """The run store runs are saved to (``DAG_STORE``), None when it is off or cannot be written."""
        return self.store_for(self.settings)

    def store_for(self, settings: DagSettings) -> RunStore | None:
        """The run store ``settings`` name, opened once; None when it is off or cannot be written."""
        path = settings.store_path
        if path is None:
            self._store_problems[None] = "DAG_STORE is none"
            return None
        if path in self._stores and self._stores[path].closed:  # closed meanwhile (by a test, say): open again
            del self._stores[path]
        if path not in self._stores and path not in self._store_problems:
            try:
                self._stores[path] = RunStore.open(path)
            except StoreUnavailable as exc:
                self._store_problems[path] = str(exc)
        return self._stores.get(path)

    def store_problem(self, settings: DagSettings | None = None) -> str | None:
        """Why runs with ``settings`` are not saved, None when they are."""
        settings = settings or self.settings
        return None if self.store_for(settings) is not None else self._store_problems.get(settings.store_path)

    def _driver(self, history: list[Exchange], options: RunOptions, *, replaying: bool = False) -> _Driver:
        """What drives one run: the session's goal loop, or one with the run's own options (``replaying``: its
        models answer from a run's recording, which neither the response cache nor a cassette of the settings
        may answer for: a divergence would be hidden).
        """
        settings = options.get("settings") or self.settings
        models = options.get("models", self.models)
        models.for_role("smart")
        if not replaying:
            models = cassette_registry(cached_registry(models, settings), settings)
        tools = options.get("tools")
        chosen = self._tools if tools is None else list(tools)
        toolset = self._toolset(chosen, options.get("allow_code", self.allow_code))
        runner = self._step_runner if self._step_runner is not None and tools is None else StepAgent(toolset)
        own_runner = runner is not self._step_runner
        servers = [item for item in chosen if isinstance(item, MCPServer)]
        loop = GoalLoop(
            models,
            settings,
            runner,
            history=tuple(history),
            tool_names=[tool.name for tool in toolset],
            tools=toolset,
            digests=self._digests,
            approve_plans=options.get("approve_plans", self.approve_plans),
            connect=self._connector(servers, own_runner) if servers else None,
        )
        return _Driver(self, loop, history)

    def _connector(self, servers: list[MCPServer], own_runner: bool) -> Callable[[GoalLoop], Awaitable[None]]:
        """What joins the tools of ``servers`` to a run's loop, starting the servers not running yet."""

        async def connect(loop: GoalLoop) -> None:
            served = await self._mcp.tools(servers)
            names = [tool.name for tool in [*loop.tools, *served]]
            if repeated := sorted({name for name in names if names.count(name) > 1}):
                raise ConfigurationError(
                    f"the tool name {', '.join(repeated)} is listed by an MCP server and given again (by another "
                    "server or a function): a model could not tell them apart; leave one of them out of tools="
                )
            toolset = as_tools([*loop.tools, *served])
            loop.tools, loop.tool_names = toolset, [tool.name for tool in toolset]
            if own_runner:
                loop.step_runner = StepAgent(toolset)

        return connect

    def _toolset(self, tools: list[ToolLike], allow_code: bool) -> list[Tool]:
        functions = [item for item in tools if not isinstance(item, MCPServer)]  # theirs join once they started
        if allow_code and self._code is None:
            self._code = CodeWorkspace(self.settings.code_timeout, network=self.settings.code_network)
        extra = [self._code.tool()] if allow_code and self._code is not None else []
        return as_tools([*functions, *extra])

    def _unsandboxed_code_warning(self) -> str | None:
        """Once per session, when its ``python`` tool runs scripts without a sandbox: what that means."""
        if self._code is None or self._code.sandbox_problem is None or self._warned_without_sandbox:
            return None
        self._warned_without_sandbox = True
        return (
            f"The python tool runs scripts without a sandbox: {self._code.sandbox_problem}. They run as your"
            " user: they can read and change your files, see your processes and use the network (whatever"
            " DAG_CODE_NETWORK says). What still holds: their environment has no keys or DAG_* variables, and"
            " every process they start is ended with the call (unless a script kills its supervisors on purpose)."
        )

    def _keep(self, run: DagRun) -> DagRun:
        if all(kept is not run for kept in self.runs):
            self.runs.append(run)
        self._forget_finished()
        return run

    def _started(self, run: DagRun, task: asyncio.Task[None]) -> None:
        self._active.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(lambda finished: self._finished(run, finished))
        self._keep(run)

    def reset(self) -> None:
        """Forget the conversation: later runs start without history."""
        self.history.clear()
        self._digests.clear()

    def _forget_finished(self) -> None:
        """Keep the latest ``runs_in_memory`` finished runs (and every running one); older ones stay in the store."""
        finished = [run for run in self.runs if run.done() and not run.driven]
        dropped = {id(run) for run in finished[: max(len(finished) - self.settings.runs_in_memory, 0)]}
        if dropped:
            self.runs[:] = [run for run in self.runs if id(run) not in dropped]

    def _finished(self, run: DagRun, task: asyncio.Task[None]) -> None:
        self._active.discard(task)
        self._forget_finished()
        if not task.cancelled():
            task.exception()  # retrieved: the loop records failures on the run itself
        if run.status in ("done", "failed") and run.answer and run.run_id not in self._outside:
            exchange = Exchange(goal=run.objective, answer=run.answer)  # a follow-up sent just before a Stop counts
            place = self._in_history.get(run.run_id)
            if place is not None and place < len(self.history):  # a re-run: its new answer replaces the old
                self.history[place] = exchange
            else:
                self._in_history[run.run_id] = len(self.history)
                self.history.append(exchange)

    def close(self) -> None:
        """Stop the MCP servers, kill the ``python`` tool's scripts still running and remove its working directory,
        and checkpoint the run stores (outside an event loop: once what waits is written); idempotent. On the
        servers' event loop they stop once the caller yields (``async with`` or ``await aclose()`` waits).

        Garbage collection and interpreter exit do the same for a session never closed.
        """
        self._mcp.close()
        if self._code is not None:
            self._code.close()
        try:
            asyncio.get_running_loop()
            wait = 0.0  # never stall the loop: the store's writer checkpoints once what waits is written
        except RuntimeError:
            wait = _CLOSE_SECONDS
        for store in self._stores.values():
            store.checkpoint(wait)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    async def aclose(self) -> None:
        """``close()``, waiting until the MCP servers stopped (their processes ended)."""
        await self._mcp.aclose()
        self.close()

    async def __aenter__(self) -> Self:
        """Start the session's MCP servers now: one that cannot start raises ``MCPServerError`` here."""
        try:
            await self._mcp.tools(item for item in self._tools if isinstance(item, MCPServer))
        except BaseException:
            await self._mcp.aclose()  # those that did start: nothing will close this session
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"DagSession(models={[entry.name for entry in self.models]}, runs={len(self.runs)})"


@dataclass
class _Driver:
    """What drives one run of a session (``dagmagic.engine.run.dag_run.RunDriver``): its goal loop, the conversation
    it is planned in, and the session's bookkeeping of the run's tasks.
    """

    session: DagSession
    loop: GoalLoop
    history: list[Exchange]

    @property
    def registry(self) -> ModelRegistry:
        """The run's models."""
        return self.loop.registry

    def check_store(self) -> None:
        """Open the run's store now: a foreign or damaged file raises ``StoreError`` before anything runs."""
        self.session.store_for(self.loop.settings)

    def start(self, run: DagRun, origin: Origin) -> asyncio.Task[None]:
        """Save the run (when its store can be written; else it says why not) and drive it as a task."""
        settings = self.loop.settings
        tracer = run_tracer(settings)  # DAG_OTEL=1 without OpenTelemetry: ConfigurationError, before anything
        store = self.session.store_for(settings)
        if store is not None:  # takes the run's lease: refused (DagError, naming the driver) while another holds it
            run.save_to(store, self.history)
        elif settings.store_path is not None and not isinstance(origin, Rerun):
            run.emit(RunWarning(message=f"This run is not saved: {self.session.store_problem(settings)}"))
        if "python" in self.loop.tool_names and (warning := self.session._unsandboxed_code_warning()):
            run.emit(RunWarning(message=warning))
        if tracer is not None:
            tracer.follow(run)
        task = asyncio.get_running_loop().create_task(
            self._drive(run, origin, tracer), name=f"dagmagic:run:{run.run_id}"
        )
        token = store.lease_token(run.run_id) if store is not None else None
        if store is not None and token is not None:  # the run's end gives it back; this, if the end was not saved
            task.add_done_callback(lambda _: _release(store, run.run_id, token))
        self.session._started(run, task)
        return task

    async def _drive(self, run: DagRun, origin: Origin, tracer: RunTracer | None = None) -> None:
        """Drive the run; it ends once what it did is on disk (the store checkpointed), or says what is not,
        and its spans are exported.
        """
        try:
            await self.loop.drive(run, origin)
        finally:
            await run._settle_store()
            if tracer is not None:
                await tracer.close()


def _release(store: RunStore, run_id: str, token: str) -> None:
    try:
        store.release(run_id, token)
    except Exception:  # the store failed: the lease expires by itself
        log.warning("[dagmagic] the lease on run %s could not be given back; it expires by itself", run_id)


def _running_loop(what: str, elsewhere: str) -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{what} needs a running event loop (a notebook cell or an async function); elsewhere use {elsewhere}."
        ) from None


def _check_goal(goal: str) -> str:
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError("a goal needs some text: say what you want to find out or get done")
    return goal.strip()
