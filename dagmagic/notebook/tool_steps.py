"""How a tool step reads in the text views: its call, ``add(a=$s1 → 68.4, b=12)``.

A tool step is one direct call of its tool (``PlanStep.tool_args`` set). The planner's arguments are shown as
written, so a reference to another step's result (``$s1``) stays visible; once the step ran, each argument the
executor changed (a reference replaced by its result) is followed by ``→`` and the value the tool was called
with. The widget's front end (js/src/toolstep.js) writes the same form.
"""

from __future__ import annotations

import json
from typing import Any

from dagmagic.engine import STEP_REFERENCE
from dagmagic.models import PlanStep, ToolCallRecord

__all__ = ["call_text", "direct_call", "fell_back", "is_tool_step"]


def _whole_reference(value: Any) -> bool:
    """An argument that is one step's result as a whole (``$s1``, ``$r1.s2``): shown bare, and its value as text."""
    return isinstance(value, str) and STEP_REFERENCE.fullmatch(value.strip()) is not None


def is_tool_step(step: PlanStep) -> bool:
    """Whether the planner made ``step`` one direct call of its tool."""
    return step.tool_args is not None


def direct_call(step: PlanStep) -> ToolCallRecord | None:
    """The executor's own call of the tool (turn 0), once it was made."""
    return next((call for call in step.tool_calls if call.turn == 0), None)


def fell_back(step: PlanStep) -> bool:
    """Whether the direct call failed, so an agent ran the step instead."""
    call = direct_call(step)
    return call is not None and call.error is not None


def call_text(step: PlanStep, value_chars: int = 60) -> str:
    """``tool(name=planned → called with, …)``: each shown value cut to ``value_chars``; the called-with value
    only where it differs from what was planned.
    """
    call = direct_call(step)
    planned = step.tool_args or {}
    called = call.arguments if call is not None else {}
    parts = []
    for name in [*planned, *(name for name in called if name not in planned)]:
        if name not in planned:
            parts.append(f"{name}={_cut(_shown(called[name]), value_chars)}")
            continue
        text = f"{name}={_cut(_shown(planned[name]), value_chars)}"
        if name in called and called[name] != planned[name]:
            whole = _whole_reference(planned[name])
            value = called[name] if whole and isinstance(called[name], str) else _shown(called[name])
            text += f" → {_cut(value, value_chars)}"
        parts.append(text)
    name = call.name if call is not None else step.tool_hint or "?"
    return f"{name}({', '.join(parts)})"


def _shown(value: Any) -> str:
    if isinstance(value, str) and _whole_reference(value):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 1].rstrip()}…"
