"""A reached verdict's answer checked against what the analyzer was given, before the answer is taken.

Small models write confident answers that their own inputs contradict: a total no step computed ("12,480,000
three times: 37,440,000"), or "France has more people than Germany, 68,401,997 compared to Germany's 84,482,267".
Comparing and adding large numbers is what they get wrong, and what a tool step gets right. What can be checked
mechanically is checked here, with pure functions; ``Analyzer.analyze`` asks once more when something fails.

Built for precision: a false alarm costs a call and may turn a right answer into "not reached", so each rule
leaves alone what it cannot read for sure.

**Figures** (``unsupported_figures``). A *checked figure* of the answer is a number that is

- a percentage (``12.5%``, ``12.5 percent``), or written with a scale word (``12.48 million``, ``3bn``, ``5k``), or
  at least 1000 (``68,401,997``, ``84 482 267``, ``84.482.267``);
- not a year (a bare integer from 1000 to 2199, with no separator, scale, percent or currency sign);
- not part of a date, time, range, version or identifier: digits glued to letters (``s1``, ``CO2``, ``1st``, ``5km``)
  or to ``-``, ``/``, ``:`` and another number (``2024-03-12``, ``10:30``, ``1.2.3``), or inside a URL or code.

Small integers (list numbering, "3 steps"), decimals below 1000 and years are not checked. A checked figure is
*supported* when some number of the sources (everything the analyzer read: its prompt with the goal and the
results, each step's whole result, what each tool call returned) rounds or cuts to it at the precision the
answer writes: ``3.9 million`` holds for 3,878,100 and 3,949,999 (within one unit of its last digit, 0.1
million), ``2,100,000`` for 2,102,650 (trailing zeros are not precise), ``12%`` for 0.12 or 12.4%. A figure no
source holds is one the model computed or made up: no arithmetic on the sources is accepted (a sum a model
writes may be right, but one that must be computed needs a step that computes it, with a tool), except the
arithmetic an answer shows in the open: a figure that is, at its precision, the sum or difference of two figures
the answer states and the sources hold ("84,482,267 against 68.4 million, a gap of 16.1 million"), or, as a
percentage, one's share of the other or how much more it is ("23.5% more"). A sum of three, a product, a figure
times three, or arithmetic on a figure no source holds is still a figure no source holds.

**Order** (``order_mismatches``), among the answer's own checked figures, of the same kind (percentages with
percentages):

- a comparison: one sentence with one comparative followed by ``than`` ("X has more people than Y", "more
  populous", "larger", "fewer", "lower"...), no negation, a name (a capitalized word) on each side, and two
  figures, each the other side's unless one is written right after the other name ("Germany's 84,482,267",
  "Germany (84 million)", "Germany: 84M"); the figures must not say the opposite. "more than 60 million" (a
  bound: ``than`` followed by a figure or a lowercase word) is no comparison;
- a superlative: "X is the largest/most populous ..." with X's figure written after X or right after the
  superlative (", with 84 million") and the figures written after other names in the sentence: none may be
  beyond X's ("one of the largest", "the second largest" are not checked);
- a ranking: a numbered list (or a bulleted one introduced as ranked, sorted, in descending or ascending order)
  of at least two items, one figure each, after a line that ranks ("the largest", "top", "ranked"...): its
  figures must go one way (down after "largest", "most", "top", "descending"; up after "smallest", "least",
  "ascending"; either way otherwise).

Tables, figures in words ("three million") and arithmetic the answer spells out are not checked.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Figure", "Mismatch", "check_answer", "figures", "order_mismatches", "source_values", "unsupported_figures"]

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
_CURRENCY = "$€£¥"
_HIDDEN = re.compile(r"```.*?```|`[^`\n]*`|\]\([^)]*\)|https?://\S+|www\.\S+", re.DOTALL)
"""Code, link targets and addresses: their numbers are no figures the answer states."""


@dataclass(frozen=True)
class Figure:
    """A number as the answer writes it."""

    text: str
    """As written, with its scale or percent sign (``12.48 million``, ``12%``)."""
    start: int
    end: int
    value: float
    """Its value, the scale applied (12480000.0)."""
    unit: float
    """One unit of its last significant digit, the scale applied: how precise it claims to be."""
    percent: bool
    scaled: bool
    checked: bool
    """Whether it is a figure the checks read (see the module docstring)."""


@dataclass(frozen=True)
class Mismatch:
    """Something the answer says that does not check."""

    kind: Literal["figure", "order"]
    message: str
    """What did not check, as a clause: "the answer says 37,440,000, which no step result holds ..."."""


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
        currency = start > 0 and text[start - 1] in _CURRENCY
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


def _held(figure: Figure, values: Sequence[float]) -> bool:
    """Whether some value rounds or cuts to the figure at its precision (within one unit of its last digit)."""
    reach = figure.unit * (1 + 1e-9) + abs(figure.value) * 1e-12
    low = bisect.bisect_left(values, figure.value - reach)
    return low < len(values) and values[low] <= figure.value + reach


def unsupported_figures(answer: str, sources: Iterable[str]) -> list[Mismatch]:
    """The answer's checked figures that no source holds and that are no sum, difference or ratio of two
    figures it states that the sources hold, each once.
    """
    values = source_values(sources)
    stated = [figure for figure in figures(answer) if figure.checked]
    held = [figure for figure in stated if _held(figure, values)]
    said: dict[str, Mismatch] = {}
    for figure in stated:
        if figure.text not in said and figure not in held and not _derived(figure, held):
            said[figure.text] = Mismatch(
                "figure", f"the answer says {figure.text}, which no step result holds and no tool computed"
            )
    return list(said.values())


def _derived(figure: Figure, operands: Sequence[Figure]) -> bool:
    """Whether ``figure`` is, at its precision, the sum or difference of two of ``operands`` (of its kind), or,
    as a percentage, one's share of the other or how much more or less it is ("23.5% more than France").
    """
    reach = figure.unit * (1 + 1e-9)
    for first, second in itertools.permutations(operands, 2):
        a, b = first.value, second.value
        if first.percent == second.percent == figure.percent and (
            abs(figure.value - (a + b)) <= reach or abs(figure.value - abs(a - b)) <= reach
        ):
            return True
        shares = (a / b * 100, abs(a / b - 1) * 100) if b else ()
        if (
            figure.percent
            and not first.percent
            and not second.percent
            and any(abs(figure.value - share) <= reach for share in shares)
        ):
            return True
    return False


_SENTENCES = re.compile(r"(?<=[.!?])\s+(?=[^a-z])|\n+")
_NAME = re.compile(r"\b[A-Z][\w'’-]*(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][\w-]*)*")
_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|cannot)\b|n['’]t\b", re.IGNORECASE)
_UP = r"more|larger|higher|greater|bigger"
_DOWN = r"fewer|less|smaller|lower"
_COMPARATIVE = re.compile(rf"\b(?P<word>{_UP}|{_DOWN})\b(?P<between>(?:\s+[\w-]+){{0,3}}?)\s+than\b", re.IGNORECASE)
_APPROX = r"(?:about|approximately|around|roughly|some|nearly|almost|over|just|only|~|≈)"
_ATTACHMENT = re.compile(
    r"^(?:['’]s?)?(?:\s+(?:population|people|inhabitants|residents|total|revenue|GDP|sales))?"
    rf"\s*(?:[:(=–—-]|\s+(?:has|had|at|of|is|was|counts|totals))?\s*(?:{_APPROX}\s*)?[{_CURRENCY}]?\s*$"
)
_RANKED = r"(?!(?:recent|important|relevant|notable|significant|common|likely|reliable)\b)\w+"
"""The word after "most" or "least" when it ranks by a quantity ("most populous"), not by time or weight."""
_PAIRED = re.compile(r"^[\s,;(]*(?:vs\.?|versus|against|compared (?:to|with)|to)[\s(]*$", re.IGNORECASE)
"""Two figures written as a pair ("68,401,997 vs 84,482,267"): the first the subject's, the second the other's."""
_SUPERLATIVE = re.compile(
    rf"\b(?:the\s+)?(?P<word>largest|biggest|highest|greatest|most\s+{_RANKED}|smallest|lowest|least\s+{_RANKED}|fewest)\b",
    re.IGNORECASE,
)
_AFTER_SUPERLATIVE = re.compile(rf"^[\w\s-]{{0,60}}?,?\s*(?:with|at|:|\()\s*(?:{_APPROX}\s*)?[{_CURRENCY}]?\s*$")


def _attached(sentence: str, name: str, figure: Figure, limit: int = 40) -> bool:
    """Whether ``figure`` is written right after an occurrence of ``name`` ("Germany's 84,482,267")."""
    for occurrence in re.finditer(re.escape(name), sentence):
        gap = sentence[occurrence.end() : figure.start]
        if occurrence.end() <= figure.start and len(gap) <= limit and _ATTACHMENT.match(gap):
            return True
    return False


def _comparison(sentence: str, checked: list[Figure], supported: set[str]) -> Mismatch | None:
    comparatives = list(_COMPARATIVE.finditer(sentence))
    if len(comparatives) != 1 or _NEGATION.search(sentence):
        return None
    comparative = comparatives[0]
    rest = sentence[comparative.end() :]
    if re.match(rf"\s*(?:{_APPROX}\s*)?[{_CURRENCY}\d]", rest):
        return None  # "more than 60 million": a bound
    if not comparative.group("between") and not re.match(r"\s*[A-Z]", rest):
        return None  # "more than twice", "less than half"
    before = [m for m in _NAME.finditer(sentence[: comparative.start()])]
    after = _NAME.search(rest)
    if not before or after is None:
        return None
    subject, other = before[-1].group(), after.group()
    if subject == other:
        return None
    pairs = [
        (mine, theirs)
        for mine in checked
        for theirs in checked
        if mine is not theirs and _attached(sentence, subject, mine) and _attached(sentence, other, theirs)
    ]
    if len(pairs) == 1:
        mine, theirs = pairs[0]
    elif len(checked) == 2:
        mine, theirs = checked
        paired = _PAIRED.match(sentence[mine.end : theirs.start])  # "84,482,267 against 68,401,997": in order
        if not paired and (_attached(sentence, other, mine) or _attached(sentence, subject, theirs)):
            mine, theirs = theirs, mine
    else:
        return None
    if mine.percent != theirs.percent:
        return None
    up = comparative.group("word").lower() in _UP.split("|")
    if (mine.value < theirs.value) if up else (mine.value > theirs.value):
        clause = sentence[before[-1].start() : comparative.end() + after.end()].strip()
        source = "the results give" if {mine.text, theirs.text} <= supported else "its own figures are"
        return Mismatch("order", f"it says {clause}, but {source} {subject} {mine.text} and {other} {theirs.text}")
    return None


def _superlative(sentence: str, checked: list[Figure]) -> Mismatch | None:
    found = list(_SUPERLATIVE.finditer(sentence))
    if len(found) != 1 or _NEGATION.search(sentence):
        return None
    superlative = found[0]
    lead = sentence[: superlative.start()]
    if re.search(r"\b(?:one of|second|third|fourth|fifth|\d+(?:st|nd|rd|th))\s*(?:the\s*)?$", lead, re.IGNORECASE):
        return None
    names = list(_NAME.finditer(lead))
    if not names:
        return None
    subject = names[-1].group()
    mine = [
        figure
        for figure in checked
        if _attached(sentence, subject, figure)
        or (
            figure.start >= superlative.end()
            and _AFTER_SUPERLATIVE.match(sentence[superlative.end() : figure.start]) is not None
        )
    ]
    if len(mine) != 1:
        return None
    own = mine[0]
    others = [
        (name.group(), figure)
        for figure in checked
        if figure is not own and figure.percent == own.percent
        for name in _NAME.finditer(sentence)
        if name.group() != subject
        and 0 <= figure.start - name.end() <= 40
        and _ATTACHMENT.match(sentence[name.end() : figure.start])
    ]
    word = superlative.group("word").lower()
    up = not word.startswith(("smallest", "lowest", "least", "fewest"))
    for name, figure in others:
        if (figure.value > own.value) if up else (figure.value < own.value):
            return Mismatch(
                "order",
                f"it says {subject} is the {word}, but it gives {subject} {own.text} and {name} {figure.text}",
            )
    return None


_ITEM = re.compile(r"^\s*(?P<marker>\d+[.)]|[-*•+])\s+(?P<text>.+)$")
_RANKS = re.compile(
    rf"\b(?P<down>largest|biggest|highest|greatest|most\s+{_RANKED}|top|descending)\b"
    rf"|\b(?P<up>smallest|lowest|least\s+{_RANKED}|fewest|ascending)\b"
    r"|\b(?:rank|ranked|ranking|sorted)\b",
    re.IGNORECASE,
)
_ORDERED = re.compile(r"\b(?:rank|ranked|ranking|sorted|descending|ascending)\b", re.IGNORECASE)


def _rankings(answer: str) -> list[Mismatch]:
    lines = answer.splitlines()
    found: list[Mismatch] = []
    position = 0
    while position < len(lines):
        if _ITEM.match(lines[position]) is None:
            position += 1
            continue
        end = position
        while end < len(lines) and _ITEM.match(lines[end]):
            end += 1
        items = [_ITEM.match(line) for line in lines[position:end]]
        intro = next((line for line in reversed(lines[:position]) if line.strip()), "")
        numbered = all(item is not None and item.group("marker")[0].isdigit() for item in items)
        ranks = list(_RANKS.finditer(intro))
        if ranks and (numbered or _ORDERED.search(intro)):
            mismatch = _ranking([item.group("text") for item in items if item is not None], ranks)
            if mismatch is not None:
                found.append(mismatch)
        position = end
    return found


def _ranking(items: list[str], ranks: list[re.Match[str]]) -> Mismatch | None:
    each = [[figure for figure in figures(item) if figure.checked] for item in items]
    if len(items) < 2 or any(len(found) != 1 for found in each):
        return None
    values = [found[0] for found in each]
    if len({figure.percent for figure in values}) != 1:
        return None
    down = any(rank.group("down") for rank in ranks)
    up = any(rank.group("up") for rank in ranks)
    if down == up:  # no way said (or both): either way goes, the way its ends take
        down = values[0].value >= values[-1].value
    pairs = list(itertools.pairwise(values))
    for index, (a, b) in enumerate(pairs):
        if a.value < b.value if down else a.value > b.value:
            first, second = (_label(items[index], a), _label(items[index + 1], b))
            way = "less" if a.value < b.value else "more"
            return Mismatch(
                "order",
                f"its ranked list puts {first} before {second}, but {a.text} is {way} than {b.text}",
            )
    return None


def _label(item: str, figure: Figure) -> str:
    head = item[: figure.start].strip(" :(–—-*_,") or item.strip()
    return head[:40]


def order_mismatches(answer: str, sources: Iterable[str] = ()) -> list[Mismatch]:
    """Comparisons, superlatives and rankings of the answer that its own figures contradict."""
    values = source_values(sources)
    found: list[Mismatch] = []
    for sentence in _SENTENCES.split(answer):
        checked = [figure for figure in figures(sentence) if figure.checked]
        if len(checked) < 2:
            continue
        supported = {figure.text for figure in checked if _held(figure, values)}
        mismatch = _comparison(sentence, checked, supported) or _superlative(sentence, checked)
        if mismatch is not None:
            found.append(mismatch)
    return found + _rankings(answer)


def check_answer(answer: str | None, sources: Iterable[str]) -> list[Mismatch]:
    """Everything of ``answer`` that does not check against ``sources`` (nothing for no answer)."""
    if not answer:
        return []
    sources = list(sources)
    return unsupported_figures(answer, sources) + order_mismatches(answer, sources)
