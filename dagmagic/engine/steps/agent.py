"""The step agent: a fresh, memoryless ReAct loop per step.

Native tool calling when the step's model supports it, else a JSON action format parsed like structured
output; a call a model offered native tools writes as text instead (``{"name": ..., "arguments": ...}``,
the JSON action, ``<tool_call>...</tool_call>``) is recognised and run too, and what the model wrote after
such a call (often its result, invented) is left out of the conversation. The loop ends when the model
answers without calling a tool. Guards: the same call with the same arguments a second time gets a warning
instead of a result; a third time the model is asked once, without tools, for its answer from what it has
(else the step fails, keeping its notes); observations are capped; at ``step_max_iterations`` the step fails,
keeping its notes. Then, optionally, a completion check (3+ tools used, a short answer) and a citation check
with one re-run on failure; a check that cannot run leaves the result standing, flagged as not verified.
A step tried again (a transient error) or resumed goes on from the tool calls it recorded
(``dagmagic.engine.steps.transcript``): a call that returned is not made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from dagmagic._secrets import mask_secrets
from dagmagic.engine.calls.citations import CitationVerdict, extract_citations, verify_citations
from dagmagic.engine.calls.context import truncate
from dagmagic.engine.steps.executor import StepFailure
from dagmagic.engine.steps.runner import StepRequest, step_messages
from dagmagic.engine.steps.transcript import (
    RequestedCall,
    assistant_message,
    observation_message,
    record_call,
    recorded_turns,
)
from dagmagic.engine.tools.functions import Tool, ToolInterrupted, ToolOutcome, capped
from dagmagic.errors import RUN_ENDING, ContextWindowExceededError
from dagmagic.events import RunWarning, Verification, Verifying
from dagmagic.llm import ChatModel, ChatResult, extract_json_span, structured_llm_call
from dagmagic.models import PlanStep

__all__ = ["SHORT_ANSWER_CHARS", "StepAgent", "ToolSelection", "needed_tools"]

log = logging.getLogger("dagmagic")

SHORT_ANSWER_CHARS = 300
"""An answer shorter than this after 3+ tool calls gets one completion check."""

JSON_ACTIONS = """\
You can call these tools:
{tools}

To call a tool, reply with only a JSON object: {{"tool": "<name>", "arguments": {{...}}}}
You will get its result back. When you have everything, reply with your final answer as plain text."""

REPEAT_WARNING = (
    "You already called {name} with exactly these arguments; its result is above. Use it, or try different "
    "arguments or another tool. Calling it again the same way ends this step."
)

COMPLETION_CHECK = (
    "You used {count} tools but your answer is short. Check it against your task and the results above, "
    "then reply with the complete final answer (plain text, no tool calls)."
)

FORCE_ANSWER = (
    "You called {name} three times with the same arguments. Do not call any tool again: reply now with your "
    "final answer to your task from the results above, as plain text."
)

NOT_VERIFIED = "citations not verified: the check failed ({error})"

_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

CITATION_FEEDBACK = (
    "\n\nA reviewer checked the citations in your previous answer and found problems:\n{feedback}\n"
    "Correct them; cite only what you can verify."
)


class ToolSelection(BaseModel):
    """The tools a step needs."""

    tools: list[str] = Field(description="Names of the tools this step needs, most useful first.")


class StepAgent:
    """Runs a step with tools; with no tools it is a single LLM call on the step's context."""

    def __init__(self, tools: Sequence[Tool] = ()) -> None:
        self.tools = {t.name: t for t in tools}

    async def __call__(self, request: StepRequest) -> str:
        """The step's result (``StepFailure`` with its notes when it cannot finish)."""
        tools = await self._select(request)
        result = await self._react(request, tools)
        settings = request.settings
        if not settings.citation_verification or request.smart is None:
            return result
        citations = extract_citations(result)
        if not citations:
            return result
        step = request.step
        request.emit(Verifying(round=request.round, step_id=step.id))
        try:
            verdict = await self._check_citations(request, result, citations)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a check that cannot run never costs the step its result (not even a
            # wrong key: the result exists already, and the run's next call meets the key and ends the run)
            note = mask_secrets(NOT_VERIFIED.format(error=f"{type(exc).__name__}: {exc}"))
            step.warnings.append(note)
            request.emit(Verification(round=request.round, step_id=step.id, passed=False, feedback=note))
            return result
        feedback = verdict.feedback or "; ".join(verdict.problems)
        request.emit(Verification(round=request.round, step_id=step.id, passed=verdict.valid, feedback=feedback))
        if verdict.valid:
            return result
        return await self._react(request, tools, feedback=CITATION_FEEDBACK.format(feedback=feedback))

    @staticmethod
    async def _check_citations(request: StepRequest, result: str, citations: list[str]) -> CitationVerdict:
        step, smart = request.step, request.smart
        assert smart is not None
        checked = result
        if request.guard is not None:  # the checker reads the answer beside its instructions and the citations
            checked = await request.guard.fit(
                result,
                smart,
                budget=request.guard.budget(smart) // 2,
                task=f"checking these citations: {', '.join(citations)}",
                round=request.round,
                step_id=step.id,
            )
        return await verify_citations(smart, step.task, checked, citations, round=request.round, step_id=step.id)

    async def _select(self, request: StepRequest) -> list[Tool]:
        """The tools the step needs (``needed_tools``): all of them, or at most ``tool_selection_max`` picked by the
        step's model above the threshold.
        """
        tools = needed_tools(request.step, list(self.tools.values()), failed_call=request.failed_call is not None)
        settings = request.settings
        if len(tools) <= settings.tool_selection_threshold:
            return tools
        listing = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        messages = [
            {
                "role": "system",
                "content": f"Pick the tools (at most {settings.tool_selection_max}) this task needs, from:\n{listing}",
            },
            {"role": "user", "content": request.step.task},
        ]
        try:
            outcome = await structured_llm_call(
                request.model,
                messages,
                ToolSelection,
                purpose="tool_selection",
                round=request.round,
                step_id=request.step.id,
            )
        except RUN_ENDING:
            raise
        except Exception as exc:  # selection only narrows the list: on any failure the step gets every tool
            _all_tools(request, f"{type(exc).__name__}: {exc}", len(tools))
            return tools
        picked = [name for name in dict.fromkeys(outcome.value.tools) if name in self.tools]
        if not picked:
            _all_tools(request, "it named none of the tools", len(tools))
            return tools
        hint = request.step.tool_hint
        if hint in self.tools and hint not in picked[: settings.tool_selection_max]:
            # the planner's hint always stays, in place of the model's last pick: the cap holds
            picked = [*[name for name in picked if name != hint][: settings.tool_selection_max - 1], hint]
        picked = picked[: settings.tool_selection_max]
        return [self.tools[name] for name in picked]

    async def _react(self, request: StepRequest, tools: list[Tool], feedback: str = "") -> str:
        model = request.model
        step = request.step
        native = bool(tools) and model.entry.capabilities.tool_call
        messages: list[dict[str, Any]] = step_messages(request)
        if feedback:
            messages[-1] = {**messages[-1], "content": messages[-1]["content"] + feedback}
        if tools and not native:
            listing = "\n".join(f"- {t.name}: {t.description} Arguments: {json.dumps(t.parameters)}" for t in tools)
            messages[0] = {
                **messages[0],
                "content": f"{messages[0]['content']}\n\n{JSON_ACTIONS.format(tools=listing)}",
            }
        schemas = [t.schema() for t in tools] if native else None
        # a step tried again, or resumed, goes on from the calls it made: none that returned is made again (a
        # tool step's direct call, turn 0, was the executor's: its prompt says how it failed)
        made = [call for call in step.tool_calls if call.turn != 0]
        turns, done = recorded_turns(made, native)
        messages.extend(turns)
        seen: Counter[str] = Counter(_call_key(c.name, c.arguments) for c in made)
        notes = [_note(c.name, c.arguments, c.observation) for c in made]
        results = {_call_key(c.name, c.arguments): _note(c.name, c.arguments, c.observation) for c in made}
        used = len(made)
        settings = request.settings
        for iteration in range(done + 1, settings.step_max_iterations + 1):
            await _fit(request, messages, schemas)
            reply = await _chat(request, messages, schemas, native)
            calls, content, reported = _read_turn(reply, tools, results)
            if reported is not None:
                return reported
            if not calls:
                return await self._final(request, messages, reply.content.strip(), used, notes)
            messages.append(assistant_message(content, calls, native))
            for call in calls:
                key = _call_key(call.name, call.arguments)
                seen[key] += 1
                if seen[key] >= 3:
                    notes.append(f"Stopped: {call.name} was called a third time with the same arguments.")
                    return await self._forced_answer(request, messages, call.name, tools, notes, results)
                try:
                    outcome = await self._call(call, tools, request, repeated=seen[key] == 2)
                except ToolInterrupted as exc:
                    raise StepFailure(str(exc), notes=_notes(notes)) from exc
                used += 1
                record_call(
                    request.step,
                    call.name,
                    call.arguments,
                    outcome,
                    turn=iteration,
                    round=request.round,
                    emit=request.emit,
                )
                notes.append(_note(call.name, call.arguments, outcome.observation))
                if outcome.error is None:
                    results.setdefault(key, _note(call.name, call.arguments, outcome.observation))
                messages.append(observation_message(call, outcome.observation, native))
        raise StepFailure(
            f"iteration limit ({settings.step_max_iterations}) reached without a final answer", notes=_notes(notes)
        )

    async def _final(
        self, request: StepRequest, messages: list[dict[str, Any]], answer: str, used: int, notes: list[str]
    ) -> str:
        """The step's answer: checked once for completeness when it is short after 3+ tool calls."""
        if used >= 3 and len(answer) < SHORT_ANSWER_CHARS:
            answer = await self._completion_check(request, messages, answer, used) or answer
        if not answer:
            raise StepFailure("the model returned an empty answer", notes=_notes(notes))
        return answer

    @staticmethod
    async def _forced_answer(
        request: StepRequest,
        messages: list[dict[str, Any]],
        name: str,
        tools: list[Tool],
        notes: list[str],
        results: dict[str, str],
    ) -> str:
        """A stuck step's last chance: its answer from what it has, asked once without tools."""
        turn = max(i for i, message in enumerate(messages) if message.get("role") == "assistant")
        messages = messages[:turn]  # this turn's calls stay unanswered: most providers refuse that
        ask = [*messages, {"role": "user", "content": FORCE_ANSWER.format(name=name)}]
        await _fit(request, ask, None)
        reply = await request.model.chat(ask, purpose="step", round=request.round, step_id=request.step.id)
        answer = reply.content.strip()
        reported = _reported(answer, tools, results)
        if reported is not None:
            return reported
        if not answer or _text_calls(answer, tools) or _CALL_WRITTEN.match(answer):
            if results:  # no answer, but what the tools returned stands: that is the step's result
                return "\n".join(dict.fromkeys(results.values()))
            raise StepFailure(
                f"stuck: {name} was called three times with the same arguments, and no answer came after",
                notes=_notes(notes),
            )
        return answer

    async def _call(
        self, call: RequestedCall, tools: list[Tool], request: StepRequest, *, repeated: bool
    ) -> ToolOutcome:
        if repeated:
            return ToolOutcome(REPEAT_WARNING.format(name=call.name), error="repeated call")
        available = {t.name: t for t in tools}
        chosen = available.get(call.name)
        if chosen is None:
            names = ", ".join(available) or "none"
            return ToolOutcome(f"There is no tool named {call.name!r}. Available tools: {names}.", error="unknown tool")
        settings = request.settings
        outcome = await chosen.run(
            call.arguments, timeout=settings.tool_timeout, threads=settings.tool_threads, late=_late_notice(request)
        )
        return capped(outcome, settings.observation_max_chars)

    @staticmethod
    async def _completion_check(
        request: StepRequest, messages: list[dict[str, Any]], answer: str, used: int
    ) -> str | None:
        check = [
            *messages,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": COMPLETION_CHECK.format(count=used)},
        ]
        await _fit(request, check, None)
        model: ChatModel = request.model
        reply = await model.chat(check, purpose="step", round=request.round, step_id=request.step.id)
        return reply.content.strip() or None


async def _chat(
    request: StepRequest, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, native: bool
) -> ChatResult:
    """The step model's reply to ``messages``; refused as too long for a window the guard did not know (or knew
    larger), once more with the conversation fitted to the window the refusal taught.
    """
    model: ChatModel = request.model

    async def chat() -> ChatResult:
        tool_choice = "auto" if native else None
        return await model.chat(
            messages, purpose="step", round=request.round, step_id=request.step.id, tools=tools, tool_choice=tool_choice
        )

    try:
        return await chat()
    except ContextWindowExceededError as refusal:
        guard = request.guard
        if guard is None or not guard.learn_window(
            model, refusal, messages, tools, round=request.round, step_id=request.step.id
        ):
            raise
    await _fit(request, messages, tools)
    return await chat()


async def _fit(request: StepRequest, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> None:
    """Shorten the conversation in place when it outgrows the step model's window (older observations first)."""
    if request.guard is not None:
        await request.guard.fit_transcript(
            messages,
            request.model,
            tools=tools,
            task=request.step.task,
            round=request.round,
            step_id=request.step.id,
        )


def _late_notice(request: StepRequest) -> Callable[[str], None]:
    """Says, while the run lasts, that a tool the step stopped waiting for has returned after all."""

    def late(message: str) -> None:
        if request.run_ended():
            log.warning("[dagmagic] %s", message)
        else:
            request.emit(RunWarning(message=message, round=request.round, step_id=request.step.id))

    return late


_COMBINING = re.compile(
    r"\b(?:compar\w*|rank\w*|order|sort\w*|sum|add|total|combine|difference|subtract|divide|ratio|average|mean|"
    r"percent\w*|(?:larg|small|bigg|high|low|great|few)(?:er|est)|more|most|less|least|which of)\b",
    re.IGNORECASE,
)
"""A task that compares, ranks or combines what it is given."""
_LOOKING_UP = re.compile(r"\b(?:look\w* up|lookup|search\w*|fetch\w*|retriev\w*|query|download\w*|browse)\b", re.I)


def needed_tools(step: PlanStep, tools: list[Tool], *, failed_call: bool = False) -> list[Tool]:
    """The tools a step is offered: a step with no tool hint that only compares, ranks or combines the results it
    waits for (its inputs are complete) gets the computing tools (``Tool.computes``) and the tools its task names,
    none else: given every tool, a small model looked up again what it had and looped on them. Any other step
    gets every tool.
    """
    if step.tool_hint or not step.dependencies or failed_call:
        return tools
    task = step.task
    if not _COMBINING.search(task) or _LOOKING_UP.search(task):
        return tools
    return [tool for tool in tools if tool.computes or re.search(rf"\b{re.escape(tool.name)}\b", task)]


def _all_tools(request: StepRequest, cause: str, count: int) -> None:
    message = f"Tool selection for {request.step.id} failed ({cause}): the step is given all {count} tools."
    request.emit(RunWarning(message=message, round=request.round, step_id=request.step.id))


def _native_calls(tool_calls: Sequence[Any]) -> list[RequestedCall]:
    calls = []
    for tc in tool_calls:
        try:
            arguments: Any = json.loads(tc.arguments) if tc.arguments else {}
        # ValueError: broken JSON or an integer too long to convert; RecursionError: nested past the parser
        except (ValueError, RecursionError):
            arguments = tc.arguments  # validation turns this into an observation the model can fix
        calls.append(RequestedCall(tc.id, tc.name, arguments))
    return calls


def _read_turn(
    reply: ChatResult, tools: list[Tool], results: Mapping[str, str]
) -> tuple[list[RequestedCall], str, str | None]:
    """A reply's calls (native, else written as text), its text as kept in the conversation, and the answer it
    gives by writing back calls the step made with their results (``_reported``), if it does.
    """
    calls = _native_calls(reply.response.tool_calls)
    if calls:
        return calls, reply.content, None
    reported = _reported(reply.content, tools, results)
    if reported is not None:
        return [], reply.content, reported
    calls, content = _text_turn(reply.content, tools)
    return calls, content, None


def _text_calls(content: str, tools: list[Tool]) -> list[RequestedCall]:
    """Tool calls written in the reply's text (``_text_turn``'s calls)."""
    return _text_turn(content, tools)[0]


def _text_turn(content: str, tools: list[Tool]) -> tuple[list[RequestedCall], str]:
    """Tool calls written in the reply's text: the JSON action format (``{"tool": ..., "arguments": ...}``),
    an OpenAI-style call (``{"name": ..., "arguments": ...}``, or under ``"function"``), a list of them, or
    Qwen's ``<tool_call>...</tool_call>``; only calls naming a tool the step was offered count. With them, the
    turn's text as kept in the conversation: what came before the first call, then the calls as written.
    What a model writes after a call it wrote as text (often the result it expects, invented: "The population
    of Berlin is ...") is no observation: it is left out, and the tools' results come in its place.
    """
    if not tools or not content.strip():
        return [], content
    offered = {tool.name for tool in tools}
    # where calls may be: (the text, its offset in the reply, where its tag opens, where it closes: None if not)
    pieces: list[tuple[str, int, int | None, int | None]] = [
        (tag.group(1), tag.start(1), tag.start(), tag.end() if tag.group(0).endswith("</tool_call>") else None)
        for tag in _TOOL_CALL_TAG.finditer(content)
    ]
    calls: list[RequestedCall] = []
    spans: list[tuple[int, int]] = []
    reports = False
    for text, offset, tag_start, tag_end in pieces or [(content, 0, None, None)]:
        try:
            value, json_start, json_end = extract_json_span(text)
        except ValueError:
            continue
        found = len(calls)
        for item in value if isinstance(value, list) else [value]:
            call = _as_call(item, len(calls))
            if call is not None and call.name in offered:
                calls.append(call)
                reports = reports or any(key in _unwrapped(item) for key in _REPORTED)
        if len(calls) > found:  # a tag from its opening; a closed one to its close, else to the JSON's end
            start = tag_start if tag_start is not None else offset + json_start
            spans.append((start, tag_end if tag_end is not None else offset + json_end))
    if not calls:
        return [], content
    if reports:  # the result written inside the call is invented: the call is kept without it
        return calls, content[: spans[0][0]] + "\n".join(_written(call) for call in calls)
    kept = content[: spans[0][0]] + "\n".join(content[start:end] for start, end in spans)
    return calls, kept


_CALL_WRITTEN = re.compile(r'^\W*\{\s*"(?:name|tool|function)"\s*:')
"""A reply that begins a call written as JSON, even one cut short (it cannot be read, but it is no answer)."""
_REPORTED = ("result", "output", "observation", "response", "return", "returns")
"""The keys with which a small model writes a call it made back, with its result, as its answer."""


def _reported(content: str, tools: list[Tool], results: Mapping[str, str]) -> str | None:
    """The answer a reply gives by writing back calls the step made, each with a result (Qwen2.5-Coder 1.5B, after
    an observation: ``{"name": "population", "arguments": ..., "result": {"value": "12480000"}}``): the calls'
    actual results, as notes; None when the reply is no such report. A call written with a result but never made
    is a call (its result is invented): ``_text_turn`` reads it.
    """
    try:
        value, _, _ = extract_json_span(content)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    keys = []
    for item in items:
        call = _as_call(item, 0)
        if call is None or not any(key in _unwrapped(item) for key in _REPORTED):
            return None
        keys.append(_call_key(call.name, call.arguments))
    if not keys or not tools or not all(key in results for key in keys):
        return None
    return "\n".join(results[key] for key in dict.fromkeys(keys))


def _written(call: RequestedCall) -> str:
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False, default=str)


def _unwrapped(item: Any) -> dict[str, Any]:
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        return {**item, **item["function"]}
    return item if isinstance(item, dict) else {}


def _as_call(item: Any, index: int) -> RequestedCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):
        item = item["function"]
    name = item.get("tool", item.get("name"))
    if not isinstance(name, str):
        return None
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):
        # left as text (broken, too long a number, too deep), validation tells the model what is wrong
        with contextlib.suppress(ValueError, RecursionError):
            arguments = json.loads(arguments) if arguments.strip() else {}
    return RequestedCall(f"call_text_{index}", name, arguments)


def _call_key(name: str, arguments: Any) -> str:
    return f"{name}:{json.dumps(arguments, sort_keys=True, default=str)}"


def _note(name: str, arguments: Any, observation: str) -> str:
    return f"{name}({_arguments_text(arguments)}) -> {truncate(observation, 500)}"


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return repr(arguments)


def _notes(notes: list[str]) -> str:
    return "Partial notes (tool calls so far):\n" + "\n".join(f"- {note}" for note in notes) if notes else ""
