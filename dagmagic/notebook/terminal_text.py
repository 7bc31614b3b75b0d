"""Markdown as a terminal shows it: an answer's emphasis, code marks and links as plain words, and its tables
as aligned columns (numbers to the right, as the table's ``---:`` asks), with no ``**`` or ``|---|`` left.

Only the few constructs answers use are read; anything else is printed as written. No dependency: ``rich``
is not one of dagmagic's.
"""

from __future__ import annotations

import re

__all__ = ["terminal_text"]

_EMPHASIS = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1|(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?!\w)")
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[*+]\s+")
_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def terminal_text(markdown: str) -> str:
    """``markdown`` as plain text for a terminal."""
    lines = markdown.splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        if _is_row(lines[index]) and index + 1 < len(lines) and _RULE.match(lines[index + 1]):
            end = index + 2
            while end < len(lines) and _is_row(lines[end]):
                end += 1
            out += _table(lines[index], lines[index + 1], lines[index + 2 : end])
            index = end
            continue
        out.append(_inline(_BULLET.sub(r"\1- ", _HEADING.sub(r"\1", lines[index]))))
        index += 1
    return "\n".join(out)


def _inline(text: str) -> str:
    text = _LINK.sub(lambda m: m.group(1) if m.group(1) == m.group(2) else f"{m.group(1)} ({m.group(2)})", text)
    text = _CODE.sub(r"\1", text)
    return _EMPHASIS.sub(lambda m: m.group(2) or m.group(3), text)


def _is_row(line: str) -> bool:
    return line.strip().startswith("|") and line.strip().endswith("|") and len(line.strip()) > 1


def _cells(line: str) -> list[str]:
    return [_inline(cell.strip()) for cell in line.strip().strip("|").split("|")]


def _table(header: str, rule: str, rows: list[str]) -> list[str]:
    """A Markdown table as aligned columns under a dashed rule."""
    right = [
        cell.strip().endswith(":") and not cell.strip().startswith(":") for cell in rule.strip().strip("|").split("|")
    ]
    table = [_cells(header), *(_cells(row) for row in rows)]
    columns = max(len(row) for row in table)
    table = [row + [""] * (columns - len(row)) for row in table]
    right += [False] * (columns - len(right))
    widths = [max(len(row[column]) for row in table) for column in range(columns)]

    def line(row: list[str]) -> str:
        return "  ".join(
            cell.rjust(width) if align else cell.ljust(width)
            for cell, width, align in zip(row, widths, right, strict=True)
        ).rstrip()

    header_row, *body = table
    return [line(header_row), "  ".join("-" * width for width in widths), *(line(row) for row in body)]
