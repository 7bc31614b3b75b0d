"""The response cache: identical requests answered from a SQLite file with no provider call and cost 0."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dagmagic import ConfigurationError, DagSession, DagSettings, ModelRegistry, errors
from dagmagic.llm import ChatModel
from dagmagic.llm.cache import CachingBackend, ResponseCache, cached_registry, request_key
from dagmagic.llm.protocol import ChatRequest
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, verdict

HELLO = [{"role": "user", "content": "hello"}]
PRICE = (1e-6, 2e-6)
LONG_RESULT = "The capital of France is Paris. " * 20  # longer than any synthesis_result_chars below


def script(**overrides: Any) -> dict[str, Any]:
    return {
        "plan": [plan_reply(("s1", []), ("s2", []), ("s3", ["s1", "s2"]))],
        "step": [LONG_RESULT],
        "analyze": [verdict(True, 0.9, "ok")],
        "synthesize": ["Paris is the capital."],
        **overrides,
    }


def session(llm: ScriptedLLM, cache: Path, **settings: Any) -> DagSession:
    return DagSession(ModelRegistry().register("scripted", llm), DagSettings(cache=cache, store="none", **settings))


def cached_model(llm: ScriptedLLM, cache: Path) -> ChatModel:
    models = cached_registry(ModelRegistry().register("m", llm), DagSettings(cache=cache))
    return ChatModel(models.get("m"))


async def test_a_run_again_is_answered_from_the_cache_with_no_request_and_cost_0(tmp_path: Path) -> None:
    llm = ScriptedLLM(script(), price=PRICE)
    first = await session(llm, tmp_path / "c.sqlite").run("capital of France?")
    sent = len(llm.requests)
    assert sent >= 5 and not any(call.cached for call in first.calls)
    assert first.usage.cached_requests == 0 and "cached" not in first.usage.describe()

    second = await session(llm, tmp_path / "c.sqlite").run("capital of France?")
    assert len(llm.requests) == sent  # not one request reached the model
    assert second.answer == first.answer == "Paris is the capital."
    assert len(second.calls) == len(first.calls) and all(call.cached for call in second.calls)
    assert all(call.cost == 0 for call in second.calls)
    usage = second.usage
    assert (usage.requests, usage.cached_requests, usage.cost) == (len(first.calls), len(first.calls), 0)
    assert usage.saved_cost == pytest.approx(first.cost)
    cost = first.cost
    assert cost is not None
    assert f"{usage.requests} requests ({usage.requests} cached, saved ${cost:.4f}) · $0" in usage.describe()
    assert "cached" in repr(second.calls[0])


async def test_tuning_only_the_synthesis_costs_one_call(tmp_path: Path) -> None:
    llm = ScriptedLLM(script(), price=PRICE)
    await session(llm, tmp_path / "c.sqlite").run("capital of France?")
    sent = len(llm.requests)

    # synthesis_result_chars is read by synthesis alone: it cuts the step results the answer is written from
    tuned = await session(llm, tmp_path / "c.sqlite", synthesis_result_chars=200).run("capital of France?")
    assert [request.purpose for request in llm.requests[sent:]] == ["synthesize"]
    (fresh,) = [call for call in tuned.calls if not call.cached]
    assert fresh.purpose == "synthesize" and fresh.cost is not None and fresh.cost > 0
    assert tuned.usage.cost == pytest.approx(fresh.cost)


async def test_a_stream_hit_comes_back_in_pieces(tmp_path: Path) -> None:
    llm = ScriptedLLM({"synthesize": [["Paris ", "is ", "the ", "capital."]]}, price=PRICE)
    first = [chunk.text async for chunk in cached_model(llm, tmp_path / "c.sqlite").stream(HELLO, purpose="synthesize")]
    again = [chunk.text async for chunk in cached_model(llm, tmp_path / "c.sqlite").stream(HELLO, purpose="synthesize")]
    assert len(llm.requests) == 1
    assert "".join(again) == "".join(first) == "Paris is the capital." and len(again) > 1


async def test_a_streamed_and_a_whole_request_share_an_answer(tmp_path: Path) -> None:
    llm = ScriptedLLM({"*": ["Paris"]})
    model = cached_model(llm, tmp_path / "c.sqlite")
    streamed = "".join([chunk.text async for chunk in model.stream(HELLO, purpose="step")])
    whole = await model.chat(HELLO, purpose="step")
    assert (streamed, whole.content, whole.call.cached, len(llm.requests)) == ("Paris", "Paris", True, 1)


async def test_a_request_that_differs_in_messages_tools_or_parameters_misses(tmp_path: Path) -> None:
    llm = ScriptedLLM({"*": ["Paris"]})
    model = cached_model(llm, tmp_path / "c.sqlite")
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    await model.chat(HELLO, purpose="step")
    await model.chat([{"role": "user", "content": "hello!"}], purpose="step")
    await model.chat(HELLO, purpose="step", tools=[tool])
    await model.chat(HELLO, purpose="step", temperature=0.5)
    assert len(llm.requests) == 4
    again = await model.chat(HELLO, purpose="step", tools=[tool])
    assert again.call.cached and len(llm.requests) == 4


def test_the_key_ignores_options_stream_and_where_the_call_comes_from() -> None:
    plain = ChatRequest(model="m", messages=HELLO, purpose="step")
    elsewhere = ChatRequest(
        model="m", messages=HELLO, purpose="analyze", round=2, step_id="s9", options={"api_key": "sk-other-0000000"}
    )
    assert request_key(plain) == request_key(elsewhere)
    assert request_key(plain) != request_key(plain.model_copy(update={"model": "n"}))


async def test_errors_and_empty_replies_are_not_cached(tmp_path: Path) -> None:
    llm = ScriptedLLM({"*": [errors.BadRequestError("no"), "", "Paris"]})
    model = cached_model(llm, tmp_path / "c.sqlite")
    with pytest.raises(errors.BadRequestError):
        await model.chat(HELLO, purpose="step")
    assert (await model.chat(HELLO, purpose="step")).content == ""
    result = await model.chat(HELLO, purpose="step")
    assert (result.content, result.call.cached, len(llm.requests)) == ("Paris", False, 3)
    assert (await model.chat(HELLO, purpose="step")).call.cached


async def test_a_stream_that_fails_midway_is_not_cached(tmp_path: Path) -> None:
    llm = ScriptedLLM({"*": [["Par", RuntimeError("connection dropped")], ["Paris"]]})
    model = cached_model(llm, tmp_path / "c.sqlite")
    with pytest.raises(Exception, match="connection dropped"):
        async for _ in model.stream(HELLO, purpose="step"):
            pass
    assert len(ResponseCache.open(tmp_path / "c.sqlite")) == 0
    assert "".join([chunk.text async for chunk in model.stream(HELLO, purpose="step")]) == "Paris"
    assert len(llm.requests) == 2


def test_the_file_is_owner_only_and_a_foreign_one_is_refused(tmp_path: Path) -> None:
    cache = ResponseCache.open(tmp_path / "dir" / "c.sqlite")
    assert (cache.path.stat().st_mode & 0o777, cache.path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE t (x)")
    db.close()
    with pytest.raises(ConfigurationError, match=r"another program.s SQLite file.*DAG_CACHE"):
        ResponseCache(foreign)


async def test_no_key_reaches_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registered = "sk-canary-registered-7f3a9c"
    from_env = "canary-env-value-5d1e8b2a"
    monkeypatch.setenv("CANARY_API_KEY", from_env)
    llm = ScriptedLLM(
        {
            "step:s1": [f"keys: {registered} and {from_env}"],
            "step:s2": ["a key_value_store holds it"],  # shaped like a key: masked, the answer would change
            "step:s3": ["Paris"],
        }
    )
    models = ModelRegistry().register("m", llm, api_key=registered)
    model = ChatModel(cached_registry(models, DagSettings(cache=tmp_path / "c.sqlite")).get("m"))
    asking = [{"role": "user", "content": f"say {registered} and {from_env}"}]
    for step in ("s1", "s2", "s2"):
        await model.chat(asking, purpose="step", step_id=step)
    assert len(llm.requests) == 3 and len(ResponseCache.open(tmp_path / "c.sqlite")) == 0  # neither reply kept
    await model.chat(asking, purpose="step", step_id="s3")  # a key in the request: only in its hash
    assert len(ResponseCache.open(tmp_path / "c.sqlite")) == 1
    stored = b"".join(path.read_bytes() for path in tmp_path.iterdir())  # the -wal file too
    assert b"Paris" in stored
    assert registered.encode() not in stored and from_env.encode() not in stored and b"key_value" not in stored


async def test_two_processes_share_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    writer = (
        "import asyncio, sys\n"
        "from dagmagic.llm import ChatModel, ModelRegistry\n"
        "from dagmagic.llm.cache import cached_registry\n"
        "from dagmagic.settings import DagSettings\n"
        "from dagmagic.testing import ScriptedLLM\n"
        "models = cached_registry(ModelRegistry().register('m', ScriptedLLM({'*': ['from the other process']})),"
        " DagSettings(cache=sys.argv[1]))\n"
        "asyncio.run(ChatModel(models.get('m')).chat([{'role': 'user', 'content': 'hello'}], purpose='step'))\n"
    )
    subprocess.run([sys.executable, "-c", writer, str(path)], check=True, timeout=60)
    llm = ScriptedLLM({"*": ["from this process"]})
    result = await cached_model(llm, path).chat(HELLO, purpose="step")
    assert (result.content, result.call.cached, llm.requests) == ("from the other process", True, [])


def test_off_leaves_the_registry_as_it_is_and_on_wraps_every_model(tmp_path: Path) -> None:
    models = ModelRegistry().register("a", ScriptedLLM({}), roles=["smart"]).register("b", ScriptedLLM({}))
    assert cached_registry(models, DagSettings()) is models
    wrapped = cached_registry(models, DagSettings(cache=tmp_path / "c.sqlite"))
    assert all(isinstance(entry.backend, CachingBackend) for entry in wrapped)
    assert wrapped.roles == models.roles and wrapped.get("b").backend.inner is models.get("b").backend  # type: ignore[attr-defined]


def test_cache_on_means_the_default_file_and_off_means_none() -> None:
    assert DagSettings(cache="on").cache_path == Path(".dagmagic/cache.sqlite")
    assert DagSettings(cache="true").cache_path == Path(".dagmagic/cache.sqlite")
    assert DagSettings(cache="elsewhere/c.sqlite").cache_path == Path("elsewhere/c.sqlite")
    for off in ("off", "none", "false", ""):
        assert DagSettings(cache=off).cache_path is None
    assert DagSettings().cache_path is None


async def test_deleting_the_file_empties_the_cache_for_the_next_run(tmp_path: Path) -> None:
    llm = ScriptedLLM({"*": ["Paris"]})
    path = tmp_path / "c.sqlite"
    await cached_model(llm, path).chat(HELLO, purpose="step")
    for file in tmp_path.iterdir():
        file.unlink()
    result = await cached_model(llm, path).chat(HELLO, purpose="step")
    assert (result.call.cached, len(llm.requests), len(ResponseCache.open(path))) == (False, 2, 1)


async def test_a_cached_call_is_marked_in_every_view_and_kept_by_the_run_store(tmp_path: Path) -> None:
    from dagmagic import load_run
    from dagmagic.notebook.progress import trace_table
    from dagmagic.notebook.widget import widget_state

    llm = ScriptedLLM(script(), price=PRICE)
    await session(llm, tmp_path / "c.sqlite").run("capital of France?")
    store = tmp_path / "runs.sqlite"
    settings = DagSettings(cache=tmp_path / "c.sqlite", store=store)
    run = await DagSession(ModelRegistry().register("scripted", llm), settings).run("capital of France?")

    lines = trace_table(run).splitlines()
    assert all(line.endswith("  cached") for line in lines[1 : len(run.calls) + 1])
    assert lines[-1].startswith(f"{'total':16} {len(run.calls):>3} calls") and f"{len(run.calls)} cached" in lines[-1]
    state = widget_state(run)
    assert all(call["cached"] for call in state["calls"])
    assert state["usage"]["cached_requests"] == len(run.calls) and state["usage"]["saved_cost"] > 0
    loaded = load_run(run.run_id, store=store)
    assert [call.cached for call in loaded.calls] == [True] * len(run.calls)
    assert loaded.usage == run.usage
    pd = pytest.importorskip("pandas")
    calls = run.to_dataframe("calls")
    assert isinstance(calls, pd.DataFrame) and calls["cached"].all() and (calls["cost"] == 0).all()


async def test_the_litellm_path_is_cached_too_and_a_stream_hit_needs_no_provider(tmp_path: Path) -> None:
    from tests.fake_provider import Provider

    provider = Provider()
    provider.reply = "Paris, from the provider"
    key = "sk-canary-litellm-1b2c3d4e5f"
    try:
        models = ModelRegistry().register("gpt", "openai/gpt-4.1-mini", api_base=provider.base, api_key=key)
        model = ChatModel(cached_registry(models, DagSettings(cache=tmp_path / "c.sqlite")).get("gpt"))
        first = await model.chat(HELLO, purpose="step")
        assert (first.content, first.call.cached, provider.requests) == ("Paris, from the provider", False, 1)
        assert first.call.cost is not None and first.call.cost > 0
        again = await model.chat(HELLO, purpose="step")
        streamed = [chunk.text async for chunk in model.stream(HELLO, purpose="step")]
        assert provider.requests == 1  # neither reached the provider
        assert (again.content, again.call.cached, again.call.cost) == ("Paris, from the provider", True, 0)
        assert again.call.usage.saved_cost == pytest.approx(first.call.cost)
        assert "".join(streamed) == "Paris, from the provider"
        # in pieces again (four, give or take a piece's end held back while it could begin a key this process knows)
        assert len(streamed) > 1, streamed
    finally:
        provider.close()
    assert key.encode() not in b"".join(path.read_bytes() for path in tmp_path.iterdir())


async def test_a_reply_that_cannot_be_read_back_is_a_miss_not_a_failure(tmp_path: Path) -> None:
    llm = ScriptedLLM({"*": ["Paris"]})
    model = cached_model(llm, tmp_path / "c.sqlite")
    await model.chat(HELLO, purpose="step")
    with sqlite3.connect(tmp_path / "c.sqlite") as db:  # another program (or a bad disk) spoils the row
        db.execute("UPDATE responses SET response = 'not json'")
    db.close()
    result = await model.chat(HELLO, purpose="step")
    assert (result.content, result.call.cached, len(llm.requests)) == ("Paris", False, 2)
