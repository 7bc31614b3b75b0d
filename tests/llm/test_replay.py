"""Replaying a recorded run: ``dagmagic.testing.replay``, ``ReplayLLM``, cassettes and the record modes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry, tool
from dagmagic.errors import ConfigurationError, ReplayMismatch
from dagmagic.llm.protocol import ChatRequest, ChatResponse
from dagmagic.llm.replay import cassette_registry, forget_cassettes
from dagmagic.testing import Cassette, ReplayLLM, ScriptedLLM, ToolCall, recording_of, replay
from tests.engine.conftest import plan_reply, verdict

GOAL = "Compare the populations of Paris and Berlin"
USER = [{"role": "user", "content": "Hello"}]
"""A request's messages where only the model's answer matters."""


def provider(latency: float = 0.0) -> ScriptedLLM:
    """A scripted 'provider': two parallel lookups, a join, a tool call, a verdict and a streamed synthesis."""
    return ScriptedLLM(
        {
            "plan": [
                plan_reply(
                    ("s1", [], "population of Paris"),
                    ("s2", [], "population of Berlin"),
                    ("s3", ["s1", "s2"], "compare them"),
                )
            ],
            "step:s1": [ToolCall("lookup", {"city": "Paris"}), "Paris has 2.1 million people."],
            "step:s2": [ToolCall("lookup", {"city": "Berlin"}), "Berlin has 3.7 million people."],
            "step:s3": ["Berlin is larger, by 1.6 million."],
            "analyze": [verdict(False, 0.9, "the comparison holds")],
            "synthesize": [["Berlin ", "(3.7 M) ", "is larger ", "than Paris (2.1 M)."]],
            "*": ["ok"],
        },
        latency=latency,
        price=(1e-6, 2e-6),
    )


@tool
def lookup(city: str) -> str:
    """The population of a city."""
    return {"Paris": "2.1 million", "Berlin": "3.7 million"}.get(city, "unknown")


@tool
def lookup_v2(city: str, year: int = 2024) -> str:
    """The population of a city in a year."""
    return "unknown"


def session(models: ModelRegistry, tools: list[Any] | None = None, **settings: Any) -> DagSession:
    return DagSession(models, DagSettings(store="none", **settings), tools=[lookup] if tools is None else tools)


def shape(run: Any) -> dict[str, Any]:
    """What a replay must reproduce: the answer, every round's steps and results, and the verdicts."""
    return {
        "answer": run.answer,
        "status": run.status,
        "rounds": [
            {
                "steps": {s.id: (s.task, s.status, s.result) for s in record.plan.steps},
                "verdict": record.analysis.model_dump(include={"achieved", "confidence", "reasoning"})
                if record.analysis
                else None,
            }
            for record in run.rounds
        ],
        "usage": (run.usage.input_tokens, run.usage.output_tokens, run.usage.cost),
    }


async def recorded_run(latency: float = 0.0) -> tuple[Any, ScriptedLLM]:
    llm = provider(latency)
    run = await session(ModelRegistry().register("scripted", llm, roles=["smart", "general"])).run(GOAL)
    assert run.status == "done", run.error
    return run, llm


async def test_a_replayed_run_gives_the_same_answer_steps_and_verdicts_without_a_provider_request() -> None:
    run, llm = await recorded_run()
    requests = len(llm.requests)
    assert requests >= 7  # plan, two tool-calling steps (two calls each), s3, verdict, synthesis

    models = replay(run)
    replayed = await session(models).run(GOAL)

    assert len(llm.requests) == requests  # the provider was not asked again
    assert shape(replayed) == shape(run)
    assert [c.purpose for c in replayed.calls] == [c.purpose for c in run.calls] or sorted(
        (c.purpose, c.step_id or "") for c in replayed.calls
    ) == sorted((c.purpose, c.step_id or "") for c in run.calls)
    assert sorted(models.roles.items()) == [("general", "scripted"), ("smart", "scripted")]
    backend = models.get("scripted").backend
    assert isinstance(backend, ReplayLLM) and backend.replayed == len(run.calls)


async def test_parallel_steps_replay_whatever_order_they_ask_in() -> None:
    run, _ = await recorded_run()
    cassette = recording_of(run)
    swapped = list(reversed(cassette.interactions))  # s2's calls now come before s1's in the recording
    models = Cassette(swapped, cassette.models.values())
    from dagmagic.llm.replay import replay_registry

    replayed = await session(replay_registry(models)).run(GOAL)
    assert shape(replayed) == shape(run)


async def test_parallel_steps_overlap_in_a_replay_with_recorded_timing() -> None:
    run, _ = await recorded_run(latency=0.05)
    replayed = await session(replay(run, timing=1.0)).run(GOAL)
    starts = {e.step_id: e.at for e in replayed.events if e.type == "step_started"}
    ends = {e.step_id: e.at for e in replayed.events if e.type == "step_completed"}
    assert starts["s2"] < ends["s1"] and starts["s1"] < ends["s2"]  # s1 and s2 ran at once, as recorded
    assert shape(replayed) == shape(run)


async def test_a_streamed_reply_is_replayed_piece_by_piece() -> None:
    run, _ = await recorded_run()
    models = replay(run)
    seen: list[str] = []
    replayed = session(models).start(GOAL)
    replayed.subscribe(lambda event: seen.append(event.text) if event.type == "answer_delta" else None)
    await replayed
    assert len(seen) > 1
    assert "".join(seen).endswith("than Paris (2.1 M).")


async def test_a_changed_goal_raises_a_mismatch_naming_the_first_diverging_call() -> None:
    run, _ = await recorded_run()
    replayed = await session(replay(run)).run("Compare the populations of Paris and Rome")
    assert replayed.status == "failed"
    error = replayed.exception
    assert isinstance(error, ReplayMismatch)
    assert error.purpose == "plan" and error.step_id is None
    assert "'plan' call" in str(error) and "was not recorded" in str(error)
    assert "-" in str(error) and "+" in str(error) and "Rome" in str(error)  # a diff of what changed


async def test_a_changed_tool_raises_a_mismatch_at_the_step_that_offers_it() -> None:
    run, _ = await recorded_run()
    replayed = await session(replay(run), tools=[lookup_v2]).run(GOAL)
    assert replayed.status == "failed"
    error = replayed.exception
    assert isinstance(error, ReplayMismatch)
    assert error.purpose == "plan"  # the planner is told the tools first: the first call that diverges
    assert "lookup_v2" in str(error)


async def test_a_changed_tool_schema_is_a_mismatch_too() -> None:
    run, _ = await recorded_run()

    @tool(name="lookup")
    def renamed_argument(town: str) -> str:
        """The population of a city."""
        return ""

    replayed = await session(replay(run), tools=[renamed_argument]).run(GOAL)
    assert isinstance(replayed.exception, ReplayMismatch)


async def test_not_strict_falls_through_to_the_fallback_registry() -> None:
    run, _ = await recorded_run()
    other = ScriptedLLM({"plan": [plan_reply(("s1", [], "population of Rome"))], "*": ["Rome: 2.8 million"],
                         "analyze": [verdict(True, 0.9, final_answer="Rome has 2.8 million.")]})  # fmt: skip
    fallback = ModelRegistry().register("scripted", other, roles=["smart"])
    replayed = await session(replay(run, strict=False, fallback=fallback)).run("How many people live in Rome?")
    assert replayed.status == "done" and "2.8 million" in replayed.answer
    assert other.requests_for("plan")


async def test_a_recorded_provider_error_is_replayed_and_retried_as_recorded() -> None:
    from dagmagic.errors import RateLimitError

    calls = {"n": 0}

    def flaky(request: Any) -> Any:
        calls["n"] += 1
        return RateLimitError("slow down", model="scripted") if calls["n"] == 1 else "fine"

    script = {"plan": [plan_reply(("s1", []))], "step": flaky, "analyze": [verdict(True, 0.9, final_answer="fine")]}
    llm = ScriptedLLM(script)
    run = await session(ModelRegistry().register("m", llm), llm_retry_backoff=0.0).run("goal")
    assert run.status == "done"
    replayed = await session(replay(run), llm_retry_backoff=0.0).run("goal")
    assert shape(replayed) == shape(run)


def cut_stream_script(model: str) -> dict[str, Any]:
    """A run whose streamed answer breaks off after two pieces (a server that ends a stream early), then is
    written again.
    """
    from dagmagic.errors import ServerError

    cut = ["Berlin ", "is ", ServerError("the stream ended before it finished", model=model)]
    return {
        "plan": [plan_reply(("s1", []))],
        "step": ["Berlin: 3.7 M."],
        "analyze": [verdict(True, 0.9)],
        "synthesize": [cut, ["Berlin is larger."]],
    }


async def test_a_stream_that_broke_off_is_replayed_breaking_off_after_its_pieces(tmp_path: Path) -> None:
    """Not before its first piece: that error would be retried, and the replay would leave the recording."""
    forget_cassettes()
    path = tmp_path / "cut.jsonl"
    recorded = await run_with("all", path, ScriptedLLM(cut_stream_script("scripted")), goal="goal")
    assert recorded.status == "done" and [c.status for c in recorded.calls].count("failed") == 1
    forget_cassettes()
    replayed = await run_with("none", path, ScriptedLLM({}), goal="goal")
    assert shape(replayed) == shape(recorded)


async def test_a_stored_stream_that_broke_off_is_replayed_breaking_off_too() -> None:
    llm = ScriptedLLM(cut_stream_script("m"))
    run = await session(ModelRegistry().register("m", llm)).run("goal")
    assert run.status == "done"
    (broken,) = [call for call in run.calls if call.status == "failed"]
    assert broken.pieces == 2
    replayed = await session(replay(run)).run("goal")
    assert shape(replayed) == shape(run)


def test_a_cassette_round_trips_through_its_file(tmp_path: Path) -> None:
    run, _ = asyncio.run(recorded_run())
    cassette = recording_of(run)
    path = cassette.save(tmp_path / "run.jsonl")
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["dagmagic_cassette"] == 1
    assert len(lines) == 1 + len(run.calls)
    loaded = Cassette.load(path)
    assert [i.model_dump() for i in loaded] == [i.model_dump() for i in cassette]
    assert loaded.models == cassette.models
    llm = ReplayLLM.from_file(path)
    replayed = asyncio.run(session(ModelRegistry().register("scripted", llm, roles=["smart"])).run(GOAL))
    assert shape(replayed) == shape(run)
    assert path.stat().st_mode & 0o077 == 0  # owner-only, like the run store


def test_a_file_that_is_not_a_cassette_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(ConfigurationError, match="not a dagmagic cassette"):
        Cassette.load(bad)
    with pytest.raises(ConfigurationError, match="no cassette at"):
        Cassette.load(tmp_path / "missing.jsonl")


def test_a_line_cut_short_by_a_dying_kernel_is_dropped(tmp_path: Path) -> None:
    run, _ = asyncio.run(recorded_run())
    path = recording_of(run).save(tmp_path / "run.jsonl")
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the last call's line cut in the middle
    assert len(Cassette.load(path)) == len(run.calls) - 1


async def test_the_planner_date_and_the_python_tools_directory_do_not_break_a_match() -> None:
    from dagmagic.llm.cassette import normalized_messages

    a = [{"role": "system", "content": "Today is 2026-12-02 (the year is 2026); in /tmp/dagmagic-code-k3x_9a2q/a.csv"}]
    b = [
        {"role": "system", "content": "Today is 2027-01-15 (the year is 2027); in /var/T/dagmagic-code-0p7zyw1m/a.csv"}
    ]
    assert normalized_messages(a) == normalized_messages(b)
    c = [{"role": "user", "content": "population in 2020"}]
    d = [{"role": "user", "content": "population in 2021"}]
    assert normalized_messages(c) != normalized_messages(d)


async def test_a_replay_on_another_day_matches() -> None:
    run, _ = await recorded_run()
    models = replay(run)
    later = DagSession(models, DagSettings(store="none"), tools=[lookup])
    import dagmagic.engine.calls.planner as planner_module

    original = planner_module.dt.date

    class Tomorrow(original):  # type: ignore[misc,valid-type]
        @classmethod
        def today(cls) -> Any:
            return original(2031, 5, 17)

    planner_module.dt.date = Tomorrow  # type: ignore[misc]
    try:
        replayed = await later.run(GOAL)
    finally:
        planner_module.dt.date = original  # type: ignore[misc]
    assert replayed.status == "done", replayed.error
    assert shape(replayed) == shape(run)


# --- record modes


def scripted_registry(llm: ScriptedLLM) -> ModelRegistry:
    return ModelRegistry().register("scripted", llm, roles=["smart", "general"])


async def run_with(mode: str, path: Path, llm: ScriptedLLM, goal: str = GOAL) -> Any:
    return await session(scripted_registry(llm), cassette=str(path), record=mode).run(goal)


async def test_record_once_records_when_the_cassette_is_missing_then_replays(tmp_path: Path) -> None:
    forget_cassettes()
    path = tmp_path / "nb.jsonl"
    first_llm = provider()
    first = await run_with("once", path, first_llm)
    assert path.exists() and len(Cassette.load(path)) == len(first_llm.requests)

    forget_cassettes()  # a new kernel
    second_llm = provider()
    second = await run_with("once", path, second_llm)
    assert second_llm.requests == []
    assert shape(second) == shape(first)


async def test_record_none_replays_and_a_miss_ends_the_run(tmp_path: Path) -> None:
    forget_cassettes()
    path = tmp_path / "nb.jsonl"
    recorded = await run_with("all", path, provider())
    forget_cassettes()
    llm = provider()
    replayed = await run_with("none", path, llm)
    assert llm.requests == [] and shape(replayed) == shape(recorded)
    missed = await run_with("none", path, llm, goal="Something else entirely")
    assert llm.requests == [] and isinstance(missed.exception, ReplayMismatch)


def test_record_none_without_a_cassette_file_says_how_to_record_it(tmp_path: Path) -> None:
    forget_cassettes()
    with pytest.raises(ConfigurationError, match="record it first"):
        asyncio.run(run_with("none", tmp_path / "missing.jsonl", provider()))
    scripted = asyncio.run(session(scripted_registry(provider()), record="none").run(GOAL))
    assert scripted.status == "done"  # a scripted model is no provider: record=none lets it answer


async def test_record_none_without_a_cassette_refuses_every_provider_call() -> None:
    from tests.fake_provider import Provider

    server = Provider()
    try:
        models = ModelRegistry().register("real", "openai/m", roles=["smart"], api_base=server.base, api_key="none")
        run = await session(models, record="none").run(GOAL)
    finally:
        server.close()
    assert server.requests == 0
    assert isinstance(run.exception, ReplayMismatch) and "DAG_RECORD=none" in str(run.exception)


async def test_record_none_without_a_cassette_lets_litellm_mock_responses_answer() -> None:
    """litellm's ``mock_response`` makes no request (tutorial 05's router pool): nothing to refuse in CI."""
    from litellm import Router

    pool = Router(model_list=[deployment("sk-a", mock_response="Done."), deployment("sk-b", mock_response="Done.")])
    models = (
        scripted_registry(provider())
        .register("mocked", "openai/m", roles=["fast"], api_key="sk-c", mock_response="Done.")
        .register("pool", pool, model_group="workers", roles=["reasoning"])
    )
    wrapped = cassette_registry(models, DagSettings(store="none", record="none"))
    for name in ("mocked", "pool"):
        reply = await ask(wrapped, name)
        assert reply.content == "Done."


async def test_record_none_refuses_a_router_with_one_deployment_that_calls_a_provider() -> None:
    from litellm import Router

    pool = Router(model_list=[deployment("sk-a", mock_response="Done."), deployment("sk-b")])
    models = ModelRegistry().register("pool", pool, model_group="workers", roles=["smart"])
    wrapped = cassette_registry(models, DagSettings(store="none", record="none"))
    with pytest.raises(ReplayMismatch, match="DAG_RECORD=none"):
        await ask(wrapped, "pool")


def deployment(key: str, **options: Any) -> dict[str, Any]:
    """A router deployment in the group ``workers``."""
    return {"model_name": "workers", "litellm_params": {"model": "openai/m", "api_key": key, **options}}


async def ask(models: ModelRegistry, name: str) -> Any:
    """One call to the model ``name`` of ``models``, as the engine makes it."""
    entry = models.get(name)
    request = ChatRequest(model=entry.target, messages=USER, purpose="step", options=entry.options)
    return await entry.backend.complete(request)


async def test_record_new_episodes_replays_what_matches_and_records_the_rest(tmp_path: Path) -> None:
    forget_cassettes()
    path = tmp_path / "nb.jsonl"
    await run_with("all", path, provider())
    recorded = len(Cassette.load(path))
    forget_cassettes()
    llm = provider()
    await run_with("new_episodes", path, llm)  # the same run: all replayed
    assert llm.requests == []
    other = await run_with("new_episodes", path, llm, goal="Compare the populations of Paris and Rome")
    assert other.status == "done" and llm.requests  # the new goal went to the provider ...
    assert len(Cassette.load(path)) == recorded + len(llm.requests)  # ... and was recorded
    forget_cassettes()
    again = provider()
    await run_with("none", path, again, goal="Compare the populations of Paris and Rome")
    assert again.requests == []


async def test_record_all_records_anew(tmp_path: Path) -> None:
    forget_cassettes()
    path = tmp_path / "nb.jsonl"
    path.write_text("stale\n")
    llm = provider()
    await run_with("all", path, llm)
    assert len(Cassette.load(path)) == len(llm.requests) > 0


async def test_no_key_reaches_a_cassette(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forget_cassettes()
    canary = "sk-canary-0123456789abcdef"
    env_canary = "canary-env-secret-value-42"
    monkeypatch.setenv("CANARY_API_KEY", env_canary)
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", [], f"use {canary}"))],
            "step": [f"the key is {canary} and {env_canary}"],
            "analyze": [verdict(True, 0.9, final_answer=f"done {env_canary}")],
        }
    )
    models = ModelRegistry().register("scripted", llm, roles=["smart"], api_key=canary)
    path = tmp_path / "secret.jsonl"
    run = await session(models, cassette=str(path), record="all").run(f"goal mentioning {canary}")
    data = path.read_bytes()
    assert len(data) > 500 and b"the key is" in data
    assert canary.encode() not in data and env_canary.encode() not in data
    saved = recording_of(run).save(tmp_path / "from-run.jsonl").read_bytes()
    assert b"the key is" in saved and canary.encode() not in saved and env_canary.encode() not in saved


async def test_replay_from_a_run_store_by_id(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    llm = provider()
    run = await DagSession(scripted_registry(llm), DagSettings(store=str(store)), tools=[lookup]).run(GOAL)
    replayed = await session(replay(run.run_id, store=store)).run(GOAL)
    assert shape(replayed) == shape(run)


# --- through litellm, against a provider on loopback


def answer_like_a_model(body: dict[str, Any]) -> str:
    """The fake provider's replies, by the system prompt of each request: a plan, step results, a verdict that
    leaves the answer to the synthesis, and the answer.
    """
    system = str(body["messages"][0].get("content") or "")
    if system.startswith("Plan how to reach"):
        return "1. population of Paris\n2. population of Berlin"
    if system.startswith("Judge whether"):
        return "no 0.95: both figures are known"
    if system.startswith("You carry out one step"):
        prompt = json.dumps(body["messages"])
        return "Paris: 2.1 million." if "Paris" in prompt.split("population of")[-1][:20] else "Berlin: 3.7 million."
    return "Berlin (3.7 million) has more people than Paris (2.1 million)."


async def test_a_run_through_litellm_is_replayed_with_no_request_to_the_provider(tmp_path: Path) -> None:
    from tests.fake_provider import Provider

    server = Provider()
    server.answer = answer_like_a_model
    server.piece_size = 7  # streams in many pieces
    try:
        models = ModelRegistry().register(
            "real", "openai/m", roles=["smart"], api_base=server.base, api_key="sk-test-canary-0123456789"
        )
        forget_cassettes()
        path = tmp_path / "real.jsonl"
        recorded = await session(models, tools=[], cassette=str(path), record="once").run(GOAL)
        assert recorded.status == "done", recorded.error
        made = server.requests
        assert made >= 4

        forget_cassettes()  # a new kernel, as in CI
        replayed = await session(models, tools=[], cassette=str(path), record="none").run(GOAL)
        assert server.requests == made
        assert shape(replayed) == shape(recorded)
        assert "3.7 million" in replayed.answer

        from_store = await session(replay(recorded), tools=[]).run(GOAL)  # the run itself, no cassette
        assert server.requests == made and shape(from_store) == shape(recorded)
    finally:
        server.close()
    assert b"sk-test-canary" not in path.read_bytes()
    streamed = [i for i in Cassette.load(path) if i.stream and i.outcome == "ok"]
    assert streamed and all(len(i.chunks or []) > 1 for i in streamed)  # the pieces as they came


async def test_a_call_cancelled_when_recorded_is_cancelled_again_by_the_same_timeout(tmp_path: Path) -> None:
    """A step whose call outlived DAG_STEP_TIMEOUT when recorded: the replay waits as long for the timeout to
    cancel it again (a replay at once would otherwise answer a call the recorded run never got an answer to).
    """
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", [], "slow"), ("s2", [], "fast"))],
            "step:s1": ["too late"],
            "step:s2": ["quick"],
            "analyze": [verdict(True, 0.9, final_answer="only s2 answered")],
        },
        latency={"step:s1": 0.6},
    )
    forget_cassettes()
    path = tmp_path / "timeout.jsonl"
    models = ModelRegistry().register("m", llm, roles=["smart"])
    recorded = await session(models, tools=[], cassette=str(path), record="all", step_timeout=0.3,
                             step_immediate_retries=0, step_retry_delays="").run(GOAL)  # fmt: skip
    assert recorded.rounds[0].plan.steps[0].status == "failed"
    assert any(i.outcome == "cancelled" for i in Cassette.load(path))
    forget_cassettes()
    replayed = await session(models, tools=[], cassette=str(path), record="none", step_timeout=0.3,
                             step_immediate_retries=0, step_retry_delays="").run(GOAL)  # fmt: skip
    assert replayed.status == "done", replayed.error
    assert shape(replayed)["answer"] == shape(recorded)["answer"]


async def test_a_run_with_a_subrun_is_replayed_from_the_store(tmp_path: Path) -> None:
    from tests.engine.loop import test_subdag

    store = tmp_path / "runs.sqlite"
    recorded_session, llm = test_subdag.session(store)
    run = await recorded_session.run("compare markets")
    assert run.status == "done" and run.steps["s2"].subrun is not None
    made = len(llm.requests)
    replayed = await DagSession(replay(run.run_id, store=store), DagSettings(store="none")).run("compare markets")
    assert replayed.status == "done", replayed.error
    assert len(llm.requests) == made
    assert shape(replayed) == shape(run)
    assert replayed.steps["s2"].result == run.steps["s2"].result


async def test_a_reply_cut_at_its_token_limit_is_replayed_as_cut() -> None:
    # the run store keeps why each reply ended; a replay that said "stop" instead would read the cut line
    llm = ScriptedLLM(
        {
            "plan": [ChatResponse(content='1. lookup(city="Paris")\n2. lookup(city="Ber', finish_reason="length")],
            "analyze": [verdict(True, 0.9, "", final_answer="Paris has 2.1 million people.")],
            "*": ["ok"],
        }
    )
    run = await session(ModelRegistry().register("m", llm)).run(GOAL)
    (plan,) = [call for call in run.calls if call.purpose == "plan"]
    assert plan.finish_reason == "length"
    assert [step.id for step in run.steps.values()] == ["s1"]
    replayed = await session(replay(run)).run(GOAL)
    assert shape(replayed) == shape(run)
