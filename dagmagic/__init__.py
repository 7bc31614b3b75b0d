"""dagmagic: an autonomous LLM goal loop for Jupyter: plan a DAG, run it in parallel, judge, replan, answer.

The public API is re-exported here; everything else lives in subpackages. Importing dagmagic does not
import litellm (it is imported on the first model call).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun
    from dagmagic.engine.tools.functions import Tool, tool
    from dagmagic.engine.tools.mcp import MCPServer
    from dagmagic.errors import ConfigurationError, DagError, ProviderError, StructuredOutputError
    from dagmagic.llm.registry import ModelRegistry
    from dagmagic.models import AnalysisResult, ExecutionPlan, LLMCall, PlanStep, RoundRecord, Usage
    from dagmagic.session import DagSession
    from dagmagic.settings import DagSettings
    from dagmagic.side_by_side import compare

# Exports load on first use: `%load_ext dagmagic` must stay fast, and pydantic models take time to build.
_EXPORTS = {
    "AnalysisResult": "dagmagic.models",
    "ConfigurationError": "dagmagic.errors",
    "DagError": "dagmagic.errors",
    "DagRun": "dagmagic.engine.run.dag_run",
    "DagSession": "dagmagic.session",
    "DagSettings": "dagmagic.settings",
    "ExecutionPlan": "dagmagic.models",
    "LLMCall": "dagmagic.models",
    "MCPServer": "dagmagic.engine.tools.mcp",
    "ModelRegistry": "dagmagic.llm.registry",
    "PlanStep": "dagmagic.models",
    "ProviderError": "dagmagic.errors",
    "RoundRecord": "dagmagic.models",
    "StructuredOutputError": "dagmagic.errors",
    "Tool": "dagmagic.engine.tools.functions",
    "Usage": "dagmagic.models",
    "compare": "dagmagic.side_by_side",
    "tool": "dagmagic.engine.tools.functions",
}


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The server extension (``dagmagic.server``): saved notebooks keep the static views of runs."""
    return [{"module": "dagmagic.server"}]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dagmagic' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AnalysisResult",
    "ConfigurationError",
    "DagError",
    "DagRun",
    "DagSession",
    "DagSettings",
    "ExecutionPlan",
    "LLMCall",
    "MCPServer",
    "ModelRegistry",
    "PlanStep",
    "ProviderError",
    "RoundRecord",
    "StructuredOutputError",
    "Tool",
    "Usage",
    "compare",
    "export_store",
    "last_run",
    "load_ipython_extension",
    "load_run",
    "tool",
    "unload_ipython_extension",
]

__version__ = "0.1.0"


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext dagmagic``: the ``%%dag`` magic, its input transformer and the display of runs."""
    from dagmagic.notebook import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell: Any) -> None:
    """``%unload_ext dagmagic``."""
    from dagmagic.notebook import unload_ipython_extension as unload

    unload(shell)


def load_run(run_id: str, store: str | None = None) -> DagRun:
    """A run read back from the run store (``store``, default ``DAG_STORE``), in any kernel: read-only; to
    continue one that did not end, ``await session.resume(run_id)``. ``KeyError`` when it is not there.
    """
    from dagmagic.engine.run.dag_run import DagRun
    from dagmagic.errors import ConfigurationError
    from dagmagic.settings import DagSettings
    from dagmagic.store import RunStore

    path = store if store is not None else DagSettings().store_path
    if path is None:
        raise ConfigurationError("there is no run store: DAG_STORE is none; pass store= a path to read one")
    stored = RunStore.open(path).load(run_id)
    return DagRun(stored.state, events=stored.events, read_only=True)


def export_store(path: str | os.PathLike[str], store: str | None = None) -> Path:
    """A copy of the run store (``store``, default ``DAG_STORE``) at ``path``, safe to move, share or back up:
    one consistent SQLite file (SQLite's backup; a PostgreSQL store's rows in one snapshot), made even while runs
    are being written. ``path`` must be new; ``StoreError`` says why a copy cannot be made. Returns ``path``.
    """
    from dagmagic.errors import ConfigurationError, StoreError
    from dagmagic.settings import DagSettings
    from dagmagic.store import RunStore
    from dagmagic.store_url import store_location

    try:
        source = store_location(store) if store is not None else DagSettings().store_path
    except ValueError as exc:
        raise ConfigurationError(f"{exc}.") from None
    if source is None:
        raise ConfigurationError("there is no run store: DAG_STORE is none; pass store= a path to export one")
    if isinstance(source, Path) and not source.expanduser().exists():
        raise StoreError(f"there is no run store at {source}: nothing to export")
    return RunStore.open(source).export(path)


def last_run() -> DagRun | None:
    """The most recent run started by ``%%dag`` in this kernel, or None."""
    from dagmagic.notebook.magics import last_run as latest

    return latest()
