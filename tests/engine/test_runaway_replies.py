"""A model that never stops writing, in a whole run: its call is cut at ``DAG_LLM_TOTAL_TIMEOUT`` and the run goes
on to an answer (the fault matrix's scenario, ``tests/engine/test_fault_matrix.py``)."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.models import Exchange
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.test_fault_matrix import GOAL, check_nothing_lost, healthy_script, lookup_tools, warnings_of

BOUND = 1.0
"""The total bound set (seconds)."""


def endless(request: ScriptedRequest) -> Any:
    return (f"la{number} " for number in itertools.count())


async def run_with(tmp_path: Path, script: dict[str, Any]) -> tuple[Any, ScriptedLLM, Path, float]:
    llm = ScriptedLLM(script, context_window=6000)
    registry = ModelRegistry().register("m", llm, roles=["smart", "general", "fast", "reasoning"])
    store = tmp_path / "runs.sqlite"
    settings = DagSettings(store=str(store), llm_retries=1, llm_retry_backoff=0, step_retry_delays=(),
                           planner_input_tokens=2000, max_replan_rounds=2)  # fmt: skip
    session = DagSession(registry, settings, tools=lookup_tools())
    session.history = [Exchange(goal="What do HTTP codes mean? " * 200, answer="They classify responses. " * 400)]
    started = time.monotonic()
    run = await asyncio.wait_for(session.run(GOAL), BOUND * 40)  # the old code's hold ends here, failing
    return run, llm, store, time.monotonic() - started


@pytest.mark.parametrize("purpose", ["synthesize", "analyze"])
async def test_a_reply_that_never_ends_is_cut_and_the_run_ends_with_an_answer(
    purpose: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAG_LLM_TOTAL_TIMEOUT", str(BOUND))
    script = healthy_script()
    script[purpose] = endless
    run, llm, store, took = await run_with(tmp_path, script)
    cut = [call for call in run.calls if "DAG_LLM_TOTAL_TIMEOUT" in (call.error or "")]
    assert cut and {call.purpose for call in cut} == {purpose}
    streamed = [call for call in cut if call.stream]
    assert streamed and all(call.pieces > 10 and call.reply.startswith("la0 la1 ") for call in streamed)  # kept
    assert all(call.max_tokens == DagSettings().llm_max_tokens.of(purpose) for call in cut)
    assert all(request.max_tokens == DagSettings().llm_max_tokens.of(request.purpose) for request in llm.requests)
    # each cut try holds the run about BOUND; the rest of the run takes a fraction of a second
    tries = sum(call.retries + 1 for call in cut)
    assert took < BOUND * (tries + 3), f"{took:.1f} s for {tries} tries cut"
    said = "\n".join(warnings_of(run))
    if purpose == "synthesize":  # the verdict stands; the answer is made of what completed
        assert run.status == "done", run.error
        assert "The answer could not be written" in said
    else:  # not streamed either, the verdict never comes: the round is not judged, and the run answers
        assert run.status == "done", run.error
        assert "could not be judged" in said and "The answer could not be written" not in said
    check_nothing_lost(run, store)
