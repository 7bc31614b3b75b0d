"""``DagSession``: the conversation runs belong to; it starts runs and remembers their answers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from dagmagic.engine.agent import StepAgent
from dagmagic.engine.code_tool import python_tool
from dagmagic.engine.context import Exchange
from dagmagic.engine.guard import HistoryDigests
from dagmagic.engine.loop import GoalLoop
from dagmagic.engine.run import DagRun
from dagmagic.engine.steps import StepRunner
from dagmagic.engine.tools import Tool, as_tools
from dagmagic.llm import ModelRegistry
from dagmagic.models import RunState
from dagmagic.settings import DagSettings

__all__ = ["DagSession"]


class DagSession:
    """Runs goals with one set of models, settings and tools; each finished run becomes history for the next.

    ``models`` defaults to ``ModelRegistry.from_settings(settings)`` (the ``DAG_*_MODEL`` variables);
    ``tools`` are ``@tool`` functions or plain callables; ``allow_code=True`` adds the ``python`` tool,
    which runs model-written code in a separate process.
    """

    def __init__(
        self,
        models: ModelRegistry | None = None,
        settings: DagSettings | None = None,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        allow_code: bool = False,
        step_runner: StepRunner | None = None,
    ) -> None:
        self.settings = settings or DagSettings()
        self.models = models if models is not None else ModelRegistry.from_settings(self.settings)
        self.models.for_role("smart")  # an empty registry fails here, with the message that says what to set
        extra = [python_tool(self.settings.code_timeout)] if allow_code else []
        self.tools = as_tools([*tools, *extra])
        """The tools steps may call (``python`` only with ``allow_code=True``)."""
        self.step_runner = step_runner or StepAgent(self.tools)
        self.history: list[Exchange] = []
        self.runs: list[DagRun] = []
        self._digests: HistoryDigests = {}
        self._active: set[asyncio.Task[None]] = set()

    def start(self, goal: str) -> DagRun:
        """Start pursuing ``goal`` as a task on the running loop; ``await`` the returned run for its end."""
        goal = _check_goal(goal)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "DagSession.start() needs a running event loop (a notebook cell or an async function); "
                "elsewhere use asyncio.run(session.run(goal))."
            ) from None
        run = DagRun(RunState(run_id=uuid.uuid4().hex[:12], goal=goal, started_at=time.time()))
        driver = GoalLoop(
            self.models,
            self.settings,
            self.step_runner,
            history=tuple(self.history),
            tool_names=[t.name for t in self.tools],
            digests=self._digests,
        )
        task = loop.create_task(driver.drive(run), name=f"dagmagic:run:{run.run_id}")
        run._task = task
        self._active.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(lambda finished: self._finished(run, finished))
        self.runs.append(run)
        return run

    async def run(self, goal: str) -> DagRun:
        """Pursue ``goal`` to its end and return the finished run. Cancelling this cancels the run."""
        return await self.start(goal).wait(cancel_with_waiter=True)

    def reset(self) -> None:
        """Forget the conversation: later runs start without history."""
        self.history.clear()
        self._digests.clear()

    def _finished(self, run: DagRun, task: asyncio.Task[None]) -> None:
        self._active.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the loop records failures on the run itself
        if run.status in ("done", "failed") and run.answer:
            follow_ups = [*run.follow_ups, *run.pending_follow_ups]  # one sent just before a Stop counts too
            goal = "".join([run.goal, *(f"\n\n[User follow-up]: {text}" for text in follow_ups)])
            self.history.append(Exchange(goal=goal, answer=run.answer))

    def __repr__(self) -> str:
        return f"DagSession(models={[entry.name for entry in self.models]}, runs={len(self.runs)})"


def _check_goal(goal: str) -> str:
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError("a goal needs some text: say what you want to find out or get done")
    return goal.strip()
