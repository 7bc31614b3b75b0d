"""``DagSession``: the conversation runs belong to; it starts runs, drives them, and remembers their answers.

The front door over the engine (goal loop), the run store, evaluation and tracing; its parts live in
``dagmagic/_session/`` (stores, tools, the conversation and its runs, each run's driver, replays, evaluations).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Self, TypedDict, Unpack

from dagmagic._session.conversation import Conversation
from dagmagic._session.driving import RunDriver, SessionParts
from dagmagic._session.evaluations import EvaluationOptions, ResumeOptions, SessionEvaluations
from dagmagic._session.forks import forked_state
from dagmagic._session.replays import forkable, history_read, replayable
from dagmagic._session.stores import SessionStores
from dagmagic._session.toolbox import Toolbox, ToolLike
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.engine.steps.agent import StepAgent
from dagmagic.engine.steps.runner import StepRunner
from dagmagic.engine.tools.functions import Tool
from dagmagic.errors import DagError
from dagmagic.evaluation.experiment import Experiment
from dagmagic.llm import ModelRegistry
from dagmagic.models import Exchange, RunState
from dagmagic.settings import DagSettings
from dagmagic.store import RunStore, StoredRun
from dagmagic.store.replay import replay as replay_registry

__all__ = ["DagSession", "RunOptions"]

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
        self.approve_plans = approve_plans
        """Every plan waits for ``run.approve()`` (perhaps with an edited plan) or ``run.reject(why)``."""
        self.step_through = step_through
        """Every step pauses before it runs until ``run.step_over()``, ``run.resume_step()`` or ``run.skip(id)``."""
        self._step_runner = step_runner
        self._toolbox = Toolbox(tools, self.settings)
        self._stores = SessionStores()
        self._conversation = Conversation(lambda: self.settings.runs_in_memory)
        self._evaluations = SessionEvaluations()

    @property
    def history(self) -> list[Exchange]:
        """The conversation so far: each finished run's goal and answer, oldest first."""
        return self._conversation.history

    @history.setter
    def history(self, exchanges: list[Exchange]) -> None:
        self._conversation.history = exchanges

    @property
    def runs(self) -> list[DagRun]:
        """Runs started here, the latest ``settings.runs_in_memory`` finished ones and every running one; older
        ones are read back with ``dagmagic.load_run(run_id)`` (or taken back with ``reopen(run_id)``).
        """
        return self._conversation.runs

    @property
    def tools(self) -> list[Tool]:
        """The tools steps may call (``python`` only with ``allow_code=True``); an MCP server's join each run
        once the server started.
        """
        return self._toolbox.toolset(self._toolbox.given, self.allow_code)

    @property
    def step_runner(self) -> StepRunner:
        """What runs each step: a ``StepAgent`` over the session's tools, unless one was given."""
        return self._step_runner or StepAgent(self.tools)

    # --- runs

    def start(
        self, goal: str, *, conversation: bool = True, on: str | None = None, **options: Unpack[RunOptions]
    ) -> DagRun:
        """Start pursuing ``goal`` as a task on the running loop; ``await`` the returned run for its end.
        ``options`` replace the session's own for this run; ``conversation=False``: the run neither sees the
        conversation so far nor joins it.

        ``on="temporal://HOST:PORT/NAMESPACE"``: the run goes to the workers of that Temporal service (``python -m
        dagmagic worker``), with their models and tools, and outlives this process; the run returned follows it
        through the run store they share, and its controls (``stop()``, ``follow_up()``, ``approve()``...) reach it
        as signals. ``dagmagic.temporal.attach(run_id, store)`` (``%dag attach RUN``) follows it again from any
        process. Its answer does not join the conversation.
        """
        goal = _check_goal(goal)
        _running_loop("DagSession.start()", "asyncio.run(session.run(goal))")
        if on is not None:
            return self._start_detached(goal, on, conversation, options)
        driver = self._driver(list(self.history) if conversation else [], options)
        driver.check_store()
        state = RunState(run_id=uuid.uuid4().hex[:12], goal=goal, started_at=time.time())
        run = DagRun(state, driver=driver, origin="new", step_through=options.get("step_through", self.step_through))
        return self._conversation.keep(run, outside=not conversation)

    def _start_detached(self, goal: str, on: str, conversation: bool, options: RunOptions) -> DagRun:
        from dagmagic.temporal import TemporalAddress, require_sdk, start_detached

        address = TemporalAddress.parse(on)
        require_sdk()
        if given := [name for name in ("models", "tools", "allow_code") if name in options]:
            raise ValueError(
                f"on= sends the run to Temporal's workers, whose FILE gives the models and tools; "
                f"{', '.join(given)} cannot travel with it"
            )
        settings = options.get("settings") or self.settings
        run = start_detached(
            address,
            goal,
            self.store_for(settings),
            history=self.history if conversation else (),
            settings=settings,
            approve_plans=options.get("approve_plans", self.approve_plans),
            step_through=options.get("step_through", self.step_through),
        )
        return self._conversation.keep(run, outside=True)

    def start_as(
        self,
        run_id: str,
        goal: str,
        history: Sequence[Exchange],
        *,
        detached_on: str | None = None,
        **options: Unpack[RunOptions],
    ) -> DagRun:
        """Start ``goal`` as the run ``run_id``, planned in the conversation ``history``, outside this session's own:
        what a worker does with a run a notebook sent it (``detached_on``: where from, ``temporal://…``), under the
        id the notebook follows it by.
        """
        goal = _check_goal(goal)
        _running_loop("DagSession.start_as()", "a worker's event loop")
        driver = self._driver(list(history), options)
        driver.check_store()
        state = RunState(run_id=run_id, goal=goal, started_at=time.time(), detached_on=detached_on)
        run = DagRun(state, driver=driver, origin="new", step_through=options.get("step_through", self.step_through))
        return self._conversation.keep(run, outside=True)

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
        stored = self._stores.load(run_id, options.get("settings") or self.settings, "resume", f"{run_id!r} from")
        if stored.state.status in ("done", "failed"):
            raise DagError(f"run {run_id} ended ({stored.state.status}): there is nothing to resume")
        state = stored.state.model_copy(
            update={"status": "running", "finished_at": None, "error": None, "answer": "", "phase": "starting"}
        )
        driver = self._driver(stored.history, options)
        step_through = options.get("step_through", self.step_through)
        run = DagRun(state, events=stored.events, driver=driver, origin="resume", step_through=step_through)
        return self._conversation.keep(run)

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
        _running_loop("DagSession.start_replay()", "asyncio.run(session.replay(run_id))")
        if "models" in options:
            raise TypeError("a replay's models answer from the recording; pass fallback= for calls it lacks")
        original, history = replayable(run, self._stores, options.get("settings") or self.settings)
        if fallback is None and not strict:
            fallback = self.models
        models = replay_registry(original, strict=strict, fallback=fallback, timing=timing)
        own: RunOptions = {"approve_plans": False, "step_through": False, **options, "models": models}
        driver = self._driver(history, own, replaying=True, history_read=history_read(original))
        driver.check_store()
        state = RunState(run_id=uuid.uuid4().hex[:12], goal=original.state.goal, started_at=time.time())
        state.replay_of = original.state.run_id
        replayed = DagRun(state, driver=driver, origin="new", step_through=own.get("step_through", False))
        return self._conversation.keep(replayed, outside=True)

    async def replay(self, run: str | DagRun | StoredRun, **options: Any) -> DagRun:
        """Replay the run ``run`` to the end (see ``start_replay``) and return the replay."""
        return await self.start_replay(run, **options).wait(cancel_with_waiter=True)

    def start_fork(
        self,
        run: str | DagRun | StoredRun,
        at: str,
        *,
        task: str | None = None,
        result: str | None = None,
        **options: Unpack[RunOptions],
    ) -> DagRun:
        """Start a NEW run from the state of ``run`` (a run, a run read back, or its id in the session's store)
        before its step ``at`` (``s3``, or ``r2.s3`` for another round than the latest that has it): it keeps the
        rounds before and, of that round, every step that does not depend on ``at``; ``at`` runs again (``task``:
        with this task instead), or, with ``result``, ended with that text (marked edited); what depends on it runs,
        then the verdict, the answer and any later round. ``options``: as ``start``'s (``settings``, ``models``...)
        for the fork. Every model call the fork makes that the original made unchanged is answered from the
        original's recording (no provider call; not when ``models`` are given: those answer), the rest is live.

        The fork is a run of its own (in ``runs`` and the store, ``forked_from`` naming the original, ``forked_at``
        the step) outside the conversation, planned in the original's. ``dagmagic.compare(run, fork)`` puts the two
        side by side. Returns the fork at once; ``await`` it for its end.
        """
        _running_loop("DagSession.start_fork()", "asyncio.run(session.fork(run, at='s3'))")
        original, history = forkable(run, self._stores, options.get("settings") or self.settings)
        state = forked_state(original.state, at, task=task, result=result)
        recorded = "models" not in options and bool(original.state.calls)
        if recorded:  # what the fork asks as the original did is answered as it was; the rest by the session's models
            own: RunOptions = {**options, "models": replay_registry(original, strict=False, fallback=self.models)}
            driver = self._driver(history, own, replaying=True, history_read=history_read(original))
        else:
            driver = self._driver(history, options, history_read=history_read(original))
        driver.check_store()
        forked = DagRun(
            state, driver=driver, origin="fork", step_through=options.get("step_through", self.step_through)
        )
        return self._conversation.keep(forked, outside=True)

    async def fork(self, run: str | DagRun | StoredRun, at: str, **options: Any) -> DagRun:
        """Fork ``run`` at step ``at`` (see ``start_fork``) and return the fork once it ended."""
        return await self.start_fork(run, at, **options).wait(cancel_with_waiter=True)

    def reopen(self, run_id: str, **options: Unpack[RunOptions]) -> DagRun:
        """A stored run that ended, taken back into this session so that its steps can be re-run
        (``run.rerun``): for a run no longer in memory (see ``DagSettings.runs_in_memory``). Nothing runs yet.
        ``options``: as ``start``'s, for its re-runs.
        """
        settings = options.get("settings") or self.settings
        stored = self._stores.load(run_id, settings, "read", f"run {run_id!r} back from")
        if stored.state.status == "running":
            raise DagError(f"run {run_id} did not end: continue it with `session.resume({run_id!r})`")
        driver = self._driver(stored.history, options)
        step_through = options.get("step_through", self.step_through)
        run = DagRun(stored.state, events=stored.events, driver=driver, step_through=step_through)
        return self._conversation.keep(run)

    # --- evaluations

    def start_evaluation(self, cases: Any, **options: Unpack[EvaluationOptions]) -> Experiment:
        """Start evaluating this session's workflow over ``cases`` as a task on the running loop; the
        ``Experiment`` at once (``await`` it for the end). See ``evaluate``.
        """
        _running_loop("DagSession.start_evaluation()", "asyncio.run(session.evaluate(cases))")
        return self._evaluations.start(self, cases, options)

    async def evaluate(self, cases: Any, **options: Any) -> Experiment:
        """Run every cell (case × config × repetition) of an experiment and score it; the experiment once all ended.

        ``cases``: goals, dicts with a ``goal`` (and ``expected``, ``metadata``, ``id``), or a pandas DataFrame
        whose rows fill the template ``goal="Compare {a} and {b}"``. ``configs``: named variations of this
        session's models, settings and tools (``{"small": {"models": {"smart": "openai/gpt-4o-mini"}}}``; default:
        the session's own, named ``default``). ``scorers``: callables ``(case, run) -> float | bool | dict``, sync or
        async; one that raises scores that cell as an error. ``concurrency``: cells at once (default
        ``settings.max_concurrency``); ``max_cost``: USD after which no cell starts (the experiment says so);
        ``on_cell``: told of each cell's change. Each cell is an ordinary stored run outside the conversation.
        Cancelling this interrupts the experiment: finished cells are kept, and ``resume_evaluation`` runs the rest.
        """
        return await self.start_evaluation(cases, **options).wait()

    @property
    def experiments(self) -> list[Experiment]:
        """The experiments this session started or resumed (each once, as it is now), oldest first."""
        return self._evaluations.experiments

    def start_resume_evaluation(self, name_or_id: str, **options: Unpack[ResumeOptions]) -> Experiment:
        """Start running the cells of the experiment ``name_or_id`` that did not end, as a task on the running
        loop; the ``Experiment`` at once (``await`` it for the end). See ``resume_evaluation``.
        """
        _running_loop("DagSession.start_resume_evaluation()", "asyncio.run(session.resume_evaluation(name))")
        return self._evaluations.resume(self, name_or_id, options)

    async def resume_evaluation(self, name_or_id: str, **options: Any) -> Experiment:
        """Run the cells of the experiment ``name_or_id`` that did not end (a cell cut mid-run is resumed like any
        run; one ``max_cost`` left unstarted is started) and return it. ``options``: ``configs``, ``scorers``,
        ``concurrency``, ``max_cost``, ``on_cell``. An experiment of this session keeps its configs and scorers; one
        read back from the store (another session, a restarted kernel) needs them again, by the same names.
        ``max_cost``: a new budget for the whole experiment (default: the one it had).
        """
        return await self.start_resume_evaluation(name_or_id, **options).wait()

    # --- stores

    @property
    def store(self) -> RunStore | None:
        """The run store runs are saved to (``DAG_STORE``), None when it is off or cannot be written."""
        return self._stores.store_for(self.settings)

    def store_for(self, settings: DagSettings) -> RunStore | None:
        """The run store ``settings`` name, opened once; None when it is off or cannot be written."""
        return self._stores.store_for(settings)

    def store_problem(self, settings: DagSettings | None = None) -> str | None:
        """Why runs with ``settings`` are not saved, None when they are."""
        return self._stores.problem(settings or self.settings)

    def _driver(
        self, history: list[Exchange], options: RunOptions, *, replaying: bool = False, history_read: str | None = None
    ) -> RunDriver:
        """What drives one run: the session's goal loop, or one with the run's own ``options`` (see ``drive_with``)."""
        mine = RunOptions(models=self.models, settings=self.settings, allow_code=self.allow_code)
        mine["approve_plans"] = self.approve_plans
        parts = SessionParts(self._toolbox, self._stores, self._conversation, self._step_runner, self.start_fork)
        return RunDriver.of(parts, history, {**mine, **options}, replaying=replaying, history_read=history_read)

    # --- the session's lifetime

    def reset(self) -> None:
        """Forget the conversation: later runs start without history."""
        self._conversation.reset()

    def close(self) -> None:
        """Cancel the runs still going, then stop the MCP servers, end the ``python`` tool's scripts (its directory
        removed) and checkpoint the stores; idempotent. On the session's loop this happens once the runs ended,
        after the caller yields (``aclose()`` waits). Garbage collection and interpreter exit do the same.
        """
        ending = self._conversation.cancel_runs()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: no run's task can run any more, and the stores may take their time
            self._release(_CLOSE_SECONDS)
            return
        if ending:
            self._closing = loop.create_task(self._aclose(ending), name="dagmagic:session-close")
        else:
            self._release(0.0)

    async def _aclose(self, runs: list[asyncio.Task[None]], *, servers: bool = False) -> None:
        await asyncio.gather(*runs, return_exceptions=True)  # never stop what a run still uses
        if servers:
            await self._toolbox.aclose()
        self._release(0.0)

    def _release(self, wait: float) -> None:
        self._toolbox.close()
        self._stores.checkpoint(wait)  # on a loop (0 s), never stall it: the writer checkpoints once all is written

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    async def aclose(self) -> None:
        """``close()``, waiting until the runs still going ended (cancelled, their ends saved) and then the MCP
        servers stopped (their processes ended).
        """
        await self._aclose(self._conversation.cancel_runs(), servers=True)

    async def __aenter__(self) -> Self:
        """Start the session's MCP servers now: one that cannot start raises ``MCPServerError`` here."""
        await self._toolbox.start_servers()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"DagSession(models={[entry.name for entry in self.models]}, runs={len(self.runs)})"


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
