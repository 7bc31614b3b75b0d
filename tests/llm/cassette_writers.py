"""A kernel recording into a cassette, run in a process of its own (``multiprocessing``): the tests of cassettes
that several kernels record at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.llm.replay import cassette_registry
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, verdict


def provider(latency: float = 0.0) -> ScriptedLLM:
    """Two parallel steps, a verdict and a streamed answer: five calls a goal."""
    return ScriptedLLM(
        {
            "plan": [plan_reply(("s1", [], "look it up"), ("s2", [], "check it"))],
            "step:s1": ["found it"],
            "step:s2": ["checked it"],
            "analyze": [verdict(True, 0.9, "it holds")],
            "synthesize": [["the ", "answer"]],
        },
        latency=latency,
    )


def kernel(model: str, llm: ScriptedLLM, path: str, mode: str) -> DagSession:
    registry = ModelRegistry().register(model, llm, roles=["smart", "general"])
    return DagSession(registry, DagSettings(store="none", cassette=path, record=mode))


def record(name: str, path: str, model: str, goals: list[str], mode: str, barrier: Any, results: Any) -> None:
    """Record ``goals`` with ``model`` into the cassette at ``path``, as the kernel ``name`` would, starting when
    every other kernel has decided what its mode makes of the cassette; put the number of calls made in
    ``results``.
    """
    llm = provider(latency=0.002)
    session = kernel(model, llm, path, mode)
    cassette_registry(session.models, session.settings)  # the mode decided as this kernel first uses the file
    barrier.wait()

    async def goals_run() -> None:
        for goal in goals:
            run = await session.run(goal)
            assert run.status == "done", run.error

    try:
        asyncio.run(goals_run())
    except BaseException as exc:
        results.put((name, f"{type(exc).__name__}: {exc}"))
        raise
    results.put((name, len(llm.requests)))
