"""Numbers as a text writes them, read with their value and their precision: ``68,401,997``, ``84 482 267``,
``84.482.267``, ``12.48 million``, ``3bn``, ``12.5%``, ``1,5 Millionen``. What the answer checks read
(``dagmagic.engine.calls.verdict_check``, whose docstring gives the rules): an answer's figures, each with the unit
of its last significant digit (how precise it claims to be) and whether it is one the checks read, and every value
a source's numbers may mean.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["CURRENCY", "Figure", "figures", "held", "source_values"]

_SCALES = {
    "thousand": 1e3,
    "thousands": 1e3,
    "k": 1e3,
    "million": 1e6,
    "millions": 1e6,
    "mn": 1e6,
    "mio": 1e6,
    "millionen": 1e6,
    "billion": 1e9,
    "billions": 1e9,
    "bn": 1e9,
    "milliard": 1e9,
    "milliards": 1e9,
    "milliarden": 1e9,
    "mrd": 1e9,
    "trillion": 1e12,
    "trillions": 1e12,
    "tn": 1e12,
}
_ATTACHED = {"k": 1e3, "K": 1e3, "M": 1e6, "mn": 1e6, "bn": 1e9, "tn": 1e12}
"""Scales written right after the digits (``5k``, ``3M``, ``2bn``); ``m`` and ``B`` are left out (metres, bytes)."""

_NUMBER = re.compile(
    r"(?P<int>\d{1,3}(?P<sep>[,\u00a0\u202f\u2009'’])\d{3}(?:(?P=sep)\d{3})*(?![\d])"
    r"|\d{1,3}(?: \d{3}){2,}(?![\d])"
    r"|\d{1,3}(?:\.\d{3}){2,}(?![\d])"
    r"|\d+)"
    r"(?:(?P<dec>[.,])(?P<frac>\d+))?"
)
_SCALE_WORD = re.compile(r"\s?(?P<word>[A-Za-z]+)\.?")
_PERCENT = re.compile(r"\s?(?:%|percent\b|per cent\b|pct\b|prozent\b|pour cent\b)", re.IGNORECASE)
CURRENCY = "$€£¥"
"""Signs that make a number an amount of money (``$1500`` is no year)."""
_HIDDEN = re.compile(r"```.*?```|`[^`\n]*`|\]\([^)]*\)|https?://\S+|www\.\S+", re.DOTALL)
"""Code, link targets and addresses: their numbers are no figures the answer states."""


@dataclass(frozen=True)
class Figure:
    """A number as the answer writes it."""

    text: str
    """As written, with its scale or percent sign (``12.48 million``, ``12%``)."""
    start: int
    """Where it starts in the text."""
    end: int
    """Where it ends, its scale or percent sign included."""
    value: float
    """Its value, the scale applied (12480000.0)."""
    unit: float
    """One unit of its last significant digit, the scale applied: how precise it claims to be."""
    percent: bool
    """Written as a percentage."""
    scaled: bool
    """Written with a scale word or suffix (``million``, ``bn``, ``k``)."""
    checked: bool
    """Whether it is a figure the checks read: a percentage, a scaled figure or one of at least 1000, not a
    year (``dagmagic.engine.calls.verdict_check``)."""


def _value(match: re.Match[str]) -> tuple[float, float, bool] | None:
    """The value, the unit of the last digit, and whether it is a plain integer (no separator, no decimals)."""
    whole, sep, dec, frac = match.group("int"), match.group("sep"), match.group("dec"), match.group("frac")
    digits = re.sub(r"\D", "", whole)
    grouped = sep is not None or len(digits) != len(whole)
    if frac is not None:
        if dec == "," and (sep == "," or len(frac) == 3):
            return None  # "1,234,5" or "1234,567": not a number this reads for sure
        if dec == "." and whole.count(".") > 0:
            return None
        return float(f"{digits}.{frac}"), 10.0 ** -len(frac), False
    zeros = len(digits) - len(digits.rstrip("0")) if digits.strip("0") else 0
    return float(digits), 10.0**zeros, not grouped


def figures(text: str) -> list[Figure]:
    """The numbers ``text`` states as figures, in order (see the module docstring for what is left out)."""
    found: list[Figure] = []
    hidden = [(m.start(), m.end()) for m in _HIDDEN.finditer(text)]
    for match in _NUMBER.finditer(text):
        start, end = match.start(), match.end()
        if any(a <= start < b for a, b in hidden):
            continue
        before = text[max(0, start - 2) : start]
        if before and (before[-1].isalnum() or before[-1] in "_.,"):
            continue  # s1, CO2, part of a longer number
        if re.search(r"\d[-/:]$", before) or (before[-1:] in "-/:" and start >= 2 and text[start - 2].isdigit()):
            continue
        after = text[end : end + 2]
        if re.match(r"[-/:.,]\d", after):
            continue  # a date, time, range or version
        read = _value(match)
        if read is None:
            continue
        value, unit, plain = read
        scale, percent, stop = 1.0, False, end
        percent_match = _PERCENT.match(text, end)
        if percent_match:
            percent, stop = True, percent_match.end()
        else:
            word = _SCALE_WORD.match(text, end)
            if word is not None:
                name = word.group("word")
                glued = not text[end].isspace()
                if glued and name in _ATTACHED:
                    scale, stop = _ATTACHED[name], word.end("word")
                elif not glued and name.lower() in _SCALES and name not in {"k", "K"}:
                    scale, stop = _SCALES[name.lower()], word.end("word")
                elif glued:
                    continue  # 1st, 5km, 3GB
        currency = start > 0 and text[start - 1] in CURRENCY
        year = plain and scale == 1.0 and not percent and not currency and 1000 <= value <= 2199 and unit >= 1
        checked = not year and (percent or scale != 1.0 or value >= 1000)
        found.append(
            Figure(
                text=text[start:stop],
                start=start,
                end=stop,
                value=value * scale,
                unit=unit * scale,
                percent=percent,
                scaled=scale != 1.0,
                checked=checked,
            )
        )
    return found


_LOOSE = re.compile(r"\d+(?:[.,]\d+)?")


def source_values(sources: Iterable[str]) -> list[float]:
    """Every value a number of the sources may mean, sorted: as written, with and without its scale, as a
    percentage and as a fraction, and each run of digits alone (``pop=84482267``): the checks ask only whether
    a figure is there, so reading more is safer than reading less.
    """
    values: set[float] = set()
    for text in sources:
        for match in _NUMBER.finditer(text):
            read = _value(match)
            if read is not None:
                value = read[0]
                values.update((value, value / 100, value * 100))
                word = _SCALE_WORD.match(text, match.end())
                if word is not None:
                    name = word.group("word")
                    scale = _ATTACHED.get(name) or _SCALES.get(name.lower())
                    if scale is not None:
                        values.add(value * scale)
        for match in _LOOSE.finditer(text):
            raw = match.group()
            values.add(float(raw.replace(",", ".")) if "," in raw else float(raw))
            values.add(float(re.sub(r"\D", "", raw)))
    return sorted(values)


def held(figure: Figure, values: Sequence[float]) -> bool:
    """Whether some value rounds or cuts to the figure at its precision (within one unit of its last digit)."""
    reach = figure.unit * (1 + 1e-9) + abs(figure.value) * 1e-12
    low = bisect.bisect_left(values, figure.value - reach)
    return low < len(values) and values[low] <= figure.value + reach
