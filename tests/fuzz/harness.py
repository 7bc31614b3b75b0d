"""Models and checks shared by the fuzz tests."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm.protocol import ChatRequest, ToolCallData
from dagmagic.models import AnalysisResult, ExecutionPlan
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM

SETTINGS = DagSettings(store="none", llm_retry_backoff=0.001)
CAPABILITIES = {
    "tool_call": ("tool_call", "json_mode", "stream"),
    "json_mode": ("json_mode", "stream"),
    "text": ("stream",),
}


class RawToolCalls:
    """A reply made of tool calls whose argument text is given as is (``ToolCall`` only takes dicts)."""

    def __init__(self, calls: list[tuple[str, str]], content: str = "") -> None:
        self.calls = calls
        self.content = content

    def __repr__(self) -> str:
        return f"RawToolCalls({self.calls!r}, {self.content!r})"


class FuzzLLM(ScriptedLLM):
    """``ScriptedLLM`` that can also answer with raw tool-call argument text."""

    def _render(self, request: ChatRequest, reply: Any) -> tuple[str, list[ToolCallData]]:
        if isinstance(reply, RawToolCalls):
            calls = [
                ToolCallData(id=f"call_{i}", name=name, arguments=text) for i, (name, text) in enumerate(reply.calls)
            ]
            return reply.content, calls
        return super()._render(request, reply)


def chat_model(llm: ScriptedLLM, settings: DagSettings = SETTINGS, emit: Any = None) -> ChatModel:
    return ChatModel(ModelRegistry().register("m", llm).get("m"), settings=settings, emit=emit)


def assert_valid_plan(plan: ExecutionPlan, max_steps: int, earlier: Collection[str] = ()) -> None:
    """The planner's contract: 1..max steps, unique ids, every dependency a step of the plan (or a reusable
    result of an earlier round), no cycle.
    """
    ids = [step.id for step in plan.steps]
    assert 1 <= len(ids) <= max_steps, ids
    assert len(set(ids)) == len(ids), ids
    for step in plan.steps:
        assert isinstance(step.task, str) and isinstance(step.id, str)
        assert set(step.dependencies) <= {*ids, *earlier}, (step.id, step.dependencies, ids)
    layered = [sid for layer in plan.layers() for sid in layer]
    assert sorted(layered) == sorted(ids)


def assert_sane_verdict(verdict: Any) -> None:
    """The analyzer's contract: an ``AnalysisResult``, a bool verdict and a finite confidence in [0, 1]."""
    assert isinstance(verdict, AnalysisResult)
    assert type(verdict.achieved) is bool
    assert isinstance(verdict.confidence, float) and math.isfinite(verdict.confidence)
    assert 0.0 <= verdict.confidence <= 1.0
    assert isinstance(verdict.reasoning, str)
