"""Keeping API keys out of everything a user or a file can see.

A key is masked (``***``) wherever text leaves dagmagic's hands: error messages, LLM call records, step
errors, events, a run's views, and the exceptions ``raise_for_status()`` raises. Masking knows every key
the registry was given (``api_key=`` and other secret options, a Router's deployments), every value of an
environment variable named like a key, and anything shaped like a common provider key.

Text that enters a run (a tool's result, a model's reply) is masked as it enters, so that everything keeping it
(the run's calls, events and state, the store, the widget) holds it masked. A model's reply is masked of the
keys dagmagic knows only (``mask_known_secrets``): masked by shape, code it wrote (``api_key_header = ...``)
would no longer run.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dagmagic import errors

__all__ = [
    "SECRET_OPTION_WORDS",
    "SecretStreamMask",
    "is_secret_option",
    "mask_data",
    "mask_known_secrets",
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
    """Remember the secret values among ``options`` so that they are masked wherever they appear: options named
    like a secret, a URL's password (``api_base="https://user:pw@host"``), an ``Authorization`` header's
    credentials, in nested options (``extra_headers``) too.
    """
    for name, value in options.items():
        if isinstance(value, Mapping):
            remember_secrets(value)
        elif not isinstance(value, str):
            continue
        elif is_secret_option(name):
            _remember(value)
        elif name.lower() in ("authorization", "proxy-authorization"):
            _remember(value.split()[-1] if value.split() else value)  # "Bearer <token>": the token
        elif "://" in value:
            with contextlib.suppress(ValueError):  # not a URL after all
                _remember(urlsplit(value).password or "")


def remember_secret_values(values: Iterable[str]) -> None:
    """Remember ``values`` as secrets whatever they are named (an MCP server's ``env=`` and ``headers=``): each
    value, each of its words (``Bearer <token>``) and a URL's password, those long enough to be keys.
    """
    for value in values:
        parts = {value, *value.split()}
        with contextlib.suppress(ValueError):  # not a URL after all
            parts.add(urlsplit(value.strip()).password or "")
        for part in parts:
            _remember(part)


def _remember(value: str) -> None:
    if len(value) >= _MIN_LENGTH:
        _known.add(value)


if TYPE_CHECKING:
    _Environ = os._Environ[str]
else:
    _Environ = os._Environ


class _WatchedEnviron(_Environ):
    """``os.environ``'s own class, which also counts the changes made through it (``os.environb`` shares its
    variables and gets the same class): masking then knows, without reading the environment, whether it changed.
    """

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        _environ_changed()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        _environ_changed()


_changes = itertools.count()
_environ_version = next(_changes)
"""A new number after each change of the environment through ``os.environ`` or ``os.environb``."""


def _environ_changed() -> None:
    global _environ_version
    _environ_version = next(_changes)  # after the change: whoever reads this number reads the changed environment


def _watch(environ: Any) -> bool:
    """Give ``environ`` (``os.environ`` or ``os.environb``) the watched class; whether it has it."""
    if type(environ) is os._Environ:
        environ.__class__ = _WatchedEnviron
    return type(environ) is _WatchedEnviron


class _Secrets:
    """The values to mask, longest first (a key inside another), worked out again only when the registered keys
    or the environment changed. Reading ``os.environ`` decodes every variable, and comparing it with a copy
    reads them all: too slow for each text masked (a run masks several texts per step). The watched
    ``os.environ`` says whether it changed by a number; a mapping put in its place is compared with a copy.
    """

    def __init__(self) -> None:
        self.values: tuple[str, ...] = ()
        self._known_count = -1
        self._environ: Any = None
        self._version = -1
        self._copy: dict[Any, Any] = {}

    def current(self) -> tuple[str, ...]:
        environ = os.environ
        if environ is not self._environ:
            self._environ, self._version, self._copy = environ, -1, {}
            if _watch(environ):
                _watch(getattr(os, "environb", None))
        if type(environ) is _WatchedEnviron:
            changed = _environ_version != self._version
        else:  # its own dict of encoded names and values, compared with a copy: no variable is decoded
            raw: Mapping[Any, Any] = getattr(environ, "_data", environ)
            changed = raw != self._copy
        if changed or len(_known) != self._known_count:
            version = _environ_version  # read before the environment: a change made meanwhile is seen next time
            self._known_count = len(_known)
            if type(environ) is _WatchedEnviron:
                self._version = version
            else:
                self._copy = dict(getattr(environ, "_data", environ))
            from_env = [
                value for name, value in environ.items() if len(value) >= 12 and name.upper().endswith(_ENV_SUFFIXES)
            ]
            self.values = tuple(sorted({*_known, *from_env}, key=len, reverse=True))
        return self.values


_SECRETS = _Secrets()


def mask_known_secrets(text: str) -> str:
    """``text`` with every registered key and environment key replaced by ``***`` (not key-shaped strings)."""
    if not text:
        return text
    for secret in _SECRETS.current():
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def mask_secrets(text: str) -> str:
    """``text`` with every known key, environment key and key-shaped string replaced by ``***``."""
    if not text:
        return text
    return _KEYLIKE.sub(MASK, mask_known_secrets(text))


def mask_data(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string in it masked like ``mask_secrets``; the
    names of a dict's entries stay as they are.
    """
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {key: mask_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mask_data(item) for item in value]
    return value


class SecretStreamMask:
    """Masks the known keys in a text that arrives in pieces (``mask_known_secrets``): the end of a piece that may
    be the start of a key is held back until the next piece says whether it is one.
    """

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        """What of the text so far can be shown now, masked."""
        text = mask_known_secrets(self._held + piece)
        held = _open_secret(text)
        self._held = text[len(text) - held :] if held else ""
        return text[: len(text) - held]

    def flush(self) -> str:
        """The text held back (the stream ended: it is no key)."""
        held, self._held = self._held, ""
        return held


def _open_secret(text: str) -> int:
    """The length of the longest end of ``text`` that begins a known key."""
    longest = 0
    for secret in _SECRETS.current():
        start = max(len(text) - len(secret) + 1, 0)
        while (start := text.find(secret[0], start)) != -1:
            if secret.startswith(text[start:]):
                longest = max(longest, len(text) - start)
                break
            start += 1
    return longest


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
