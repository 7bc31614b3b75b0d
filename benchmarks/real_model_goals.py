"""``real_model.py``'s accuracy set: ten goals over made-up facts that only its tools know, and a checker each.

The countries, cities and companies are invented (Dorvania, Maresk, Talvane Systems...), so a model cannot
answer from memory: a right answer means the engine looked the figures up (and computed with them where asked).
The tools are one-argument lookups and one computing tool, ``calculate``. Goals mix single lookups, independent
lookups (2 and 4), a comparison, a ranking of three, a sum, a ratio and two chains (one lookup's result is the
next one's argument). Each checker reads the answer's text and says ``right``, ``partly`` or ``wrong``; it is
fair to wording: numbers count as written "12,480,000", "12480000" or "12.48 million" (a rounded form when the
figure rounds to it, within 1 %: "12.5 million" but not "13 million"), names in any case.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from dagmagic import tool

__all__ = ["ACCURACY_GOALS", "ACCURACY_TOOLS", "COMPUTING", "Goal"]

COUNTRIES = {
    # name: (capital, population, area in km²)
    "dorvania": ("Maresk", 12_480_000, 84_300),
    "kelmora": ("Vostrel", 7_315_000, 152_900),
    "zantheria": ("Lirobe", 3_902_500, 41_750),
    "ostravel": ("Quennic", 21_064_000, 301_200),
    "pellundia": ("Sarvik", 5_548_000, 67_400),
}
CITIES = {"maresk": 1_842_000, "vostrel": 962_300, "lirobe": 1_205_700, "quennic": 3_418_900, "sarvik": 608_450}
COMPANIES = {
    # name: (founded, headquarters)
    "brimlock industries": (1962, "Maresk"),
    "talvane systems": (1987, "Quennic"),
    "orrin & vale": (1934, "Lirobe"),
}

COMPUTING = "calculate"
"""The one tool that computes; every other tool looks a fact up."""


def _key(name: str) -> str:
    return " ".join(name.strip().strip("\"'.").lower().removeprefix("the ").split())


def _known(table: dict[str, object]) -> str:
    return ", ".join(name.title() for name in table)


@tool(name="population")
def population_tool(place: str) -> int:
    """The population of a country or a city.

    Args:
        place: The country's or city's name.
    """
    key = _key(place)
    if key in COUNTRIES:
        return COUNTRIES[key][1]
    if key in CITIES:
        return CITIES[key]
    raise ValueError(f"unknown place {place!r}; known: {_known({**COUNTRIES, **CITIES})}")


def _country(country: str) -> tuple[str, int, int]:
    try:
        return COUNTRIES[_key(country)]
    except KeyError:
        raise ValueError(f"unknown country {country!r}; known: {_known(COUNTRIES)}") from None


@tool(name="capital")
def capital_tool(country: str) -> str:
    """The capital city of a country.

    Args:
        country: The country's name.
    """
    return _country(country)[0]


@tool(name="area")
def area_tool(country: str) -> int:
    """The area of a country in square kilometres.

    Args:
        country: The country's name.
    """
    return _country(country)[2]


def _company(company: str) -> tuple[int, str]:
    try:
        return COMPANIES[_key(company)]
    except KeyError:
        raise ValueError(f"unknown company {company!r}; known: {_known(COMPANIES)}") from None


@tool(name="founded")
def founded_tool(company: str) -> int:
    """The year a company was founded.

    Args:
        company: The company's name.
    """
    return _company(company)[0]


@tool(name="headquarters")
def headquarters_tool(company: str) -> str:
    """The city where a company has its headquarters.

    Args:
        company: The company's name.
    """
    return _company(company)[1]


_OPERATORS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _evaluate(node: ast.AST) -> float:
    """Arithmetic only: numbers, + - * / // % ** and parentheses; anything else is refused."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise ValueError(f"only arithmetic is allowed, not {ast.dump(node)[:80]}")


@tool(name=COMPUTING)
def calculate_tool(expression: str) -> float | int:
    """Evaluate an arithmetic expression (numbers, + - * / // % ** and parentheses), e.g. "(3 + 4) * 2".

    Args:
        expression: The expression to evaluate.
    """
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", expression)  # 12,480,000 is one number
    try:
        value = _evaluate(ast.parse(text.strip(), mode="eval"))
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    return round(value, 6) if isinstance(value, float) else value


ACCURACY_TOOLS = [population_tool, capital_tool, area_tool, founded_tool, headquarters_tool, calculate_tool]

# --- checkers ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s*(million|mln|m\b|billion|bn|thousand|k\b))?", re.IGNORECASE
)
_SCALE = {"million": 1e6, "mln": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "thousand": 1e3, "k": 1e3}


def numbers(text: str) -> list[tuple[float, float]]:
    """Every number written in ``text``: (its value, half a unit of its last written digit: 50,000 for "5.5
    million", 0.5 for a whole number).
    """
    found = []
    for match in _NUMBER.finditer(text):
        whole, decimals, scale = match.groups()
        factor = _SCALE[scale.lower()] if scale else 1.0
        value = float(whole.replace(",", "") + (decimals or "")) * factor
        found.append((value, 0.5 * 10.0 ** -len((decimals or ".")[1:]) * factor))
    return found


def _matches(value: float, half: float, target: float, tolerance: float) -> bool:
    return abs(value - target) <= max(0.5, min(half, tolerance * abs(target)))


def has_number(text: str, target: float, tolerance: float = 0.01) -> bool:
    """Whether ``text`` states ``target``: exactly (to 0.5), or rounded as written ("12.5 million" for 12,480,000)
    and then within ``tolerance``.
    """
    return any(_matches(value, half, target, tolerance) for value, half in numbers(text))


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` (any case, as a whole word)."""
    return re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE) is not None


def _names_in_order(text: str, names: list[str]) -> list[str]:
    pattern = re.compile("|".join(rf"\b{re.escape(name)}\b" for name in names), re.IGNORECASE)
    return [match.group().lower() for match in pattern.finditer(text)]


_MORE = re.compile(r"\b(more|larger|bigger|greater|higher|most|largest|biggest|exceeds|outnumbers)\b", re.IGNORECASE)
_FEWER = re.compile(r"\b(fewer|less|smaller|lower|least|smallest)\b", re.IGNORECASE)


SHORT = 60
"""An answer this short may be just the name asked for."""


def claimed_larger(text: str, names: list[str]) -> str | None:
    """The name the answer says is the larger: in its last sentence comparing them, the name just before
    "more" (or the other one when the word is "fewer"); without such a sentence, in a short answer (just the
    name, say) the one it names first; else None.
    """
    lowered = [name.lower() for name in names]
    for sentence in reversed(re.split(r"(?<=[.!?\n])\s+", text)):
        for word in reversed(list(_MORE.finditer(sentence)) + list(_FEWER.finditer(sentence))):
            before = _names_in_order(sentence[: word.start()], names)
            if before:
                if _FEWER.fullmatch(word.group()):
                    return next((name for name in lowered if name != before[-1]), None)
                return before[-1]
    order = _names_in_order(text, names) if len(text.strip()) <= SHORT else []
    return order[0] if order else None


def in_order(text: str, names: list[str]) -> bool:
    """Whether the answer names ``names`` one after another in this order (a restated question may come first)."""
    order = _names_in_order(text, names)
    wanted = [name.lower() for name in names]
    return any(order[i : i + len(wanted)] == wanted for i in range(len(order) - len(wanted) + 1))


def _score(parts: list[bool]) -> str:
    return "right" if all(parts) else "partly" if any(parts) else "wrong"


def _population(place: str) -> int:
    key = place.lower()
    return COUNTRIES[key][1] if key in COUNTRIES else CITIES[key]


def check_figures(*pairs: tuple[str, float]) -> Callable[[str], str]:
    """Right when every figure is stated (partly: some); ``pairs`` are (a name, its figure)."""

    def check(answer: str) -> str:
        return _score([has_number(answer, figure) for _, figure in pairs])

    return check


def check_names(*names: str) -> Callable[[str], str]:
    """Right when every name is given (partly: some)."""

    def check(answer: str) -> str:
        return _score([mentions(answer, name) for name in names])

    return check


def invented(answer: str, figures: list[float]) -> bool:
    """Whether the answer states a large figure (10,000 or more) that is none of ``figures``: made up."""
    return any(
        value >= 10_000 and not any(_matches(value, half, figure, 0.01) for figure in figures)
        for value, half in numbers(answer)
    )


def check_larger(larger: str, smaller: str) -> Callable[[str], str]:
    """Right when the answer says ``larger`` has more people, with no figure of its own making; partly when it
    says so with invented figures, or only gives both figures right.
    """

    def check(answer: str) -> str:
        big, small = _population(larger), _population(smaller)
        if claimed_larger(answer, [larger, smaller]) == larger.lower():
            return "partly" if invented(answer, [big, small, big - small]) else "right"
        return "partly" if has_number(answer, big) and has_number(answer, small) else "wrong"

    return check


def check_ranking(asked: tuple[str, ...], ranked: tuple[str, ...]) -> Callable[[str], str]:
    """Right when the answer ranks ``ranked`` in this order; partly when reversed, or its largest comes first. The
    goal's own listing (``asked``, "A, B and C") restated in the answer is no ranking: it is left out first.
    """
    restated = re.compile(r"\W+(?:and\W+)?".join(rf"\b{re.escape(name)}\b" for name in asked), re.IGNORECASE)

    def check(answer: str) -> str:
        answer = restated.sub(" ", answer)
        if in_order(answer, list(ranked)):
            return "right"
        if in_order(answer, list(reversed(ranked))):
            return "partly"
        return "partly" if claimed_larger(answer, list(ranked)) == ranked[0].lower() else "wrong"

    return check


def check_result(result: float, *inputs: float, tolerance: float = 0.01) -> Callable[[str], str]:
    """Right when the computed ``result`` is stated (within ``tolerance``); partly when only its inputs are."""

    def check(answer: str) -> str:
        if has_number(answer, result, tolerance):
            return "right"
        return "partly" if inputs and all(has_number(answer, figure) for figure in inputs) else "wrong"

    return check


def check_chain(name: str, figure: float) -> Callable[[str], str]:
    """Right when the answer names the first lookup's result and states the second's figure."""

    def check(answer: str) -> str:
        return _score([mentions(answer, name), has_number(answer, figure)])

    return check


@dataclass(frozen=True)
class Goal:
    """A goal of the accuracy set."""

    text: str
    """What the engine is asked."""
    kind: str
    """Its shape: single, parallel, comparison, ranking, sum, ratio, chain."""
    check: Callable[[str], str]
    """The answer's text → ``right``, ``partly`` or ``wrong``."""
    expected: str
    """The right answer, for the reader."""


_DENSITY = 12_480_000 / 84_300

ACCURACY_GOALS = [
    Goal("What is the population of Dorvania?", "single", check_figures(("Dorvania", 12_480_000)), "12,480,000"),
    Goal("In which year was Talvane Systems founded?", "single", check_figures(("Talvane Systems", 1987)), "1987"),
    Goal(
        "What are the capitals of Kelmora and Pellundia?",
        "parallel 2",
        check_names("Vostrel", "Sarvik"),
        "Vostrel; Sarvik",
    ),
    Goal(
        "What are the areas of Dorvania, Zantheria, Ostravel and Pellundia in square kilometres?",
        "parallel 4",
        check_figures(("Dorvania", 84_300), ("Zantheria", 41_750), ("Ostravel", 301_200), ("Pellundia", 67_400)),
        "84,300; 41,750; 301,200; 67,400 km²",
    ),
    Goal(
        "Which country has more people, Kelmora or Pellundia?",
        "comparison",
        check_larger("Kelmora", "Pellundia"),
        "Kelmora (7,315,000 > 5,548,000)",
    ),
    Goal(
        "Rank Dorvania, Zantheria and Ostravel by population, largest first.",
        "ranking 3",
        check_ranking(("Dorvania", "Zantheria", "Ostravel"), ("Ostravel", "Dorvania", "Zantheria")),
        "Ostravel 21,064,000; Dorvania 12,480,000; Zantheria 3,902,500",
    ),
    Goal(
        "What is the combined population of Kelmora and Zantheria?",
        "sum",
        check_result(7_315_000 + 3_902_500, 7_315_000, 3_902_500),
        "11,217,500",
    ),
    Goal(
        "What is the population density of Dorvania, in people per square kilometre?",
        "ratio",
        check_result(_DENSITY, 12_480_000, 84_300),
        f"{_DENSITY:.1f} (12,480,000 / 84,300)",
    ),
    Goal(
        "What is the capital of Ostravel, and what is that city's population?",
        "chain",
        check_chain("Quennic", 3_418_900),
        "Quennic, 3,418,900",
    ),
    Goal(
        "In which city does Brimlock Industries have its headquarters, and how many people live there?",
        "chain",
        check_chain("Maresk", 1_842_000),
        "Maresk, 1,842,000",
    ),
]
"""The accuracy set, in the order ``--goal N`` numbers them."""
