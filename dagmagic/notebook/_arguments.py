"""The words of ``%dag`` lines, shared by the subcommands and the magics: lists of names, a subcommand's
arguments, notebook variables in a line, amounts of USD, and the timestamps the subcommands print.
"""

from __future__ import annotations

import argparse
import shlex
import time
from typing import Any

from IPython.core.error import UsageError

__all__ = ["expand_variables", "names", "parse_words", "usd", "when"]


def names(text: str | None) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``."""
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def parse_words(
    command: str,
    line: str,
    positional: tuple[str, ...],
    options: tuple[str, ...],
    optional: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
    pairs: tuple[str, ...] = (),
) -> Any:
    """A subcommand's arguments, or a ``UsageError`` that shows its usage. ``pairs``: options taking two numbers
    (``--rounds 1 2``).
    """
    parser = argparse.ArgumentParser(prog=f"%dag {command}", add_help=False, exit_on_error=False)
    for name in positional:
        parser.add_argument(name)
    for name in optional:
        parser.add_argument(name, nargs="?")
    for option in options:
        parser.add_argument(option)
    for flag in flags:
        parser.add_argument(flag, action="store_true")
    for pair in pairs:
        parser.add_argument(pair, nargs=2, type=int, metavar=("A", "B"))
    try:
        return parser.parse_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit, ValueError) as exc:
        detail = f": {exc}" if isinstance(exc, argparse.ArgumentError) else ""
        raise UsageError(f"{parser.format_usage().strip()}{detail}") from None


def expand_variables(text: str, namespace: dict[str, Any]) -> str:
    """``$name`` and ``{expression}`` from the notebook's namespace, as IPython expands other magics' lines;
    the text as written when it does not expand.
    """
    from IPython.utils.text import DollarFormatter

    try:
        return DollarFormatter().vformat(text, args=[], kwargs=namespace)
    except Exception:
        return text


def usd(text: str) -> float:
    """An amount of USD, 0 or more, as ``--max-cost`` takes it (argparse shows the error's words)."""
    try:
        amount = float(text.strip().removeprefix("$"))
    except ValueError:
        amount = float("nan")
    if not amount >= 0 or amount == float("inf"):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(f"takes an amount in USD, 0 or more (e.g. 0.05), not {text!r}")
    return amount


def when(timestamp: float | None) -> str:
    """A timestamp as ``%dag history`` shows it."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else "-"
