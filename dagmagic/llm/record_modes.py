"""The cassette the settings name (``DAG_CASSETTE``, ``DAG_RECORD``) and what each record mode makes of a
registry: ``cassette_registry`` wraps its models to record to the cassette, replay from it, or both
(``new_episodes``), or, with ``record=none`` and no cassette, to refuse every provider call.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dagmagic import errors
from dagmagic.llm.cassette import Cassette
from dagmagic.llm.litellm_backend import LiteLLMBackend, router_deployments
from dagmagic.llm.protocol import Capabilities, ChatBackend, ChatRequest, ChatResponse, StreamChunk
from dagmagic.llm.recording import RecordingBackend
from dagmagic.llm.registry import ModelEntry, ModelRegistry
from dagmagic.llm.replay_backend import ReplayLLM
from dagmagic.llm.replay_matching import RecordedCalls, described_call
from dagmagic.llm.wrapping import WrappingBackend, provider_backend
from dagmagic.models import ModelCard
from dagmagic.settings import DagSettings

__all__ = ["RecordMode", "cassette_registry", "cassette_words", "forget_cassettes"]


RecordMode = Literal["once", "new_episodes", "none", "all"]


@dataclass
class _Tape:
    """A cassette as this process uses it: asked for with ``requested``, used as ``mode``."""

    cassette: Cassette
    pool: RecordedCalls
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
        tape = _TAPES[key] = _Tape(cassette, RecordedCalls(cassette), requested, mode)
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

    def __init__(
        self, entry: ModelEntry, pool: RecordedCalls, *, card: ModelCard | None, fallback: ChatBackend | None
    ) -> None:
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
            f"{described_call(request)} would call the provider of model {self.entry.name!r}, but DAG_RECORD=none "
            "allows no provider call and no cassette is set to answer it: set DAG_CASSETTE (or `%dag config "
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
