"""dagmagic: an autonomous LLM goal loop for Jupyter: plan a DAG, run it in parallel, judge, replan, answer.

The public API is re-exported here; everything else lives in subpackages. Importing dagmagic does not
import litellm (it is imported on the first model call).
"""

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
    "tool",
]

__version__ = "0.1.0"
