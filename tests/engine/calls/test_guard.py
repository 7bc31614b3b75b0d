"""The context guard: budgets from windows, fitting one text, many texts, a transcript, and the history."""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic import DagSession
from dagmagic.engine.calls.context import enriched_query, format_history
from dagmagic.engine.calls.guard import UNKNOWN_WINDOW_BUDGET, ContextGuard
from dagmagic.engine.calls.history import ConversationSummary, PlannerHistory
from dagmagic.events import Event, LLMCallRecorded, RunWarning
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm.litellm_backend import LiteLLMBackend
from dagmagic.llm.tokens import count_tokens, request_tokens
from dagmagic.models import Exchange
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ToolCall
from tests.engine.conftest import plan_reply, verdict

SETTINGS = DagSettings(max_message_chars=1000, structured_context_multiplier=3.0, llm_retries=0)


def litellm_tokens(text: str) -> int:
    import litellm

    return int(litellm.token_counter(model="", text=text))


# --- planner input


def long_history() -> list[Exchange]:
    """About 8000 characters (2000 estimated tokens): over a 1000-token planner input; the last exchange short."""
    long = [Exchange(f"question number {i}", f"answer {i}: " + "lorem ipsum " * 160) for i in range(4)]
    return [*long, Exchange("question number 4", "the short last answer")]


PLANNER_SETTINGS = DagSettings(planner_input_tokens=1000, history_fallback_chars=1000, llm_retries=0)


def registry(smart: ScriptedLLM, fast: ScriptedLLM | None = None) -> ModelRegistry:
    models = ModelRegistry().register("smart", smart, roles=["smart"])
    if fast is not None:
        models.register("fast", fast, roles=["fast"])
    return models


async def test_planner_input_under_budget_is_the_enriched_query() -> None:
    smart, fast = ScriptedLLM({}), ScriptedLLM({"history_summary": "unused"})
    guard = ContextGuard(registry(smart, fast), PLANNER_SETTINGS)
    history = [Exchange("short question", "short answer")]

    text = await PlannerHistory(guard, ConversationSummary()).planner_input(
        "the goal", history, ["a follow-up"], round=1
    )

    assert text == enriched_query("the goal", history, ["a follow-up"])
    assert fast.requests == [] and smart.requests == []


async def test_planner_input_over_budget_is_summarized_by_the_fast_model() -> None:
    smart = ScriptedLLM({})
    fast = ScriptedLLM({"history_summary": "SUMMARY: five questions about lorem ipsum"})
    events: list[Event] = []
    guard = ContextGuard(registry(smart, fast), PLANNER_SETTINGS, emit=events.append)

    text = await PlannerHistory(guard, ConversationSummary()).planner_input(
        "the goal", long_history(), ["also cover Spain"], round=2
    )

    calls = fast.requests_for("history_summary")
    assert len(calls) == 1
    assert len(fast.requests) == 1 and smart.requests == []
    assert "question number 0" in calls[0].prompt and "question number 4" in calls[0].prompt
    assert calls[0].round == 2
    assert "SUMMARY: five questions about lorem ipsum" in text
    assert "lorem ipsum lorem ipsum" not in text  # the long history itself is gone
    assert "Current request: the goal" in text
    assert text.endswith("[User follow-up]: also cover Spain")
    recorded = [e.call for e in events if isinstance(e, LLMCallRecorded)]
    assert [(c.purpose, c.model, c.error) for c in recorded] == [("history_summary", "fast", None)]


async def test_planner_input_without_a_fast_model_keeps_the_last_characters() -> None:
    smart = ScriptedLLM({})
    guard = ContextGuard(registry(smart), PLANNER_SETTINGS)
    history = long_history()

    text = await PlannerHistory(guard, ConversationSummary()).planner_input("the goal", history, (), round=1)

    assert smart.requests == []  # no LLM call at all
    assert format_history(history)[-1000:] in text
    assert format_history(history)[-1001:] not in text
    assert "question number 0" not in text
    assert "question number 4" in text  # the last exchange survives
    assert text.endswith("Current request: the goal")
    assert len(text) < 1000 + 200


async def test_planner_input_falls_back_when_the_summary_fails() -> None:
    smart = ScriptedLLM({})
    fast = ScriptedLLM({"history_summary": RuntimeError("fast model is down")})
    guard = ContextGuard(registry(smart, fast), PLANNER_SETTINGS)
    history = long_history()

    text = await PlannerHistory(guard, ConversationSummary()).planner_input(
        "the goal", history, ["also cover Spain"], round=1
    )

    assert len(fast.requests_for("history_summary")) == 1
    assert format_history(history)[-1000:] in text
    assert "question number 0" not in text
    assert "fast model is down" not in text
    assert text.endswith("Current request: the goal\n\n[User follow-up]: also cover Spain")


async def test_planner_input_falls_back_when_the_summary_is_empty() -> None:
    fast = ScriptedLLM({"history_summary": "   "})
    guard = ContextGuard(registry(ScriptedLLM({}), fast), PLANNER_SETTINGS)
    history = long_history()

    text = await PlannerHistory(guard, ConversationSummary()).planner_input("the goal", history, (), round=1)

    assert format_history(history)[-1000:] in text
    assert "question number 0" not in text


# --- context guard: fit

BIG = "HEAD-MARK " + "filler text " * 4000 + " TAIL-MARK"  # ~48000 characters, ~12000 estimated tokens


def guarded(window: int | None, fast: ScriptedLLM | None) -> tuple[ContextGuard, ChatModel, ScriptedLLM]:
    smart = ScriptedLLM({}, context_window=window)
    models = registry(smart, fast)
    return ContextGuard(models, SETTINGS), ChatModel(models.get("smart"), settings=SETTINGS), smart


def test_budget_is_a_share_of_the_window_with_a_floor_but_always_inside_the_window() -> None:
    guard, model, _ = guarded(100_000, None)
    assert guard.budget(model) == 75_000
    guard, model, _ = guarded(5_000, None)
    assert guard.budget(model) == SETTINGS.context_floor_tokens == 4000  # the floor, above 75 %
    guard, model, _ = guarded(2_000, None)
    assert guard.budget(model) == 2_000 - 512  # never so much that no reply fits


def test_a_model_whose_window_nobody_knows_is_not_guessed_small_and_the_setting_gives_one() -> None:
    guard, model, _ = guarded(None, None)
    assert guard.window(model) is None and guard.budget(model) == UNKNOWN_WINDOW_BUDGET  # was 8192 and 6144
    settings = DagSettings(default_context_tokens=32_000)
    models = registry(ScriptedLLM({}))
    assert ContextGuard(models, settings).window(ChatModel(models.get("smart"))) == 32_000


def test_a_window_declared_at_registration_wins() -> None:
    models = ModelRegistry().register("local", ScriptedLLM({}, context_window=100_000), context_window=4096)
    guard = ContextGuard(models, SETTINGS)
    assert guard.window(ChatModel(models.get("local"))) == 4096
    # litellm does not know a local server's model: unknown (the setting's, when it is set), unless declared
    unknown = ModelRegistry().register("a", "openai/my-local-qwen", api_base="http://127.0.0.1:9/v1")
    unknown.register("b", "openai/my-local-qwen", context_window=16_384)
    assert ContextGuard(unknown, SETTINGS).window(ChatModel(unknown.get("a"))) is None
    assert ContextGuard(unknown, SETTINGS).window(ChatModel(unknown.get("b"))) == 16_384
    defaulted = SETTINGS.model_copy(update={"default_context_tokens": 12_000})
    assert ContextGuard(unknown, defaulted).window(ChatModel(unknown.get("a"))) == 12_000
    assert ContextGuard(unknown, defaulted).window(ChatModel(unknown.get("b"))) == 16_384


@pytest.mark.parametrize("bad", [0, 100, -5, "8k"])
def test_a_nonsense_context_window_is_refused_at_registration(bad: object) -> None:
    from dagmagic import ConfigurationError

    with pytest.raises(ConfigurationError, match="context_window must be a number of tokens"):
        ModelRegistry().register("m", ScriptedLLM({}), context_window=bad)  # type: ignore[arg-type]


async def test_fit_returns_text_that_fits_unchanged() -> None:
    fast = ScriptedLLM({"compaction": "unused"})
    guard, model, smart = guarded(5000, fast)

    assert await guard.fit("a short input", model, task="t", round=1) == "a short input"
    assert fast.requests == [] and smart.requests == []


async def test_fit_over_budget_is_compacted_by_the_fast_model() -> None:
    fast = ScriptedLLM({"compaction": "the compacted facts"})
    guard, model, smart = guarded(5000, fast)

    text = await guard.fit(BIG, model, task="Summarize the filler", round=3, step_id="s2")

    assert text == "the compacted facts"
    calls = fast.requests_for("compaction")
    assert len(calls) == 1 and len(fast.requests) == 1
    assert smart.requests == []
    assert calls[0].step_id == "s2" and calls[0].round == 3
    assert "Summarize the filler" in calls[0].prompt
    assert "HEAD-MARK" in calls[0].prompt and "TAIL-MARK" in calls[0].prompt


async def test_fit_truncates_head_and_tail_when_compaction_fails() -> None:
    fast = ScriptedLLM({"compaction": RuntimeError("fast model is down")})
    guard, model, _ = guarded(5000, fast)

    text = await guard.fit(BIG, model, task="t", round=1)

    assert len(fast.requests_for("compaction")) == 1
    assert "characters omitted" in text
    assert text.startswith("HEAD-MARK") and text.endswith("TAIL-MARK")
    assert 3500 < litellm_tokens(text) <= 4000  # inside the budget, without wasting it


async def test_fit_truncates_when_the_compacted_text_is_still_too_long() -> None:
    fast = ScriptedLLM({"compaction": "still long " * 3000})
    guard, model, _ = guarded(5000, fast)

    text = await guard.fit(BIG, model, task="t", round=1)

    assert "characters omitted" in text
    assert text.startswith("HEAD-MARK")


async def test_fit_truncates_without_a_fast_model() -> None:
    guard, model, smart = guarded(5000, None)

    text = await guard.fit(BIG, model, task="t", round=1)

    assert smart.requests == []
    assert "characters omitted" in text
    assert text.startswith("HEAD-MARK") and text.endswith("TAIL-MARK")


async def test_fit_guards_a_model_whose_window_is_unknown_with_the_setting_and_not_without() -> None:
    guard, model, _ = guarded(None, None)
    huge = "HEAD-MARK " + "a dependency result that goes on " * 12_000 + " TAIL-MARK"  # ~400,000 characters
    assert await guard.fit(huge, model, task="t", round=1) == huge  # nothing known to fit it into

    guard = ContextGuard(guard.registry, SETTINGS.model_copy(update={"default_context_tokens": 8192}))
    text = await guard.fit(huge, model, task="t", round=1)

    assert len(huge) > 390_000 and litellm_tokens(text) <= 6144
    assert text.startswith("HEAD-MARK") and text.endswith("TAIL-MARK")


@pytest.mark.parametrize(
    "text",
    [
        "Population 2023: 1234567, 2345678, 3456789; " * 3000,  # digits: fewer than 4 characters a token
        "東京都の人口は約1400万人です。" * 2000,  # CJK: about one token a character
    ],
    ids=["numbers", "cjk"],
)
async def test_truncation_counts_tokens_not_characters(text: str) -> None:
    guard, model, _ = guarded(8000, None)
    cut = await guard.fit(text, model, task="t", round=1, budget=3000)
    assert 2500 < count_tokens(model.entry, cut) <= 3000  # a token per digit: a local model's count
    assert litellm_tokens(cut) <= 3000


# --- a whole run against an 8,000-token window


WINDOW = 8000
PROSE = "The 2023 census counted 2,102,650 people in Paris and 3,755,251 in Berlin; growth was 0.4 % a year. "


def request_tokens_measured(request: ScriptedRequest) -> int:
    """What the request costs by litellm's counter (tiktoken's default encoding), tools included, with a
    token per digit as the open models served locally count them (Qwen2.5's tokenizer agreed within 1 %).
    """
    import json

    import litellm

    from dagmagic.llm.litellm_backend import _digit_surplus

    tokens = int(litellm.token_counter(model="", messages=request.messages, tools=request.tools or None))
    return tokens + _digit_surplus(json.dumps([request.messages, request.tools]))


async def test_no_request_of_a_run_exceeds_an_8000_token_window() -> None:
    """Every call site at once: a long history, a 400,000-character dependency, a step whose tool
    observations outgrow the window, an analyzer and a synthesis over many large results, a long replan
    context. Each request is measured with litellm's token counter.
    """
    huge = PROSE * 4000  # ~400,000 characters
    plans = [
        plan_reply(
            ("s1", [], "fetch the census tables"),
            ("s2", ["s1"], "read the tables with the tool"),
            ("s3", [], "fetch the growth series"),
            ("s4", [], "fetch the housing series"),
        ),
        plan_reply(("s1", ["r1.s1", "r1.s3"], "combine the census and the growth"), ("s2", ["r1.s4"], "check housing")),
    ]
    lookups = [ToolCall("census", {"page": page}) for page in range(12)]
    smart = ScriptedLLM(
        {
            "plan": plans,
            "step:s2": [*lookups, "the tool pages agree: " + PROSE * 50],
            "step": lambda r: huge if r.round == 1 else PROSE * 400,
            "analyze": [
                verdict(False, 0.3, "Missing the housing comparison. " + PROSE * 200),
                verdict(True, 0.9, "complete"),
            ],
            "synthesize": [["Paris ", "and ", "Berlin."]],
        },
        context_window=WINDOW,
    )
    fast = ScriptedLLM(
        {"compaction": lambda r: "compacted: " + PROSE * 3, "history_summary": ["summary of the conversation"]},
        context_window=WINDOW,
    )

    def census(page: int) -> str:
        """A page of the census (8000 characters)."""
        return (f"page {page}: " + PROSE * 100)[:8000]

    registry = (
        ModelRegistry().register("smart", smart, roles=["smart", "general"]).register("fast", fast, roles=["fast"])
    )
    session = DagSession(registry, DagSettings(store="none", llm_retries=0), tools=[census])
    session.history = [Exchange(f"earlier question {i}", PROSE * 120) for i in range(8)]  # ~96,000 characters
    run = await session.run("Compare the populations of Paris and Berlin")

    assert run.status == "done" and run.answer == "Paris and Berlin." and len(run.rounds) == 2
    sizes = {
        (r.purpose, r.round, r.step_id, n): request_tokens_measured(r)
        for n, r in enumerate([*smart.requests, *fast.requests])
    }
    over = {key: size for key, size in sizes.items() if size > WINDOW}
    assert not over, f"requests over the {WINDOW}-token window: {over}"
    purposes = {purpose for purpose, *_ in sizes}
    assert {"plan", "step", "analyze", "synthesize", "compaction", "history_summary"} <= purposes
    before_planning = [r for r in fast.requests_for("history_summary") if r.round is not None]
    assert len(before_planning) == 1  # once, the history given without a summary, though two rounds planned
    assert len(smart.requests_for("step", "s2")) >= 13  # all its turns ran, older observations compacted
    assert any("[Earlier observation, shortened]" in r.prompt for r in smart.requests_for("step", "s2"))
    assert max(sizes.values()) > WINDOW * 0.5  # the window was used, not avoided


async def test_a_dependency_of_400000_characters_is_not_sent_whole_to_a_local_model_of_8k() -> None:
    llm = ScriptedLLM(  # litellm does not know a local server: its window given (llama.cpp's -c 8192)
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
            "step": lambda r: PROSE * 4000 if r.step_id == "s1" else "done",
            "analyze": [verdict(True, 0.9, "ok")],
            "synthesize": [["ok"]],
        },
        context_window=8192,
    )
    session = DagSession(ModelRegistry().register("local", llm), DagSettings(store="none"))
    await session.run("goal")
    (s2,) = llm.requests_for("step", "s2")
    assert "characters omitted" in s2.prompt  # no fast model of its own: truncated, head and tail kept
    assert request_tokens_measured(s2) <= 8192 * 0.75
    assert all(request_tokens_measured(r) <= 8192 for r in llm.requests)


async def test_a_goal_of_200_kb_and_a_follow_up_of_100_kb_fit_every_request_into_an_8k_window() -> None:
    """Before: only step prompts were fitted; the route, plan, analysis and synthesis requests carried the whole
    goal (about 52,000 tokens for 200 KB), the plan after a 100 KB follow-up the whole follow-up as well.
    """
    window = 8192
    goal = "GOAL-HEAD Summarize this server log. " + PROSE * 2000 + " GOAL-TAIL"  # 200 KB
    follow_up = "FOLLOW-HEAD Also compare it with this one. " + PROSE * 1000 + " FOLLOW-TAIL"  # 100 KB
    started: list[Any] = []

    def step(request: ScriptedRequest) -> str:
        if request.round == 1 and request.step_id == "s1" and request.index == 0:
            started[0].follow_up(follow_up)  # arrives while round 1 runs: round 2 plans for it
        return f"Result of {request.step_id}: " + PROSE * 20

    llm = ScriptedLLM(
        {
            "plan": [
                plan_reply(("s1", [], "count the errors"), ("s2", ["s1"], "explain them")),
                plan_reply(("s1", [])),
            ],
            "step": step,
            "compaction": lambda request: "the gist of it",
            "analyze": [verdict(False, 0.3, "The follow-up is not covered."), verdict(True, 0.9, "Covered.")],
            "synthesize": [["The log shows ", "three errors."]],
        },
        context_window=window,
    )
    models = ModelRegistry().register("local", llm, roles=["smart", "general", "fast"])
    session = DagSession(models, DagSettings(store="none", llm_retries=0))
    started.append(session.start(goal))
    run = await started[0]

    assert run.status == "done" and run.answer == "The log shows three errors." and len(run.rounds) == 2
    entry = models.get("local")
    sizes = [(r.purpose, r.round, r.step_id, request_tokens(entry, r.messages, r.tools or None)) for r in llm.requests]
    assert {"plan", "step", "analyze", "synthesize"} <= {purpose for purpose, *_ in sizes}
    over = [size for size in sizes if size[-1] > window]
    assert not over, f"requests over the {window}-token window: {over}"
    replan = llm.requests_for("plan")[-1].prompt
    assert all(mark in replan for mark in ("GOAL-HEAD", "GOAL-TAIL", "FOLLOW-HEAD", "FOLLOW-TAIL"))  # head, tail kept
    said = [event.message for event in run.events if isinstance(event, RunWarning)]
    assert any(message.startswith("The goal") and "cut" in message for message in said), said
    assert run.goal == goal and follow_up in run.objective  # what the user wrote is kept whole


def test_a_goal_that_fits_is_sent_as_written_and_a_long_one_is_cut_once_with_a_warning() -> None:
    events: list[Event] = []
    models = registry(ScriptedLLM({}, context_window=8192))
    guard = ContextGuard(models, SETTINGS, emit=events.append)
    model = ChatModel(models.get("smart"), settings=SETTINGS)
    assert guard.objective("a short goal", ["and a follow-up"], model, round=1) == ("a short goal", ["and a follow-up"])

    goal = "GOAL-HEAD " + "filler text " * 10_000 + " GOAL-TAIL"
    fitted_goal, follow_ups = guard.objective(goal, ["keep it short"], model, round=2)
    assert follow_ups == ["keep it short"]  # small enough for its share: kept as written
    assert fitted_goal.startswith("GOAL-HEAD ") and fitted_goal.endswith(" GOAL-TAIL") and "omitted" in fitted_goal
    assert guard.tokens(model, fitted_goal) <= guard.budget(model) * 0.25
    assert (
        guard.objective_text(goal, ["keep it short"], model, round=2)
        == f"{fitted_goal}\n\n[User follow-up]: keep it short"
    )
    (warning,) = [event for event in events if isinstance(event, RunWarning)]  # said once, though asked twice
    assert warning.round == 2 and warning.message.startswith("The goal was too long for model 'smart'")
    assert (
        f"the goal from {guard.tokens(model, goal):,} to {guard.tokens(model, fitted_goal):,} tokens" in warning.message
    )


async def test_a_compaction_asked_for_a_task_that_quotes_a_long_goal_fits_the_fast_model() -> None:
    fast = ScriptedLLM({"compaction": lambda request: "short"}, context_window=4096)
    guard, model, _ = guarded(8000, fast)
    task = "judging whether this goal was reached: " + "filler text " * 20_000
    assert await guard.fit(BIG, model, budget=500, task=task, round=1) == "short"
    (request,) = fast.requests_for("compaction")
    assert request_tokens(guard.registry.get("fast"), request.messages) <= 4096


# --- many texts, and a transcript


def test_water_fill_keeps_small_sizes_and_splits_the_rest() -> None:
    from dagmagic.engine.calls.guard import water_fill

    assert water_fill([10, 100, 1000], 300) == [10, 100, 190]
    assert water_fill([10, 100, 1000], 5000) == [10, 100, 1000]
    assert water_fill([500, 500, 500], 300) == [100, 100, 100]
    assert water_fill([], 100) == []


async def test_fit_blocks_compacts_only_the_blocks_over_their_share() -> None:
    fast = ScriptedLLM({"compaction": lambda r: "short version"})
    guard, model, _ = guarded(8000, fast)
    small, big = "a small result", "a big result " * 3000
    fitted = await guard.fit_blocks([small, big, big + "!"], model, room=2000, task="judge", round=1)
    assert fitted[0] == small and fitted[1:] == ["short version", "short version"]
    assert len(fast.requests_for("compaction")) == 2


def transcript(observations: int, size: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You carry out one step."},
        {"role": "user", "content": "Your task: read every page."},
    ]
    for page in range(observations):
        messages.append({"role": "assistant", "content": f'{{"tool": "page", "arguments": {{"n": {page}}}}}'})
        messages.append({"role": "user", "content": f"Result of page:\npage {page} " + PROSE * (size // len(PROSE))})
    return messages


async def test_a_transcript_over_the_window_has_its_older_observations_compacted_first() -> None:
    fast = ScriptedLLM({"compaction": lambda r: "the gist of that page"})
    guard, model, _ = guarded(8000, fast)
    messages = transcript(6, 8000)
    latest = messages[-1]["content"]
    await guard.fit_transcript(messages, model, tools=None, task="read", round=1, step_id="s1")

    assert litellm_tokens("\n".join(m["content"] for m in messages)) <= guard.budget(model)
    assert messages[-1]["content"] == latest  # the newest observation is untouched
    assert messages[3]["content"] == "[Earlier observation, shortened]\nthe gist of that page"  # the oldest first
    assert all(fast_request.step_id == "s1" for fast_request in fast.requests_for("compaction"))
    compacted = len(fast.requests_for("compaction"))
    assert 1 <= compacted < 6  # only as many as needed

    await guard.fit_transcript(messages, model, tools=None, task="read", round=1, step_id="s1")
    assert len(fast.requests_for("compaction")) == compacted  # nothing more to do


async def test_a_transcript_is_truncated_when_nothing_can_compact_it() -> None:
    guard, model, _ = guarded(8000, ScriptedLLM({"compaction": RuntimeError("down")}))
    messages = transcript(10, 8000)
    await guard.fit_transcript(messages, model, tools=None, task="read", round=1, step_id="s1")
    assert litellm_tokens("\n".join(m["content"] for m in messages)) <= guard.budget(model)
    assert "characters omitted" in messages[3]["content"]
    assert messages[-1]["content"].startswith("Result of page:\npage 9")


async def test_a_numeric_table_leaves_room_for_the_verdict_on_a_per_digit_tokenizer() -> None:
    """Seen with Qwen2.5 on an 8,192-token llama.cpp server: a 12,000-row CSV result, counted with tiktoken
    alone, filled the analyzer's prompt to 7,850 of the server's tokens; the verdict was cut off after 342
    tokens, five structured attempts failed (about 200 s each) and the round was replanned for nothing.
    Counted a token per digit, the prompt keeps a quarter of the window for the reply.
    """
    table = "city,year,population\n" + "".join(f"City{i},2023,{1000000 + i * 7919}\n" for i in range(12000))
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", [], "load the table"), ("s2", ["s1"], "name the three largest cities"))],
            "step": lambda r: table if r.step_id == "s1" else "City11999, City11998, City11997",
            "analyze": [verdict(True, 0.9, "found them")],
            "synthesize": [["City11999 is the largest."]],
        },
        context_window=8192,
    )
    session = DagSession(ModelRegistry().register("local", llm), DagSettings(store="none"))
    run = await session.run("Load the city table and name the three largest cities")
    assert run.achieved and len(llm.requests_for("analyze")) == 1
    for request in llm.requests:
        assert request_tokens_measured(request) <= 8192 * 0.75, (request.purpose, request.step_id)


async def test_a_runaway_turn_before_a_tool_call_does_not_push_the_next_turn_out_of_the_window() -> None:
    """Seen with Qwen2.5-0.5B: a step wrote 7,720 tokens of text before a tool call; the next turn, holding
    that text, asked the server for 8,247 tokens of an 8,192-token window and the step failed.
    """
    from dagmagic.testing import ToolCall

    runaway = "I will now look it up. " + "population data " * 8000  # ~130,000 characters

    def census(city: str) -> int:
        """The census."""
        return 2102650

    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", [], "find the population of Paris"))],
            "step": lambda r: [ToolCall("census", {"city": "Paris"})] if r.index == 0 else "2,102,650 people.",
            "analyze": [verdict(True, 0.9, "ok")],
            "synthesize": [["Paris: 2,102,650."]],
        },
        context_window=8000,
    )
    # the runaway text rides along with the tool call, as a model writes it
    original = llm._render

    def render(request: Any, reply: Any) -> Any:
        content, calls = original(request, reply)
        return (runaway if calls else content), calls

    llm._render = render  # type: ignore[method-assign]
    session = DagSession(ModelRegistry().register("local", llm), DagSettings(store="none"), tools=[census])
    run = await session.run("How many people live in Paris?")
    assert run.steps["s1"].status == "completed" and run.steps["s1"].result == "2,102,650 people."
    second = llm.requests_for("step", "s1")[1]
    assert request_tokens_measured(second) <= 8000 * 0.75
    assert second.messages[-2]["tool_calls"][0]["function"]["name"] == "census"


# --- a window nobody knows


async def test_a_1000_step_run_on_a_model_whose_window_is_unknown_makes_no_compaction_call() -> None:
    """Before: the window taken as 8,192 tokens, the analyzer's 1,000 results were over it from about 100 steps
    on, and each was compacted: 1,000 ``compaction`` calls for text the model may well have taken whole.
    """
    steps = 1000
    plan = {"steps": [{"id": f"s{i}", "task": f"measure item {i}", "dependencies": []} for i in range(1, steps + 1)]}
    llm = ScriptedLLM(  # no context_window: nobody knows it
        {
            "plan": [plan],
            "step": lambda r: f"Result of {r.step_id}: " + " ".join(f"word{k}" for k in range(40)),
            "analyze": [verdict(True, 0.9, "all measured", "All 1000 measured.")],
            "compaction": ["shortened"],
            "history_summary": ["summary"],
        }
    )
    models = ModelRegistry().register("scripted", llm, roles=["smart", "general", "fast"])
    session = DagSession(models, DagSettings(store="none", plan_max_steps=steps, max_concurrency=50))

    run = await session.run("measure a thousand items")

    assert run.status == "done" and len(llm.requests_for("step")) == steps
    assert llm.requests_for("compaction") == []  # before: 1000
    (analyze,) = llm.requests_for("analyze")
    assert "Result of s1:" in analyze.prompt and "Result of s1000:" in analyze.prompt  # every result, whole
    assert "characters omitted" not in analyze.prompt
    assert not any("window" in warning for warning in run.warnings)  # a scripted model has no window to say


class OfflineLiteLLM(LiteLLMBackend):
    """litellm's backend for everything but the calls themselves, which a script answers: its window is what
    litellm's map says of a model it does not list (nothing).
    """

    def __init__(self, script: ScriptedLLM) -> None:
        super().__init__()
        self.script = script

    def capabilities(self, model: str) -> Any:
        return self.script.capabilities(model)

    async def complete(self, request: Any) -> Any:
        return await self.script.complete(request)

    def stream(self, request: Any) -> Any:
        return self.script.stream(request)


async def test_a_litellm_model_whose_window_is_unknown_is_told_once_a_session_and_the_setting_gives_it() -> None:
    script = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
            "step": lambda r: PROSE * 400 if r.step_id == "s1" else "done",  # about 10,000 tokens
            "analyze": [verdict(True, 0.9, "ok", "Done.")],
            "compaction": ["shortened"],
        }
    )
    models = ModelRegistry().register("my-local-qwen", OfflineLiteLLM(script), roles=["smart", "general", "fast"])
    session = DagSession(models, DagSettings(store="none", max_message_chars=100_000))

    first, second = await session.run("goal one"), await session.run("goal two")

    said = [w for w in first.warnings if "context window" in w]
    assert len(said) == 1 and not any("context window" in w for w in second.warnings)  # once, not every run
    assert "'my-local-qwen'" in said[0] and "is unknown" in said[0]
    assert "DAG_DEFAULT_CONTEXT_TOKENS" in said[0] and "context_window=N" in said[0]  # what to set
    assert script.requests_for("compaction") == []  # not guessed at 8,192 tokens: sent whole
    assert all((PROSE * 400).strip() in r.prompt for r in script.requests_for("step", "s2"))

    windowed = DagSession(models, DagSettings(store="none", max_message_chars=100_000, default_context_tokens=8192))
    third = await windowed.run("goal three")
    assert not any("context window" in w for w in third.warnings)  # the setting gives it: nothing to say
    s2 = script.requests_for("step", "s2")[-1]
    assert script.requests_for("compaction") and (PROSE * 400).strip() not in s2.prompt  # fitted to 8,192 tokens
    assert request_tokens_measured(s2) <= 8192 * 0.75


async def test_a_step_refused_as_too_long_for_a_window_nobody_knew_learns_it_and_is_tried_again_fitted() -> None:
    """No window known, nothing is compacted: until the provider refuses a prompt as too long. Then the window it
    states is the model's for the session, and the refused step is sent once more, fitted to it.
    """
    from dagmagic.errors import ContextWindowExceededError
    from dagmagic.llm.tokens import approximate_tokens

    def step(request: ScriptedRequest) -> Any:
        if request.step_id == "s1":
            return PROSE * 400  # about 10,000 tokens, which s2 reads
        if approximate_tokens(request.prompt) > 4096:  # a llama.cpp server started with -c 4096
            return ContextWindowExceededError(
                '{"message": "the request exceeds the available context size", "n_ctx": 4096}'
            )
        return "s2 done"

    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
            "step": step,
            "analyze": [verdict(True, 0.9, "ok", "Done.")],
            "compaction": ["the census, in short"],
        }
    )
    models = ModelRegistry().register("local", llm, roles=["smart", "general", "fast"])
    session = DagSession(models, DagSettings(store="none", max_message_chars=100_000, llm_retries=0))

    run = await session.run("goal")

    assert run.status == "done" and run.steps["s2"].status == "completed" and run.steps["s2"].result == "s2 done"
    refused, accepted = [call for call in run.calls if call.step_id == "s2"]
    assert refused.error and "ContextWindowExceededError" in refused.error and accepted.error is None
    (again,) = [r for r in llm.requests_for("step", "s2") if approximate_tokens(r.prompt) <= 4096]
    assert approximate_tokens(again.prompt) <= 4096 - 512  # fitted to the window the refusal stated, room to reply
    said = [w for w in run.rounds[0].warnings if "refused a prompt" in w]
    assert len(said) == 1 and "4,096 tokens" in said[0] and "context_window=N" in said[0]

    later = await session.run("goal again")  # the session keeps what the refusal taught: fitted at once
    assert later.steps["s2"].status == "completed"
    assert not [call for call in later.calls if call.error]
    assert llm.requests_for("compaction")  # the dependency compacted to the window, before the step is sent
