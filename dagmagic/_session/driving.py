"""What drives one run of a session: its goal loop (the session's, or one with the run's own options), the
conversation it is planned in, its store and its trace; the run's task handed to the session's conversation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from dagmagic._session.conversation import Conversation
from dagmagic._session.stores import SessionStores
from dagmagic._session.toolbox import Toolbox
from dagmagic.engine.loop.driver import GoalLoop
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.engine.steps.agent import StepAgent
from dagmagic.engine.steps.runner import StepRunner
from dagmagic.engine.tools.mcp.server import MCPServer
from dagmagic.events import RunWarning
from dagmagic.llm import ModelRegistry
from dagmagic.llm.cache import cached_registry
from dagmagic.llm.replay import cassette_registry
from dagmagic.messages import Origin, Rerun
from dagmagic.models import Exchange
from dagmagic.settings import DagSettings
from dagmagic.store import RunStore
from dagmagic.tracing import RunTracer, run_tracer

__all__ = ["RunDriver", "SessionParts"]

log = logging.getLogger("dagmagic")


@dataclass(frozen=True)
class SessionParts:
    """What a session lends each run's driver: its tools, stores, conversation and step runner (if given)."""

    toolbox: Toolbox
    stores: SessionStores
    conversation: Conversation
    step_runner: StepRunner | None
    forks: Callable[..., DagRun]
    """The session's ``start_fork``."""


@dataclass
class RunDriver:
    """What drives one run of a session (``dagmagic.engine.run.dag_run.RunDriver``): its goal loop, the
    conversation it is planned in, and where the session keeps its stores, tools and runs.
    """

    loop: GoalLoop
    history: list[Exchange]
    stores: SessionStores
    toolbox: Toolbox
    conversation: Conversation
    forks: Callable[..., DagRun]
    """The session's ``start_fork``: a run forks through the session that drives it."""

    @classmethod
    def of(
        cls,
        parts: SessionParts,
        history: list[Exchange],
        options: Mapping[str, Any],
        *,
        replaying: bool,
        history_read: str | None = None,
    ) -> Self:
        """The driver of a run with ``options`` (``RunOptions``, every one given): the session's goal loop with
        them (``replaying``: its models answer from a run's recording, which neither the response cache nor a
        cassette of the settings may answer for: a divergence would be hidden; ``history_read``: the
        conversation as the replayed run read it).
        """
        settings: DagSettings = options["settings"]
        models: ModelRegistry = options["models"]
        models.for_role("smart")
        if not replaying:
            models = cassette_registry(cached_registry(models, settings), settings)
        tools = options.get("tools")
        chosen = parts.toolbox.given if tools is None else list(tools)
        toolset = parts.toolbox.toolset(chosen, options["allow_code"])
        runner = parts.step_runner if parts.step_runner is not None and tools is None else StepAgent(toolset)
        servers = [item for item in chosen if isinstance(item, MCPServer)]
        loop = GoalLoop(
            models,
            settings,
            runner,
            history=tuple(history),
            tool_names=[tool.name for tool in toolset],
            tools=toolset,
            summary=None if replaying else parts.conversation.summary,
            windows=parts.conversation.windows,
            history_read=history_read,
            approve_plans=options["approve_plans"],
            connect=parts.toolbox.connector(servers, runner is not parts.step_runner) if servers else None,
        )
        return cls(loop, history, parts.stores, parts.toolbox, parts.conversation, parts.forks)

    @property
    def registry(self) -> ModelRegistry:
        """The run's models."""
        return self.loop.registry

    def start_fork(self, run: DagRun, at: str, **options: Any) -> DagRun:
        """Fork ``run`` at step ``at`` through the session (``DagSession.start_fork``)."""
        return self.forks(run, at, **options)

    def check_store(self) -> None:
        """Open the run's store now: a foreign or damaged file raises ``StoreError`` before anything runs."""
        self.stores.store_for(self.loop.settings)

    def start(self, run: DagRun, origin: Origin) -> asyncio.Task[None]:
        """Save the run (when its store can be written; else it says why not) and drive it as a task."""
        settings = self.loop.settings
        tracer = run_tracer(settings)  # DAG_OTEL=1 without OpenTelemetry: ConfigurationError, before anything
        store = self.stores.store_for(settings)
        if store is not None:  # takes the run's lease: refused (DagError, naming the driver) while another holds it
            run.save_to(store, self.history)
        elif settings.store_path is not None and not isinstance(origin, Rerun):
            run.emit(RunWarning(message=f"This run is not saved: {self.stores.problem(settings)}"))
        if "python" in self.loop.tool_names and (warning := self.toolbox.unsandboxed_code_warning()):
            run.emit(RunWarning(message=warning))
        if tracer is not None:
            tracer.follow(run, own_trace=isinstance(origin, Rerun))
        task = asyncio.get_running_loop().create_task(
            self._drive(run, origin, tracer), name=f"dagmagic:run:{run.run_id}"
        )
        token = store.lease_token(run.run_id) if store is not None else None
        if store is not None and token is not None:  # the run's end gives it back; this, if the end was not saved
            task.add_done_callback(lambda _: _release(store, run.run_id, token))
        self.conversation.started(run, task, self.loop)
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
