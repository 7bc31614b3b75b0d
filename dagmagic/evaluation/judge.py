"""``llm_judge``: a scorer that asks a model to grade a run's answer against a rubric.

The judge is the smart model of a ``ModelRegistry`` (or another of its models, by name or role). Its calls go
through ``ChatModel`` with purpose ``judge`` and ask for a verdict with ``structured_llm_call``: a score on the
judge's scale and the reasoning behind it. They are not calls of the run it grades (that run is finished,
stored, and its cost is the configuration's): the judge keeps them, with the verdict, in ``judge.verdicts``
by run id, so that an evaluation can show and count them (``judge.usage``).

Which registry: the one given (``llm_judge(rubric, models=registry)``); else the one an evaluation binds to an
unbound judge (``judge.bound_to(session_registry)``, sharing its verdicts); else ``ModelRegistry.from_env()``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator

from dagmagic.errors import ScorerError, StructuredOutputError
from dagmagic.evaluation.cases import Case
from dagmagic.events import Event, LLMCallRecorded
from dagmagic.llm.client import ChatModel
from dagmagic.llm.registry import STANDARD_ROLES, ModelEntry, ModelRegistry
from dagmagic.llm.structured import structured_llm_call
from dagmagic.models import LLMCall, Usage
from dagmagic.settings import DagSettings

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun

__all__ = ["JudgeVerdict", "LLMJudge", "llm_judge"]

_ANSWER_LIMIT = 20000
"""Characters of the answer the judge reads (a run's answer is rarely longer; a runaway one is cut)."""
_SCORE_IN_TEXT = re.compile(r"\bscore\b\W{0,3}(-?\d+(?:\.\d+)?)", re.IGNORECASE)

_SYSTEM = """You grade the answer an AI workflow gave to a user's goal.
Read the rubric, the goal, the reference answer when there is one, and the answer. Judge only the answer, by the
rubric. First say briefly why, then give a score from {low:g} (fails the rubric) to {high:g} (fully meets it)."""


class _Grade(BaseModel):
    """The judge's verdict as the model gives it."""

    reasoning: str = Field(description="Why this score, briefly, by the rubric.")
    score: float = Field(description="The score on the rubric's scale.")

    @field_validator("reasoning", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return "" if value is None else str(value)


class JudgeVerdict(BaseModel):
    """What the judge said of one run."""

    run_id: str
    """The run graded."""
    case_id: str
    """Its case."""
    score: float
    """0..1: the judge's score mapped from its scale (1 on a 1..5 scale is 0, 5 is 1)."""
    raw_score: float | None
    """The score on the judge's scale as the model gave it (None when there was no answer to grade)."""
    reasoning: str
    """Why, in the judge's words."""
    calls: list[LLMCall] = Field(default_factory=list)
    """The judge's LLM calls for this run, purpose ``judge`` (several when a reply was unreadable)."""

    @property
    def usage(self) -> Usage:
        """Tokens and cost of the judge's calls for this run."""
        return Usage.total(call.usage for call in self.calls)


class LLMJudge:
    """The LLM-as-judge scorer (build it with ``llm_judge``): ``await judge(case, run)`` is the score, 0..1."""

    def __init__(
        self,
        rubric: str,
        *,
        models: ModelRegistry | None,
        model: str | None,
        scale: tuple[float, float],
        name: str,
        settings: DagSettings | None,
        verdicts: dict[str, JudgeVerdict] | None = None,
        failed_calls: list[LLMCall] | None = None,
    ) -> None:
        self.rubric = rubric
        self.models = models
        self.model = model
        self.scale = scale
        self.name = name
        self.settings = settings
        self.verdicts: dict[str, JudgeVerdict] = {} if verdicts is None else verdicts
        """Run id -> the judge's verdict on it, with its calls."""
        self.failed_calls: list[LLMCall] = [] if failed_calls is None else failed_calls
        """The calls of gradings that gave no verdict (the cell's score is then an error)."""
        self._env_models: ModelRegistry | None = None

    def __repr__(self) -> str:
        low, high = self.scale
        rubric = self.rubric if len(self.rubric) <= 40 else f"{self.rubric[:39]}…"
        model = f", model={self.model!r}" if self.model else ""
        return f"llm_judge({rubric!r}{model}, scale=({low:g}, {high:g}))"

    @property
    def calls(self) -> list[LLMCall]:
        """Every call the judge made, in the order of the runs graded, then those of failed gradings."""
        return [call for verdict in self.verdicts.values() for call in verdict.calls] + self.failed_calls

    @property
    def usage(self) -> Usage:
        """Tokens and cost of every call the judge made."""
        return Usage.total(call.usage for call in self.calls)

    def bound_to(self, models: ModelRegistry, settings: DagSettings | None = None) -> LLMJudge:
        """A copy of the judge with ``models`` (and ``settings``) where it was given none: an evaluation binds its
        session's so that the judge is the session's smart model. The copy records its verdicts here too.
        """
        return LLMJudge(
            self.rubric,
            models=models if self.models is None else self.models,  # an empty registry is falsy
            model=self.model,
            scale=self.scale,
            name=self.name,
            settings=settings if self.settings is None else self.settings,
            verdicts=self.verdicts,
            failed_calls=self.failed_calls,
        )

    def _registry(self) -> ModelRegistry:
        if self.models is not None:
            return self.models
        if self._env_models is None:  # kept aside, not made the judge's: an evaluation may still bind its session's
            self._env_models = ModelRegistry.from_env()
        return self._env_models

    def _entry(self) -> ModelEntry:
        models = self._registry()
        if self.model is not None and self.model in models:
            return models.get(self.model)
        if self.model is not None and self.model not in STANDARD_ROLES and not models.has_role(self.model):
            raise ScorerError(
                f"{self!r}: no model named {self.model!r} and no role {self.model!r} in the judge's registry; "
                f"models: {sorted(entry.name for entry in models)}, roles: {sorted(models.roles)}"
            )
        return models.for_role(self.model or "smart")

    def _messages(self, case: Case, run: DagRun) -> list[dict[str, Any]]:
        low, high = self.scale
        parts = [f"Rubric:\n{self.rubric}", f"Goal:\n{run.goal or case.goal}"]
        if case.expected is not None:
            parts.append(f"Reference answer:\n{case.expected}")
        parts.append(f"Answer:\n{run.answer[:_ANSWER_LIMIT]}")
        return [
            {"role": "system", "content": _SYSTEM.format(low=low, high=high)},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def _checked(self, raw: Any) -> _Grade:
        grade = _Grade.model_validate(raw)
        low, high = self.scale
        if not low <= grade.score <= high:
            raise ValueError(f"the score {grade.score:g} is outside the scale {low:g} to {high:g}")
        return grade

    @staticmethod
    def _from_text(text: str) -> dict[str, Any] | None:
        """``Score: 4`` in a prose reply, when no JSON came."""
        found = _SCORE_IN_TEXT.search(text)
        return None if found is None else {"score": float(found.group(1)), "reasoning": text.strip()}

    async def __call__(self, case: Case, run: DagRun) -> float:
        """The judge's score of ``run``'s answer, 0..1; its verdict and calls go to ``verdicts``."""
        low, high = self.scale
        if not run.answer.strip():  # nothing to grade: no call spent on it
            verdict = JudgeVerdict(run_id=run.run_id, case_id=case.id, score=0.0, raw_score=None,
                                   reasoning="The run gave no answer.")  # fmt: skip
            self.verdicts[run.run_id] = verdict
            return verdict.score
        entry = self._entry()
        calls: list[LLMCall] = []

        def keep(event: Event) -> None:
            if isinstance(event, LLMCallRecorded):
                calls.append(event.call)

        try:
            result = await structured_llm_call(
                ChatModel(entry, settings=self.settings, emit=keep),
                self._messages(case, run),
                _Grade,
                parse_fn=self._checked,
                regex_fallback=self._from_text,
                purpose="judge",
                schema_name="verdict",
            )
        except StructuredOutputError as exc:
            self.failed_calls.extend(calls)
            raise ScorerError(
                f"{self.name}: the judge model {entry.name!r} gave no readable verdict on case {case.id!r} "
                f"(a score from {low:g} to {high:g} and its reasoning): {exc}"
            ) from None
        grade: _Grade = result.value
        score = (grade.score - low) / (high - low)
        self.verdicts[run.run_id] = JudgeVerdict(
            run_id=run.run_id, case_id=case.id, score=score, raw_score=grade.score, reasoning=grade.reasoning,
            calls=calls,
        )  # fmt: skip
        return score


def llm_judge(
    rubric: str,
    *,
    models: ModelRegistry | None = None,
    model: str | None = None,
    scale: tuple[float, float] = (1, 5),
    name: str = "judge",
    settings: DagSettings | None = None,
) -> LLMJudge:
    """A scorer that has a model grade each run's answer by ``rubric``; its score is 0..1.

    The judge reads the rubric, the goal, the case's ``expected`` as a reference answer when there is one, and
    the answer, and gives its reasoning and a score from ``scale[0]`` to ``scale[1]`` (mapped to 0..1). A run
    with no answer scores 0 without a call. ``models``: the registry whose ``smart`` model judges (None: the
    evaluation's session's, else ``ModelRegistry.from_env()``); ``model``: another of its models, by name or
    role. ``name``: the score's column (two judges need two names). A reply with no readable verdict, even
    asked again, is a ``ScorerError`` (the cell's error).
    """
    if not isinstance(rubric, str) or not rubric.strip():
        raise ValueError("llm_judge(rubric) needs the rubric as text: what a good answer does")
    low, high = scale
    if not low < high:
        raise ValueError(f"llm_judge(scale=(low, high)) needs low < high, got {scale!r}")
    return LLMJudge(rubric, models=models, model=model, scale=(low, high), name=name, settings=settings)
