"""The input transformer: a ``%%dag`` cell (or ``%dag demo``, ``resume``, ``rerun``, ``replay``) becomes a top-level
``await``.

IPython cannot await a magic's return value, so the cell is rewritten before it is compiled; it then runs
on the kernel's own event loop. The goal travels as a string literal: it is never interpolated.
"""

from __future__ import annotations

from typing import Any

__all__ = ["awaited", "rewrite_dag_cell"]

_CALL = "await __import__('dagmagic.notebook.magics', fromlist=['_']).{method}({args})\n"
_AWAITED = ("demo", "resume", "rerun", "replay", "fork", "attach")
"""``%dag`` subcommands that run the loop: alone in a cell, they are awaited like a ``%%dag`` cell."""


def rewrite_dag_cell(lines: list[str]) -> list[str]:
    """The cell's lines, rewritten into an ``await`` when it is a ``%%dag`` cell or ``%dag demo``."""
    if not lines or not _can_await():
        return lines
    first = lines[0].strip()
    if first.startswith("%%dag") and not first.endswith("?") and (first == "%%dag" or first[5] in " \t"):
        line = first[len("%%dag") :].strip()
        body = "".join(lines[1:])
        return [_CALL.format(method="run_dag_cell", args=f"{line!r}, {body!r}")]
    words = first.split(maxsplit=2)
    if len(words) >= 2 and words[0] == "%dag" and words[1] in _AWAITED and not "".join(lines[1:]).strip():
        rest = words[2] if len(words) > 2 else ""
        return [_CALL.format(method="run_dag_line", args=f"{words[1]!r}, {rest!r}")]
    return lines


def awaited(cell: str) -> bool:
    """Whether the cell ``cell`` (its source) is rewritten into an ``await``."""
    lines = cell.lstrip().splitlines(keepends=True)  # IPython drops leading empty lines before rewriting
    return rewrite_dag_cell(lines) != lines


def _can_await() -> bool:
    from IPython import get_ipython

    return bool(getattr(get_ipython(), "autoawait", False))


def install(shell: Any) -> None:
    """Add the transformer (once) when the shell can await at top level."""
    if rewrite_dag_cell not in shell.input_transformers_cleanup:
        shell.input_transformers_cleanup.append(rewrite_dag_cell)


def uninstall(shell: Any) -> None:
    """Remove the transformer."""
    while rewrite_dag_cell in shell.input_transformers_cleanup:
        shell.input_transformers_cleanup.remove(rewrite_dag_cell)
