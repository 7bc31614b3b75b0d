"""``%dag demo``: the whole loop offline, with a scripted model at realistic speeds.

Two tools, two parallel lookups, one step that fails, a replan that reuses the first round's results,
and a streamed answer: everything a newcomer should see, without an API key.

Importing this module loads nothing else: ``python -m dagmagic demo`` prints the goal before the engine loads
(seconds in an environment whose bytecode is not compiled yet).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagmagic.engine import DagRun
    from dagmagic.notebook.session import NotebookSession
    from dagmagic.session import DagSession
    from dagmagic.testing import ScriptedLLM, ScriptedRequest

__all__ = ["DEMO_GOAL", "demo_session", "run_demo", "start_demo_in_background"]

DEMO_GOAL = "Which city has more inhabitants per square kilometre, Paris or Berlin, and by how much?"

_POPULATION = {"paris": 2_102_650, "berlin": 3_755_251}
_AREA_KM2 = {"paris": 105.4, "berlin": 891.1}


def city_population(city: str) -> int:
    """The number of inhabitants of a city (latest census).

    Args:
        city: The city's English name.
    """
    return _POPULATION[city.strip().lower()]


def city_area(city: str) -> float:
    """The area of a city in square kilometres.

    Args:
        city: The city's English name.
    """
    key = city.strip().lower()
    if key == "berlin":
        raise ConnectionError("the land registry did not answer")
    return _AREA_KM2[key]


def _step(request: ScriptedRequest) -> Any:
    """Each step asks for its tool once, then answers from what came back."""
    from dagmagic.testing import ToolCall

    observations = [m["content"] for m in request.messages if m.get("role") == "tool"]
    step = (request.round or 0, request.step_id or "")
    calls = {
        (1, "s1"): ToolCall("city_population", {"city": "Paris"}),
        (1, "s2"): ToolCall("city_population", {"city": "Berlin"}),
        (1, "s3"): ToolCall("city_area", {"city": "Berlin"}),
        (2, "s1"): ToolCall("city_area", {"city": "Paris"}),
    }
    if step == (1, "s3") and observations:
        raise RuntimeError("the area source for Berlin is unavailable")
    if step in calls and not observations:
        return calls[step]
    answers = {
        (1, "s1"): f"Paris has {observations[0] if observations else '?'} inhabitants.",
        (1, "s2"): f"Berlin has {observations[0] if observations else '?'} inhabitants.",
        (2, "s1"): f"Paris covers {observations[0] if observations else '?'} km²; Berlin covers 891.1 km² "
        "(Berlin Senate statistics).",
        (2, "s2"): "Paris: 2,102,650 / 105.4 km² ≈ 19,949 per km². Berlin: 3,755,251 / 891.1 km² ≈ 4,214 per km². "
        "Paris is about 4.7 times as dense.",
    }
    return answers.get(step, "done")


def demo_model() -> ScriptedLLM:
    """The scripted model behind the demo."""
    from dagmagic.testing import ScriptedLLM

    round_one = {
        "steps": [
            {"id": "s1", "task": "Find the population of Paris", "tool_hint": "city_population", "model_hint": "fast"},
            {"id": "s2", "task": "Find the population of Berlin", "tool_hint": "city_population", "model_hint": "fast"},
            {"id": "s3", "task": "Find the areas of Paris and Berlin", "tool_hint": "city_area"},
            {"id": "s4", "task": "Compute and compare the densities", "dependencies": ["s1", "s2", "s3"]},
        ]
    }
    round_two = {
        "steps": [
            {"id": "s1", "task": "Find the areas of Paris and Berlin from another source", "tool_hint": "city_area"},
            {"id": "s2", "task": "Compute and compare the densities", "dependencies": ["r1.s1", "r1.s2", "s1"]},
        ]
    }
    answer = (
        "**Paris** is far denser: about **19,950 inhabitants per km²** against **4,210** in Berlin, "
        "so roughly **4.7 times** as many people per square kilometre.\n\n"
        "| city | inhabitants | area (km²) | per km² |\n|---|---:|---:|---:|\n"
        "| Paris | 2,102,650 | 105.4 | 19,949 |\n| Berlin | 3,755,251 | 891.1 | 4,214 |\n\n"
        "Berlin has more inhabitants overall, but spread over more than eight times the area."
    )
    return ScriptedLLM(
        {
            "plan": [round_one, round_two],
            "step": _step,
            "analyze": [
                {
                    "achieved": False,
                    "confidence": 0.35,
                    "reasoning": "The populations are known, but the areas are missing: s3 failed, so s4 never ran.",
                    "final_answer": None,
                },
                {
                    "achieved": True,
                    "confidence": 0.92,
                    "reasoning": "Populations and areas agree across sources; the densities follow.",
                    "final_answer": answer,  # the verdict writes the answer, streamed as it is written
                },
            ],
        },
        latency={"plan": 1.2, "step": 0.6, "analyze": 0.9},
        chunk_delay=0.03,
        price=(2e-6, 8e-6),
    )


def demo_options() -> dict[str, Any]:
    """The demo's models, settings and tools, as ``DagSession`` and ``DagSession.start`` take them."""
    from dagmagic.llm import ModelRegistry
    from dagmagic.settings import DagSettings

    registry = ModelRegistry().register("demo-model", demo_model(), roles=["smart", "general", "fast"])
    settings = DagSettings(store="none", citation_verification=False)
    return {"models": registry, "settings": settings, "tools": [city_population, city_area]}


def demo_session() -> DagSession:
    """A session over the demo model and its two tools."""
    from dagmagic.session import DagSession

    return DagSession(**demo_options())


async def run_demo(notebook: NotebookSession) -> DagRun:
    """Run the demo like a ``%%dag`` cell (live widget, then the finished run as the cell's value), in the
    kernel's session but outside its conversation.
    """
    args = SimpleNamespace(output=None, bg=False, no_widget=False)
    return await notebook.magics.present(_start(notebook, args), args)


def start_demo_in_background(notebook: NotebookSession) -> DagRun:
    """Start the demo and return its run at once, for a cell that cannot await it: ``%dag demo`` in the cell that
    loaded dagmagic was compiled before the extension could rewrite it into an ``await``. The run, the cell's
    value, shows as any run shown as a value does: its widget, live, where a person's front end draws widgets;
    its static views as they are when the cell ends elsewhere (headless, as ``--bg``).
    """
    return _start(notebook, SimpleNamespace(output=None, bg=True, no_widget=False))


def _start(notebook: NotebookSession, args: Any) -> DagRun:
    """The demo's run, started in the kernel's session but outside its conversation."""
    options = demo_options()
    session = notebook.session(options)
    return notebook.numbered(lambda: session.start(DEMO_GOAL, conversation=False, **options), args, "")
