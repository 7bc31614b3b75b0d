"""The data of a run: plans, steps, verdicts, rounds, usage and LLM call records.

Every model here round-trips through JSON (the run store, widget state and saved notebooks depend on it).
By concept: ``usage`` (tokens and money), ``calls`` (LLM call records), ``verdicts`` (a round's analysis and
the decision after it) and ``run_state`` (the run, its rounds, plans and steps). Import them from here.
What differs between rounds or runs is ``dagmagic.diff``.
"""

from dagmagic.models._text import NO_MATH, SafeText, no_math, safe_text
from dagmagic.models.calls import CallStatus, LLMCall, ModelCard, Purpose, StructuredLevel
from dagmagic.models.run_state import (
    Exchange,
    ExecutionPlan,
    PlanCut,
    PlanStep,
    RoundRecord,
    RunPhase,
    RunState,
    RunStatus,
    StepStatus,
    ToolCallRecord,
    natural_key,
    split_round_reference,
)
from dagmagic.models.usage import Usage, money
from dagmagic.models.verdicts import AnalysisResult, Decision

__all__ = [
    "NO_MATH",
    "AnalysisResult",
    "CallStatus",
    "Decision",
    "Exchange",
    "ExecutionPlan",
    "LLMCall",
    "ModelCard",
    "PlanCut",
    "PlanStep",
    "Purpose",
    "RoundRecord",
    "RunPhase",
    "RunState",
    "RunStatus",
    "SafeText",
    "StepStatus",
    "StructuredLevel",
    "ToolCallRecord",
    "Usage",
    "money",
    "natural_key",
    "no_math",
    "safe_text",
    "split_round_reference",
]
