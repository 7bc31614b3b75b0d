"""The goal loop: planner, executor, step agent and tools, context guard, analyzer, goal loop.

The names below are what the layers above (the session, the notebook) use of the engine. They load on first use:
importing one engine module (``dagmagic.engine.tools.mcp``, which costs nothing) must not load the whole engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun
    from dagmagic.engine.run.queries import STOPPED_BY_YOU
    from dagmagic.engine.steps.tool_steps import REFERENCE as STEP_REFERENCE
    from dagmagic.engine.tools.functions import Tool, tool
    from dagmagic.engine.tools.mcp import MCPServer

__all__ = ["STEP_REFERENCE", "STOPPED_BY_YOU", "DagRun", "MCPServer", "Tool", "tool"]

_EXPORTS: dict[str, tuple[str, str]] = {
    "DagRun": ("dagmagic.engine.run.dag_run", "DagRun"),
    "MCPServer": ("dagmagic.engine.tools.mcp", "MCPServer"),
    "STEP_REFERENCE": ("dagmagic.engine.steps.tool_steps", "REFERENCE"),
    "STOPPED_BY_YOU": ("dagmagic.engine.run.queries", "STOPPED_BY_YOU"),
    "Tool": ("dagmagic.engine.tools.functions", "Tool"),
    "tool": ("dagmagic.engine.tools.functions", "tool"),
}
"""Each public name: the module it lives in, and its name there."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dagmagic.engine' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
