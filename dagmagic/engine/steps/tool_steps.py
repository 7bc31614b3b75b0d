"""Tool steps: a step whose whole task is one call of its tool, made by the executor without a model.

The planner writes the call's arguments (``PlanStep.tool_args``). ``"$s1"`` as a whole value is step s1's
result (``"$r1.s2"``: round 1's s2), which the tool's schema then coerces (``"68.4"`` becomes 68.4 for a
float, and a result that is a JSON list or object may fill a parameter of that kind); ``$s1`` inside a longer
string is replaced by the result as text; lists and objects are substituted all the way down. A reference is
``$`` followed by a step id made of letters, digits and ``_`` (starting with a letter), so ``$5`` is text.

The call is validated by the tool's schema and made as the agent makes it (``tool_timeout``, the tool
threads, a late result reported); its observation, capped like the agent's, is the step's result, and it is
recorded as the step's one ``ToolCallRecord`` with ``turn=0``. When it cannot be made or fails (invalid
arguments, a reference that names no completed dependency, the tool's error or timeout) ``DirectCallFailed``
says why, and the step runs as an agent once, told so (``failure_note``). A failed call recorded already (a
step tried again) is not made again, and a call that returned is the result of a resumed step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from dagmagic.engine.calls.context import truncate
from dagmagic.engine.steps.executor import StepFailure
from dagmagic.engine.steps.transcript import record_call
from dagmagic.engine.tools.functions import Tool, ToolInterrupted, capped
from dagmagic.events import Event, RunWarning
from dagmagic.models import PlanStep
from dagmagic.settings import DagSettings

__all__ = [
    "REFERENCE",
    "DirectCallFailed",
    "UnresolvedReference",
    "call_tool_step",
    "failure_note",
    "references",
    "substitute",
    "warning",
]

log = logging.getLogger("dagmagic")

REFERENCE = re.compile(r"\$((?:r\d+\.)?[A-Za-z_][A-Za-z0-9_]*)")
"""``$s1`` or ``$r1.s2`` in an argument: the group is the referenced step (``s1``, ``r1.s2``)."""

FAILURE_NOTE = (
    "A direct call of {tool} with arguments {arguments} failed: {error}. Do the task yourself (with the tools if "
    "they help), and answer with its result."
)

WARNING = "{tool} could not be called directly ({error}): the step ran as an agent"


class UnresolvedReference(ValueError):
    """An argument names a step whose result the step does not have."""


class DirectCallFailed(Exception):
    """The direct call could not be made or failed; ``error`` says why, ``arguments`` are those it was given."""

    def __init__(self, tool: str, arguments: Any, error: str) -> None:
        super().__init__(error)
        self.tool = tool
        self.arguments = arguments
        self.error = error


def references(arguments: Any) -> list[str]:
    """The steps ``arguments`` reference, in order of appearance, each once."""
    found: dict[str, None] = {}
    for text in _strings(arguments):
        found.update((match.group(1), None) for match in REFERENCE.finditer(text))
    return list(found)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _strings(item)]
    return []


def substitute(arguments: Any, results: Mapping[str, str], *, parse: bool = False) -> Any:
    """``arguments`` with every reference replaced by its result (``UnresolvedReference`` when one has none).
    ``parse``: a whole-value reference whose result is a JSON list or object becomes that value.
    """
    if isinstance(arguments, str):
        whole = REFERENCE.fullmatch(arguments.strip())
        if whole is not None:
            value = _result(whole.group(1), results)
            if parse:
                with contextlib.suppress(ValueError, RecursionError):
                    parsed = json.loads(value)
                    if isinstance(parsed, list | dict):
                        return parsed
            return value
        return REFERENCE.sub(lambda match: _result(match.group(1), results), arguments)
    if isinstance(arguments, Mapping):
        return {key: substitute(value, results, parse=parse) for key, value in arguments.items()}
    if isinstance(arguments, list | tuple):
        return [substitute(value, results, parse=parse) for value in arguments]
    return arguments


def _result(reference: str, results: Mapping[str, str]) -> str:
    if reference not in results:
        known = ", ".join(sorted(results)) or "none"
        raise UnresolvedReference(f"${reference} names no completed step this one depends on (results it has: {known})")
    return results[reference].strip()


async def call_tool_step(
    step: PlanStep,
    tool: Tool,
    dependencies: Mapping[str, PlanStep],
    *,
    settings: DagSettings,
    emit: Callable[[Event], object],
    round: int = 1,
    run_ended: Callable[[], bool] = lambda: False,
) -> str:
    """The step's result: its tool's observation, called with ``step.tool_args`` (``DirectCallFailed`` when the
    call cannot be made or fails; ``StepFailure`` when the tool raised what is not an ``Exception``).
    """
    recorded = next((record for record in step.tool_calls if record.turn == 0), None)
    if recorded is not None:  # the step was tried before: its call is not made again
        if recorded.error is None:
            return recorded.observation
        raise DirectCallFailed(tool.name, recorded.arguments, recorded.error)
    results = {ref: dep.result or "" for ref, dep in dependencies.items() if dep.status == "completed"}
    try:
        arguments = substitute(step.tool_args or {}, results)
    except UnresolvedReference as exc:
        raise DirectCallFailed(tool.name, step.tool_args, str(exc)) from None
    if tool.validation_problem(arguments) is not None:
        parsed = substitute(step.tool_args or {}, results, parse=True)
        if parsed != arguments and tool.validation_problem(parsed) is None:
            arguments = parsed  # a JSON result fills a list or object parameter
    try:
        outcome = await tool.run(
            arguments,
            timeout=settings.tool_timeout,
            threads=settings.tool_threads,
            late=_late_notice(emit, run_ended, round, step.id),
        )
    except ToolInterrupted as exc:
        raise StepFailure(str(exc)) from exc
    outcome = capped(outcome, settings.observation_max_chars)
    record_call(step, tool.name, arguments, outcome, turn=0, round=round, emit=emit)
    if outcome.error is not None:
        raise DirectCallFailed(tool.name, arguments, outcome.error)
    return outcome.observation


def failure_note(failure: DirectCallFailed) -> str:
    """What the step's agent is told about the direct call that failed."""
    arguments = json.dumps(failure.arguments, ensure_ascii=False, default=str)
    return FAILURE_NOTE.format(tool=failure.tool, arguments=truncate(arguments, 1000), error=failure.error)


def warning(failure: DirectCallFailed) -> str:
    """The step's warning that its direct call failed and its agent ran."""
    return WARNING.format(tool=failure.tool, error=truncate(failure.error, 500))


def _late_notice(
    emit: Callable[[Event], object], run_ended: Callable[[], bool], round: int, step_id: str
) -> Callable[[str], None]:
    """Says, while the run lasts, that a tool the step stopped waiting for has returned after all."""

    def late(message: str) -> None:
        if run_ended():
            log.warning("[dagmagic] %s", message)
        else:
            emit(RunWarning(message=message, round=round, step_id=step_id))

    return late
