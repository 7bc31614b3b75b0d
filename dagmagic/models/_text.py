"""Text helpers the models share: text made safe where it enters a run, a value cut to one short line, rows as an
HTML table, and HTML kept from math typesetting.

Dollar amounts stay dollar amounts in the HTML views (``no_math``): JupyterLab (and Notebook 7, and nbviewer) run
MathJax over a ``text/html`` output, which reads the words between two dollar signs as TeX: "between $5 and $10"
shows "5 and" as italic math, escaped or not (``&#36;`` is a dollar once parsed). MathJax leaves alone an element
whose class says so: ``tex2jax_ignore`` (MathJax 2's name, which JupyterLab's configuration keeps) and
``mathjax_ignore`` (MathJax 3's default). Every HTML view of a run, an experiment or a model (a step, a plan, a
call) is wrapped in one. The Markdown views backslash their dollars instead (``\\$`` stays a dollar).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["NO_MATH", "SafeText", "cut", "html_table", "no_math", "safe_text"]

_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` as every encoder and store takes it, made so where it enters a run (a model's reply, a tool's
    result, the goal): a lone UTF-16 surrogate (an emoji cut in half) cannot be encoded as UTF-8 and becomes U+FFFD
    (a pair becomes its character); a NUL, which PostgreSQL's text refuses, becomes U+2400 (␀).
    """
    if _UNSAFE.search(text) is None:
        return text
    text = text.replace("\x00", "\u2400")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


SafeText = Annotated[str, AfterValidator(safe_text)]
"""A text field made safe (``safe_text``) when the model is made."""


def cut(text: str | None, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def html_table(rows: Iterable[tuple[str, str]]) -> str:
    """Rows of (label, already escaped HTML) as a two-column table."""
    body = "".join(f"<tr><th style='text-align:left'>{label}</th><td style='text-align:left'>{cell}</td></tr>"
                   for label, cell in rows)  # fmt: skip
    return no_math(f"<table>{body}</table>")


NO_MATH = "tex2jax_ignore mathjax_ignore"
"""The classes that keep MathJax out of an element and everything in it."""


def no_math(html: str) -> str:
    """``html`` inside an element MathJax leaves alone."""
    return f'<div class="{NO_MATH}">{html}</div>'
