"""Dollar amounts stay dollar amounts in the HTML views: no math typesetting.

JupyterLab (and Notebook 7, and nbviewer) run MathJax over a ``text/html`` output, which reads the words between
two dollar signs as TeX: "between $5 and $10" shows "5 and" as italic math, escaped or not (``&#36;`` is a dollar
once parsed). MathJax leaves alone an element whose class says so: ``tex2jax_ignore`` (MathJax 2's name, which
JupyterLab's configuration keeps) and ``mathjax_ignore`` (MathJax 3's default). Every HTML view of a run or an
experiment is wrapped in one. The Markdown views backslash their dollars instead (``\\$`` stays a dollar).
"""

from __future__ import annotations

__all__ = ["NO_MATH", "no_math"]

NO_MATH = "tex2jax_ignore mathjax_ignore"
"""The classes that keep MathJax out of an element and everything in it."""


def no_math(html: str) -> str:
    """``html`` inside an element MathJax leaves alone."""
    return f'<div class="{NO_MATH}">{html}</div>'
