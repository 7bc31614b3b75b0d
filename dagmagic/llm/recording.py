"""``RecordingBackend``: a model's calls recorded to a cassette as they are made, and the model cards a cassette
keeps of the models recorded (what a replay needs to know of them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from dagmagic.llm.cassette import Cassette, Interaction, RecordedChunk
from dagmagic.llm.litellm_backend import LiteLLMBackend
from dagmagic.llm.protocol import ChatRequest, ChatResponse, StreamChunk
from dagmagic.llm.registry import ModelEntry, ModelRegistry
from dagmagic.llm.replay_backend import ReplayLLM
from dagmagic.llm.replay_matching import RecordedCalls
from dagmagic.llm.tokens import context_window
from dagmagic.llm.wrapping import WrappingBackend, provider_backend
from dagmagic.models import ModelCard

__all__ = ["RecordingBackend", "model_card", "model_cards"]


class RecordingBackend(WrappingBackend):
    """Calls the inner backend and appends every call, with its reply, error or cancellation, to a cassette.

    ``entry``: the model recorded, named in the cassette's header at its first call (what a replay needs of it).
    """

    def __init__(self, entry: ModelEntry, cassette: Cassette, *, pool: RecordedCalls | None = None) -> None:
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
