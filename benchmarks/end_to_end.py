"""Whole-run benchmark: one goal end to end, dagmagic against an LLMCompiler-style loop, ReAct and LangGraph.

LLMCompiler's workloads (Kim et al., 2023: HotpotQA, Movie recommendation, ParallelQA) and a straggler, at the
paper's per-call latencies, with every LLM call simulated by ONE timing model shared by every system (see
``PacedLLM``) and the same tools, real ``@tool`` functions that sleep their latency. Systems, in one process
and one run:

- **dagmagic**: ``DagSession.run(goal)`` with the run store off; every call goes through ``PacedLLM`` around a
  ``ScriptedLLM`` whose script is written to issue 22's contract: plans carry ``tool_args`` (with ``$sN``
  references) and the domain, the verdict's ``final_answer`` is the answer. Code without that contract ignores
  those fields, so the step agents, the route call and the synthesis have scripted replies too (a step agent:
  the tool call, then the tool's result restated), as a model would give them: the script measures whichever
  engine is installed;
- **reference**: an LLMCompiler-style loop: the planner streams numbered tool calls (``2. search(query=...)``,
  ``$1`` for task 1's result); a Task Fetching Unit starts each task the moment its line is parsed and its
  dependencies are done; when the plan and every task are done, one joiner call streams
  ``Thought: ... Action: Finish(<answer>)``;
- **ReAct**: one call per tool call (``Thought/Action``, the tool, its observation appended), in order, then
  one call that writes ``Final Answer: ...``;
- **LangGraph plan-and-execute** (when ``langgraph`` is installed: ``pip install -e '.[bench]'``): LangGraph's
  tutorial graph: a planner writes the steps as sentences, an executor agent runs the first remaining step
  (a model call that calls the tool, the tool, a model call that restates the result), then a replanner either
  returns the remaining steps or the response; executor and replanner alternate until it responds.

Every system runs each shape once to warm up, then 3 times (systems interleaved); the table gives medians.
Run: ``python benchmarks/end_to_end.py``. It prints numbers; it asserts nothing about time.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import argparse
import ast
import asyncio
import importlib.util
import json
import math
import operator
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict

from dagmagic import DagSession, DagSettings, ModelRegistry, tool

try:  # before issue 40 the verdict was JSON, its fields in this model's order
    from dagmagic.engine.calls.analyzer import Verdict  # type: ignore[attr-defined]
except ImportError:
    Verdict = None
from dagmagic.events import AnswerDelta
from dagmagic.llm.protocol import Capabilities, ChatRequest, ChatResponse, StreamChunk
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ToolCall

REPEATS = 2

# Per-call latencies (seconds) from the LLMCompiler paper's measurements.
PLANNER = 1.88
"""The planner's call (dagmagic's plan, the reference's plan, LangGraph's planner)."""
ANSWER = 1.62
"""A call that writes the answer (the joiner, dagmagic's synthesis, ReAct's last call, LangGraph's response)."""
ANALYZER = 1.6
"""A smart-model call that judges or chooses (dagmagic's verdict, a ReAct action, LangGraph's replan)."""
FAST = (0.4, 0.8)
"""A fast model's call (dagmagic's route call and step agents' calls, LangGraph's executor): drawn per call."""
FIRST_PIECE = 0.30
"""A streamed reply's first piece arrives at this fraction of the call's latency, the rest evenly after it."""
SEED = 20231204
"""LLMCompiler's arXiv date: fixes the tool and fast-model latencies."""
SCALE = [1.0]
"""Every latency (model and tool) is multiplied by this: 0 for the warm-up and for dagmagic's own time."""


# --- the timing models


def _load_token_rate() -> Any:
    """``dagmagic/llm/token_rate.py`` of THIS tree, loaded by path: it imports nothing of dagmagic, so an older
    engine (``--before``) is timed and counted by exactly the same code.
    """
    path = Path(__file__).resolve().parents[1] / "dagmagic" / "llm" / "token_rate.py"
    spec = importlib.util.spec_from_file_location("_bench_token_rate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the model's annotations through it
    spec.loader.exec_module(module)
    return module


token_rate = _load_token_rate()
TokenRate = token_rate.TokenRate

TIMING: list[Any] = [None]
"""The timing model in use: None for the paper's per-call latencies, else a ``TokenRate``."""


def timing_name(timing: Any) -> str:
    """A timing model as the tables name it."""
    return "per call" if timing is None else f"{timing.output_tokens_per_s:.0f} tok/s"


class PacedLLM:
    """A ``ChatBackend`` that gives every reply of ``inner`` (a zero-latency backend) the timing model in use.

    Per call (``TIMING`` None): a call of latency L (``latency(request)``): a whole reply arrives at L; a streamed
    one in its pieces, the first at ``FIRST_PIECE`` x L, the last at L, the ones between evenly spaced. A plan of
    40 pieces and an answer of 12 cost the same L: the latency is the paper's per call, whatever its length.

    By the token (``TIMING`` a ``TokenRate``): the first piece after ``first_token`` + the prompt's tokens at the
    input rate, each later piece when its last token is written at the output rate, a whole reply when its last
    token is. Every sleep is awaited against the call's start, so sleeps do not drift.

    Usage is counted the same way for every system, in ``cl100k_base`` tokens: prompt = every message's text and
    tool calls, the tool schemas and the response format sent with it; completion = the reply's text and tool
    calls. Every request is kept in ``calls``.
    """

    def __init__(self, inner: Any, latency: Callable[[ChatRequest], float]) -> None:
        self.inner = inner
        self.latency = latency
        self.calls: list[ChatRequest] = []
        self.usage: list[tuple[str, int, int]] = []
        """Per finished call: its purpose, input and output tokens."""

    def capabilities(self, model: str) -> Capabilities:
        """The inner backend's."""
        return self.inner.capabilities(model)  # type: ignore[no-any-return]

    def count_tokens(self, model: str, text: str) -> int:
        """The same count as the usage."""
        return int(token_rate.wire_tokens(text))

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The whole reply, when its timing model says."""
        start = asyncio.get_running_loop().time()
        self.calls.append(request)
        response = _counted(request, await self.inner.complete(request))
        self.usage.append((request.purpose, response.input_tokens, response.output_tokens))
        rate = TIMING[0]
        seconds = self.latency(request) if rate is None else rate.written(response.input_tokens, response.output_tokens)
        await _sleep_until(start + seconds * SCALE[0])
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The reply's pieces, each when its timing model says."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.calls.append(request)
        chunks = [chunk async for chunk in self.inner.stream(request)]
        pieces = [chunk for chunk in chunks if chunk.final is None]
        final = _counted(request, next(chunk.final for chunk in chunks if chunk.final is not None))
        self.usage.append((request.purpose, final.input_tokens, final.output_tokens))
        rate = TIMING[0]
        if rate is None:
            latency = self.latency(request)
            first = FIRST_PIECE * latency
            gap = (latency - first) / max(len(pieces) - 1, 1)
            times = [first + number * gap for number in range(len(pieces))]
            end = latency
        else:
            texts = [piece.text + "".join((d.name or "") + d.arguments for d in piece.tool_calls) for piece in pieces]
            times = token_rate.piece_times(rate, final.input_tokens, texts)
            end = rate.written(final.input_tokens, final.output_tokens)
        for at, piece in zip(times, pieces, strict=True):
            await _sleep_until(start + at * SCALE[0])
            yield piece
        await _sleep_until(start + end * SCALE[0])
        yield StreamChunk(final=final)


async def _sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _counted(request: ChatRequest, response: ChatResponse) -> ChatResponse:
    calls = [(call.name, call.arguments) for call in response.tool_calls]
    return response.model_copy(
        update={
            "input_tokens": token_rate.request_tokens(request),
            "output_tokens": token_rate.reply_tokens(response.content, calls),
        }
    )


# --- tools: the same functions for every system


@dataclass(frozen=True)
class Call:
    """One tool call of a shape: the step id, the tool, its arguments (``$sN``: step sN's result), its
    dependencies, its latency and, for the scripts, the task in words.
    """

    id: str
    tool: str
    args: dict[str, Any]
    deps: tuple[str, ...]
    latency: float
    task: str


@dataclass(frozen=True)
class Shape:
    """A goal, the tool calls that answer it, and the answer."""

    name: str
    goal: str
    calls: tuple[Call, ...]
    answer: str
    search_results: dict[str, str]

    def resolved(self) -> dict[str, dict[str, Any]]:
        """Each call's arguments with the references replaced by the results (what a step agent would write)."""
        results = self.results()
        return {call.id: _substitute(call.args, results) for call in self.calls}

    def results(self) -> dict[str, str]:
        """Each call's observation, computed in dependency order."""
        results: dict[str, str] = {}
        for call in self.calls:
            results[call.id] = observe(call.tool, _substitute(call.args, results), self)
        return results

    def fast_latencies(self) -> dict[str, tuple[float, float]]:
        """Per step, the latencies of a step agent's two calls (tool call, then the restated result)."""
        rng = random.Random(f"{SEED}-{self.name}")
        return {call.id: (rng.uniform(*FAST), rng.uniform(*FAST)) for call in self.calls}

    def route_latency(self) -> float:
        """The latency of dagmagic's domain classification, a fast-model call."""
        return random.Random(f"{SEED}-{self.name}-route").uniform(*FAST)


_REFERENCE = re.compile(r"\$(s\d+)")


def _substitute(args: dict[str, Any], results: dict[str, str]) -> dict[str, Any]:
    """``"$s1"`` -> s1's result; ``$s1`` inside a longer string -> its text."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if isinstance(value, str) and _REFERENCE.fullmatch(value):
            out[key] = results[value[1:]]
        elif isinstance(value, str):
            out[key] = _REFERENCE.sub(lambda m: results[m.group(1)], value)
        else:
            out[key] = value
    return out


SHAPE_IN_USE: list[Shape] = []
"""The shape being run: the tools read their latencies and results from it."""


def _latency(tool_name: str, args: dict[str, Any]) -> float:
    shape = SHAPE_IN_USE[0]
    results = shape.results()
    for call in shape.calls:
        if call.tool == tool_name and _same(_substitute(call.args, results), args):
            return call.latency * SCALE[0]
    raise LookupError(f"{shape.name}: no {tool_name} call with {args}")


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def norm(value: Any) -> str:
        try:
            return repr(float(value))
        except (TypeError, ValueError):
            return " ".join(str(value).split())

    return a.keys() == b.keys() and all(norm(a[k]) == norm(b[k]) for k in a)


def observe(tool_name: str, args: dict[str, Any], shape: Shape) -> str:
    """What a tool returns for ``args`` (as text, the way a step sees it)."""
    if tool_name == "search":
        return shape.search_results[args["query"]]
    if tool_name == "math":
        return _number(_evaluate(str(args["expression"])))
    if tool_name == "compare":
        a, b = float(args["a"]), float(args["b"])
        relation = "larger than" if a > b else "smaller than" if a < b else "equal to"
        return f"{_number(a)} is {relation} {_number(b)} (difference {_number(abs(a - b))})"
    raise LookupError(tool_name)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.4g}"


_OPERATORS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(expression: str) -> float:
    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return float(_OPERATORS[type(node.op)](walk(node.left), walk(node.right)))
        raise ValueError(f"math takes + - * / over numbers, got {expression!r}")

    return walk(ast.parse(expression.replace(",", ""), mode="eval").body)


@tool
async def search(query: str) -> str:
    """Search an encyclopedia and return the passage that answers the query.

    Args:
        query: What to look up.
    """
    await asyncio.sleep(_latency("search", {"query": query}))
    return observe("search", {"query": query}, SHAPE_IN_USE[0])


@tool(name="math")
async def math_tool(expression: str) -> str:
    """Evaluate an arithmetic expression (+ - * / over numbers).

    Args:
        expression: e.g. "5550203 + 10551707".
    """
    await asyncio.sleep(_latency("math", {"expression": expression}))
    return _number(_evaluate(expression))


@tool
async def compare(a: float, b: float) -> str:
    """Compare two numbers: which is larger, and by how much.

    Args:
        a: The first number.
        b: The second number.
    """
    await asyncio.sleep(_latency("compare", {"a": a, "b": b}))
    return observe("compare", {"a": a, "b": b}, SHAPE_IN_USE[0])


TOOLS = [search, math_tool, compare]
TOOL_FUNCTIONS: dict[str, Callable[..., Awaitable[Any]]] = {"search": search, "math": math_tool, "compare": compare}
TOOL_DESCRIPTIONS = """\
search(query: str) -> str: search an encyclopedia and return the passage that answers the query.
math(expression: str) -> str: evaluate an arithmetic expression (+ - * / over numbers).
compare(a: float, b: float) -> str: compare two numbers: which is larger, and by how much."""


async def call_tool(name: str, args: dict[str, Any]) -> str:
    """Run one tool the way a loop outside dagmagic would, returning its observation as text."""
    return str(await TOOL_FUNCTIONS[name](**args))


# --- the shapes


def _search(id: str, query: str, latency: float, deps: tuple[str, ...] = ()) -> Call:
    return Call(id, "search", {"query": query}, deps, latency, f"Search: {query}")


def build_shapes() -> list[Shape]:
    """LLMCompiler's shapes with realistic content; tool latencies within the paper's 0.2-1.13 s."""
    rng = random.Random(SEED)
    movies = ["Braveheart", "Pulp Fiction", "The Shawshank Redemption", "Schindler's List"]
    options = ["The Usual Suspects", "Toy Story", "Pretty Woman", "The Lion King"]
    movie_latency = [round(min(1.13, max(0.2, rng.lognormvariate(math.log(0.5), 0.5))), 2) for _ in range(8)]
    summaries = {
        "Braveheart": "Braveheart (1995): historical war drama directed by and starring Mel Gibson.",
        "Pulp Fiction": "Pulp Fiction (1994): Quentin Tarantino's crime film of intersecting stories.",
        "The Shawshank Redemption": "The Shawshank Redemption (1994): prison drama about hope and friendship.",
        "Schindler's List": "Schindler's List (1993): Steven Spielberg's historical drama about the Holocaust.",
        "The Usual Suspects": "The Usual Suspects (1995): neo-noir crime thriller with a famous twist ending.",
        "Toy Story": "Toy Story (1995): Pixar's animated family comedy about toys that come to life.",
        "Pretty Woman": "Pretty Woman (1990): romantic comedy starring Julia Roberts and Richard Gere.",
        "The Lion King": "The Lion King (1994): Disney's animated musical drama about a young lion.",
    }
    movie_calls = tuple(
        _search(f"s{i + 1}", f"{title} movie", movie_latency[i]) for i, title in enumerate(movies + options)
    )
    return [
        Shape(
            "HotpotQA: 2 searches",
            "Were Scott Derrickson and Ed Wood of the same nationality?",
            (_search("s1", "Scott Derrickson", 0.62), _search("s2", "Ed Wood", 0.95)),
            "Yes. Both are American: Scott Derrickson is an American director, screenwriter and producer, "
            "and Ed Wood was an American filmmaker, actor and author.",
            {
                "Scott Derrickson": "Scott Derrickson (born 1966) is an American director, screenwriter and producer.",
                "Ed Wood": "Edward Davis Wood Jr. (1924-1978) was an American filmmaker, actor and author.",
            },
        ),
        Shape(
            "Movie rec.: 8 parallel searches",
            f"Find a movie similar to {', '.join(movies)}. Options: "
            + ", ".join(f"({letter}) {title}" for letter, title in zip("ABCD", options, strict=True)),
            movie_calls,
            "(A) The Usual Suspects. Like Braveheart, Pulp Fiction, The Shawshank Redemption and Schindler's "
            "List, it is an acclaimed mid-1990s drama for adults, a crime story with a serious tone; the other "
            "options are an animated family film, a romantic comedy and an animated musical.",
            {f"{title} movie": summaries[title] for title in movies + options},
        ),
        Shape(
            "ParallelQA A: 3 searches, add, compare",
            "Do Norway and Sweden together have more people than Germany?",
            (
                _search("s1", "population of Norway", 0.55),
                _search("s2", "population of Sweden", 0.40),
                _search("s3", "population of Germany", 1.13),
                Call("s4", "math", {"expression": "$s1 + $s2"}, ("s1", "s2"), 0.20, "Add the two populations"),
                Call("s5", "compare", {"a": "$s4", "b": "$s3"}, ("s4", "s3"), 0.20, "Compare the sum with Germany"),
            ),
            "No. Norway (5,550,203) and Sweden (10,551,707) together have 16,101,910 people, about 68.4 million "
            "fewer than Germany's 84,482,267.",
            {
                "population of Norway": "5550203",
                "population of Sweden": "10551707",
                "population of Germany": "84482267",
            },
        ),
        Shape(
            "ParallelQA B: 4 searches, 2 adds, compare",
            "Which pair has the larger total area: Norway and Sweden, or Finland and Denmark?",
            (
                _search("s1", "area of Norway in km2", 0.40),
                _search("s2", "area of Sweden in km2", 1.00),
                _search("s3", "area of Finland in km2", 0.60),
                _search("s4", "area of Denmark in km2", 0.50),
                Call("s5", "math", {"expression": "$s1 + $s2"}, ("s1", "s2"), 0.20, "Add Norway's and Sweden's"),
                Call("s6", "math", {"expression": "$s3 + $s4"}, ("s3", "s4"), 0.20, "Add Finland's and Denmark's"),
                Call("s7", "compare", {"a": "$s5", "b": "$s6"}, ("s5", "s6"), 0.20, "Compare the two sums"),
            ),
            "Norway and Sweden: together 835,502 km2, against 381,388 km2 for Finland and Denmark, 454,114 km2 more.",
            {
                "area of Norway in km2": "385207",
                "area of Sweden in km2": "450295",
                "area of Finland in km2": "338455",
                "area of Denmark in km2": "42933",
            },
        ),
        Shape(
            "Straggler: fast->a->b->c | slow",
            "Take the year the Eiffel Tower opened, add 10, double it and subtract 5; also, how high is Mont Blanc?",
            (
                _search("s1", "year the Eiffel Tower opened", 0.20),
                Call("s2", "math", {"expression": "$s1 + 10"}, ("s1",), 0.25, "Add 10 to the year"),
                Call("s3", "math", {"expression": "$s2 * 2"}, ("s2",), 0.25, "Double it"),
                Call("s4", "math", {"expression": "$s3 - 5"}, ("s3",), 0.25, "Subtract 5"),
                _search("s5", "height of Mont Blanc", 1.13),
            ),
            "The Eiffel Tower opened in 1889; 1889 + 10 = 1899, doubled 3798, minus 5 gives 3793. "
            "Mont Blanc is 4,806 m high.",
            {
                "year the Eiffel Tower opened": "1889",
                "height of Mont Blanc": "Mont Blanc is 4,806 m (15,768 ft) high, the highest peak of the Alps.",
            },
        ),
    ]


def critical_tools(shape: Shape) -> float:
    """The longest chain of tool latencies: the tools' share of any system's critical path."""
    finish: dict[str, float] = {}
    for call in shape.calls:
        finish[call.id] = max((finish[d] for d in call.deps), default=0.0) + call.latency
    return max(finish.values())


# --- what each system's run yields


@dataclass
class Outcome:
    """One run of one system on one shape."""

    seconds: float
    calls: int
    prompt_tokens: int
    completion_tokens: int
    first_answer: float | None
    answer: str
    breakdown: dict[str, float] = field(default_factory=dict)
    per_call: list[tuple[str, int, int]] = field(default_factory=list)
    """Each call's purpose, input and output tokens."""


class StreamReader:
    """Reads a ``PacedLLM`` stream like a streaming client: the text so far, when the answer began, usage."""

    def __init__(self, answer_marker: str | None) -> None:
        self.marker = answer_marker
        self.text = ""
        self.answer_at: float | None = None
        self.final: ChatResponse | None = None

    async def read(self, backend: PacedLLM, request: ChatRequest, on_text: Callable[[str], None] | None = None) -> str:
        """The whole reply's text; ``on_text`` sees the text so far after each piece."""
        async for chunk in backend.stream(request):
            if chunk.final is not None:
                self.final = chunk.final
                continue
            self.text += chunk.text + "".join(delta.arguments for delta in chunk.tool_calls)
            if self.answer_at is None and self.marker is not None:
                start = self.text.find(self.marker)
                if start >= 0 and len(self.text) > start + len(self.marker):
                    self.answer_at = time.perf_counter()
            if on_text is not None:
                on_text(self.text)
        return self.text


class Tally:
    """Calls and tokens of a loop outside dagmagic, from the replies' usage (counted by ``PacedLLM``)."""

    def __init__(self) -> None:
        self.calls = 0
        self.prompt = 0
        self.completion = 0

    def add(self, response: ChatResponse | None) -> None:
        """Count one finished call."""
        assert response is not None
        self.calls += 1
        self.prompt += response.input_tokens
        self.completion += response.output_tokens


def _request(purpose: str, messages: list[dict[str, Any]], step_id: str | None = None) -> ChatRequest:
    return ChatRequest(model="sim", messages=messages, purpose=purpose, step_id=step_id)  # type: ignore[arg-type]


def _echo_backend(latency: Callable[[ChatRequest], float], reply: Callable[[ScriptedRequest], Any]) -> PacedLLM:
    return PacedLLM(ScriptedLLM({"*": reply}), latency)


# --- (a) dagmagic


PLAN_LINES = importlib.util.find_spec("dagmagic.engine.calls.plan_lines") is not None
"""Whether the engine reads plan lines (a tool step written as its call), or JSON steps (before issue 40)."""


def dagmagic_script(shape: Shape) -> dict[str, Any]:
    """The replies a model would give dagmagic for ``shape``, to issue 22's contract (see the module docstring)."""
    resolved = shape.resolved()
    results = shape.results()
    steps = []
    for call in shape.calls:
        if PLAN_LINES:  # a step that is one call is written as the call: its dependencies are its references
            steps.append({"id": call.id, "tool_hint": call.tool, "tool_args": call.args})
            continue
        step: dict[str, Any] = {"id": call.id, "task": call.task, "dependencies": list(call.deps)}
        step["tool_hint"] = call.tool
        step["tool_args"] = call.args
        steps.append(step)
    verdict = {
        "achieved": True,
        "confidence": 0.95,
        # verdict lines ask for a reason only when the goal is not reached; the JSON verdict required one
        "reasoning": "" if Verdict is None else "Every step succeeded and together they answer the goal.",
        "final_answer": shape.answer,
    }
    script: dict[str, Any] = {
        "route": [{"domain": None}],
        "plan": [{"domain": None, "steps": steps}],
        "analyze": [_in_schema_order(verdict)],
        "synthesize": [_words(shape.answer)],
    }
    for call in shape.calls:
        script[f"step:{call.id}"] = [ToolCall(call.tool, resolved[call.id]), results[call.id]]
    return script


def _in_schema_order(verdict: dict[str, Any]) -> dict[str, Any]:
    """The verdict's fields in the order the installed engine's schema asks for them: a model writes them so."""
    return verdict if Verdict is None else {name: verdict[name] for name in Verdict.model_fields}


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [word + (" " if i < len(words) - 1 else "") for i, word in enumerate(words)]


def dagmagic_latency(shape: Shape) -> Callable[[ChatRequest], float]:
    """Per call: plan, verdict, answer at the paper's latencies; route and step agents' calls fast."""
    fast = shape.fast_latencies()
    turns: dict[str, int] = {}

    def latency(request: ChatRequest) -> float:
        if request.purpose == "step" and request.step_id in fast:
            turn = turns.get(request.step_id, 0)
            turns[request.step_id] = turn + 1
            return fast[request.step_id][min(turn, 1)]
        return {"plan": PLANNER, "analyze": ANALYZER, "synthesize": ANSWER, "route": shape.route_latency()}.get(
            request.purpose, ANALYZER
        )

    return latency


async def run_dagmagic(shape: Shape) -> Outcome:
    """One goal through ``DagSession``."""
    backend = PacedLLM(ScriptedLLM(dagmagic_script(shape)), dagmagic_latency(shape))
    settings = DagSettings(store="none", max_concurrency=8, plan_max_steps=8)
    session = DagSession(ModelRegistry().register("sim", backend), settings, tools=TOOLS)
    started = time.time()
    begin = time.perf_counter()
    run = await session.run(shape.goal)
    seconds = time.perf_counter() - begin
    if run.state.status != "done":
        raise RuntimeError(f"dagmagic on {shape.name}: {run.state.status} ({run.state.error})")
    deltas = [e.at for e in run.events if isinstance(e, AnswerDelta)]
    usage = run.state.usage
    return Outcome(
        seconds,
        len(run.state.calls),
        usage.input_tokens,
        usage.output_tokens,
        min(deltas) - started if deltas else None,
        run.state.answer,
        _breakdown(run, started),
        list(backend.usage),
    )


def _breakdown(run: Any, started: float) -> dict[str, float]:
    """Where dagmagic's time went: each phase's start and end, seconds from the run's start."""
    calls = run.state.calls
    marks: dict[str, float] = {}
    for purpose in ("route", "plan", "analyze", "synthesize"):
        mine = [c for c in calls if c.purpose == purpose]
        if mine:
            marks[f"{purpose} start"] = min(c.started_at for c in mine) - started
            marks[f"{purpose} end"] = max(c.started_at + c.latency for c in mine) - started
    steps = [s for r in run.state.rounds for s in r.plan.steps if s.started_at is not None]
    if steps:
        marks["steps start"] = min(s.started_at for s in steps) - started
        marks["steps end"] = max(s.completed_at or 0.0 for s in steps) - started
    marks["finished"] = (run.state.finished_at or 0.0) - started
    return marks


# --- (b) the LLMCompiler-style reference


REFERENCE_PLANNER_PROMPT = f"""\
Given a user query, create a plan to solve it with the utmost parallelizability. Each plan should comprise an
action from the following {3 + 1} types:
{TOOL_DESCRIPTIONS}
join(): collects and combines results from prior actions; always the last action of the plan.

Guidelines:
 - Each action described above contains input/output types and description.
 - Each action in the plan should strictly be one of the above types.
 - Each action MUST have a unique ID, which is strictly increasing.
 - Inputs for actions can either be constants or outputs from preceding actions. In the latter case, use the
   format $id to denote the ID of the previous action whose output will be the input.
 - Always call join as the last action in the plan. Say '<END_OF_PLAN>' after you call join.
 - Ensure the plan maximizes parallelizability.
 - Only use the provided action types. If a query cannot be addressed using these, invoke the join action.

Question: Is the tallest of Mount Everest and K2 higher than 8,800 m?
1. search(query="height of Mount Everest")
2. search(query="height of K2")
3. join()
<END_OF_PLAN>"""

REFERENCE_JOINER_PROMPT = """\
Solve a question answering task. Here are some guidelines:
 - In the Assistant Scratchpad, you will be given results of a plan you have executed to answer the user's
   question.
 - Thought needs to reason about the question based on the Observations in 1-2 sentences.
 - Ignore irrelevant action results.
 - If the required information is present, give a concise but complete and helpful answer to the user's
   question.
 - If you are unable to give a satisfactory finishing answer, replan to get the required information.
Respond in the following format:
Thought: <reason about the task results and whether you have sufficient information to answer the question>
Action: <action to take>
Available actions:
 (1) Finish(the final answer to return to the user): returns the answer and finishes the task.
 (2) Replan(the reasoning and other information that will help you plan again. Can be a line): instructs why we
     must replan"""

_PLAN_LINE = re.compile(r"^\s*(\d+)\.\s*(\w+)\((.*)\)\s*$")


def reference_plan_text(shape: Shape) -> str:
    """The plan an LLMCompiler planner writes for ``shape``."""
    index = {call.id: number for number, call in enumerate(shape.calls, 1)}
    lines = []
    for number, call in enumerate(shape.calls, 1):
        args = ", ".join(f"{key}={_reference_value(value, index)}" for key, value in call.args.items())
        lines.append(f"{number}. {call.tool}({args})")
    lines.append(f"{len(shape.calls) + 1}. join()")
    return "\n".join(lines) + "\n<END_OF_PLAN>"


def _reference_value(value: Any, index: dict[str, int]) -> str:
    if isinstance(value, str) and _REFERENCE.fullmatch(value):
        return f"${index[value[1:]]}"
    if isinstance(value, str):
        return json.dumps(_REFERENCE.sub(lambda m: f"${index[m.group(1)]}", value))
    return repr(value)


def _parse_task(line: str) -> tuple[int, str, dict[str, Any], set[int]] | None:
    """``3. math(expression="$1 + $2")`` -> (3, "math", {"expression": "$1 + $2"}, {1, 2}); None for other lines."""
    match = _PLAN_LINE.match(line)
    if match is None:
        return None
    number, name, text = int(match.group(1)), match.group(2), match.group(3)
    deps = {int(d) for d in re.findall(r"\$(\d+)", text)}
    named = re.sub(r"\$(\d+)", r"_ref_\1", text)
    call = ast.parse(f"f({named})", mode="eval").body
    assert isinstance(call, ast.Call)
    args = {kw.arg: _literal(kw.value) for kw in call.keywords if kw.arg is not None}
    return number, name, args, deps


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Name) and node.id.startswith("_ref_"):
        return f"${node.id[5:]}"
    value = ast.literal_eval(node)
    return re.sub(r"_ref_(\d+)", r"$\1", value) if isinstance(value, str) else value


def _fill(args: dict[str, Any], results: dict[int, str]) -> dict[str, Any]:
    """``$N`` (whole value or inside a string) -> task N's result."""
    return {
        key: re.sub(r"\$(\d+)", lambda m: results[int(m.group(1))], value) if isinstance(value, str) else value
        for key, value in args.items()
    }


async def run_reference(shape: Shape) -> Outcome:
    """LLMCompiler: streamed plan, Task Fetching Unit dispatching each task once parsed and unblocked, joiner."""
    plan_text = reference_plan_text(shape)
    joiner_text = "Thought: The observations give everything the question needs.\nAction: Finish(" + shape.answer + ")"
    latencies = {"plan": PLANNER, "synthesize": ANSWER}
    backend = _echo_backend(
        lambda request: latencies[request.purpose],
        lambda request: _words(plan_text) if request.purpose == "plan" else _words(joiner_text),
    )
    tally = Tally()
    begin = time.perf_counter()
    results: dict[int, str] = {}
    done: dict[int, asyncio.Event] = {}
    tasks: list[asyncio.Task[None]] = []
    parsed_lines = 0

    async def execute(number: int, name: str, args: dict[str, Any], deps: set[int]) -> None:
        for dep in deps:
            await done.setdefault(dep, asyncio.Event()).wait()
        results[number] = await call_tool(name, _fill(args, results))
        done.setdefault(number, asyncio.Event()).set()

    def fetch_tasks(text: str) -> None:
        # the Task Fetching Unit: every complete line is a task, started at once; it waits for its own inputs
        nonlocal parsed_lines
        lines = text.split("\n")[:-1]  # the last line may still be arriving
        for line in lines[parsed_lines:]:
            task = _parse_task(line)
            if task is not None and task[1] != "join":
                tasks.append(asyncio.create_task(execute(*task)))
        parsed_lines = len(lines)

    plan_messages = [
        {"role": "system", "content": REFERENCE_PLANNER_PROMPT},
        {"role": "user", "content": f"Question: {shape.goal}"},
    ]
    planner = StreamReader(None)
    await planner.read(backend, _request("plan", plan_messages), fetch_tasks)
    fetch_tasks(planner.text + "\n")
    tally.add(planner.final)
    await asyncio.gather(*tasks)
    scratchpad = "\n".join(
        f"{line}\nObservation: {results[int(line.split('.')[0])]}"
        for line in plan_text.splitlines()
        if _parse_task(line) and "join()" not in line
    )
    joiner_messages = [
        {"role": "system", "content": REFERENCE_JOINER_PROMPT},
        {"role": "user", "content": f"Question: {shape.goal}\n\n{scratchpad}"},
    ]
    joiner = StreamReader("Finish(")
    text = await joiner.read(backend, _request("synthesize", joiner_messages))
    tally.add(joiner.final)
    seconds = time.perf_counter() - begin
    answer = text.split("Finish(", 1)[1].removesuffix(")")
    first = joiner.answer_at - begin if joiner.answer_at is not None else None
    return Outcome(seconds, tally.calls, tally.prompt, tally.completion, first, answer, {}, list(backend.usage))


# --- (c) a sequential ReAct agent


REACT_PROMPT = f"""\
Answer the question. You can use these tools:
{TOOL_DESCRIPTIONS}
Use this format:
Thought: what to do next
Action: tool_name(arguments)
Observation: the tool's result (given to you)
... (Thought/Action/Observation repeats as needed)
Thought: I know the answer
Final Answer: the answer to the question"""


async def run_react(shape: Shape) -> Outcome:
    """Thought/Action, the tool, its Observation, one call at a time; then the final answer."""
    resolved = shape.resolved()
    actions = [
        f"Thought: I need {call.task[0].lower()}{call.task[1:]}.\nAction: {call.tool}("
        + ", ".join(f"{k}={json.dumps(v)}" for k, v in resolved[call.id].items())
        + ")"
        for call in shape.calls
    ]
    final = f"Thought: I know the answer.\nFinal Answer: {shape.answer}"
    backend = _echo_backend(
        lambda request: ANSWER if request.step_id == "final" else ANALYZER,
        lambda request: _words(final if request.step_id == "final" else actions[request.index]),
    )
    tally = Tally()
    begin = time.perf_counter()
    scratchpad = f"Question: {shape.goal}\n"
    for call in shape.calls:
        messages = [{"role": "system", "content": REACT_PROMPT}, {"role": "user", "content": scratchpad}]
        reader = StreamReader(None)
        text = await reader.read(backend, _request("step", messages, "action"))
        tally.add(reader.final)
        observation = await call_tool(call.tool, resolved[call.id])
        scratchpad += f"{text}\nObservation: {observation}\n"
    messages = [{"role": "system", "content": REACT_PROMPT}, {"role": "user", "content": scratchpad}]
    reader = StreamReader("Final Answer: ")
    text = await reader.read(backend, _request("step", messages, "final"))
    tally.add(reader.final)
    seconds = time.perf_counter() - begin
    first = reader.answer_at - begin if reader.answer_at is not None else None
    answer = text.split("Final Answer: ", 1)[1]
    return Outcome(seconds, tally.calls, tally.prompt, tally.completion, first, answer, {}, list(backend.usage))


# --- (d) LangGraph's plan-and-execute


PAE_PLANNER_PROMPT = """\
For the given objective, come up with a simple step by step plan. This plan should involve individual tasks,
that if executed correctly will yield the correct answer. Do not add any superfluous steps. The result of the
final step should be the final answer. Make sure that each step has all the information needed - do not skip
steps. Answer as JSON: {"steps": ["...", ...]}"""

PAE_REPLANNER_PROMPT = """\
For the given objective, come up with a simple step by step plan. [...as the planner...]
Update your plan accordingly. If no more steps are needed and you can return to the user, then respond with
that. Otherwise, fill out the plan. Only add steps to the plan that still NEED to be done. Do not return
previously done steps as part of the plan.
Answer as JSON: {"action": {"response": "..."}} or {"action": {"steps": ["...", ...]}}"""


class _PlanExecuteState(TypedDict):
    input: str
    plan: list[str]
    past_steps: Annotated[list[tuple[str, str]], operator.add]
    response: str


def plan_and_execute_model(shape: Shape) -> PacedLLM:
    """The model LangGraph's plan-and-execute talks to: planner, executor agent (tool call, then the result
    restated), replanner (the remaining steps, or the response once none remain).
    """
    resolved = shape.resolved()
    results = shape.results()
    fast = shape.fast_latencies()
    response_json = json.dumps({"action": {"response": shape.answer}})

    def reply(request: ScriptedRequest) -> Any:
        if request.purpose == "plan":
            return _words(json.dumps({"steps": [call.task for call in shape.calls]}))
        if request.purpose == "step":
            call = shape.calls[int(request.step_id or "0")]
            first_turn = request.messages[-1]["role"] == "user"
            return ToolCall(call.tool, resolved[call.id]) if first_turn else results[call.id]
        remaining = json.loads(request.messages[-1]["content"].rsplit("REMAINING:", 1)[1])
        return _words(json.dumps({"action": {"steps": remaining}}) if remaining else response_json)

    def latency(request: ChatRequest) -> float:
        if request.purpose == "plan":
            return PLANNER
        if request.purpose == "step":
            turn = 0 if request.messages[-1]["role"] == "user" else 1
            return fast[shape.calls[int(request.step_id or "0")].id][turn]
        return ANSWER if request.messages[-1]["content"].endswith("REMAINING:[]") else ANALYZER

    return _echo_backend(latency, reply)


def langgraph_runner(shape: Shape) -> Callable[[], Awaitable[Outcome]] | None:
    """LangGraph's plan-and-execute tutorial graph over the same tools and timing, or None without LangGraph."""
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    step_of = {call.task: call for call in shape.calls}
    response_marker = '{"action": {"response": "'
    tally = Tally()
    answer_at: list[float] = []

    async def plan_step(state: _PlanExecuteState) -> dict[str, Any]:
        messages = [{"role": "system", "content": PAE_PLANNER_PROMPT}, {"role": "user", "content": state["input"]}]
        reader = StreamReader(None)
        text = await reader.read(backend, _request("plan", messages))
        tally.add(reader.final)
        return {"plan": json.loads(text)["steps"]}

    async def execute_step(state: _PlanExecuteState) -> dict[str, Any]:
        task = state["plan"][0]
        call = step_of[task]
        number = str(shape.calls.index(call))
        plan = "\n".join(f"{i + 1}. {step}" for i, step in enumerate(state["plan"]))
        done = "\n".join(f"{step}: {result}" for step, result in state["past_steps"])
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a helpful assistant. Use the tools you are given."},
            {
                "role": "user",
                "content": f"For the following plan:\n{plan}\n\nDone so far:\n{done}\n\n"
                f"You are tasked with executing step 1, {task}.",
            },
        ]
        schemas = [t.schema() for t in TOOLS]
        first = await backend.complete(_request("step", messages, number).model_copy(update={"tools": schemas}))
        tally.add(first)
        tool_call = first.tool_calls[0]
        observation = await call_tool(tool_call.name, json.loads(tool_call.arguments))
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [tool_call.model_dump()]},
            {"role": "tool", "content": observation, "tool_call_id": tool_call.id},
        ]
        second = await backend.complete(_request("step", messages, number).model_copy(update={"tools": schemas}))
        tally.add(second)
        return {"past_steps": [(task, second.content)]}

    async def replan_step(state: _PlanExecuteState) -> dict[str, Any]:
        done = {step for step, _ in state["past_steps"]}
        remaining = [call.task for call in shape.calls if call.task not in done]
        past = "\n".join(f"{step}: {result}" for step, result in state["past_steps"])
        messages = [
            {"role": "system", "content": PAE_REPLANNER_PROMPT},
            {
                "role": "user",
                "content": f"Objective: {state['input']}\nOriginal plan: {json.dumps(state['plan'])}\n"
                f"Steps done so far:\n{past}\nREMAINING:{json.dumps(remaining)}",
            },
        ]
        reader = StreamReader(response_marker)
        text = await reader.read(backend, _request("analyze", messages))
        tally.add(reader.final)
        action = json.loads(text)["action"]
        if "response" in action:
            if reader.answer_at is not None:
                answer_at.append(reader.answer_at)
            return {"response": action["response"]}
        return {"plan": action["steps"]}

    backend = plan_and_execute_model(shape)
    graph: Any = StateGraph(_PlanExecuteState)
    graph.add_node("planner", plan_step)
    graph.add_node("agent", execute_step)
    graph.add_node("replan", replan_step)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "agent")
    graph.add_edge("agent", "replan")
    graph.add_conditional_edges("replan", lambda state: END if state.get("response") else "agent", ["agent", END])
    compiled = graph.compile()

    async def run() -> Outcome:
        nonlocal tally
        tally = Tally()
        answer_at.clear()
        backend.calls.clear()
        backend.usage.clear()
        begin = time.perf_counter()
        state = await compiled.ainvoke({"input": shape.goal, "past_steps": []}, {"recursion_limit": 100})
        seconds = time.perf_counter() - begin
        first = answer_at[0] - begin if answer_at else None
        answer = state["response"]
        return Outcome(seconds, tally.calls, tally.prompt, tally.completion, first, answer, {}, list(backend.usage))

    return run


# --- measuring and reporting


SYSTEMS = ["dagmagic", "reference", "ReAct", "LangGraph P&E"]
TIMINGS: list[Any] = [
    None,
    TokenRate(first_token=0.3, input_tokens_per_s=2000, output_tokens_per_s=40),
    TokenRate(first_token=0.3, input_tokens_per_s=2000, output_tokens_per_s=100),
]
"""The paper's per-call latencies, then providers that charge by the token, writing 40 and 100 tokens a second."""

Results = dict[str, dict[str, dict[str, list[Outcome]]]]
"""Outcomes by timing model, shape and system."""


async def measure(shapes: list[Shape], systems: list[str], repeats: int) -> Results:
    """Outcomes per timing model, shape and system; repeats interleave the systems so drift hits all alike."""
    runners: dict[str, dict[str, Callable[[], Awaitable[Outcome]]]] = {}
    for shape in shapes:
        everyone: dict[str, Callable[[], Awaitable[Outcome]]] = {
            "dagmagic": lambda shape=shape: run_dagmagic(shape),  # type: ignore[misc]
            "reference": lambda shape=shape: run_reference(shape),  # type: ignore[misc]
            "ReAct": lambda shape=shape: run_react(shape),  # type: ignore[misc]
        }
        graph = langgraph_runner(shape) if "LangGraph P&E" in systems else None
        if graph is not None:
            everyone["LangGraph P&E"] = graph
        runners[shape.name] = {name: run for name, run in everyone.items() if name in systems}
    results: Results = {}
    plan: list[tuple[Any, float]] = [(None, 0.0)] + [(timing, 1.0) for timing in TIMINGS for _ in range(repeats)]
    for number, (timing, scale) in enumerate(plan):  # the first pass, every latency 0, warms up: not kept
        TIMING[0], SCALE[0] = timing, scale
        for shape in shapes:
            SHAPE_IN_USE[:] = [shape]
            for name, run in runners[shape.name].items():
                outcome = await run()
                if " ".join(outcome.answer.split()) != " ".join(shape.answer.split()):
                    raise RuntimeError(f"{name} on {shape.name} answered {outcome.answer!r}")
                if number:
                    by_shape = results.setdefault(timing_name(timing), {}).setdefault(shape.name, {})
                    by_shape.setdefault(name, []).append(outcome)
    TIMING[0], SCALE[0] = None, 0.0  # dagmagic's own time: the same runs with every latency 0
    for _ in range(repeats):
        for shape in shapes:
            SHAPE_IN_USE[:] = [shape]
            own = results[timing_name(None)][shape.name].setdefault("dagmagic, latencies 0", [])
            own.append(await run_dagmagic(shape))
    SCALE[0] = 1.0
    return results


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _purpose_tokens(outcomes: list[Outcome], purpose: str) -> tuple[float, float, float]:
    """Median per goal: calls of ``purpose``, input tokens per such call, output tokens per such call."""
    calls, inputs, outputs = [], [], []
    for outcome in outcomes:
        mine = [(i, o) for p, i, o in outcome.per_call if p == purpose]
        calls.append(len(mine))
        inputs.extend(i for i, _ in mine)
        outputs.extend(o for _, o in mine)
    return statistics.median(calls), _median(list(inputs)) or 0.0, _median(list(outputs)) or 0.0


def summary(shapes: list[Shape], results: Results) -> dict[str, dict[str, float]]:
    """Per shape, the issue's measures as numbers: ratios to the reference per timing model, plan tokens."""
    out: dict[str, dict[str, float]] = {}
    for shape in shapes:
        row: dict[str, float] = {}
        for timing in TIMINGS:
            name = timing_name(timing)
            by_system = results[name][shape.name]
            dag, ref = by_system["dagmagic"], by_system["reference"]
            row[f"e2e {name}"] = statistics.median(o.seconds for o in dag) / statistics.median(o.seconds for o in ref)
            dag_first, ref_first = _median([o.first_answer for o in dag]), _median([o.first_answer for o in ref])
            row[f"first {name}"] = dag_first / ref_first if dag_first and ref_first else math.nan
        per_call = results[timing_name(None)][shape.name]
        _, dag_plan_in, dag_plan_out = _purpose_tokens(per_call["dagmagic"], "plan")
        _, ref_plan_in, ref_plan_out = _purpose_tokens(per_call["reference"], "plan")
        row.update(
            {
                "plan out x": dag_plan_out / ref_plan_out,
                "plan in x": dag_plan_in / ref_plan_in,
                "calls dagmagic": statistics.median(o.calls for o in per_call["dagmagic"]),
                "calls reference": statistics.median(o.calls for o in per_call["reference"]),
                "plan in dagmagic": dag_plan_in,
                "plan in reference": ref_plan_in,
                "plan out dagmagic": dag_plan_out,
                "plan out reference": ref_plan_out,
            }
        )
        out[shape.name] = row
    return out


def report(shapes: list[Shape], results: Results, seconds: float, repeats: int) -> None:
    """The tables per timing model, tokens per call, the goal check and where dagmagic's time went."""
    for timing in TIMINGS:
        _report_timing(shapes, results[timing_name(timing)], timing)
    print(f"Medians of {repeats} runs after a warm-up. x ref: end-to-end / the reference's. Tokens are per goal,")
    print("counted in cl100k_base for every system. 1st answer: seconds from the start to the first piece of the")
    print("answer's text (dagmagic: the first AnswerDelta).")
    print()
    _report_tokens_per_call(shapes, results[timing_name(None)])
    print()
    print_summary(summary(shapes, results))
    print()
    _report_breakdown(shapes, results)
    print("tools crit.: the longest chain of tool latencies; own ms: dagmagic's whole run with every latency 0")
    print("(model calls and tools answer at once): the engine's own time per goal.")
    if any("LangGraph P&E" in r for r in results[timing_name(None)].values()):
        from importlib.metadata import version

        print(f"\nLangGraph: {version('langgraph')}")
    else:
        print("\nLangGraph: not measured (pip install -e '.[bench]')")
    print(f"Total benchmark time: {seconds:.1f}s")


def _report_timing(shapes: list[Shape], results: dict[str, dict[str, list[Outcome]]], timing: Any) -> None:
    if timing is None:
        title = "Per-call latencies (the paper's)"
    else:
        title = (
            f"By the token: first token {timing.first_token}s + input at {timing.input_tokens_per_s:.0f} tok/s, "
            f"output at {timing.output_tokens_per_s:.0f} tok/s"
        )
    print(title)
    header = (
        f"{'shape':42}{'system':15}{'end-to-end':>11}{'x ref':>7}{'LLM calls':>10}"
        f"{'prompt tok':>11}{'compl. tok':>11}{'1st answer':>11}{'x ref':>7}"
    )
    print(header)
    print("-" * len(header))
    for shape in shapes:
        ref = results[shape.name]["reference"]
        ref_seconds = statistics.median(o.seconds for o in ref)
        ref_first = _median([o.first_answer for o in ref])
        for system in SYSTEMS:
            outcomes = results[shape.name].get(system)
            label = shape.name if system == "dagmagic" else ""
            if not outcomes:
                continue
            e2e = statistics.median(o.seconds for o in outcomes)
            first = _median([o.first_answer for o in outcomes])
            row = (
                f"{label:42}{system:15}{e2e:10.2f}s{e2e / ref_seconds:7.2f}"
                f"{statistics.median(o.calls for o in outcomes):10.0f}"
                f"{statistics.median(o.prompt_tokens for o in outcomes):11.0f}"
                f"{statistics.median(o.completion_tokens for o in outcomes):11.0f}"
            )
            if first is not None and ref_first:
                row += f"{first:10.2f}s{first / ref_first:7.2f}"
            else:
                row += f"{'-':>11}{'-':>7}"
            print(row)
    print()


def _report_tokens_per_call(shapes: list[Shape], results: dict[str, dict[str, list[Outcome]]]) -> None:
    print("Tokens per call (median input / output tokens of one call of that purpose; calls a goal):")
    print(f"{'shape':42}{'system':11}{'purpose':>11}{'calls':>7}{'input':>8}{'output':>8}")
    for shape in shapes:
        for system in ("dagmagic", "reference"):
            outcomes = results[shape.name][system]
            purposes = dict.fromkeys(p for o in outcomes for p, _, _ in o.per_call)
            for number, purpose in enumerate(purposes):
                calls, inputs, outputs = _purpose_tokens(outcomes, purpose)
                label = shape.name if system == "dagmagic" and number == 0 else ""
                shown = "joiner" if system == "reference" and purpose == "synthesize" else purpose
                print(f"{label:42}{system if number == 0 else '':11}{shown:>11}{calls:7.0f}{inputs:8.0f}{outputs:8.0f}")


def print_summary(rows: dict[str, dict[str, float]], before: dict[str, dict[str, float]] | None = None) -> None:
    """The issue's goals per shape: ratios to the reference (before -> after when ``before`` is given)."""
    names = [timing_name(timing) for timing in TIMINGS]

    def cell(shape: str, key: str, width: int, digits: int = 2) -> str:
        after = rows[shape][key]
        text = f"{after:.{digits}f}"
        if before is not None and shape in before and key in before[shape]:
            text = f"{before[shape][key]:.{digits}f}->{text}"
        return f"{text:>{width}}"

    width = 12 if before is not None else 7
    print(
        "Goals (dagmagic / reference): end to end and first answer token <= 1.0x at every timing; plan output"
        " tokens <= 1.1x; plan prompt <= 1.5x; 2 calls a goal." + (" before->after." if before is not None else "")
    )
    header = (
        f"{'shape':42}"
        + "".join(f"{'e2e ' + n:>{width + 4}}" for n in names)
        + "".join(f"{'1st ' + n:>{width + 4}}" for n in names)
        + f"{'plan out':>{width + 2}}{'plan in':>{width + 2}}{'calls':>{width}}"
    )
    print(header)
    missed: list[str] = []
    for shape, row in rows.items():
        line = f"{shape:42}"
        line += "".join(cell(shape, f"e2e {n}", width + 4) for n in names)
        line += "".join(cell(shape, f"first {n}", width + 4) for n in names)
        plan_out, plan_in = row["plan out x"], row["plan in x"]
        line += cell(shape, "plan out x", width + 2) + cell(shape, "plan in x", width + 2)
        line += cell(shape, "calls dagmagic", width, 0)
        print(line)
        missed += [f"{shape}: e2e {n}" for n in names if row[f"e2e {n}"] > 1.0]
        missed += [f"{shape}: 1st {n}" for n in names if row[f"first {n}"] > 1.0]
        missed += [f"{shape}: plan out {plan_out:.2f}x"] if plan_out > 1.1 else []
        missed += [f"{shape}: plan in {plan_in:.2f}x"] if plan_in > 1.5 else []
        missed += [f"{shape}: {row['calls dagmagic']:.0f} calls"] if row["calls dagmagic"] > 2 else []
    print("All goals met." if not missed else "Missed: " + "; ".join(missed))


def _report_breakdown(shapes: list[Shape], results: Results) -> None:
    marks = [
        "plan start",
        "steps start",
        "plan end",
        "steps end",
        "analyze start",
        "analyze end",
        "synthesize start",
        "synthesize end",
        "finished",
    ]
    short = {m: m.replace("synthesize", "synth.").replace("analyze", "verdict") for m in marks}
    for timing in TIMINGS:
        by_shape = results[timing_name(timing)]
        print(f"Where dagmagic's time goes, {timing_name(timing)} (median of each mark, seconds from the start):")
        print(f"{'shape':42}" + "".join(f"{short[m]:>14}" for m in marks) + f"{'tools crit.':>12}{'own ms':>8}")
        for shape in shapes:
            breakdowns = [o.breakdown for o in by_shape[shape.name]["dagmagic"]]
            row = f"{shape.name:42}"
            for mark in marks:
                value = _median([b.get(mark) for b in breakdowns])
                row += f"{value:14.2f}" if value is not None else f"{'-':>14}"
            own = statistics.median(o.seconds for o in results[timing_name(None)][shape.name]["dagmagic, latencies 0"])
            print(row + f"{critical_tools(shape):12.2f}{own * 1000:8.0f}")
        print()


def _commit(revision: str = "HEAD") -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", revision],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure_before(revision: str, repeats: int) -> dict[str, dict[str, float]]:
    """The same benchmark (this file, this timing code) with the engine of ``revision``, in a subprocess:
    dagmagic and the reference only; its summary.
    """
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", revision, "dagmagic"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        out = Path(tree) / "summary.json"
        env = {**os.environ, "PYTHONPATH": tree + os.pathsep + os.environ.get("PYTHONPATH", "")}
        command = [sys.executable, __file__, "--systems", "dagmagic,reference", "--repeats", str(repeats)]
        print(f"Measuring the engine of {revision} ({_commit(revision)}) in a subprocess...", flush=True)
        subprocess.run([*command, "--json", str(out), "--engine-from", tree], env=env, check=True)
        summary_rows: dict[str, dict[str, float]] = json.loads(out.read_text())
        return summary_rows


def main() -> None:
    """Run every shape under every system and timing model and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="measured runs per system, shape and timing")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated systems to run")
    parser.add_argument("--before", metavar="REV", help="also measure the engine of git revision REV, side by side")
    parser.add_argument("--json", metavar="PATH", help="write the summary as JSON")
    parser.add_argument("--engine-from", metavar="DIR", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.engine_from:  # the --before subprocess: it must run the engine it was given
        import dagmagic

        engine = Path(dagmagic.__file__).resolve()
        if not engine.is_relative_to(Path(options.engine_from).resolve()):
            raise SystemExit(f"expected the engine from {options.engine_from}, imported {engine}")
    before = measure_before(options.before, options.repeats) if options.before else None
    shapes = build_shapes()
    print(
        f"dagmagic end-to-end benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - commit {_commit()}"
        + (" (engine of an earlier revision)" if options.engine_from else "")
        + f" - Python {sys.version.split()[0]} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores,"
        f" load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"Per-call latencies: planner {PLANNER}s, answer/joiner {ANSWER}s, verdict/analyzer {ANALYZER}s, fast model "
        f"{FAST[0]}-{FAST[1]}s (seeded per call); a streamed reply's first piece at {FIRST_PIECE:.0%} of its "
        "latency, the rest evenly to the end. Tools 0.2-1.13s under every timing model."
    )
    movie = next(s for s in shapes if s.name.startswith("Movie"))
    print(f"Movie rec. search latencies (seed {SEED}): {', '.join(f'{c.latency:.2f}' for c in movie.calls)}")
    print()
    start = time.perf_counter()
    results = asyncio.run(measure(shapes, options.systems.split(","), options.repeats))
    report(shapes, results, time.perf_counter() - start, options.repeats)
    rows = summary(shapes, results)
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=1))
    if before is not None:
        print()
        print(f"Before ({options.before}) -> after (this tree):")
        print_summary(rows, before)


if __name__ == "__main__":
    main()
