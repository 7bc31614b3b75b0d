"""The models dagmagic picks when none is chosen: from the first provider key found, else a local Ollama.

The rule: a ``DAG_*_MODEL`` variable (or a model given in code or to the magic) is the user's choice, and
nothing is added to it. With none, the first of these that is there decides:

1. ``OPENAI_API_KEY``     -> OpenAI's sol, terra and luna tiers
2. ``ANTHROPIC_API_KEY``  -> Claude Opus, Sonnet and Haiku
3. ``GEMINI_API_KEY``     -> Google's rolling ``gemini-*-latest`` aliases
4. an Ollama server answering ``/api/tags`` (``OLLAMA_API_BASE``, else ``OLLAMA_HOST``, else
   ``127.0.0.1:11434``) -> its first chat model, for every role

Only step 4 touches the network, with a short timeout, and only when no key is set.
"""

from __future__ import annotations

import http.client
import json
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

__all__ = [
    "KEY_DEFAULTS",
    "OLLAMA_PROBE_TIMEOUT",
    "DefaultModels",
    "default_models",
    "ollama_base_url",
    "ollama_models",
]

KEY_DEFAULTS: tuple[tuple[str, dict[str, str]], ...] = (
    (
        # The newest model of each tier in litellm's map; the GPT-4.1 family it replaces is retired there
        # (gpt-4.1-nano since 2026-10-23, gpt-4.1 and gpt-4.1-mini on 2027-01-14).
        "OPENAI_API_KEY",
        {"smart": "openai/gpt-6.1-sol", "general": "openai/gpt-6.1-terra", "fast": "openai/gpt-6-luna"},
    ),
    (
        # Not the Claude models that think by default (sonnet-5, opus-5): Anthropic refuses a forced tool
        # choice while thinking is on, and forced tool calls are how the planner and analyzer get JSON.
        "ANTHROPIC_API_KEY",
        {
            "smart": "anthropic/claude-opus-4-7",
            "general": "anthropic/claude-sonnet-4-6",
            "fast": "anthropic/claude-haiku-4-5",
        },
    ),
    (
        # Google keeps these aliases on its current models, so they outlive a pinned version's retirement.
        "GEMINI_API_KEY",
        {
            "smart": "gemini/gemini-pro-latest",
            "general": "gemini/gemini-flash-latest",
            "fast": "gemini/gemini-flash-lite-latest",
        },
    ),
)
"""The provider key variables in the order they are looked for, and the models each one brings."""

OLLAMA_PROBE_TIMEOUT = 0.5
"""Seconds the probe waits to connect, and for each read: a closed port answers at once, a silent host not."""

_OLLAMA_DEFAULT_PORT = 11434
_OLLAMA_REPLY_LIMIT = 1_000_000
_EMBEDDING_NAMES = ("embed", "minilm", "bge-")
_EMBEDDING_FAMILIES = {"bert", "nomic-bert"}


@dataclass(frozen=True)
class DefaultModels:
    """Models picked for the user, and why."""

    roles: dict[str, str]
    """Role -> litellm model string."""
    chosen_because: str
    """What decided, e.g. "OPENAI_API_KEY is set"."""
    options: dict[str, Any] = field(default_factory=dict)
    """litellm keywords for every call (the Ollama server's ``api_base``)."""


def default_models(environ: Mapping[str, str], probe_timeout: float = OLLAMA_PROBE_TIMEOUT) -> DefaultModels | None:
    """The models the first key in ``environ`` (else a local Ollama) brings; None when there is neither."""
    for variable, roles in KEY_DEFAULTS:
        if environ.get(variable, "").strip():
            return DefaultModels(dict(roles), f"{variable} is set")
    base_url = ollama_base_url(environ)
    served = ollama_models(base_url, probe_timeout)
    if not served:
        return None
    model = f"ollama_chat/{served[0]}"
    where = base_url.split("://", 1)[-1]
    return DefaultModels(
        {"smart": model, "general": model, "fast": model},
        f"no provider key is set and Ollama at {where} serves {served[0]}",
        {"api_base": base_url},
    )


def ollama_base_url(environ: Mapping[str, str]) -> str:
    """Where Ollama answers: litellm's ``OLLAMA_API_BASE``, else Ollama's own ``OLLAMA_HOST``, else its default.

    ``OLLAMA_HOST`` is read as Ollama reads it: ``host``, ``host:port`` or a URL; a wildcard bind address
    (``0.0.0.0``) means this machine.
    """
    api_base = environ.get("OLLAMA_API_BASE", "").strip().rstrip("/")
    if api_base:
        return api_base
    host = environ.get("OLLAMA_HOST", "").strip()
    scheme, has_scheme, rest = host.partition("://")
    if not has_scheme:
        scheme, rest = "http", host
    if rest.count(":") > 1 and "[" not in rest:  # a bare IPv6 address, as Ollama accepts it
        rest = f"[{rest}]"
    parts = urlsplit(f"{scheme}://{rest}")
    try:
        explicit_port = parts.port
    except ValueError:  # not a port number: Ollama itself would refuse it, so probe the default
        explicit_port = None
    port = explicit_port or (_OLLAMA_DEFAULT_PORT if not has_scheme else {"https": 443}.get(scheme, 80))
    hostname = parts.hostname or "127.0.0.1"
    if hostname in ("0.0.0.0", "::"):
        hostname = "127.0.0.1"
    if ":" in hostname:
        hostname = f"[{hostname}]"
    return f"{scheme}://{hostname}:{port}{parts.path.rstrip('/')}"


class _OllamaDetails(BaseModel):
    family: str = ""


class _OllamaModel(BaseModel):
    name: str
    details: _OllamaDetails = Field(default_factory=_OllamaDetails)


class _OllamaTags(BaseModel):
    models: list[_OllamaModel] = Field(default_factory=list)


def ollama_models(base_url: str, timeout: float = OLLAMA_PROBE_TIMEOUT) -> list[str]:
    """The chat models an Ollama server at ``base_url`` lists (embedding-only ones left out, by name or
    family), in its order; empty when nothing answers in time or the answer is not Ollama's.
    """
    # no proxy: a proxy set for the internet would otherwise be asked for this machine's own port
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{base_url}/api/tags", timeout=timeout) as reply:
            tags = _OllamaTags.model_validate(json.loads(reply.read(_OLLAMA_REPLY_LIMIT)))
    except (OSError, ValueError, http.client.HTTPException):  # refused, timed out, not HTTP, not JSON, not tags
        return []
    return [
        model.name
        for model in tags.models
        if model.details.family not in _EMBEDDING_FAMILIES
        and not any(hint in model.name.lower() for hint in _EMBEDDING_NAMES)
    ]
