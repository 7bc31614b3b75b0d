"""Helpers for engine tests: plans as dicts, a session over one ScriptedLLM."""

from __future__ import annotations

from typing import Any

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.testing import ScriptedLLM


def plan_reply(*steps: tuple[str, list[str]] | tuple[str, list[str], str]) -> dict[str, Any]:
    """A planner reply: ("s1", []) or ("s2", ["s1"], "task text")."""
    return {
        "steps": [
            {"id": step[0], "task": step[2] if len(step) > 2 else f"do {step[0]}", "dependencies": step[1]}
            for step in steps
        ]
    }


def verdict(achieved: bool, confidence: float, reasoning: str = "because", final_answer: str | None = None) -> dict:
    return {"achieved": achieved, "confidence": confidence, "reasoning": reasoning, "final_answer": final_answer}


def session_for(llm: ScriptedLLM, **settings: Any) -> DagSession:
    return DagSession(ModelRegistry().register("scripted", llm), DagSettings(store="none", **settings))


def with_a_reasoning_model(llm: ScriptedLLM) -> ModelRegistry:
    """``llm`` as the general model and, under another name, as the reasoning one: the roles lead to two models,
    so the planner is asked for hints and the goal's domain (which route steps between them).
    """
    return ModelRegistry().register("scripted", llm).register("careful", llm, roles=("reasoning",))
