"""The streaming planner: steps start while the plan is still being written.

The smart model's reply (tool-call argument deltas, or JSON text) is scanned as it arrives, each character
once: the scanner keeps its place (inside a string or not, after a backslash or not, how deep) from one piece
to the next, finds the plan's steps array, and parses each step object once, when it closes. A step is handed
over as soon as it is complete and every step it depends on is already known: a step that depends only on
earlier steps cannot close a cycle. A step naming something not seen yet waits; when the plan ends it is
validated as a whole (the same rules as the normal planner), the waiting steps follow, and a plan the
validation rejects is reported so the caller can drop what it started and re-ask. An element that is no
usable step is skipped on the way; the validation of the whole plan names the problem. A tool step (its
``tool_args``) waits for the steps its arguments reference as for its dependencies, then starts at once: its
call needs no model.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from dagmagic.engine.calls.plan_copies import CopyCheck
from dagmagic.engine.calls.plan_drafts import Domain, StepDraft, normalize_step
from dagmagic.engine.calls.plan_lines import LineReader
from dagmagic.engine.calls.plan_validation import names_itself, step_hints, usable_tool_args
from dagmagic.engine.calls.planner import Planner
from dagmagic.engine.steps.tool_steps import references
from dagmagic.errors import TransientProviderError
from dagmagic.llm.extraction import parse_json
from dagmagic.llm.protocol import StreamChunk
from dagmagic.models import PlanStep, split_round_reference

__all__ = ["PlanStream", "StreamedPlan"]

# Outside strings only these characters change what the scanner knows; inside one, only these two.
_STRUCTURE = re.compile(r'[{}\[\],:"]')
_STRING_STOP = re.compile(r'["\\]')


@dataclass
class StreamedPlan:
    """What a plan stream produced: its steps (handed over or not), or the problem that sinks it."""

    messages: list[dict[str, Any]]
    """The conversation, for a re-ask."""
    drafts: list[StepDraft] = field(default_factory=list)
    """Every step as finally written."""
    started: dict[str, PlanStep] = field(default_factory=dict)
    """Steps handed over while the plan streamed, by id."""
    readable: bool = True
    """False when the reply held no plan at all."""
    domain: Domain | None = None
    """The goal's domain as the reply said it (only when it was asked for)."""


class PlanStream:
    """Streams one plan and hands each step to ``on_step`` as soon as it can run."""

    def __init__(self, planner: Planner, on_step: Callable[[PlanStep], None]) -> None:
        self.planner = planner
        self.on_step = on_step

    async def run(
        self,
        query: str,
        *,
        round: int,
        context: str | None = None,
        earlier: Collection[str] = (),
        domain: str | None = None,
        ask_domain: bool = False,
    ) -> StreamedPlan:
        """Stream the plan; steps go to ``on_step`` on the way. Provider errors propagate; a malformed plan
        does not raise: its unusable steps are skipped, and a reply with no readable plan is ``readable=False``.
        ``ask_domain``: the planner must say the goal's domain too (read from the whole reply at the end).
        """
        planner = self.planner
        ask_domain = ask_domain and not domain
        messages = planner.messages(
            query, round=round, context=context, earlier=earlier, domain=domain, ask_domain=ask_domain
        )
        streamed = StreamedPlan(messages=messages)
        handover = _Handover(self, streamed, earlier, planner.settings.plan_max_steps, planner.copies(query))
        instructions = str(messages[0]["content"])
        reply = _Reply(planner.reader(earlier, instructions))
        try:
            async for chunk in planner.model.stream(
                messages,
                purpose="plan",
                round=round,
                temperature=0.0,
                structured_level="text",
                reply_format="plan",
                on_finish=reply.ended,
            ):
                for index, item in reply.add(chunk):
                    handover.offer(item, index)
        except TransientProviderError:
            # llama.cpp's server ends a streamed tool call without a finish reason, which litellm reports as a
            # broken stream: a whole plan that came through is still a plan; a cut one is not
            if not reply.complete:
                raise
        for index, item in reply.finish():
            handover.offer(item, index)
        try:
            draft = planner.read(reply.whole(), earlier, instructions, cut=reply.cut)  # the whole reply, read once
            streamed.drafts = draft.steps
            streamed.domain = draft.domain if ask_domain else None
        except (ValueError, TypeError, RecursionError):
            # ValueError (pydantic's ValidationError is one): no plan, or a step that is not one; the others
            # guard against shapes no one has met yet. The normal planner counts any exception as an unreadable
            # reply; so does this one.
            streamed.readable = False
        return streamed


class _Reply:
    """The reply as it arrives: plan lines, each read when its newline comes; or, from a model that writes JSON
    instead (or calls a tool with it), the step objects of that JSON, each read when it closes.
    """

    def __init__(self, lines: LineReader) -> None:
        self.text: list[str] = []
        self.arguments: list[str] = []
        self.lines = lines
        self._line = ""
        self._line_steps = 0
        self.cut = False
        """The provider cut the reply at its token limit: its last line is a fragment."""
        self._text_steps = _StepScanner()
        self._argument_steps = _StepScanner()

    def add(self, chunk: StreamChunk) -> list[tuple[int, Any]]:
        """Take a piece; the steps it completed, as (index in the plan, the step as its JSON form has it)."""
        self.text.append(chunk.text)
        closed: list[tuple[int, Any]] = []
        for delta in chunk.tool_calls:
            if delta.index == 0 and delta.arguments:
                self.arguments.append(delta.arguments)
                closed += self._json(self._argument_steps.feed(delta.arguments))
        if not self.arguments and chunk.text:  # text before a tool call is preamble, not the plan
            if not self._text_steps.found:
                closed += self._read_lines(chunk.text)
            if not self._line_steps:
                closed += self._json(self._text_steps.feed(chunk.text))
        return closed

    def ended(self, finish_reason: str | None) -> None:
        """How the provider said the reply ended."""
        self.cut = finish_reason == "length"

    def finish(self) -> list[tuple[int, Any]]:
        """The last line, which no newline ended (unless the reply was cut in it)."""
        if self.arguments or self._text_steps.found or not self._line or self.cut:
            return []
        return self._read_lines("\n")

    def _read_lines(self, text: str) -> list[tuple[int, Any]]:
        *complete, self._line = (self._line + text).split("\n")
        read = []
        for line in complete:
            step = self.lines.read(line)
            if step is not None:
                read.append((self._line_steps, step))
                self._line_steps += 1
        return read

    @staticmethod
    def _json(closed: list[tuple[int, str]]) -> list[tuple[int, Any]]:
        return [(index, parse_json(text)) for index, text in closed]

    @property
    def complete(self) -> bool:
        """Whether the plan's JSON steps array has closed (plan lines are never known to be complete)."""
        return (self._argument_steps if self.arguments else self._text_steps).done

    def whole(self) -> str:
        """Everything received (joined once, at the end)."""
        return "".join(self.arguments) or "".join(self.text)


@dataclass
class _Frame:
    """An open object or array above the steps array, while the scanner looks for it."""

    is_object: bool
    key: str | None = None
    """The key whose value comes next (objects only), as written, escapes left as they are."""
    expecting_key: bool = True


class _StepScanner:
    """Finds the step objects of a plan arriving in pieces, looking at each character once.

    The steps array is the reply's top-level array, or the ``steps`` array of its top-level object, or of
    that object's ``plan`` object. Anything before the first bracket (prose, a code fence) is skipped, and a
    top-level value that held no step object (a bracket in prose) is forgotten. Only the text of the step
    object being read (or of a key being read) is kept, and it is handed out once, when it closes: the work
    per piece is proportional to the piece, however long the reply grows, and nesting costs a counter, not
    recursion.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.frames: list[_Frame] = []  # the open containers at depths 1 and 2 while no steps array is known
        self.steps_depth: int | None = None  # the depth of the steps array once it opened
        self.index = 0  # the position of the current element in the steps array
        self.found = 0  # step objects handed out from the current steps array
        self.in_string = False
        self.escaped = False
        self.done = False
        self.capture: list[str] | None = None  # pieces of the key or step object being read
        self.capture_from = 0  # where the capture starts in the current piece
        self.capturing_key = False
        self.closed: list[tuple[int, str]] = []

    def feed(self, piece: str) -> list[tuple[int, str]]:
        """Scan the next piece; the step objects that closed in it, as (index, JSON text)."""
        position = 0
        while position < len(piece) and not self.done:
            if self.in_string:
                position = self._string(piece, position)
                continue
            match = _STRUCTURE.search(piece, position)
            if match is None:
                break
            position = match.end()
            self._structure(piece, match.start(), match.group())
        if self.capture is not None:
            self.capture.append(piece[self.capture_from :])
            self.capture_from = 0
        closed, self.closed = self.closed, []
        return closed

    def _string(self, piece: str, position: int) -> int:
        """Read inside a string from ``position``; where to go on."""
        if self.escaped:  # the piece before ended on a backslash
            self.escaped = False
            return position + 1
        match = _STRING_STOP.search(piece, position)
        if match is None:
            return len(piece)
        if match.group() == "\\":
            self.escaped = True
            return match.end()
        self.in_string = False
        if self.capturing_key:
            self.capturing_key = False
            self.frames[-1].key = self._end_capture(piece, match.start())
        return match.end()

    def _structure(self, piece: str, at: int, char: str) -> None:
        if self.depth == 0 and char not in "{[":
            return  # prose before the plan
        tracked = self.steps_depth is None and 0 < self.depth == len(self.frames)
        frame = self.frames[-1] if tracked else None
        if char == '"':
            self.in_string = True
            if frame is not None and frame.is_object and frame.expecting_key:
                self.capturing_key = True
                self._start_capture(at + 1)
        elif char in "{[":
            self._open(at, char)
        elif char in "}]":
            self._close(piece, at)
        elif self.steps_depth is not None:
            self.index += char == "," and self.depth == self.steps_depth
        elif frame is not None and frame.is_object:
            frame.expecting_key = char == ","

    def _open(self, at: int, char: str) -> None:
        self.depth += 1
        if self.steps_depth is not None:
            if self.depth == self.steps_depth + 1 and char == "{":
                self._start_capture(at)
        elif char == "[" and self._steps_open():
            self.steps_depth, self.index, self.found = self.depth, 0, 0
        elif self.depth <= 2:
            self.frames.append(_Frame(is_object=char == "{"))

    def _steps_open(self) -> bool:
        """Whether the array opening at the current depth is the plan's steps array."""
        keys = [frame.key if frame.is_object else None for frame in self.frames[: self.depth - 1]]
        return self.depth == len(self.frames) + 1 and keys in ([], ["steps"], ["plan", "steps"])

    def _close(self, piece: str, at: int) -> None:
        if self.steps_depth is not None and self.depth == self.steps_depth + 1 and self.capture is not None:
            self.closed.append((self.index, self._end_capture(piece, at + 1)))
            self.found += 1
        elif self.steps_depth is not None and self.depth == self.steps_depth:
            self.done = self.found > 0  # an array with no step object in it was not the plan
            self.steps_depth = None
        elif self.steps_depth is None and self.depth == len(self.frames):
            self.frames.pop()
        self.depth -= 1
        if self.depth == 0:  # a top-level value ended without a plan: look further
            self.frames, self.steps_depth = [], None

    def _start_capture(self, at: int) -> None:
        self.capture, self.capture_from = [], at

    def _end_capture(self, piece: str, end: int) -> str:
        parts = self.capture or []
        text = "".join([*parts, piece[self.capture_from : end]])
        self.capture = None
        return text


class _Handover:
    """Decides which streamed steps can start now."""

    def __init__(
        self, stream: PlanStream, streamed: StreamedPlan, earlier: Collection[str], limit: int, copies: CopyCheck
    ) -> None:
        self.stream = stream
        self.copies = copies
        self.drafts: list[StepDraft] = []
        self.streamed = streamed
        self.earlier = set(earlier)
        self.limit = limit
        self.seen: set[str] = set()
        self.arrivals = 0
        self.blocked: dict[str, list[_Waiting]] = {}  # a dependency not known yet -> the steps waiting on it

    def offer(self, item: Any, index: int) -> None:
        """Consider a finished element of the steps array: start it if it can, else let it wait."""
        draft = _draft(item, index)
        if draft is None or draft.id in self.seen:
            return  # unreadable or a duplicate: the validation at the end names it
        self.seen.add(draft.id)
        self.drafts.append(draft)
        if self.copies.step_problem(draft, self.drafts) is not None or draft in self.copies.write_ups(self.drafts):
            return  # copied or a write-up: it does not start (the validation at the end re-asks, or leaves it out)
        draft = self._with_references(draft)
        waiting = _Waiting(self.arrivals, draft, {dep for dep in draft.dependencies if not self._known(dep)})
        self.arrivals += 1
        for dependency in waiting.missing:
            self.blocked.setdefault(dependency, []).append(waiting)
        if not waiting.missing:
            self._release(waiting)

    def _release(self, ready: _Waiting) -> None:
        """Start a ready step and every waiting step it unblocks, earliest in the plan first."""
        queue = [ready]
        while queue and len(self.streamed.started) < self.limit:  # past the limit the validation rejects it
            draft = heapq.heappop(queue).draft
            step = _step(draft, self.stream.planner.roles, self.stream.planner.tool_names)
            self.streamed.started[step.id] = step
            self.stream.on_step(step)
            for waiting in self.blocked.pop(step.id, []):
                waiting.missing.discard(step.id)
                if not waiting.missing:
                    heapq.heappush(queue, waiting)

    def _with_references(self, draft: StepDraft) -> StepDraft:
        """A tool step also waits for the steps its arguments reference, as the whole plan's validation will
        add them (that warns, not this); an earlier round's result that cannot be reused is not waited for.
        """
        planner = self.stream.planner
        tool, _ = step_hints(draft, roles=planner.roles, tools=planner.tool_names)
        tool_args, _ = usable_tool_args(draft, tool, planner.tool_names)
        added = [
            ref
            for ref in references(tool_args)
            if ref != draft.id
            and ref not in draft.dependencies
            and (split_round_reference(ref) is None or ref in self.earlier)
        ]
        return draft.model_copy(update={"dependencies": [*draft.dependencies, *added]}) if added else draft

    def _known(self, dependency: str) -> bool:
        if split_round_reference(dependency) is not None and dependency not in self.streamed.started:
            return dependency in self.earlier
        return dependency in self.streamed.started


@dataclass(order=True)
class _Waiting:
    """A step that has not started, with the dependencies it still waits for."""

    arrival: int
    draft: StepDraft = field(compare=False)
    missing: set[str] = field(compare=False)


def _draft(item: Any, index: int) -> StepDraft | None:
    """The step an element describes; None when it is unusable (the final validation names why)."""
    if not isinstance(item, dict) or not (item.get("task") or item.get("description")):
        return None
    try:
        draft = StepDraft.model_validate(normalize_step(dict(item), index))
    except (ValueError, TypeError, RecursionError):  # as in PlanStream.run: an element that is no step
        return None
    return None if names_itself(draft.task) else draft


def _step(draft: StepDraft, roles: Collection[str], tools: Collection[str]) -> PlanStep:
    """A streamed step, its hints as the whole plan's validation will have them (that warns, not this)."""
    tool, hint = step_hints(draft, roles=roles, tools=tools)
    return PlanStep(
        id=draft.id,
        task=draft.task,
        dependencies=list(dict.fromkeys(draft.dependencies)),
        tool_hint=tool,
        model_hint=hint,
        tool_args=usable_tool_args(draft, tool, tools)[0],
    )
