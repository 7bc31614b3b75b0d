"""Which recorded call answers a request in a replay (``RecordedCalls``), and what a replay says when none does.

A replay answers each request with the recorded call it matches (``dagmagic.llm.cassette.request_key``): the
first not yet used of those with the same key, whatever the order parallel steps ask in. A request that matches
none gets a ``ReplayMismatch`` naming the call and showing the closest recorded one and what changed.
"""

from __future__ import annotations

import difflib
import json
import threading
from typing import Any

from dagmagic import errors
from dagmagic.llm.cassette import Cassette, Interaction, RequestKey, normalized_messages, request_key, tool_names
from dagmagic.llm.protocol import ChatRequest

__all__ = ["RecordedCalls", "described_call", "replay_mismatch"]

_DIFF_LINES = 40
_COMPARED_CHARS = 100_000
"""How much of each text of a call the closest-call search and its diff look at: a recorded tool output of
100 MB would cost seconds there, and a diff of 40 lines shows no more of it."""


class RecordedCalls:
    """The recorded calls of one cassette, and which of them a replay has used (shared by its models)."""

    def __init__(self, cassette: Cassette) -> None:
        self.cassette = cassette
        self._used: set[int] = set()
        self._lock = threading.Lock()
        self._by_key: dict[RequestKey, list[int]] = {}
        """Recorded calls by key (without ``asked``), in recorded order: a key is computed once per call."""
        self._indexed = 0
        self.diverged: errors.ReplayMismatch | None = None
        """The first request no recording answered: every later strict request is refused with it, so that
        whichever call ends the run, it names where the run first left the recording."""

    def _index(self) -> None:
        calls = self.cassette.interactions
        for index in range(self._indexed, len(calls)):
            self._by_key.setdefault(_loose(calls[index].key), []).append(index)
        self._indexed = len(calls)

    def take(self, key: RequestKey) -> Interaction | None:
        """The first unused call recorded under ``key``, marked used: one of the same step first, then one a
        subrun's step made (a run keeps those as ``s2/s1``: the subrun of step s2, its step s1).
        """
        with self._lock:
            self._index()
            candidates = [i for i in self._by_key.get(_loose(key), ()) if i not in self._used and self._fits(i, key)]
            calls = self.cassette.interactions
            exact = [i for i in candidates if calls[i].step_id == key.step_id]
            if not candidates:
                return None
            chosen = (exact or candidates)[0]
            self._used.add(chosen)
            return calls[chosen]

    def recorded(self, key: RequestKey) -> list[Interaction]:
        """Every call recorded under ``key``, used or not."""
        with self._lock:
            self._index()
            calls = self.cassette.interactions
            return [calls[i] for i in self._by_key.get(_loose(key), ()) if self._fits(i, key)]

    def _fits(self, index: int, key: RequestKey) -> bool:
        recorded = self.cassette.interactions[index]
        if recorded.asked and recorded.asked != key.asked:
            return False
        if recorded.max_tokens is not None and recorded.max_tokens != key.max_tokens:
            return False
        return _same_step(recorded.step_id, key.step_id)

    def record(self, interaction: Interaction) -> None:
        """Append a call just made (``record=new_episodes``), as used."""
        with self._lock:
            self._used.add(len(self.cassette.interactions))
            self.cassette.append(interaction)

    def unused(self) -> list[Interaction]:
        """The recorded calls no request has taken yet."""
        with self._lock:
            return [item for index, item in enumerate(self.cassette.interactions) if index not in self._used]


def _loose(key: RequestKey) -> RequestKey:
    """The key without what ``_fits`` checks: what else was asked, its cap, and the step (a path in a subrun)."""
    return key.model_copy(update={"asked": "", "step_id": None, "max_tokens": None})


def _same_step(recorded: str | None, asked: str | None) -> bool:
    """Whether a call recorded for step ``recorded`` can answer one asked for step ``asked``: the same step, or
    the subrun's call a run keeps under its step's path (``s2`` for the subrun's own calls, ``s2/s1`` for its
    step s1's); the messages, compared too, tell which.
    """
    if recorded == asked or recorded is None:
        return recorded == asked
    if asked is None:
        return True
    return recorded.rsplit("/", 1)[-1] == asked and "/" in recorded


def replay_mismatch(calls: RecordedCalls, model: str, request: ChatRequest) -> errors.ReplayMismatch:
    """The error for a request no recorded call answers: the call, and the closest recorded one and what changed
    (or that it was asked more often than recorded, or that no call is left).
    """
    asked = request_key(model, request)
    candidates = calls.unused() or list(calls.cassette.interactions)
    closest = _closest(candidates, asked, request)
    where = described_call(request)
    if closest is None:
        text = f"{where}: the recording has no calls left to answer it."
    else:
        repeated = calls.recorded(asked)
        if repeated:
            text = f"{where} was asked more often than recorded ({len(repeated)} time(s))."
        else:
            text = f"{where} was not recorded. The closest recorded call ({closest.describe()}) differs:\n"
            text += _changes(closest, asked, request)
    return errors.ReplayMismatch(text, model=model, purpose=request.purpose, step_id=request.step_id)


def described_call(request: ChatRequest) -> str:
    """The call in words: "The 'step' call of step s1 in round 2"."""
    parts = [f"The {request.purpose!r} call"]
    if request.step_id:
        parts.append(f"of step {request.step_id}")
    if request.round:
        parts.append(f"in round {request.round}")
    return " ".join(parts)


def _closest(candidates: list[Interaction], asked: RequestKey, request: ChatRequest) -> Interaction | None:
    if not candidates:
        return None
    text = _message_text(request.messages)

    def likeness(item: Interaction) -> tuple[int, int, float]:
        same_place = int(item.purpose == asked.purpose) + int(item.step_id == asked.step_id)
        ratio = difflib.SequenceMatcher(None, _message_text(item.messages), text, autojunk=False).quick_ratio()
        return (same_place, int(item.model == asked.model), ratio)

    return max(candidates, key=likeness)


def _message_text(messages: list[dict[str, Any]]) -> str:
    lines = []
    for message in normalized_messages(_clipped(messages)):
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        lines.append(f"[{message.get('role', '?')}]")
        lines.extend(content.splitlines())
        if message.get("tool_calls"):
            lines.append(json.dumps(message["tool_calls"], ensure_ascii=False, sort_keys=True))
    return "\n".join(lines)


def _clipped(value: Any) -> Any:
    """``value`` with each text cut at ``_COMPARED_CHARS``, saying how much was left out."""
    if isinstance(value, str):
        if len(value) <= _COMPARED_CHARS:
            return value
        return f"{value[:_COMPARED_CHARS]}… ({len(value) - _COMPARED_CHARS:,} more characters not compared)"
    if isinstance(value, dict):
        return {key: _clipped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clipped(item) for item in value]
    return value


def _changes(recorded: Interaction, asked: RequestKey, request: ChatRequest) -> str:
    changes = []
    if recorded.model != asked.model:
        changes.append(f"model: recorded {recorded.model!r}, now {asked.model!r}")
    if recorded.purpose != asked.purpose or recorded.step_id != asked.step_id:
        changes.append(f"call: recorded {recorded.describe()}")
    now_tools = tool_names(request.tools)
    if now_tools != recorded.tool_names:
        added = sorted(set(now_tools) - set(recorded.tool_names))
        removed = sorted(set(recorded.tool_names) - set(now_tools))
        changes.append(f"tools: added {added or 'none'}, removed {removed or 'none'}")
    elif recorded.asked and recorded.asked != asked.asked:
        changes.append("tools or options: the same tool names, but their schemas, the tool choice, the response "
                       "format or the temperature changed")  # fmt: skip
    if recorded.max_tokens is not None and recorded.max_tokens != asked.max_tokens:
        changes.append(f"max_tokens: recorded {recorded.max_tokens}, now {asked.max_tokens} (DAG_LLM_MAX_TOKENS)")
    before = _message_text(recorded.messages).splitlines()
    after = _message_text(request.messages).splitlines()
    diff = list(difflib.unified_diff(before, after, "recorded", "now", n=1, lineterm=""))
    if diff:
        shown = diff[:_DIFF_LINES]
        if len(diff) > _DIFF_LINES:
            shown.append(f"… ({len(diff) - _DIFF_LINES} more lines of difference)")
        changes.append("messages:\n" + "\n".join(shown))
    return "\n".join(changes) or "(nothing a replay compares differs: it was recorded fewer times)"
