"""Strategies for model output as small real models write it: messy text, broken JSON, wrong types."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import strategies as st

# every code point a model can emit except lone surrogates (no valid UTF-8 carries them); NUL, RTL marks and
# astral characters (emoji, mathematical letters) are in, and drawn on purpose below
CHARACTERS = st.characters(exclude_categories=("Cs",))
ODD_CHARACTERS = st.sampled_from(["\x00", "\u200f", "\u202e", "\u2066", "\ufeff", "𝕏", "😀", "\U0010fffd", "\\", '"'])
HOSTILE_STRINGS = st.sampled_from(
    [
        "",
        " ",
        "<img src=x onerror=alert(1)>",
        "r1.s2",
        "r0.s1",
        "s1",
        "s1, s2",
        "null",
        "None",
        "\x00",
        "\u202es1",
        "fast",
        "reasoning",
        "subplan",
        "${jndi:ldap://x}",
        "'; DROP TABLE steps; --",
        "1e309",
        "NaN",
    ]
)


def texts(max_size: int = 200) -> st.SearchStrategy[str]:
    """Arbitrary text, with a good share of the characters that break naive parsers."""
    return st.text(st.one_of(CHARACTERS, ODD_CHARACTERS), max_size=max_size)


HUGE_NUMBERS = st.sampled_from([1e308, -1e308, 10**1000, -(10**1000), 2**64, math.inf, -math.inf, math.nan, 5e-324])
NUMBERS = st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), HUGE_NUMBERS)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, texts(40), HOSTILE_STRINGS)


def json_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """A JSON-like value of arbitrary shape (NaN and infinities included, as Python's json writes them)."""
    return st.recursive(
        SCALARS,
        lambda children: st.one_of(
            st.lists(children, max_size=5), st.dictionaries(st.one_of(texts(12), HOSTILE_STRINGS), children, max_size=5)
        ),
        max_leaves=max_leaves,
    )


def dump(value: Any, ascii_only: bool = False, indent: int | None = None) -> str:
    """JSON text as Python writes it: NaN/Infinity literals included."""
    return json.dumps(value, ensure_ascii=ascii_only, indent=indent)


@st.composite
def deep_nesting(draw: st.DrawFn) -> str:
    """Lists or objects nested up to 3,000 deep, closed or not, maybe around a plan."""
    depth = draw(st.sampled_from([10, 500, 900, 990, 1000, 1200, 3000]))
    kind = draw(st.sampled_from(["list", "object", "steps", "plan"]))
    if kind == "list":
        opened, closed = "[" * depth, "]" * depth
    elif kind == "object":
        opened, closed = '{"a":' * depth, "}" * depth
    elif kind == "steps":
        opened, closed = '{"steps":[' * depth, "]}" * depth
    else:  # the planner follows `plan` keys into the object they hold
        opened, closed = '{"plan":' * depth, "}" * depth
    inner = draw(st.sampled_from(["1", '{"id": "s1", "task": "t"}', "", '"x"']))
    text = opened + inner + (closed if draw(st.booleans()) else closed[: draw(st.integers(0, len(closed)))])
    return draw(st.sampled_from(["", "Plan:\n", '{"steps": ['])) + text


HUGE_NUMBER_TEXTS = st.sampled_from(
    ["1" + "0" * 1000, "-" + "9" * 5000, "1e308", "1e309", "-1e309", "NaN", "Infinity", "-Infinity", "1" * 4301]
)


@st.composite
def wrapped(draw: st.DrawFn, body: str) -> str:
    """JSON text cut at a random point (or not), with prose and code fences around it (or not)."""
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]
    before = draw(st.sampled_from(["", "Here is the plan:\n", "```json\n", "```\n", "Sure! ", "<think>x</think>"]))
    after = draw(st.sampled_from(["", "\n```", "\nHope this helps.", " [1] {oops", "```"]))
    return draw(texts(20)) + before + body + after if draw(st.booleans()) else before + body + after


@st.composite
def json_ish_text(draw: st.DrawFn, values: st.SearchStrategy[Any] | None = None) -> str:
    """Text that is, contains, or almost contains JSON."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(texts())
    if choice == 1:
        return draw(deep_nesting())
    if choice == 2:
        return (
            draw(st.sampled_from(['{"value": ', "[", '{"steps": [{"id": 1, "confidence": ']))
            + draw(HUGE_NUMBER_TEXTS)
            + draw(st.sampled_from(["", "}", "]", "}]}"]))
        )
    value = draw(values if values is not None else json_values())
    body = dump(value, ascii_only=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
    return draw(wrapped(body))


# --- plans --------------------------------------------------------------------------------------------------

IDS = st.one_of(
    st.sampled_from(["s1", "s2", "s3", "s4", "s5", "s6", "s7", "r1.s2", "r1.s1"]),  # a small pool: duplicates
    st.integers(-3, 8),
    st.floats(allow_nan=True, allow_infinity=True),
    st.just(10**1000),
    st.none(),
    st.lists(st.sampled_from(["s1", 1]), max_size=2),
    HOSTILE_STRINGS,
    texts(12),
)
DEPENDENCIES = st.one_of(
    st.none(),
    IDS,
    st.lists(IDS, max_size=4),
    st.lists(st.one_of(IDS, st.lists(IDS, max_size=2), st.fixed_dictionaries({"id": IDS})), max_size=4),
    st.dictionaries(texts(5), IDS, max_size=2),
    st.sampled_from(["s1, s2", "s1; s3", "s2,", ""]),
)
TASKS = st.one_of(texts(60), HOSTILE_STRINGS, NUMBERS, st.none(), st.lists(texts(5), max_size=2), st.booleans())
HINTS = st.one_of(st.none(), HOSTILE_STRINGS, st.sampled_from(["fast", "reasoning", "general", "search"]), NUMBERS)


@st.composite
def step_objects(draw: st.DrawFn) -> Any:
    """One step as a model might write it, wrong types and aliases included; sometimes no object at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(SCALARS)
    step: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        step["id"] = draw(IDS)
    if draw(st.integers(0, 9)):
        step["task" if draw(st.integers(0, 4)) else "description"] = draw(TASKS)
    if draw(st.booleans()):
        step[draw(st.sampled_from(["dependencies", "depends_on", "deps", "requires"]))] = draw(DEPENDENCIES)
    for hint in ("tool_hint", "model_hint"):
        if draw(st.integers(0, 3)) == 0:
            step[hint] = draw(HINTS)
    if draw(st.integers(0, 9)) == 0:
        step[draw(texts(8))] = draw(SCALARS)
    return step


@st.composite
def plan_like(draw: st.DrawFn, steps: st.SearchStrategy[list[Any]] | None = None) -> Any:
    """A plan in one of the shapes models write: ``{"steps": [...]}``, a bare list, ``plan.steps``, ``steps``
    as a JSON string or a dict by id, a bare step.
    """
    items = draw(steps if steps is not None else st.lists(step_objects(), max_size=9))
    shape = draw(st.integers(0, 6))
    if shape == 0:
        return items
    if shape == 1:
        return {"plan": {"goal": "g", "steps": items}}
    if shape == 2:
        return {"steps": json.dumps(items)}
    if shape == 3:
        return {"steps": {str(i.get("id", n)) if isinstance(i, dict) else str(n): i for n, i in enumerate(items)}}
    if shape == 4 and items:
        return items[0]
    return {"steps": items}


def well_typed_steps(max_size: int = 9) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Steps with the right types (ids from a small pool, so dangling references, cycles and duplicates
    still happen).
    """
    pool = [f"s{n}" for n in range(1, 9)]
    step = st.fixed_dictionaries(
        {
            "id": st.sampled_from(pool),
            "task": texts(40).filter(lambda text: text.strip() != ""),
            "dependencies": st.lists(st.sampled_from(pool), max_size=3),
        },
        optional={
            "tool_hint": st.sampled_from(["search", "fast", None]),
            "model_hint": st.sampled_from(["fast", None]),
        },
    )
    return st.lists(step, min_size=1, max_size=max_size)


@st.composite
def many_steps(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Hundreds of steps (up to 500), each depending on a random earlier or later one."""
    count = draw(st.integers(50, 500))
    seed = draw(st.integers(0, 2**16))
    return [
        {"id": f"s{n}", "task": f"step {n}", "dependencies": [f"s{(n * 7 + seed) % (count + 3)}"]} for n in range(count)
    ]


# --- analysis -----------------------------------------------------------------------------------------------

ACHIEVED = st.one_of(
    SCALARS,
    st.sampled_from(["true", "false", "yes", "no", "TRUE", "1", "0", " yes ", "achieved", "partially"]),
    st.lists(st.booleans(), max_size=2),
    st.fixed_dictionaries({"type": st.just("boolean")}),
)
CONFIDENCE = st.one_of(
    NUMBERS,
    st.sampled_from(["85%", "85 %", "-3", "150", "1e309", "-1e309", "NaN", "inf", "0.5", " 42% ", "%", "high", ""]),
    texts(10),
    st.none(),
    st.lists(NUMBERS, max_size=2),
)


@st.composite
def analysis_like(draw: st.DrawFn) -> Any:
    """A verdict with its fields as anything."""
    verdict: dict[str, Any] = {}
    for name, values in (
        ("achieved", ACHIEVED),
        ("confidence", CONFIDENCE),
        ("reasoning", st.one_of(texts(80), SCALARS)),
        ("final_answer", st.one_of(texts(80), SCALARS)),
    ):
        if draw(st.integers(0, 7)):
            verdict[name] = draw(values)
    return verdict
