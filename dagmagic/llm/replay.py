"""Answering model calls from a recording, and recording them: ``ReplayLLM`` and ``RecordingBackend``.

A replay answers each request with the recorded call it matches (``dagmagic.llm.cassette.request_key``): the
first not yet used of those with the same key, whatever the order parallel steps ask in. A request that matches
none raises ``ReplayMismatch``, naming the call and showing the closest recorded one and what changed; or, not
strict, goes to a fallback backend (``record=new_episodes`` records it there).
"""

from __future__ import annotations

import asyncio
import difflib
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dagmagic import errors
from dagmagic.llm.cassette import (
    Cassette,
    Interaction,
    RecordedChunk,
    RequestKey,
    normalized_messages,
    request_key,
    tool_names,
)
from dagmagic.llm.litellm_backend import LiteLLMBackend, router_deployments
from dagmagic.llm.protocol import Capabilities, ChatBackend, ChatRequest, ChatResponse, StreamChunk, response_pieces
from dagmagic.llm.registry import ModelEntry, ModelRegistry
from dagmagic.llm.tokens import approximate_tokens, context_window
from dagmagic.llm.wrapping import WrappingBackend, provider_backend
from dagmagic.models import ModelCard
from dagmagic.settings import DagSettings

__all__ = ["RecordingBackend", "ReplayLLM", "ReplayMismatch", "model_card", "model_cards"]

ReplayMismatch = errors.ReplayMismatch

_CANCEL_GRACE = 5.0
"""Seconds a replayed call that was cancelled when recorded waits, after its recorded pieces and as long as it
ran when recorded (a step's timeout, say, cancels it again after as long), for the run to cancel it again before
saying the replay diverged (the run did not move on as it did)."""
_DIFF_LINES = 40


class _Pool:
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
    """The key without what ``_fits`` checks: what else was asked, and the step (a path in a subrun)."""
    return key.model_copy(update={"asked": "", "step_id": None})


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


class ReplayLLM:
    """A ``ChatBackend`` answering one model's calls from recorded ones (see the module docstring).

    ``timing``: None or 0 replays at once; 1.0 with the recorded delays (first piece, pieces of a stream);
    0.1 ten times faster. ``fallback``: where a request with no recording goes when not ``strict``.
    """

    def __init__(
        self,
        cassette: Cassette | _Pool,
        model: str,
        *,
        card: ModelCard | None = None,
        strict: bool = True,
        fallback: ChatBackend | None = None,
        timing: float | None = None,
        counter: ChatBackend | None = None,
    ) -> None:
        self._pool = cassette if isinstance(cassette, _Pool) else _Pool(cassette)
        self.model = model
        self.card = card or self._pool.cassette.models.get(model)
        self.strict = strict
        self.fallback = fallback
        self.timing = timing or 0.0
        self._counter = counter
        self.replayed = 0
        """Requests answered from the recording."""
        self.passed_on = 0
        """Requests the recording had no answer for, sent to the fallback."""

    @classmethod
    def from_file(cls, path: Any, model: str | None = None, **options: Any) -> ReplayLLM:
        """A replay of the cassette file ``path`` for ``model`` (default: its only model)."""
        cassette = Cassette.load(path)
        names = sorted(cassette.models) or sorted({item.model for item in cassette.interactions})
        if model is None:
            if len(names) != 1:
                raise errors.ConfigurationError(f"the cassette {path} holds calls of models {names}: pass model=")
            model = names[0]
        return cls(cassette, model, **options)

    @property
    def cassette(self) -> Cassette:
        """The recording answered from."""
        return self._pool.cassette

    def save(self, path: Any) -> Any:
        """Write the recording to the cassette file ``path`` (JSON lines, keys masked)."""
        return self.cassette.save(path)

    # --- what the recorded model was

    def capabilities(self, model: str) -> Capabilities:
        """The recorded model's, so each call is made at the level it was recorded at."""
        if self.card is not None:
            return Capabilities.of(tuple(self.card.capabilities))
        if self.fallback is not None:
            return self.fallback.capabilities(model)
        return Capabilities.of(("tool_call", "json_mode", "stream"))

    def count_tokens(self, model: str, text: str) -> int:
        """As the recorded model counted: litellm's counter for a litellm model, else ``approximate_tokens``."""
        if self._counter is not None and callable(counter := getattr(self._counter, "count_tokens", None)):
            return int(counter(model, text))
        if self.card is not None and self.card.counter == "litellm":
            return LiteLLMBackend().count_tokens(self.card.model or model, text)
        return approximate_tokens(text)

    def context_window(self, model: str) -> int | None:
        """The recorded model's window."""
        return self.card.context_window if self.card is not None else None

    # --- answering

    def _match(self, request: ChatRequest) -> Interaction | None:
        refuse = self.strict or self.fallback is None
        if refuse and self._pool.diverged is not None:
            raise self._pool.diverged
        interaction = self._pool.take(request_key(self.model, request))
        if interaction is not None:
            return interaction
        if refuse:
            self._pool.diverged = self._mismatch(request)
            raise self._pool.diverged
        return None

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The recorded reply (or error) of the matching call."""
        interaction = self._match(request)
        if interaction is None:
            self.passed_on += 1
            assert self.fallback is not None
            return await self.fallback.complete(request)
        self.replayed += 1
        await self._wait(interaction.latency)
        if interaction.outcome == "error":
            raise _recorded_error(interaction, self.model)
        if interaction.outcome == "cancelled":
            await self._await_cancel(interaction, request)
        return _response(interaction)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The recorded pieces of the matching call, then its whole reply."""
        interaction = self._match(request)
        if interaction is None:
            self.passed_on += 1
            assert self.fallback is not None
            async for chunk in self.fallback.stream(request):
                yield chunk
            return
        self.replayed += 1
        if interaction.outcome == "error":  # after the pieces that came first, if any: it is not retried then
            async for chunk in self._pieces(interaction.chunks or []):
                yield chunk
            await self._wait(interaction.latency - max((chunk.at for chunk in interaction.chunks or []), default=0))
            raise _recorded_error(interaction, self.model)
        response = _response(interaction)
        chunks = interaction.chunks if interaction.chunks is not None else _spread(response, interaction.latency)
        async for chunk in self._pieces(chunks):
            yield chunk
        if interaction.outcome == "cancelled":
            await self._await_cancel(interaction, request)
        yield StreamChunk(final=response)

    async def _pieces(self, chunks: list[RecordedChunk]) -> AsyncIterator[StreamChunk]:
        """The recorded pieces, each when it came (``timing``)."""
        previous = 0.0
        for recorded in chunks:
            await self._wait(recorded.at - previous)
            previous = recorded.at
            yield StreamChunk(text=recorded.text, tool_calls=recorded.tool_calls)

    async def _wait(self, seconds: float) -> None:
        if self.timing and seconds > 0:
            await asyncio.sleep(seconds * self.timing)

    async def _await_cancel(self, interaction: Interaction, request: ChatRequest) -> None:
        recorded_time_passed = bool(self.timing)  # replayed with its delays: as long as it ran has passed
        await asyncio.sleep(_CANCEL_GRACE + (0.0 if recorded_time_passed else interaction.latency))
        raise errors.ReplayMismatch(
            f"{interaction.describe()}: the recorded run moved on before this call's reply came (it was cancelled); "
            "this replay did not, so the recording has no reply for it.",
            model=self.model,
            purpose=request.purpose,
            step_id=request.step_id,
        )

    def _mismatch(self, request: ChatRequest) -> errors.ReplayMismatch:
        asked = request_key(self.model, request)
        candidates = self._pool.unused() or list(self._pool.cassette.interactions)
        closest = _closest(candidates, asked, request)
        where = _where(request)
        if closest is None:
            text = f"{where}: the recording has no calls left to answer it."
        else:
            repeated = self._pool.recorded(asked)
            if repeated:
                text = f"{where} was asked more often than recorded ({len(repeated)} time(s))."
            else:
                text = f"{where} was not recorded. The closest recorded call ({closest.describe()}) differs:\n"
                text += _changes(closest, asked, request)
        return errors.ReplayMismatch(text, model=self.model, purpose=request.purpose, step_id=request.step_id)

    def __repr__(self) -> str:
        return f"ReplayLLM({self.model!r}, {len(self._pool.cassette)} recorded calls, replayed={self.replayed})"


def _where(request: ChatRequest) -> str:
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
    for message in normalized_messages(messages):
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        lines.append(f"[{message.get('role', '?')}]")
        lines.extend(content.splitlines())
        if message.get("tool_calls"):
            lines.append(json.dumps(message["tool_calls"], ensure_ascii=False, sort_keys=True))
    return "\n".join(lines)


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
    before = _message_text(recorded.messages).splitlines()
    after = _message_text(request.messages).splitlines()
    diff = list(difflib.unified_diff(before, after, "recorded", "now", n=1, lineterm=""))
    if diff:
        shown = diff[:_DIFF_LINES]
        if len(diff) > _DIFF_LINES:
            shown.append(f"… ({len(diff) - _DIFF_LINES} more lines of difference)")
        changes.append("messages:\n" + "\n".join(shown))
    return "\n".join(changes) or "(nothing a replay compares differs: it was recorded fewer times)"


def _response(interaction: Interaction) -> ChatResponse:
    return interaction.response or ChatResponse()


def _spread(response: ChatResponse, latency: float) -> list[RecordedChunk]:
    """A reply recorded whole, as pieces spread evenly over its latency."""
    pieces = response_pieces(response)
    step = latency / max(len(pieces), 1)
    return [
        RecordedChunk(at=step * (number + 1), text=piece.text, tool_calls=piece.tool_calls)
        for number, piece in enumerate(pieces)
    ]


def _recorded_error(interaction: Interaction, model: str) -> BaseException:
    """The error the recorded call met, raised again as the same kind of dagmagic error."""
    kind, _, message = (interaction.error or "ProviderError: the call failed").partition(": ")
    message = message.split("\nHint:")[0]
    cls = getattr(errors, kind, None)
    unreplayable = (errors.ReplayMismatch, errors.ProviderUnavailableError, errors.ProviderError)
    if isinstance(cls, type) and issubclass(cls, errors.ProviderError) and cls not in unreplayable:
        said = message.removeprefix(f"{cls.kind} for model {interaction.model!r}: ").removeprefix(f"{cls.kind}: ")
        return cls(said, model=model)  # in the provider's words: the class says its kind and model again
    return errors.ServerError(f"{kind}: {message}", model=model)


class RecordingBackend(WrappingBackend):
    """Calls the inner backend and appends every call, with its reply, error or cancellation, to a cassette.

    ``entry``: the model recorded, named in the cassette's header at its first call (what a replay needs of it).
    """

    def __init__(self, entry: ModelEntry, cassette: Cassette, *, pool: _Pool | None = None) -> None:
        super().__init__(entry.backend)
        self.entry = entry
        self.cassette = cassette
        self.model = entry.name
        self._pool = pool
        self._carded = False

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The inner reply, recorded."""
        started = time.monotonic()
        try:
            response = await self.inner.complete(request)
        except asyncio.CancelledError:
            self._record(request, started, cancelled=True)
            raise
        except Exception as exc:
            self._record(request, started, error=exc)
            raise
        self._record(request, started, response=response)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The inner stream, each piece recorded with when it came."""
        started = time.monotonic()
        chunks: list[RecordedChunk] = []
        final: ChatResponse | None = None
        try:
            async for chunk in self.inner.stream(request):
                if chunk.final is not None:
                    final = chunk.final
                else:
                    at = time.monotonic() - started
                    chunks.append(RecordedChunk(at=at, text=chunk.text, tool_calls=chunk.tool_calls))
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            self._record(request, started, chunks=chunks, response=_joined(chunks, final), cancelled=True)
            raise
        except Exception as exc:
            self._record(request, started, chunks=chunks, error=exc)
            raise
        self._record(request, started, chunks=chunks, response=_joined(chunks, final))

    def _record(self, request: ChatRequest, started: float, **outcome: Any) -> None:
        if not self._carded:
            self.cassette.add_models([model_card(self.entry)])
            self._carded = True
        stream = "chunks" in outcome
        latency = time.monotonic() - started
        interaction = Interaction.of(self.model, request, stream=stream, latency=latency, **outcome)
        if self._pool is not None:
            self._pool.record(interaction)  # recorded by this request: not an answer for another one
        else:
            self.cassette.append(interaction)


def _joined(chunks: list[RecordedChunk], final: ChatResponse | None) -> ChatResponse:
    response = final or ChatResponse()
    if not response.content and any(chunk.text for chunk in chunks):
        response = response.model_copy(update={"content": "".join(chunk.text for chunk in chunks)})
    return response


def model_card(entry: ModelEntry) -> ModelCard:
    """What a replay needs to know of ``entry``: its name, roles, capabilities, window and token counter."""
    backend = provider_backend(entry.backend) or entry.backend
    litellm_counted = isinstance(backend, LiteLLMBackend) or (
        isinstance(backend, ReplayLLM) and backend.card is not None and backend.card.counter == "litellm"
    )
    capabilities = entry.capabilities
    return ModelCard(
        name=entry.name,
        model=entry.target,
        roles=list(entry.roles),
        capabilities=[name for name, supported in capabilities.model_dump().items() if supported],
        context_window=context_window(entry),
        counter="litellm" if litellm_counted else "approximate",
    )


def model_cards(registry: ModelRegistry) -> list[ModelCard]:
    """``model_card`` of every model of ``registry``."""
    return [model_card(entry) for entry in registry]


def replay_registry(
    cassette: Cassette,
    *,
    strict: bool = True,
    fallback: ModelRegistry | None = None,
    timing: float | None = None,
) -> ModelRegistry:
    """A registry of the cassette's models, each answered from it (see ``dagmagic.testing.replay``)."""
    pool = _Pool(cassette)
    cards = dict(cassette.models)
    for interaction in cassette.interactions:  # a recording without its models' cards: what its calls say
        cards.setdefault(interaction.model, _inferred_card(cassette, interaction.model))
    registry = ModelRegistry()
    taken: set[str] = set()
    for card in cards.values():
        backup = _fallback_for(fallback, card) if fallback is not None else None
        backend = ReplayLLM(pool, card.name, card=card, strict=strict, fallback=backup, timing=timing)
        roles = [role for role in card.roles if role not in taken]
        taken.update(roles)
        registry.register(card.name, backend, roles=roles, context_window=card.context_window)
    return registry


def _inferred_card(cassette: Cassette, model: str) -> ModelCard:
    """What a model's recorded calls say it supported: native tools if any call offered them, JSON mode if any
    call asked for it.
    """
    calls = [item for item in cassette.interactions if item.model == model]
    capabilities = ["stream"]
    if any(item.tool_names or item.structured_level == "tool_call" for item in calls):
        capabilities.append("tool_call")
    if any(item.response_format or item.structured_level == "json_mode" for item in calls):
        capabilities.append("json_mode")
    return ModelCard(name=model, model=model, capabilities=capabilities)


def _fallback_for(fallback: ModelRegistry, card: ModelCard) -> ChatBackend:
    if card.name in fallback:
        entry = fallback.get(card.name)
    else:
        entry = fallback.for_role(card.roles[0] if card.roles else None)
    return _Retargeted(entry)


class _Retargeted(WrappingBackend):
    """Another registry's model answering for a recorded one: asked for its own target, with its own options."""

    def __init__(self, entry: ModelEntry) -> None:
        super().__init__(entry.backend)
        self.entry = entry

    def _own(self, request: ChatRequest) -> ChatRequest:
        return request.model_copy(update={"model": self.entry.target, "options": self.entry.options})

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return await self.inner.complete(self._own(request))

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        return self.inner.stream(self._own(request))


RecordMode = Literal["once", "new_episodes", "none", "all"]


@dataclass
class _Tape:
    """A cassette as this process uses it: asked for with ``requested``, used as ``mode``."""

    cassette: Cassette
    pool: _Pool
    requested: RecordMode
    mode: RecordMode


_TAPES: dict[Path, _Tape] = {}
"""The cassettes this process has opened: a cassette answers every run of the process from one pool, so two
runs asking the same thing get the two recorded answers in order."""
_TAPES_LOCK = threading.Lock()


def _tape(path: Path, requested: RecordMode) -> _Tape:
    """The cassette at ``path`` as this process uses it, decided at its first use here with that mode: ``once``
    replays when the file exists then, else records (a notebook records all its cells in its first session and
    replays them in every later one); ``all`` empties the file and records; ``new_episodes`` replays what it
    holds and records the rest; ``none`` replays.
    """
    key = path.resolve()
    with _TAPES_LOCK:
        known = _TAPES.get(key)
        if known is not None and known.requested == requested:
            return known
        record_all = requested == "all" or (requested in ("once", "new_episodes") and not path.exists())
        if requested == "all":
            path.unlink(missing_ok=True)
        cassette = Cassette(path=path) if record_all else Cassette.load(path)
        mode: RecordMode = "all" if record_all else "none" if requested == "once" else requested
        tape = _TAPES[key] = _Tape(cassette, _Pool(cassette), requested, mode)
        return tape


def cassette_words(settings: DagSettings) -> str:
    """What the ``cassette`` and ``record`` settings now mean for the next runs, in words."""
    path = settings.cassette_path
    if path is None:
        if settings.record == "none":
            return "No cassette is set: with record=none every call to a provider is refused (ScriptedLLM answers)."
        return "Model calls are neither recorded nor replayed."
    known = _TAPES.get(path.resolve())
    if known is not None and known.requested == settings.record:
        mode = known.mode
    elif settings.record in ("once", "new_episodes") and not path.exists():
        mode = "all"
    else:
        mode = "none" if settings.record == "once" else settings.record
    if mode == "all":
        return f"The next runs' model calls are recorded to {path} (record={settings.record})."
    try:
        held = len(known.cassette) if known is not None else len(Cassette.load(path))
    except errors.ConfigurationError as exc:
        return f"{exc}."
    if mode == "new_episodes":
        return (
            f"{path} holds {held} recorded calls: those the next runs make again are replayed, the others made "
            "and recorded."
        )
    return (
        f"{path} holds {held} recorded calls: the next runs are answered from it with no provider call "
        f"(record={settings.record}); a call it does not hold ends the run (ReplayMismatch)."
    )


def forget_cassettes() -> None:
    """Forget the cassettes this process opened (tests; a kernel re-deciding ``once``)."""
    with _TAPES_LOCK:
        _TAPES.clear()


def cassette_registry(models: ModelRegistry, settings: DagSettings) -> ModelRegistry:
    """``models`` recording to or replaying from the cassette the settings name (``DAG_CASSETTE``,
    ``DAG_RECORD``); ``models`` itself without one.
    """
    path = settings.cassette_path
    if path is None:
        if settings.record == "none":  # no provider may be called (CI): refused at the call, naming the model
            return models.wrapped(lambda entry: _Refusing(entry) if _calls_a_provider(entry) else entry.backend)
        return models
    tape = _tape(path, settings.record)

    def wrap(entry: ModelEntry) -> ChatBackend:
        if tape.mode == "all":
            return RecordingBackend(entry, tape.cassette, pool=tape.pool)
        recorder = RecordingBackend(entry, tape.cassette, pool=tape.pool) if tape.mode == "new_episodes" else None
        return _Replaying(entry, tape.pool, card=tape.cassette.models.get(entry.name), fallback=recorder)

    return models.wrapped(wrap)


class _Replaying(ReplayLLM, WrappingBackend):
    """A registry's own model answered from a cassette: it counts tokens and guards its window as the model
    itself does, and (``new_episodes``) records what the cassette lacks by calling it.
    """

    def __init__(self, entry: ModelEntry, pool: _Pool, *, card: ModelCard | None, fallback: ChatBackend | None) -> None:
        WrappingBackend.__init__(self, entry.backend)
        ReplayLLM.__init__(
            self, pool, entry.name, card=card, strict=fallback is None, fallback=fallback, counter=entry.backend
        )
        self.calls_inner = fallback is not None

    def capabilities(self, model: str) -> Capabilities:
        return self.inner.capabilities(model)

    def context_window(self, model: str) -> int | None:
        window = getattr(self.inner, "context_window", None)
        return window(model) if callable(window) else None


def _calls_a_provider(entry: ModelEntry) -> bool:
    """Whether a call to ``entry`` may send a request: a litellm model, unless litellm's ``mock_response``
    answers it (in its options, or in every deployment of its router group), which sends none.
    """
    backend = provider_backend(entry.backend)
    if not isinstance(backend, LiteLLMBackend):
        return False
    if backend.router is None:
        return "mock_response" not in entry.options
    group = [d for d in router_deployments(backend.router) if d.get("model_name") == entry.target]
    return not group or any("mock_response" not in d.get("litellm_params", {}) for d in group)


class _Refusing(WrappingBackend):
    """A provider's model under ``record=none`` with no cassette: every call is refused, none is made."""

    calls_inner = False

    def __init__(self, entry: ModelEntry) -> None:
        super().__init__(entry.backend)
        self.entry = entry

    def _refusal(self, request: ChatRequest) -> errors.ReplayMismatch:
        return errors.ReplayMismatch(
            f"{_where(request)} would call the provider of model {self.entry.name!r}, but DAG_RECORD=none allows "
            "no provider call and no cassette is set to answer it: set DAG_CASSETTE (or `%dag config "
            "cassette=PATH`) to the file recorded with record=once.",
            model=self.entry.name,
            purpose=request.purpose,
            step_id=request.step_id,
        )

    async def complete(self, request: ChatRequest) -> ChatResponse:
        raise self._refusal(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        raise self._refusal(request)
        yield StreamChunk()  # pragma: no cover - makes this an async generator
