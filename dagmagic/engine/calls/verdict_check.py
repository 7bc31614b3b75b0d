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
  "ascending"; either way otherwise). "Most recent", "most important" and the like rank by time or weight, not by
  a figure: no superlative or ranking is read from them.

Figures in words ("three million") are not read; a table's figures are checked, not its order.

**An answer that gives nothing** (``unstated_results``): one that speaks of the results ("the step results
reach the user's goal by providing the areas ...") and states none of what the tool steps found (their short
results, neither a figure nor a name of them): a small model wrote its judgement where the answer goes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from dagmagic.engine.calls.figures import CURRENCY, Figure, figures, held, source_values

__all__ = ["Mismatch", "check_answer", "order_mismatches", "unstated_results", "unsupported_figures"]


@dataclass(frozen=True)
class Mismatch:
    """Something the answer says that does not check."""

    kind: Literal["figure", "order", "answer"]
    message: str
    """What did not check, as a clause: "the answer says 37,440,000, which no step result holds ..."."""


def unsupported_figures(answer: str, sources: Iterable[str]) -> list[Mismatch]:
    """The answer's checked figures that no source holds and that are no sum, difference or ratio of two
    figures it states that the sources hold, each once.
    """
    values = source_values(sources)
    stated = [figure for figure in figures(answer) if figure.checked]
    backed = [figure for figure in stated if held(figure, values)]
    said: dict[str, Mismatch] = {}
    for figure in stated:
        if figure.text not in said and figure not in backed and not _derived(figure, backed):
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
    rf"\s*(?:[:(=–—-]|\s+(?:has|had|at|of|is|was|counts|totals))?\s*(?:{_APPROX}\s*)?[{CURRENCY}]?\s*$"
)
_RANKED = r"(?!(?:recent|important|relevant|notable|significant|common|likely|reliable)\b)\w+"
"""The word after "most" or "least" when it ranks by a quantity ("most populous"), not by time or weight."""
_PAIRED = re.compile(r"^[\s,;(]*(?:vs\.?|versus|against|compared (?:to|with)|to)[\s(]*$", re.IGNORECASE)
"""Two figures written as a pair ("68,401,997 vs 84,482,267"): the first the subject's, the second the other's."""
_SUPERLATIVE = re.compile(
    rf"\b(?:the\s+)?(?P<word>largest|biggest|highest|greatest|most\s+{_RANKED}|smallest|lowest|least\s+{_RANKED}|fewest)\b",
    re.IGNORECASE,
)
_AFTER_SUPERLATIVE = re.compile(rf"^[\w\s-]{{0,60}}?,?\s*(?:with|at|:|\()\s*(?:{_APPROX}\s*)?[{CURRENCY}]?\s*$")


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
    if re.match(rf"\s*(?:{_APPROX}\s*)?[{CURRENCY}\d]", rest):
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
        supported = {figure.text for figure in checked if held(figure, values)}
        mismatch = _comparison(sentence, checked, supported) or _superlative(sentence, checked)
        if mismatch is not None:
            found.append(mismatch)
    return found + _rankings(answer)


_META = re.compile(
    r"\b(?:step results?|the steps?\b|(?:the )?user'?s goal|reach(?:es|ed)? the goal|"
    r"the results? (?:show|give|provide)s?)",
    re.IGNORECASE,
)
"""Words of an answer that speaks about the results rather than giving them."""
_NO_VALUE = frozenset({"true", "false", "yes", "no", "none", "null", ""})


def unstated_results(answer: str, found: Sequence[str]) -> list[Mismatch]:
    """An answer that speaks of the results ("The step results reach the user's goal by providing the areas...")
    and gives none of what the tool steps found (``found``: their results, short ones only): a small model wrote
    its judgement where the answer goes.
    """
    values = [text.strip() for text in found if len(text.strip()) <= 60 and text.strip().lower() not in _NO_VALUE]
    if not values or not _META.search(answer):
        return []
    said = answer.lower()
    stated = figures(answer)
    for value in values:
        if value.lower() in said or any(held(figure, source_values([value])) for figure in stated):
            return []
    shown = ", ".join(values[:4]) + (", ..." if len(values) > 4 else "")
    return [Mismatch("answer", f"the answer speaks of the results but gives none of what they found ({shown})")]


def check_answer(answer: str | None, sources: Iterable[str], found: Sequence[str] = ()) -> list[Mismatch]:
    """Everything of ``answer`` that does not check against ``sources`` (nothing for no answer); ``found``: what
    the tool steps found, which an answer that speaks of the results must give some of (``unstated_results``).
    """
    if not answer:
        return []
    sources = list(sources)
    return unsupported_figures(answer, sources) + order_mismatches(answer, sources) + unstated_results(answer, found)
