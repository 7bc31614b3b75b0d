"""Answering model calls from a recording, and recording them: the names of the replay family in one place.

- ``dagmagic.llm.replay_matching``: which recorded call answers a request, and the ``ReplayMismatch`` when none does;
- ``dagmagic.llm.replay_backend``: ``ReplayLLM``, one model answered from a cassette, and ``replay_registry``;
- ``dagmagic.llm.recording``: ``RecordingBackend``, calls recorded as they are made, and the models' cards;
- ``dagmagic.llm.record_modes``: the cassette the settings name, and what each record mode does with it.
"""

from __future__ import annotations

from dagmagic import errors
from dagmagic.llm.record_modes import RecordMode, cassette_registry, cassette_words, forget_cassettes
from dagmagic.llm.recording import RecordingBackend, model_card, model_cards
from dagmagic.llm.replay_backend import ReplayLLM, replay_registry

__all__ = [
    "RecordMode",
    "RecordingBackend",
    "ReplayLLM",
    "ReplayMismatch",
    "cassette_registry",
    "cassette_words",
    "forget_cassettes",
    "model_card",
    "model_cards",
    "replay_registry",
]

ReplayMismatch = errors.ReplayMismatch
