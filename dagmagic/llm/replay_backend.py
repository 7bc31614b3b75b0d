"""``ReplayLLM``: a ``ChatBackend`` answering one model's calls from recorded ones, and ``replay_registry``, a
registry of a cassette's models each answered from it.

Each request is answered with the recorded call it matches (``dagmagic.llm.replay_matching``); a request that
matches none raises ``ReplayMismatch`` or, not strict, goes to a fallback backend (``record=new_episodes``
records it there).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from dagmagic import errors
from dagmagic.llm.cassette import Cassette, Interaction, RecordedChunk, request_key
from dagmagic.llm.litellm_backend import LiteLLMBackend
from dagmagic.llm.protocol import Capabilities, ChatBackend, ChatRequest, ChatResponse, StreamChunk, response_pieces
from dagmagic.llm.registry import ModelEntry, ModelRegistry
from dagmagic.llm.replay_matching import RecordedCalls, replay_mismatch
from dagmagic.llm.tokens import approximate_tokens
from dagmagic.llm.wrapping import WrappingBackend
from dagmagic.models import ModelCard

__all__ = ["ReplayLLM", "replay_registry"]

_CANCEL_GRACE = 5.0
"""Seconds a replayed call that was cancelled when recorded waits, after its recorded pieces and as long as it
ran when recorded (a step's timeout, say, cancels it again after as long), for the run to cancel it again before
saying the replay diverged (the run did not move on as it did)."""


class ReplayLLM:
    """A ``ChatBackend`` answering one model's calls from recorded ones (see the module docstring).

    ``timing``: None or 0 replays at once; 1.0 with the recorded delays (first piece, pieces of a stream);
    0.1 ten times faster. ``fallback``: where a request with no recording goes when not ``strict``.
    """

    def __init__(
        self,
        cassette: Cassette | RecordedCalls,
        model: str,
        *,
        card: ModelCard | None = None,
        strict: bool = True,
        fallback: ChatBackend | None = None,
        timing: float | None = None,
        counter: ChatBackend | None = None,
    ) -> None:
        self._pool = cassette if isinstance(cassette, RecordedCalls) else RecordedCalls(cassette)
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
        return replay_mismatch(self._pool, self.model, request)

    def __repr__(self) -> str:
        return f"ReplayLLM({self.model!r}, {len(self._pool.cassette)} recorded calls, replayed={self.replayed})"


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


def replay_registry(
    cassette: Cassette,
    *,
    strict: bool = True,
    fallback: ModelRegistry | None = None,
    timing: float | None = None,
) -> ModelRegistry:
    """A registry of the cassette's models, each answered from it (see ``dagmagic.testing.replay``)."""
    pool = RecordedCalls(cassette)
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
