"""Real-model benchmark: goals through ``DagSession`` and through one ReAct agent, against a small local model.

The model is Qwen2.5-Coder (1.5B or 0.5B) behind llama.cpp's OpenAI-compatible server, started with
``../shared/tools/local-model.sh start 1.5b`` (the repository's sibling ``shared`` folder; ``--model 1.5b``
reads ``http://127.0.0.1:8766/v1``, ``--model 0.5b`` ``:8765``). Every role is that one model.

Two goal sets. ``--set accuracy`` (the default): ten goals over invented countries, cities and companies whose
figures only the tools know (``real_model_goals.py``: single lookups, 2 and 4 independent ones, a comparison, a
ranking, a sum, a ratio, two chains), each answer scored right / partly / wrong by a checker. ``--set note``: the
real-model note's five goals and issue 22's lookup goal, unscored, with their own tools.

Two engines, on the same model and tools (``--engine dag|agent|both``, default both, one after the other per
goal): ``dag`` is a fresh ``DagSession`` run (plan, steps, verdict); ``agent`` is a single ReAct agent with the
goal as its task, dagmagic's own ``StepAgent`` (so both read calls a model writes as text the same way), its
calls counted from the ``LLMCall`` records its ``ChatModel`` emits. Per engine and goal: the score, LLM calls,
tokens in / out, seconds; for ``dag`` also its status, calls by purpose, and the lookups (calls of any tool but
``calculate``): how many tool steps (steps the planner gave ``tool_args``) looked something up and how many of
them were called directly (no model call), and of all lookups made, how many were such direct calls. Then per
engine: right answers, median calls and seconds a goal, % direct; the load average before and after.

Run: ``python benchmarks/real_model.py --model 1.5b --max-tokens 512`` (an hour or so on 2 cores; ``--goal N``
runs the N-th goal only; ``--repeat N`` runs each goal N times; ``--max-tokens N`` caps every reply at N tokens,
litellm's ``max_tokens``: these models sometimes write until their context is full; ``--save DIR`` writes each
run to ``DIR/<engine>-goalN.json``: the DAG run's state, or the agent's answer, tool calls and LLM calls, every
call's messages and reply; ``--rescore DIR`` runs nothing and scores such files again, for a checker changed or
a run cut short). Without the server it says so and exits. Nothing is asserted.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import argparse
import asyncio
import glob
import json
import platform
import statistics
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from real_model_goals import ACCURACY_GOALS, ACCURACY_TOOLS, COMPUTING

import dagmagic
from dagmagic import DagSession, DagSettings, ModelRegistry, tool
from dagmagic.engine.steps.agent import StepAgent
from dagmagic.engine.steps.executor import StepFailure
from dagmagic.engine.steps.runner import StepRequest
from dagmagic.engine.tools.functions import Tool
from dagmagic.events import Event, LLMCallRecorded
from dagmagic.llm import ChatModel
from dagmagic.models import LLMCall, PlanStep, RunState

MODELS = {
    "1.5b": ("openai/qwen-1.5b", "http://127.0.0.1:8766/v1"),
    "0.5b": ("openai/qwen-0.5b", "http://127.0.0.1:8765/v1"),
}
"""``--model``: the litellm model and the server's address."""

NOTE_GOALS = [
    "What is the capital of France and what is its population?",
    "Rank Paris, Berlin and Madrid by population, using the city_population tool.",
    "Find three prime numbers greater than 100 and check each with the is_prime tool.",
    "Write a Python function that reverses the words of a sentence.",
    "What were the main causes of the French Revolution?",
    "Which has more people, France or Germany? Use the population tool.",
]
"""The real-model note's five goals, then issue 22's lookup goal (``--set note``)."""

CITIES = {"paris": 2_102_650, "berlin": 3_878_100, "madrid": 3_332_035, "rome": 2_746_984, "london": 8_945_309}
COUNTRIES = {"france": 68_401_997, "germany": 84_482_267, "spain": 48_610_458, "italy": 58_850_717}


@tool
def city_population(city: str) -> int:
    """The population of a city (Paris, Berlin, Madrid, Rome, London).

    Args:
        city: The city's English name.
    """
    try:
        return CITIES[city.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown city {city!r}; known: {', '.join(c.title() for c in CITIES)}") from None


@tool
def population(place: str) -> int:
    """The population of a country or a city (France, Germany, Spain, Italy; Paris, Berlin, Madrid, Rome, London).

    Args:
        place: The country's or city's English name.
    """
    key = place.strip().lower()
    if key in COUNTRIES:
        return COUNTRIES[key]
    if key in CITIES:
        return CITIES[key]
    known = ", ".join(p.title() for p in [*COUNTRIES, *CITIES])
    raise ValueError(f"unknown place {place!r}; known: {known}")


@tool
def is_prime(n: int) -> bool:
    """Whether n is a prime number.

    Args:
        n: The whole number to check.
    """
    if n < 2:
        return False
    return all(n % d for d in range(2, int(n**0.5) + 1))


@dataclass(frozen=True)
class BenchGoal:
    """A goal as this script runs it."""

    text: str
    check: Callable[[str], str] | None = None
    """The answer's text → right / partly / wrong (None: not scored)."""
    kind: str = ""


SETS: dict[str, tuple[list[BenchGoal], list[Tool]]] = {
    "accuracy": ([BenchGoal(g.text, g.check, g.kind) for g in ACCURACY_GOALS], ACCURACY_TOOLS),
    "note": ([BenchGoal(text) for text in NOTE_GOALS], [city_population, population, is_prime]),
}


@dataclass
class Outcome:
    """One engine's run of one goal."""

    engine: str
    score: str
    """right, partly, wrong; ``-`` when the goal has no checker."""
    calls: list[LLMCall]
    seconds: float
    status: str
    answer: str
    lookup_steps: int = 0
    """Tool steps of a lookup tool (``dag`` only)."""
    direct_steps: int = 0
    """Of those, called directly (no model call)."""
    lookups: int = 0
    """Lookup tool calls made, by any path."""
    direct_lookups: int = 0
    """Of those, the executor's own (a tool step's direct call that returned)."""
    details: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> tuple[int, int]:
        """Input and output tokens over its calls."""
        return sum(c.usage.input_tokens for c in self.calls), sum(c.usage.output_tokens for c in self.calls)


def server_up(api_base: str) -> bool:
    """Whether the local model's server answers (a busy one answers when its current reply is written)."""
    try:
        with urllib.request.urlopen(f"{api_base}/models", timeout=120):
            return True
    except (urllib.error.URLError, OSError):
        return False


def registry(model: str, max_tokens: int | None) -> ModelRegistry:
    """One model for every role (replies capped when asked)."""
    target, api_base = MODELS[model]
    cap = {"max_tokens": max_tokens} if max_tokens else {}
    return ModelRegistry().register(
        "qwen",
        target,
        api_base=api_base,
        api_key="none",
        capabilities=("tool_call", "json_mode", "stream"),
        context_window=8192,
        **cap,
    )


SETTINGS = DagSettings(store="none", llm_timeout=600, max_replan_rounds=2)
"""As in the real-model note: the run store off."""


def tool_steps(state: Any, counted: Callable[[str | None], bool] = lambda name: True) -> tuple[int, int, int]:
    """(tool steps, called directly, fell back to their agent) over every round: a tool step is a step with
    ``tool_args`` (of a tool ``counted`` accepts); called directly when its turn-0 call (the executor's own)
    returned without an error.
    """
    total = direct = fallback = 0
    for record in state.rounds:
        for step in record.plan.steps:
            if getattr(step, "tool_args", None) is None or not counted(step.tool_hint):
                continue
            total += 1
            own = next((call for call in step.tool_calls if call.turn == 0), None)
            agent_turns = any((call.turn or 0) > 0 for call in step.tool_calls) or any(
                call.step_id == step.id and call.round == record.index and call.purpose == "step"
                for call in state.calls
            )
            if own is not None and own.error is None and not agent_turns:
                direct += 1
            elif own is not None or agent_turns:
                fallback += 1
    return total, direct, fallback


def _is_lookup(name: str | None) -> bool:
    return name is not None and name != COMPUTING


def _score(goal: BenchGoal, answer: str) -> str:
    return goal.check(answer) if goal.check is not None else "-"


async def run_dag(goal: BenchGoal, tools: list[Tool], model: str, max_tokens: int | None) -> tuple[Outcome, str]:
    """The goal through a fresh ``DagSession``; with the run's state as JSON."""
    start = time.perf_counter()
    run = await DagSession(registry(model, max_tokens), SETTINGS, tools=tools).run(goal.text)
    return dag_outcome(goal, run.state, time.perf_counter() - start), run.state.model_dump_json(indent=1)


def dag_outcome(goal: BenchGoal, state: RunState, seconds: float) -> Outcome:
    """What a DAG run's state says: its answer's score, calls, lookups."""
    answer = state.answer or ""
    outcome = Outcome("dag", _score(goal, answer), list(state.calls), seconds, str(state.status), answer)
    outcome.lookup_steps, outcome.direct_steps, fallback = tool_steps(state, _is_lookup)
    made = [c for record in state.rounds for step in record.plan.steps for c in step.tool_calls]
    outcome.lookups = sum(_is_lookup(c.name) for c in made)
    outcome.direct_lookups = sum(_is_lookup(c.name) and c.turn == 0 and c.error is None for c in made)
    purposes = Counter(call.purpose for call in state.calls)
    total, direct, _ = tool_steps(state)
    outcome.details = [
        f"rounds {len(state.rounds)}, calls by purpose: {', '.join(f'{p} {n}' for p, n in purposes.most_common())}",
        f"steps {sum(len(r.plan.steps) for r in state.rounds)}: tool steps {total} ({direct} called directly); "
        f"lookup tool steps {outcome.lookup_steps} ({outcome.direct_steps} direct, {fallback} fell back); "
        f"lookups made {outcome.lookups} ({outcome.direct_lookups} direct)",
    ]
    if state.error:
        outcome.details.append(f"error: {' '.join(state.error.split())[:200]}")
    return outcome


async def run_agent(goal: BenchGoal, tools: list[Tool], model: str, max_tokens: int | None) -> tuple[Outcome, str]:
    """The goal as the task of one ``StepAgent`` (a ReAct loop); with its answer, tool calls and LLM calls as JSON."""
    calls: list[LLMCall] = []

    def record(event: Event) -> None:
        if isinstance(event, LLMCallRecorded):
            calls.append(event.call)

    chat = ChatModel(registry(model, max_tokens).get("qwen"), settings=SETTINGS, emit=record)
    step = PlanStep(id="agent", task=goal.text)
    request = StepRequest(
        goal=goal.text, step=step, context="", model=chat, round=1, settings=SETTINGS, emit=lambda event: None
    )
    start = time.perf_counter()
    try:
        answer, status = await StepAgent(tools)(request), "done"
    except StepFailure as failure:
        answer, status = failure.notes or "", f"failed: {failure.reason}"
    except Exception as exc:  # a provider error ends the agent's run; the benchmark goes on
        answer, status = "", f"error: {type(exc).__name__}: {exc}"
    saved = {
        "goal": goal.text,
        "status": status,
        "answer": answer,
        "seconds": time.perf_counter() - start,
        "tool_calls": [c.model_dump() for c in step.tool_calls],
        "calls": [c.model_dump() for c in calls],
    }
    return agent_outcome(goal, saved), json.dumps(saved, indent=1, default=str)


def agent_outcome(goal: BenchGoal, saved: dict[str, Any]) -> Outcome:
    """What an agent's run says (as saved): its answer's score (a failed run's notes are no answer), calls, lookups."""
    calls = [LLMCall.model_validate(call) for call in saved["calls"]]
    if "seconds" in saved:
        seconds = saved["seconds"]
    else:  # saved before the seconds were: from its first call's start to its last call's end
        seconds = max((c.started_at + c.latency for c in calls), default=0.0) - min(
            (c.started_at for c in calls), default=0.0
        )
    status, answer = saved["status"], saved["answer"]
    outcome = Outcome("agent", _score(goal, answer) if status == "done" else "wrong", calls, seconds, status, answer)
    outcome.lookups = sum(_is_lookup(c["name"]) for c in saved["tool_calls"])
    outcome.details = [f"tool calls {len(saved['tool_calls'])}, lookups {outcome.lookups}"]
    return outcome


def rescore(directory: str, goals: list[BenchGoal], only: int | None) -> dict[str, list[Outcome]]:
    """The outcomes of the runs saved in ``directory`` (``--save``), scored again, printed as a run prints them."""
    outcomes: dict[str, list[Outcome]] = {"dag": [], "agent": []}
    for number, goal in enumerate(goals, 1):
        if only is not None and number != only:
            continue
        header = f"[{number}] {goal.text}{f' ({goal.kind})' if goal.kind else ''}"
        for engine in outcomes:
            for path in sorted(glob.glob(os.path.join(directory, f"{engine}-goal{number}.json"))) + sorted(
                glob.glob(os.path.join(directory, f"{engine}-goal{number}-run*.json"))
            ):
                with open(path) as saved:
                    text = saved.read()
                if engine == "dag":
                    state = RunState.model_validate_json(text)
                    outcome = dag_outcome(goal, state, (state.finished_at or state.started_at) - state.started_at)
                else:
                    outcome = agent_outcome(goal, json.loads(text))
                outcomes[engine].append(outcome)
                print("\n".join([header, *goal_lines(outcome)] if header else goal_lines(outcome)))
                header = ""
    return outcomes


def goal_lines(outcome: Outcome) -> list[str]:
    """The lines printed for one engine's run of one goal."""
    tokens_in, tokens_out = outcome.tokens
    answer = " ".join(outcome.answer.split())
    lines = [
        f"  {outcome.engine:5} {outcome.score:6} calls {len(outcome.calls):3}, tokens {tokens_in} in / "
        f"{tokens_out} out, {outcome.seconds:.0f}s, status {' '.join(outcome.status.split())[:120]}",
        *(f"        {detail}" for detail in outcome.details),
        f"        answer: {answer[:240]!r}",
    ]
    return lines


def _percent(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else f"{part}/0 (n/a)"


def summary(engine: str, outcomes: Sequence[Outcome]) -> str:
    """One engine's summary line."""
    scores = Counter(o.score for o in outcomes)
    line = (
        f"{engine:5}: right {scores['right']}/{len(outcomes)} (partly {scores['partly']}, wrong {scores['wrong']}); "
        f"median calls a goal {statistics.median(len(o.calls) for o in outcomes):g}; "
        f"median seconds {statistics.median(o.seconds for o in outcomes):.0f}; "
        f"tokens {sum(o.tokens[0] for o in outcomes)} in / {sum(o.tokens[1] for o in outcomes)} out"
    )
    if engine == "dag":
        steps, direct = sum(o.lookup_steps for o in outcomes), sum(o.direct_steps for o in outcomes)
        made, direct_made = sum(o.lookups for o in outcomes), sum(o.direct_lookups for o in outcomes)
        done = sum(o.status == "done" for o in outcomes)
        line += (
            f"; % direct: lookup tool steps called directly {_percent(direct, steps)}, "
            f"lookups made directly {_percent(direct_made, made)}; status done {done}/{len(outcomes)}"
        )
    return line


def summaries(outcomes: dict[str, list[Outcome]]) -> None:
    """Prints each engine's summary line."""
    print("Summary")
    for engine, done in outcomes.items():
        if done:
            print(summary(engine, done))


ENGINES = {"dag": run_dag, "agent": run_agent}


async def main(arguments: argparse.Namespace) -> None:
    """Every goal of the set in turn (or the one asked for), each engine asked for, then the summary."""
    goals, tools = SETS[arguments.set]
    target, api_base = MODELS[arguments.model]
    engines = ["dag", "agent"] if arguments.engine == "both" else [arguments.engine]
    load_before = os.getloadavg()
    print(
        f"dagmagic real-model benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python {sys.version.split()[0]} "
        f"on {platform.system()} {platform.machine()}, {os.cpu_count()} cores; model {target} at {api_base}; "
        f"max_tokens {arguments.max_tokens or 'none'}; set {arguments.set}; engines {', '.join(engines)}; "
        f"dagmagic from {os.path.dirname(os.path.dirname(dagmagic.__file__))}",
        flush=True,
    )
    total = time.perf_counter()
    outcomes: dict[str, list[Outcome]] = {engine: [] for engine in engines}
    for number, goal in enumerate(goals, 1):
        if arguments.goal is not None and number != arguments.goal:
            continue
        for repeat in range(1, arguments.repeat + 1):
            kind = f" ({goal.kind})" if goal.kind else ""
            print(f"[{number}] {goal.text}{kind}{f' - run {repeat}' * (arguments.repeat > 1)}")
            for engine in engines:
                outcome, saved = await ENGINES[engine](goal, tools, arguments.model, arguments.max_tokens)
                outcomes[engine].append(outcome)
                print("\n".join(goal_lines(outcome)), flush=True)
                if arguments.save:
                    os.makedirs(arguments.save, exist_ok=True)
                    suffix = f"-run{repeat}" if arguments.repeat > 1 else ""
                    with open(os.path.join(arguments.save, f"{engine}-goal{number}{suffix}.json"), "w") as out:
                        out.write(saved)
    summaries(outcomes)
    after = os.getloadavg()
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} (1, 5, 15 min)"
    )
    print(f"Total benchmark time: {time.perf_counter() - total:.0f}s")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS), default="accuracy", help="the goal set (default accuracy)")
    parser.add_argument("--model", choices=sorted(MODELS), default="1.5b", help="the local model (default 1.5b)")
    parser.add_argument("--engine", choices=["dag", "agent", "both"], default="both", help="default both")
    parser.add_argument("--goal", type=int, help="run only this goal (1-based)")
    parser.add_argument("--repeat", type=int, default=1, help="run each goal N times")
    parser.add_argument("--max-tokens", type=int, help="cap every reply at N tokens (litellm's max_tokens)")
    parser.add_argument("--save", metavar="DIR", help="write each run to DIR/<engine>-goalN.json")
    parser.add_argument(
        "--rescore", metavar="DIR", help="run nothing: score the runs saved in DIR again (--save's files) and sum up"
    )
    arguments = parser.parse_args(argv)
    count = len(SETS[arguments.set][0])
    if arguments.goal is not None and not 1 <= arguments.goal <= count:
        parser.error(f"--goal: the {arguments.set} set has goals 1 to {count}")
    return arguments


if __name__ == "__main__":
    arguments = parse()
    if arguments.rescore:
        summaries(rescore(arguments.rescore, SETS[arguments.set][0], arguments.goal))
        sys.exit(0)
    api_base = MODELS[arguments.model][1]
    if not server_up(api_base):
        print(
            f"real_model.py: no model server at {api_base}; start one with "
            f"../shared/tools/local-model.sh start {arguments.model} (see its header), then run this again. Skipped."
        )
        sys.exit(0)
    asyncio.run(main(arguments))
