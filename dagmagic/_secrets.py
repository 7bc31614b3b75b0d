"""Keeping API keys out of everything a user or a file can see.

A key is masked (``***``) wherever text leaves dagmagic's hands: error messages, LLM call records, step
errors, events, a run's views, and the exceptions ``raise_for_status()`` raises. Masking knows every key
the registry was given (``api_key=`` and other secret options, a Router's deployments), every value of an
environment variable named like a key, and anything shaped like a common provider key.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from dagmagic import errors

__all__ = [
    "SECRET_OPTION_WORDS",
    "is_secret_option",
    "mask_secrets",
    "remember_secret_values",
    "remember_secrets",
    "scrub_exception",
]

SECRET_OPTION_WORDS = ("api_key", "key", "token", "secret", "password", "credential")
"""An option whose name holds one of these carries a secret."""

MASK = "***"
_MIN_LENGTH = 8  # shorter values ("none", "dummy") are placeholders local servers accept, not secrets
_KEYLIKE = re.compile(r"\b(sk|pk|rk|key|api|gsk|xai|hf)[-_][A-Za-z0-9_\-]{8,}|\bAIza[0-9A-Za-z_\-]{20,}")
_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_KEY", "_PASSWORD")
_known: set[str] = set()


def is_secret_option(name: str) -> bool:
    """Whether an option named ``name`` holds a secret (``api_key``, ``azure_ad_token``, ...)."""
    return any(word in name.lower() for word in SECRET_OPTION_WORDS)


def remember_secrets(options: Mapping[str, Any]) -> None:
    """Remember the secret values among ``options`` so that they are masked wherever they appear."""
    for name, value in options.items():
        if is_secret_option(name) and isinstance(value, str) and len(value) >= _MIN_LENGTH:
            _known.add(value)


def remember_secret_values(values: Iterable[str]) -> None:
    """Remember ``values`` as secrets whatever they are named (an MCP server's ``env=`` and ``headers=``): each
    value, each of its words (``Bearer <token>``) and a URL's password, those long enough to be keys.
    """
    for value in values:
        parts = {value, *value.split()}
        with contextlib.suppress(ValueError):  # not a URL after all
            parts.add(urlsplit(value.strip()).password or "")
        _known.update(part for part in parts if len(part) >= _MIN_LENGTH)


def _secrets() -> list[str]:
    from_env = [
        value for name, value in os.environ.items() if len(value) >= 12 and name.upper().endswith(_ENV_SUFFIXES)
    ]
    return sorted({*_known, *from_env}, key=len, reverse=True)  # longest first: a key inside another


def mask_secrets(text: str) -> str:
    """``text`` with every known key, environment key and key-shaped string replaced by ``***``."""
    if not text:
        return text
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    return _KEYLIKE.sub(MASK, text)


def scrub_exception(exc: BaseException) -> BaseException:
    """``exc`` if neither it nor the exceptions chained to it show a secret; else a copy with the message
    masked and no chain (the provider's words are in the message already).
    """
    if not _shows_a_secret(exc):
        return exc
    masked = mask_secrets(str(exc))
    copy: BaseException
    if isinstance(exc, errors.ProviderError):
        copy = type(exc)(mask_secrets(exc.provider_message), model=exc.model, hint=exc.hint)
        copy.call = exc.call
    else:
        try:
            copy = type(exc)(masked)
        except Exception:  # an exception type that takes other arguments
            copy = RuntimeError(f"{type(exc).__name__}: {masked}")
    copy.__cause__ = None
    copy.__suppress_context__ = True
    return copy.with_traceback(exc.__traceback__)


def _shows_a_secret(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = f"{current} {current.args!r}"
        if mask_secrets(text) != text:
            return True
        current = current.__cause__ or current.__context__
    return False
