"""Text helpers the models' reprs share: a value cut to one short line, rows as an HTML table."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["cut", "html_table"]


def cut(text: str | None, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def html_table(rows: Iterable[tuple[str, str]]) -> str:
    """Rows of (label, already escaped HTML) as a two-column table."""
    body = "".join(f"<tr><th style='text-align:left'>{label}</th><td style='text-align:left'>{cell}</td></tr>"
                   for label, cell in rows)  # fmt: skip
    return f"<table>{body}</table>"
