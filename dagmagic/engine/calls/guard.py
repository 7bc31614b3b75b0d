"""The context guard: every prompt the loop sends fits its model's window.

A model's window is what its registry entry declares, else litellm's figure, else
``default_context_tokens``; a request may take ``GUARD_SHARE`` of it (at least ``context_floor_tokens``,
always leaving ``MIN_REPLY_TOKENS`` for the reply). A window nobody knows is not guessed: that model's prompts
are sent as they are, never compacted (a guess too small cost a ``compaction`` call per step past 100 steps),
and for a model litellm serves the run says so, once per model in a session, naming the settings that give it.
Until its provider refuses a prompt as too long (``ContextWindowExceededError``): then the window the refusal
states (else four fifths of what was sent) is the model's for the session (``learn_window``), and a step sends
the refused prompt once more, fitted to it.

The goal and its follow-ups, which every call site sends, may take ``OBJECTIVE_SHARE`` of a budget: longer, each
is cut in the middle (head and tail kept) to a fair share, and a warning says what was cut and by how much. Each
call site measures its fixed part (instructions, the goal so fitted, tool schemas) and fits its variable part
(dependency results, step results, the replan context, the history, a step's own transcript) into what is left.
Over budget, the fast model compacts the text (purpose ``compaction``); without one, or when that fails, a
truncation keeps its head and tail. The history is read from its summary (``dagmagic.engine.calls.history``).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.context import compose_query, truncate_middle
from dagmagic.errors import RUN_ENDING, ContextWindowExceededError
from dagmagic.events import Event, RunWarning
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm.breaker import CircuitBreakers
from dagmagic.llm.tokens import context_window, count_tokens, fits, litellm_serves, request_tokens
from dagmagic.models import Purpose
from dagmagic.settings import DagSettings

__all__ = [
    "GUARD_SHARE",
    "MIN_REPLY_TOKENS",
    "OBJECTIVE_SHARE",
    "PLANNER_RESERVE",
    "SHORTENED_MARKER",
    "STRUCTURED_RESERVE",
    "UNKNOWN_WINDOW_BUDGET",
    "ContextGuard",
    "ModelWindows",
    "water_fill",
]

GUARD_SHARE = 0.75
"""Share of a model's window a request may take; the rest is left for the reply."""

MIN_REPLY_TOKENS = 512
"""Tokens always left for the reply, whatever the floor says."""

STRUCTURED_RESERVE = 1000
"""Tokens a structured call may add to its messages: the schema instruction and one retry quoting a bad reply."""

PLANNER_RESERVE = 1800
"""The structured reserve plus the planner's re-ask (its first plan quoted back, and the problem)."""

MIN_ROOM = 200
"""The least room a variable part is given, even when the fixed part leaves less."""

OBJECTIVE_SHARE = 0.25
"""Share of a request's budget the goal and its follow-ups may take together: the rest is for the instructions,
the history, the results and the replan context beside them."""

COMPACTION_TASK_TOKENS = 300
"""What the compaction prompt says the text is for, at most (a task may quote the goal)."""

FOLLOW_UP_TOKENS = 8
"""Tokens of the ``[User follow-up]:`` line that introduces each follow-up."""

SHORTENED_MARKER = "[Earlier observation, shortened]\n"

UNKNOWN_WINDOW_BUDGET = 1 << 40
"""The budget of a model whose window nobody knows: no prompt is over it, so none is compacted or cut."""


def water_fill(sizes: Sequence[int], room: int) -> list[int]:
    """Each size's share of ``room``: small ones keep their size, the rest split what is left evenly."""
    shares = [0] * len(sizes)
    remaining = max(room, 0)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    for position, index in enumerate(order):
        fair = remaining // (len(order) - position)
        shares[index] = min(sizes[index], fair)
        remaining -= shares[index]
    return shares


class ModelWindows:
    """What a session learned of its models' windows, by model (``name``, NUL, ``target``)."""

    def __init__(self) -> None:
        self.told: set[str] = set()
        """The models whose window the session was told is unknown: it is told once."""
        self.learned: dict[str, int] = {}
        """Windows a provider's refusal taught: they win over every other source (it is the provider's word)."""


def _model_key(model: ChatModel) -> str:
    return f"{model.entry.name}\0{model.entry.target}"


class ContextGuard:
    """Keeps each prompt inside its model's window, for one run (compactions are remembered for the run)."""

    def __init__(
        self,
        registry: ModelRegistry,
        settings: DagSettings,
        *,
        emit: Callable[[Event], object] | None = None,
        windows: ModelWindows | None = None,
        breakers: CircuitBreakers | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.emit = emit
        self.breakers = breakers
        """The run's breakers: the fast model is not called once it stopped answering."""
        self.windows = windows if windows is not None else ModelWindows()
        """What the session learned of its models' windows (else this run alone)."""
        self._compacted: dict[tuple[str, str], str] = {}
        self._objectives: dict[tuple[str, int, str], tuple[str, list[str]]] = {}
        self._objectives_cut: set[tuple[str, str]] = set()

    # --- measures

    def window(self, model: ChatModel) -> int | None:
        """The model's input window in tokens (``default_context_tokens`` when litellm does not know it); None
        when nobody knows it (the first time, for a litellm model, a warning says so).
        """
        learned = self.windows.learned.get(_model_key(model))
        if learned is not None:
            return learned
        window = context_window(model.entry) or self.settings.default_context_tokens
        if window is None:
            self._tell_unknown(model)
        return window

    def learn_window(
        self,
        model: ChatModel,
        refusal: ContextWindowExceededError,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        round: int | None,
        step_id: str | None = None,
    ) -> bool:
        """``model``'s provider refused ``messages`` as too long: from now on, in this session, its window is the
        one the provider stated, else four fifths of what was sent, and a warning says so. Whether that is smaller
        than the window the guard went by (unknown, say): then fitting the prompt again may get it accepted.
        """
        sent = request_tokens(model.entry, messages, tools, counted=True)
        stated = refusal.window
        learned = max(stated or sent * 4 // 5, 256)
        before = self.window(model)
        if before is not None and learned >= before:
            return False
        self.windows.learned[_model_key(model)] = learned
        if self.emit is not None:
            source = "the window its provider stated" if stated else "an estimate, a fifth under what was sent"
            message = (
                f"Model {model.name!r} refused a prompt of {sent:,} tokens as too long for its window: its prompts "
                f"are fitted to a window of {learned:,} tokens from now on ({source}). Give its window to spare the "
                "refused call: register(..., context_window=N), or DAG_DEFAULT_CONTEXT_TOKENS=N."
            )
            self.emit(RunWarning(message=message, round=round, step_id=step_id))
        return True

    def _tell_unknown(self, model: ChatModel) -> None:
        """Say once per model that its window is unknown, when it is litellm's to know (a backend of one's own,
        such as ``ScriptedLLM``, says its window or has none to say).
        """
        entry, key = model.entry, _model_key(model)
        if key in self.windows.told or not litellm_serves(entry):
            return
        self.windows.told.add(key)
        if self.emit is not None:
            message = (
                f"The context window of model {entry.name!r} ({entry.target}) is unknown: litellm does not list it. "
                "Its prompts are sent as they are, never compacted to fit; a provider with a smaller window rejects "
                "them (or, as Ollama does, cuts them). Give the window: register(..., context_window=N) for this "
                "model, or DAG_DEFAULT_CONTEXT_TOKENS=N (DagSettings(default_context_tokens=N)) for every model "
                "whose window litellm does not know."
            )
            self.emit(RunWarning(message=message))

    def budget(self, model: ChatModel) -> int:
        """Tokens a whole request to ``model`` may take (``UNKNOWN_WINDOW_BUDGET`` when its window is unknown)."""
        window = self.window(model)
        if window is None:
            return UNKNOWN_WINDOW_BUDGET
        share = max(self.settings.context_floor_tokens, int(window * GUARD_SHARE))
        return max(MIN_ROOM, min(share, window - MIN_REPLY_TOKENS))

    def room(
        self,
        model: ChatModel,
        messages: Sequence[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        reserve: int = 0,
    ) -> int:
        """Tokens left for a variable part in a request that already holds ``messages`` (and ``tools``)."""
        used = request_tokens(model.entry, messages, tools)
        return max(MIN_ROOM, self.budget(model) - used - reserve)

    def tokens(self, model: ChatModel, text: str) -> int:
        """Tokens of ``text`` for ``model``."""
        return count_tokens(model.entry, text)

    # --- the goal and its follow-ups

    def objective(
        self, goal: str, follow_ups: Sequence[str], model: ChatModel, *, round: int | None
    ) -> tuple[str, list[str]]:
        """The goal and follow-ups as ``model`` reads them: as they are when together they take at most
        ``OBJECTIVE_SHARE`` of its budget, else each over its fair share (small ones keep their size) cut in the
        middle, head and tail kept, with a warning that says so (once per run for each cut). A cut, not a
        compaction: what the user wrote is kept word for word where it is kept, the same for every call site.
        """
        limit = max(MIN_ROOM, int(self.budget(model) * OBJECTIVE_SHARE))
        parts = [goal, *follow_ups]
        room = limit - FOLLOW_UP_TOKENS * len(follow_ups)
        if sum(len(part.encode("utf-8")) for part in parts) <= room:
            return goal, list(follow_ups)
        key = (model.name, limit, _digest(parts))
        known = self._objectives.get(key)
        if known is not None:
            return known[0], list(known[1])
        sizes = [self.tokens(model, part) for part in parts]
        fitted = list(parts)
        if sum(sizes) > room:
            shares = water_fill(sizes, max(room, MIN_ROOM))
            fitted = [
                self.truncate(p, model, n) if size > n else p for p, size, n in zip(parts, sizes, shares, strict=True)
            ]
            self._said_cut(model, parts, sizes, fitted, round)
        self._objectives[key] = (fitted[0], fitted[1:])
        return fitted[0], fitted[1:]

    def objective_text(self, goal: str, follow_ups: Sequence[str], model: ChatModel, *, round: int | None) -> str:
        """The goal with its follow-ups (``[User follow-up]: ...``), fitted for ``model`` (see ``objective``)."""
        fitted_goal, fitted_follow_ups = self.objective(goal, follow_ups, model, round=round)
        return compose_query(None, fitted_goal, fitted_follow_ups)

    def _said_cut(
        self, model: ChatModel, parts: list[str], sizes: list[int], fitted: list[str], round: int | None
    ) -> None:
        """One warning naming what was cut and by how much (not again for the same cut of the same texts)."""
        cuts = [
            (index, size, self.tokens(model, after))
            for index, (before, size, after) in enumerate(zip(parts, sizes, fitted, strict=True))
            if after != before
        ]
        key = (_digest(parts), _digest(fitted))
        if self.emit is None or not cuts or key in self._objectives_cut:
            return
        self._objectives_cut.add(key)
        labels = ["the goal" if index == 0 else f"follow-up {index}" for index, _, _ in cuts]
        subject = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
        verbs = "was too long" if len(cuts) == 1 else "were too long"
        details = "; ".join(
            f"{label} from {before:,} to {after:,} tokens"
            for label, (_, before, after) in zip(labels, cuts, strict=True)
        )
        window = self.window(model)
        message = (
            f"{subject[0].upper()}{subject[1:]} {verbs} for model {model.name!r} (its window: "
            f"{f'{window:,} tokens' if window is not None else 'unknown'}): cut in the middle to fit, head and tail "
            f"kept ({details})."
        )
        self.emit(RunWarning(message=message, round=round))

    # --- fitting one text

    async def fit(
        self,
        text: str,
        model: ChatModel,
        *,
        task: str,
        round: int | None,
        budget: int | None = None,
        step_id: str | None = None,
    ) -> str:
        """``text`` as is when it fits ``budget`` tokens of ``model`` (default: its whole budget), else
        compacted by the fast model, else truncated keeping head and tail.
        """
        budget = self.budget(model) if budget is None else max(budget, 1)
        if fits(model.entry, text, budget):
            return text
        compacted = await self._compact(text, model, budget, task=task, round=round, step_id=step_id)
        return compacted if compacted is not None else self.truncate(text, model, budget)

    def truncate(self, text: str, model: ChatModel, budget: int) -> str:
        """``text`` cut in the middle until it takes at most ``budget`` tokens of ``model``."""
        if fits(model.entry, text, budget):
            return text
        tokens = max(self.tokens(model, text), 1)
        limit = int(len(text) * budget / tokens * 0.95)
        while True:
            cut = truncate_middle(text, max(limit, 0))
            if limit <= 0 or fits(model.entry, cut, budget):
                return cut
            limit = int(limit * 0.85)

    async def _compact(
        self, text: str, model: ChatModel, budget: int, *, task: str, round: int | None, step_id: str | None
    ) -> str | None:
        """The fast model's shortening of ``text`` to ``budget`` tokens of ``model``; None when it fails."""
        if not self.registry.has_role("fast"):
            return None
        key = (model.name, hashlib.sha256(text.encode()).hexdigest())
        earlier = self._compacted.get(key)
        if earlier is not None and fits(model.entry, earlier, budget):
            return earlier
        fast = self._fast()
        fast_window = self.window(fast)
        reply_room = fast_window - self.budget(fast) if fast_window is not None else budget
        target = max(min(budget // 2, reply_room), 50)
        task = self.truncate(task, fast, COMPACTION_TASK_TOKENS)
        system = prompts.COMPACTION_SYSTEM.format(tokens=target, task=task)
        compacted = await self.ask_fast(system, text, purpose="compaction", round=round, step_id=step_id)
        if not compacted:
            return None
        if not fits(model.entry, compacted, budget):
            self._degraded("compaction", "the fast model's shortening is still too long", round, step_id)
            return None
        self._compacted[key] = compacted
        return compacted

    def _fast(self) -> ChatModel:
        entry = self.registry.for_role("fast")
        breaker = self.breakers.of(entry.name) if self.breakers is not None else None
        return ChatModel(entry, settings=self.settings, emit=self.emit, breaker=breaker)

    async def ask_fast(
        self, system: str, text: str, *, purpose: Purpose, round: int | None, step_id: str | None = None
    ) -> str:
        """The fast model's reply to ``system`` about ``text`` (cut to fit it first); "" when it fails: a
        shortening is an optimization, the caller falls back to cutting.
        """
        fast = self._fast()
        source = self.truncate(text, fast, self.room(fast, [{"role": "system", "content": system}]))
        try:
            result = await fast.chat(
                [{"role": "system", "content": system}, {"role": "user", "content": source}],
                purpose=purpose,
                round=round,
                step_id=step_id,
            )
        except RUN_ENDING:  # a wrong key or model ends the run: every later call would meet it too
            raise
        except Exception as exc:  # any other failure: the caller cuts instead, and says so
            self._degraded(purpose, f"{type(exc).__name__}: {exc}", round, step_id)
            return ""
        reply = result.content.strip()
        if not reply:
            self._degraded(purpose, "the fast model's reply was empty", round, step_id)
        return reply

    def _degraded(self, purpose: Purpose, cause: str, round: int | None, step_id: str | None) -> None:
        if self.emit is None:
            return
        if purpose == "history_summary":
            fallback = "the planner reads its latest part as written instead"
            what = "The conversation so far could not be summarized"
        else:
            what, fallback = "A text could not be compacted", "it is cut to fit instead (its head and tail kept)"
        self.emit(RunWarning(message=f"{what} ({cause}): {fallback}.", round=round, step_id=step_id))

    # --- fitting many texts

    async def fit_blocks(
        self, blocks: Sequence[str], model: ChatModel, *, room: int, task: str, round: int | None
    ) -> list[str]:
        """``blocks`` (step results, say) within ``room`` tokens together: each gets a fair share (small
        ones keep their size), and the ones over their share are compacted or truncated, at once.
        """
        separators = 2 * len(blocks)
        if sum(len(block.encode("utf-8")) for block in blocks) + separators <= room:
            return list(blocks)
        sizes = [self.tokens(model, block) for block in blocks]
        if sum(sizes) + separators <= room:
            return list(blocks)
        shares = water_fill(sizes, room - separators)
        slots = asyncio.Semaphore(self.settings.max_concurrency)

        async def fitted(block: str, size: int, share: int) -> str:
            if size <= share:
                return block
            async with slots:
                return await self.fit(block, model, budget=share, task=task, round=round)

        return list(await asyncio.gather(*(fitted(b, n, s) for b, n, s in zip(blocks, sizes, shares, strict=True))))

    async def fit_transcript(
        self,
        messages: list[dict[str, Any]],
        model: ChatModel,
        *,
        tools: Sequence[dict[str, Any]] | None,
        task: str,
        round: int | None,
        step_id: str | None,
    ) -> None:
        """Shorten a step agent's conversation in place until it fits: older observations first (compacted,
        else truncated), then every observation and the model's own turns, oldest first, and the step's own
        prompt last, harder.
        """
        if self.window(model) is None:  # nothing to fit into: not even counted
            return
        budget = self.budget(model)
        if request_tokens(model.entry, messages, tools) <= budget:
            return
        observations = [
            i
            for i, message in enumerate(messages)
            if i >= 2 and message.get("role") in ("tool", "user") and isinstance(message.get("content"), str)
        ]
        for index in observations[:-1]:
            content = messages[index]["content"]
            if content.startswith(SHORTENED_MARKER):
                continue
            target = max(self.tokens(model, content) // 4, 100)
            shorter = await self.fit(content, model, budget=target, task=task, round=round, step_id=step_id)
            messages[index] = {**messages[index], "content": SHORTENED_MARKER + shorter}
            if request_tokens(model.entry, messages, tools) <= budget:
                return
        said = [
            i
            for i, message in enumerate(messages)
            if i >= 2 and message.get("role") == "assistant" and isinstance(message.get("content"), str)
        ]
        for index in [*sorted([*observations, *said]), 1]:  # still over: cut harder, oldest first, the prompt last
            over = request_tokens(model.entry, messages, tools) - budget
            if over <= 0:
                return
            content = messages[index]["content"]
            keep = max(self.tokens(model, content) - over - MIN_REPLY_TOKENS // 8, 50)
            messages[index] = {**messages[index], "content": self.truncate(content, model, keep)}

    # --- the history

    def smart(self) -> ChatModel:
        """The smart model, which reads the history (in the planner's prompt)."""
        return ChatModel(self.registry.for_role("smart"), settings=self.settings)

    def history_limit(self) -> int:
        """Tokens the history may take in the planner's prompt."""
        return min(self.settings.planner_input_tokens, self.budget(self.smart()) // 3)


def _digest(texts: Sequence[str]) -> str:
    """A key for these texts that holds however long they are (their hash could collide, unnoticed)."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()
