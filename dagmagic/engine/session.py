"""``DagSession``: the conversation runs belong to; it starts runs and remembers their answers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, Self

from dagmagic.engine.agent import StepAgent
from dagmagic.engine.code_tool import CodeWorkspace
from dagmagic.engine.context import Exchange
from dagmagic.engine.guard import HistoryDigests
from dagmagic.engine.loop import GoalLoop
from dagmagic.engine.run import DagRun
from dagmagic.engine.steps import StepRunner
from dagmagic.engine.store import RunStore, StoreUnavailable
from dagmagic.engine.tools import Tool, as_tools
from dagmagic.errors import DagError
from dagmagic.events import RunWarning
from dagmagic.llm import ModelRegistry
from dagmagic.models import RunState
from dagmagic.settings import DagSettings

__all__ = ["DagSession"]


class DagSession:
    """Runs goals with one set of models, settings and tools; each finished run becomes history for the next.

    ``models`` defaults to ``ModelRegistry.from_settings(settings)`` (the ``DAG_*_MODEL`` variables; with none
    set, models picked from a provider key or a local Ollama, see ``ModelRegistry.from_env``);
    ``tools`` are ``@tool`` functions or plain callables; ``allow_code=True`` adds the ``python`` tool,
    which runs model-written code in a separate process, in a working directory of the session's own that
    ``close()`` removes (``with DagSession(...) as session:`` closes it too). ``approve_plans=True`` makes
    every plan wait for ``run.approve()`` or ``run.reject(why)``; ``step_through=True`` pauses before every step.
    """

    def __init__(
        self,
        models: ModelRegistry | None = None,
        settings: DagSettings | None = None,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        allow_code: bool = False,
        step_runner: StepRunner | None = None,
        approve_plans: bool = False,
        step_through: bool = False,
    ) -> None:
        self.settings = settings or DagSettings()
        self.models = models if models is not None else ModelRegistry.from_settings(self.settings)
        self.models.for_role("smart")  # an empty registry fails here, with the message that says what to set
        self._code = CodeWorkspace(self.settings.code_timeout) if allow_code else None
        extra = [self._code.tool()] if self._code is not None else []
        self.tools = as_tools([*tools, *extra])
        """The tools steps may call (``python`` only with ``allow_code=True``)."""
        self.step_runner = step_runner or StepAgent(self.tools)
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
        self._store: RunStore | None = None
        self._store_problem: str | None = None
        self._in_history: dict[str, int] = {}
        """Where each run's exchange sits in the history (a re-run replaces it)."""

    def start(self, goal: str) -> DagRun:
        """Start pursuing ``goal`` as a task on the running loop; ``await`` the returned run for its end."""
        goal = _check_goal(goal)
        _running_loop("DagSession.start()", "asyncio.run(session.run(goal))")
        run = DagRun(RunState(run_id=uuid.uuid4().hex[:12], goal=goal, started_at=time.time()))
        return self._launch(run, list(self.history))

    async def run(self, goal: str) -> DagRun:
        """Pursue ``goal`` to its end and return the finished run. Cancelling this cancels the run."""
        return await self.start(goal).wait(cancel_with_waiter=True)

    def start_resume(self, run_id: str) -> DagRun:
        """Continue a run that did not end (its kernel restarted, its process died, it was cancelled), as a
        task on the running loop: completed steps are kept, the others run again, and the loop goes on from
        the round it was in. The session's models and tools serve it; ``await`` the run for its end.
        """
        _running_loop("DagSession.start_resume()", "asyncio.run(session.resume(run_id))")
        store = self.store
        if store is None:
            raise DagError(f"there is no run store to resume {run_id!r} from ({self._store_problem})")
        if any(run.run_id == run_id and not run.done() for run in self.runs):
            raise DagError(f"run {run_id} is running in this session already")
        try:
            stored = store.load(run_id)
        except KeyError:
            raise DagError(
                f"no run {run_id!r} in the run store {store.path}; `%dag history` lists the stored runs"
            ) from None
        if stored.state.status in ("done", "failed"):
            raise DagError(f"run {run_id} ended ({stored.state.status}): there is nothing to resume")
        state = stored.state.model_copy(
            update={"status": "running", "finished_at": None, "error": None, "answer": "", "phase": "starting"}
        )
        return self._launch(DagRun(state, events=stored.events), stored.history)

    def reopen(self, run_id: str) -> DagRun:
        """A stored run that ended, taken back into this session so that its steps can be re-run
        (``run.rerun``): for a run no longer in memory (see ``DagSettings.runs_in_memory``). Nothing runs yet.
        """
        store = self.store
        if store is None:
            raise DagError(f"there is no run store to read run {run_id!r} back from ({self._store_problem})")
        try:
            stored = store.load(run_id)
        except KeyError:
            raise DagError(f"no run {run_id!r} in the run store {store.path}") from None
        if stored.state.status == "running":
            raise DagError(f"run {run_id} did not end: continue it with `session.resume({run_id!r})`")
        run = DagRun(stored.state, events=stored.events)
        self._drive(run, stored.history)
        self.runs.append(run)
        self._forget_finished()
        return run

    async def resume(self, run_id: str) -> DagRun:
        """Continue the stored run ``run_id`` to its end (see ``start_resume``) and return it."""
        return await self.start_resume(run_id).wait(cancel_with_waiter=True)

    @property
    def store(self) -> RunStore | None:
        """The run store runs are saved to (``DAG_STORE``), None when it is off or cannot be written."""
        if self._store_problem is None and self._store is None:
            path = self.settings.store_path
            if path is None:
                self._store_problem = "DAG_STORE is none"
            else:
                try:
                    self._store = RunStore.open(path)
                except StoreUnavailable as exc:
                    self._store_problem = str(exc)
        return self._store

    def _launch(self, run: DagRun, history: list[Exchange]) -> DagRun:
        store = self.store  # a foreign or damaged store file raises StoreError here, before anything runs
        if store is not None:
            run.save_to(store, history)
        elif self.settings.store_path is not None and self._store_problem:
            run.emit(RunWarning(message=f"This run is not saved: {self._store_problem}"))
        driver = self._drive(run, history)
        self._start_task(run, driver.drive(run))
        self.runs.append(run)
        self._forget_finished()
        return run

    def _drive(self, run: DagRun, history: list[Exchange]) -> GoalLoop:
        """Give ``run`` the goal loop that drives it (and re-runs its steps) in this session."""
        driver = GoalLoop(
            self.models,
            self.settings,
            self.step_runner,
            history=tuple(history),
            tool_names=[t.name for t in self.tools],
            digests=self._digests,
            approve_plans=self.approve_plans,
        )
        run.control.step_through = self.step_through
        run._driver = driver
        run._relaunch = lambda work: self._relaunch(run, history, work)
        return driver

    def _relaunch(self, run: DagRun, history: list[Exchange], work: Coroutine[Any, Any, None]) -> None:
        store = self.store
        if store is not None and not run.durable:  # a run taken back from the store is saved again as it re-runs
            run.save_to(store, history)
        self._start_task(run, work)
        if all(kept is not run for kept in self.runs):
            self.runs.append(run)

    def _start_task(self, run: DagRun, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name=f"dagmagic:run:{run.run_id}")
        run._task = task
        self._active.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(lambda finished: self._finished(run, finished))

    def reset(self) -> None:
        """Forget the conversation: later runs start without history."""
        self.history.clear()
        self._digests.clear()

    def _forget_finished(self) -> None:
        """Keep the latest ``runs_in_memory`` finished runs (and every running one); older ones stay in the store."""
        finished = [run for run in self.runs if run.done() and (run._task is None or run._task.done())]
        dropped = {id(run) for run in finished[: max(len(finished) - self.settings.runs_in_memory, 0)]}
        if dropped:
            self.runs[:] = [run for run in self.runs if id(run) not in dropped]

    def _finished(self, run: DagRun, task: asyncio.Task[None]) -> None:
        self._active.discard(task)
        self._forget_finished()
        if not task.cancelled():
            task.exception()  # retrieved: the loop records failures on the run itself
        if run.status in ("done", "failed") and run.answer:
            follow_ups = [*run.follow_ups, *run.pending_follow_ups]  # one sent just before a Stop counts too
            goal = "".join([run.goal, *(f"\n\n[User follow-up]: {text}" for text in follow_ups)])
            exchange = Exchange(goal=goal, answer=run.answer)
            place = self._in_history.get(run.run_id)
            if place is not None and place < len(self.history):  # a re-run: its new answer replaces the old
                self.history[place] = exchange
            else:
                self._in_history[run.run_id] = len(self.history)
                self.history.append(exchange)

    def close(self) -> None:
        """Kill the ``python`` tool's scripts still running and remove its working directory; idempotent.

        Garbage collection and interpreter exit do the same for a session never closed.
        """
        if self._code is not None:
            self._code.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

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
