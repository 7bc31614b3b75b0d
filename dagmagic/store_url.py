"""Where ``DAG_STORE`` puts the run store: a SQLite file (a path), or a PostgreSQL database (a
``postgresql://`` URL, shared by a team's kernels and machines). Any other URL is refused, never taken as a path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["POSTGRES_SCHEMES", "StoreURL", "shown_store", "store_location"]

POSTGRES_SCHEMES = ("postgresql", "postgres")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_PASSWORD_PARAMETER = re.compile(r"(?i)(password=)([^&\s]*)")
_USER_PASSWORD = re.compile(r"(://[^:/@]*):([^@]*)@")
_TAKES = (
    "DAG_STORE takes a file path (a SQLite store, e.g. .dagmagic/runs.sqlite), a PostgreSQL URL "
    "(postgresql://user@host:5432/database), or none"
)


@dataclass(frozen=True)
class StoreURL:
    """A PostgreSQL run store's URL. It may hold a password: ``str()`` and ``repr()`` show it masked."""

    url: str = field(repr=False)
    """The URL as given, handed to the driver only."""

    def __str__(self) -> str:
        try:
            parts = urlsplit(self.url)
            netloc = parts.netloc
            if parts.password is not None:
                netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
            shown = urlunsplit(parts._replace(netloc=netloc))
        except ValueError:  # not a URL urllib reads (a bad IPv6 host): whatever sits between `:` and `@` goes
            shown = _USER_PASSWORD.sub(r"\1:***@", self.url)
        return _PASSWORD_PARAMETER.sub(r"\1***", shown)

    def secrets(self) -> list[str]:
        """The passwords the URL holds (in its user part, or a ``password=`` parameter), to mask in messages."""
        found = [match.group(2) for match in _USER_PASSWORD.finditer(self.url)]
        found += [match.group(2) for match in _PASSWORD_PARAMETER.finditer(self.url)]
        return [secret for secret in found if secret]

    def __repr__(self) -> str:
        return f"StoreURL({str(self)!r})"


def store_location(value: str) -> Path | StoreURL:
    """The store ``value`` names (not ``none``); ``ValueError`` for a URL of a scheme the store does not support."""
    text = value.strip()
    scheme = _SCHEME.match(text)
    if scheme is None:
        return Path(text)
    if scheme.group(1).lower() in POSTGRES_SCHEMES:
        return StoreURL(text)
    shown = str(StoreURL(text))
    raise ValueError(f"{shown} is a {scheme.group(1)}:// URL, which the run store does not support; {_TAKES}")


def shown_store(value: str) -> str:
    """``value`` (a ``store`` setting) as it may be shown or written: a URL's password masked, a path as it is."""
    return str(StoreURL(value)) if _SCHEME.match(value.strip()) else value
