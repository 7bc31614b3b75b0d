"""dagmagic: an autonomous LLM goal loop for Jupyter: plan a DAG, run it in parallel, judge, replan, answer.

The public API is re-exported here; everything else lives in subpackages. Importing dagmagic does not
import litellm (it is imported on the first model call).
"""

from typing import Any

from dagmagic.engine.run import DagRun
from dagmagic.engine.session import DagSession
from dagmagic.engine.tools import Tool, tool
from dagmagic.errors import ConfigurationError, DagError, ProviderError, StructuredOutputError
from dagmagic.llm.registry import ModelRegistry
from dagmagic.models import AnalysisResult, ExecutionPlan, LLMCall, PlanStep, RoundRecord, Usage
from dagmagic.settings import DagSettings

__all__ = [
    "AnalysisResult",
    "ConfigurationError",
    "DagError",
    "DagRun",
    "DagSession",
    "DagSettings",
    "ExecutionPlan",
    "LLMCall",
    "ModelRegistry",
    "PlanStep",
    "ProviderError",
    "RoundRecord",
    "StructuredOutputError",
    "Tool",
    "Usage",
    "last_run",
    "load_ipython_extension",
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


def last_run() -> DagRun | None:
    """The most recent run started by ``%%dag`` in this kernel, or None."""
    from dagmagic.notebook.magics import last_run as latest

    return latest()
