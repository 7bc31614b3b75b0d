"""OpenTelemetry spans of a run: names, nesting, attributes, the content opt-in, masking, and the real export
to an OTLP/HTTP receiver (Arize Phoenix, in its own virtualenv: ``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from dagmagic import ConfigurationError, DagRun, DagSession, DagSettings, ModelRegistry, tool
from dagmagic import tracing as tracing_module
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ToolCall
from dagmagic.tracing import CAPTURE_CONTENT_VARIABLE, provider_name, run_span_context, run_tracer

KEY = "sk-test-" + "4f9a" * 8
"""A key-shaped secret planted in the goal, a tool's arguments and its result."""
ENV_SECRET = "plain-secret-value-9182736455"
"""A secret known only as an environment variable's value (``DAGMAGIC_TEST_API_KEY``)."""
ROOT = Path(__file__).resolve().parent.parent


@tool
def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: what to look up
    """
    return f"found {query} (key {KEY}, env {ENV_SECRET})"


async def _step(request: ScriptedRequest) -> str | ToolCall:
    """s1 calls the tool first; every step takes a moment, so s1 and s2 run side by side."""
    if request.step_id == "s1" and "found paris" not in request.prompt:
        return ToolCall("lookup", {"query": f"paris {KEY}"})
    await asyncio.sleep(0.05)
    return f"result of {request.step_id}"


def _script(**overrides: Any) -> dict[str, Any]:
    plan = {
        "steps": [
            {"id": "s1", "task": "look it up"},
            {"id": "s2", "task": "think"},
            {"id": "s3", "task": "combine", "dependencies": ["s1", "s2"]},
        ]
    }
    return {
        "plan": [plan],
        "step": _step,
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": "Paris."}],
        "synthesize": [["Paris", "."]],
        **overrides,
    }


def _session(**settings: Any) -> DagSession:
    registry = ModelRegistry().register("scripted", ScriptedLLM(_script()), roles=["smart", "general", "fast"])
    return DagSession(registry, DagSettings(store="none", **settings), tools=[lookup])


def _name(span: ReadableSpan | None) -> str:
    return span.name if span is not None else "(none)"


@dataclass
class Spans:
    """Finished spans, by name and by parent."""

    spans: list[ReadableSpan]

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        if span.parent is None or span.parent.is_remote:  # a run's span hangs under its run id's context
            return None
        return next(other for other in self.spans if other.context.span_id == span.parent.span_id)

    def text(self) -> str:
        """Every name, attribute, status and event of every span."""
        return json.dumps(
            [
                [span.name, dict(span.attributes or {}), span.status.description, [e.attributes for e in span.events]]
                for span in self.spans
            ],
            default=str,
        )


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The program's own TracerProvider (as a user sets one), exporting to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    monkeypatch.delenv(CAPTURE_CONTENT_VARIABLE, raising=False)
    monkeypatch.setenv("DAGMAGIC_TEST_API_KEY", ENV_SECRET)
    yield exporter
    provider.shutdown()


async def _traced_run(exporter: InMemorySpanExporter, goal: str = f"capital of France? ({KEY})") -> Spans:
    run = await _session().start(goal)
    assert run.status == "done", run.error
    assert [step.status for step in run.steps.values()] == ["completed"] * 3
    return Spans(list(exporter.get_finished_spans()))


async def test_a_run_is_a_tree_of_spans_named_by_the_conventions(exported: InMemorySpanExporter) -> None:
    spans = await _traced_run(exported)
    run = spans.one("invoke_workflow dagmagic")
    round_ = spans.one("round 1")
    plan = spans.one("plan round 1")
    steps = {step_id: spans.one(f"invoke_agent {step_id}") for step_id in ("s1", "s2", "s3")}
    tool_call = spans.one("execute_tool lookup")
    assert spans.parent(run) is None
    assert run.attributes is not None and run.parent == run_span_context(str(run.attributes["dagmagic.run_id"]))
    assert spans.parent(round_) is run
    assert spans.parent(plan) is round_
    assert all(spans.parent(step) is round_ for step in steps.values())
    assert spans.parent(tool_call) is steps["s1"]
    chats = spans.named("chat scripted")
    by_purpose: dict[str, list[ReadableSpan]] = {}
    for chat in chats:
        by_purpose.setdefault(str((chat.attributes or {})["dagmagic.purpose"]), []).append(chat)
    assert [spans.parent(chat) for chat in by_purpose["plan"]] == [plan]
    assert sorted(_name(spans.parent(chat)) for chat in by_purpose["step"]) == [
        "invoke_agent s1",
        "invoke_agent s1",  # before and after its tool call
        "invoke_agent s2",
        "invoke_agent s3",
    ]
    assert [spans.parent(chat) for chat in by_purpose["analyze"]] == [round_]
    assert {span.context.trace_id for span in spans.spans} == {run.context.trace_id}


async def test_parallel_steps_overlap_and_children_lie_within_their_parents(exported: InMemorySpanExporter) -> None:
    spans = await _traced_run(exported)
    s1, s2 = spans.one("invoke_agent s1"), spans.one("invoke_agent s2")
    assert s1.start_time is not None and s1.end_time is not None
    assert s2.start_time is not None and s2.end_time is not None
    assert s1.start_time < s2.end_time and s2.start_time < s1.end_time  # side by side, not one after the other
    s3 = spans.one("invoke_agent s3")
    assert s3.start_time is not None and s3.start_time >= max(s1.end_time, s2.end_time)  # waited for both
    for span in spans.spans:
        parent = spans.parent(span)
        if parent is not None and span.name.startswith(("chat", "execute_tool")):
            assert parent.start_time is not None and parent.end_time is not None
            assert span.start_time is not None and span.end_time is not None
            margin = 2_000_000  # ns: a record's start is taken a moment before its step's event
            assert parent.start_time - margin <= span.start_time <= span.end_time <= parent.end_time + margin


async def test_spans_carry_the_genai_and_dagmagic_attributes(exported: InMemorySpanExporter) -> None:
    spans = await _traced_run(exported)
    run_id = str((spans.one("invoke_workflow dagmagic").attributes or {})["dagmagic.run_id"])
    assert run_id
    step = dict(spans.one("invoke_agent s1").attributes or {})
    assert step["gen_ai.operation.name"] == "invoke_agent" and step["gen_ai.agent.name"] == "s1"
    assert (step["dagmagic.run_id"], step["dagmagic.round"], step["dagmagic.step_id"]) == (run_id, 1, "s1")
    assert step["dagmagic.status"] == "completed" and step["gen_ai.request.model"] == "scripted"
    chat = dict(next(s for s in spans.named("chat scripted") if s.attributes["dagmagic.purpose"] == "plan").attributes)
    assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.provider.name"] == "scripted"
    assert chat["gen_ai.request.model"] == "scripted" and chat["dagmagic.status"] == "ok"
    assert int(chat["gen_ai.usage.input_tokens"]) > 0 and int(chat["gen_ai.usage.output_tokens"]) > 0
    tool_call = dict(spans.one("execute_tool lookup").attributes or {})
    assert tool_call["gen_ai.operation.name"] == "execute_tool" and tool_call["gen_ai.tool.name"] == "lookup"
    # a step's and the run's spans add up the tokens of the calls under them
    step_chats = [s for s in spans.named("chat scripted") if (s.attributes or {}).get("dagmagic.step_id") == "s1"]
    assert step["gen_ai.usage.input_tokens"] == sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in step_chats)
    every_call = sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in spans.named("chat scripted"))
    assert spans.one("invoke_workflow dagmagic").attributes["gen_ai.usage.input_tokens"] == every_call


async def test_content_only_with_the_conventions_opt_in(
    exported: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = await _traced_run(exported)
    content_keys = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments")
    assert not any(key in (span.attributes or {}) for span in without.spans for key in content_keys)
    assert "capital of France" not in without.text() and "found paris" not in without.text()

    exported.clear()
    monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, "true")
    with_content = await _traced_run(exported)
    tool_call = dict(with_content.one("execute_tool lookup").attributes or {})
    assert json.loads(str(tool_call["gen_ai.tool.call.arguments"])) == {"query": "paris ***"}
    assert str(tool_call["gen_ai.tool.call.result"]).startswith("found paris")
    plan_chat = next(s for s in with_content.named("chat scripted") if s.attributes["dagmagic.purpose"] == "plan")
    messages = json.loads(str(plan_chat.attributes["gen_ai.input.messages"]))
    assert messages[0]["role"] == "system" and messages[0]["parts"][0]["type"] == "text"
    run = dict(with_content.one("invoke_workflow dagmagic").attributes or {})
    assert "capital of France" in str(run["gen_ai.input.messages"])
    assert "Paris." in str(run["gen_ai.output.messages"])


async def test_no_key_reaches_a_span(exported: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, "true")  # the most a span can carry
    text = (await _traced_run(exported)).text()
    assert "found paris" in text and "***" in text
    assert KEY not in text and ENV_SECRET not in text


async def test_a_failed_step_is_an_error_span_with_the_masked_error(exported: InMemorySpanExporter) -> None:
    llm = ScriptedLLM(_script(**{"step:s2": [RuntimeError(f"boom with {KEY}")]}))
    session = DagSession(ModelRegistry().register("scripted", llm), DagSettings(store="none", step_immediate_retries=0))
    await session.start("goal")
    spans = Spans(list(exported.get_finished_spans()))
    failed = spans.one("invoke_agent s2")
    assert failed.attributes is not None and failed.attributes["dagmagic.status"] == "failed"
    assert failed.status.status_code is StatusCode.ERROR and "boom" in str(failed.status.description)
    assert KEY not in spans.text()


async def test_a_subrun_is_a_workflow_under_its_step(exported: InMemorySpanExporter) -> None:
    outer = {"steps": [{"id": "s1", "task": "deep work", "tool_hint": "subplan"}]}
    inner = {"steps": [{"id": "s1", "task": "part a"}, {"id": "s2", "task": "part b"}]}
    llm = ScriptedLLM(_script(plan=[outer, inner]))
    run = await DagSession(ModelRegistry().register("scripted", llm), DagSettings(store="none")).start("goal")
    assert run.status == "done", run.error
    spans = Spans(list(exported.get_finished_spans()))
    workflows = spans.named("invoke_workflow dagmagic")
    assert len(workflows) == 2
    (subrun,) = [span for span in workflows if spans.parent(span) is not None]
    outer_step = spans.parent(subrun)  # the step planned as a subrun: run > round 1 > s1 > its own workflow
    assert outer_step is not None and outer_step.name == "invoke_agent s1"
    assert _name(spans.parent(spans.parent(outer_step) or outer_step)) == "invoke_workflow dagmagic"
    assert str((subrun.attributes or {})["dagmagic.run_id"]).endswith("/s1")
    (inner_step,) = spans.named("invoke_agent s2")  # the subrun's second step, in the subrun's round
    inner_round = spans.parent(inner_step)
    assert inner_round is not None and spans.parent(inner_round) is subrun


async def test_a_litellm_model_names_its_provider_and_the_model_that_answered(exported: InMemorySpanExporter) -> None:
    from tests.fake_provider import Provider
    from tests.llm.test_replay import GOAL, answer_like_a_model

    server = Provider()
    server.answer = answer_like_a_model
    try:
        models = ModelRegistry().register("real", "openai/m", roles=["smart"], api_base=server.base, api_key=KEY)
        run = await DagSession(models, DagSettings(store="none")).run(GOAL)
    finally:
        server.close()
    assert run.status == "done", run.error
    spans = Spans(list(exported.get_finished_spans()))
    chats = spans.named("chat openai/m")
    assert len(chats) == len(run.calls) >= 4
    for chat in chats:
        attributes = dict(chat.attributes or {})
        assert attributes["gen_ai.provider.name"] == "openai" and attributes["gen_ai.request.model"] == "openai/m"
        assert attributes["gen_ai.response.model"] == "m" and attributes["dagmagic.model"] == "real"
    assert KEY not in spans.text()


async def test_a_step_run_again_is_a_trace_of_its_own_with_the_runs_id(exported: InMemorySpanExporter) -> None:
    run = await _session().start("goal")
    first = Spans(list(exported.get_finished_spans()))
    exported.clear()
    await run.rerun("s2")
    again = Spans(list(exported.get_finished_spans()))
    (workflow,) = again.named("invoke_workflow dagmagic")
    assert workflow.attributes is not None and workflow.attributes["dagmagic.run_id"] == run.run_id
    assert workflow.context.trace_id != first.one("invoke_workflow dagmagic").context.trace_id
    assert all(span.context.trace_id == workflow.context.trace_id for span in again.spans)
    (step,) = again.named("invoke_agent s2")
    assert _name(again.parent(step)).startswith("round ")
    assert not again.named("plan round 1") and not again.named("plan round 2")  # a re-run plans nothing


async def test_a_resumed_run_adds_its_spans_to_the_trace_its_first_spans_are_in(
    exported: InMemorySpanExporter, tmp_path: Path
) -> None:
    held = asyncio.Event()

    async def holding_s3(request: ScriptedRequest) -> str | ToolCall:
        if request.step_id == "s3":
            held.set()
            await asyncio.Event().wait()  # cut here: s1 and s2 are done
        return await _step(request)

    def session(step: Any) -> DagSession:
        registry = ModelRegistry().register("scripted", ScriptedLLM(_script(step=step)), roles=["smart", "general"])
        return DagSession(registry, DagSettings(store=str(tmp_path / "runs.sqlite")), tools=[lookup])

    run = session(holding_s3).start("goal")
    await asyncio.wait_for(held.wait(), 30)
    run.cancel()
    await run.wait()
    first = Spans(list(exported.get_finished_spans()))
    exported.clear()
    resumed = await session(_step).resume(run.run_id)  # another session, as another process would
    assert resumed.status == "done" and resumed.run_id == run.run_id
    again = Spans(list(exported.get_finished_spans()))
    assert first.named("invoke_agent s1") and again.named("invoke_agent s3")
    trace_id = run_span_context(run.run_id).trace_id
    assert {span.context.trace_id for span in [*first.spans, *again.spans]} == {trace_id}
    assert first.one("invoke_workflow dagmagic").parent == again.one("invoke_workflow dagmagic").parent


def test_tracing_is_off_without_a_provider_or_dag_otel() -> None:
    assert run_tracer(DagSettings()) is None


def test_dag_otel_without_opentelemetry_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as when the extra is not installed
    assert run_tracer(DagSettings()) is None  # off: no error, no import needed
    monkeypatch.setenv("DAG_OTEL", "1")
    with pytest.raises(ConfigurationError, match=r'DAG_OTEL=1.*pip install "dagmagic\[otel\]"'):
        run_tracer(DagSettings())


async def test_a_run_with_dag_otel_and_no_opentelemetry_fails_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ConfigurationError, match="dagmagic"):
        _session(otel=True).start("goal")


@pytest.mark.parametrize(
    ("target", "provider"),
    [
        ("anthropic/claude-3-5-haiku", "anthropic"),
        ("openai/gpt-4o-mini", "openai"),
        ("gpt-4o-mini", "openai"),
        ("gemini/gemini-2.0-flash", "gcp.gemini"),
        ("bedrock/anthropic.claude-v2", "aws.bedrock"),
        ("ollama_chat/llama3.2", "ollama_chat"),
        ("scripted", "scripted"),
    ],
)
def test_provider_names_follow_the_conventions(target: str, provider: str) -> None:
    assert provider_name(target) == provider


# --- a real OTLP/HTTP receiver ----------------------------------------------------------------------------


def _phoenix() -> str:
    """Arize Phoenix's executable: ``DAGMAGIC_PHOENIX``, else the virtualenv ``.ci/run`` installs it in."""
    found = os.environ.get("DAGMAGIC_PHOENIX") or str(ROOT / ".venv-otlp" / "bin" / "phoenix")
    if Path(found).is_file():
        return found
    problem = f"Arize Phoenix (the OTLP receiver) is not installed at {found}: bash .ci/run installs it"
    if os.environ.get("DAGMAGIC_REQUIRE_OTLP"):
        pytest.fail(problem)
    pytest.skip(problem)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


@pytest.fixture
def phoenix() -> Iterator[str]:
    """A Phoenix server on 127.0.0.1 with its data in a temporary directory; its base URL."""
    executable = _phoenix()
    port, grpc_port = _free_port(), _free_port()
    with tempfile.TemporaryDirectory(prefix="dagmagic-phoenix-") as data:
        environment = {
            **{name: value for name, value in os.environ.items() if not name.startswith(("OTEL_", "PHOENIX_"))},
            "PHOENIX_WORKING_DIR": data,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        log = Path(data) / "phoenix.log"
        with log.open("wb") as output:
            server = subprocess.Popen(
                [executable, "serve"], env=environment, stdout=output, stderr=subprocess.STDOUT, cwd=data
            )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    _get(f"{url}/v1/projects")
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"Phoenix did not start:\n{log.read_text(errors='replace')[-3000:]}")
                    time.sleep(0.25)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            shutil.rmtree(data, ignore_errors=True)


def _spans_received(phoenix: str, expected: int) -> list[dict[str, Any]]:
    """The spans Phoenix has stored, once it has all ``expected`` of them (it writes what it receives in batches)."""
    deadline = time.monotonic() + 60
    while True:
        received: list[dict[str, Any]] = _get(f"{phoenix}/v1/projects/default/spans?limit=1000")["data"]
        if len(received) >= expected or time.monotonic() > deadline:
            return received
        time.sleep(0.2)


@pytest.mark.otlp
@pytest.mark.timeout(240)
async def test_dag_otel_exports_the_run_to_a_real_otlp_receiver(phoenix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing_module, "_own_provider", None)  # dagmagic's own, built for this receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix)
    monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, "true")  # content on: still no key
    monkeypatch.setenv("DAGMAGIC_TEST_API_KEY", ENV_SECRET)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # no batch leaves on its own during the test
    monkeypatch.setenv("DAG_OTEL", "1")
    run: DagRun = await _session().start(f"capital of France? ({KEY})")  # its end has its spans exported, apart
    assert run.status == "done", run.error
    provider = tracing_module._own_provider
    assert provider is not None
    try:  # read before the provider shuts down: the run's end exported them, not a batch's timer or the exit
        received = _spans_received(phoenix, expected=len(run.calls) + 7)  # calls, run, round, plan, 3 steps, tool
    finally:
        provider.shutdown()

    by_id = {span["context"]["span_id"]: span for span in received}
    named = {span["name"]: span for span in received}

    def parent(name: str) -> str:
        return str(by_id[named[name]["parent_id"]]["name"])

    assert {
        "invoke_workflow dagmagic",
        "round 1",
        "plan round 1",
        "invoke_agent s1",
        "invoke_agent s2",
        "invoke_agent s3",
        "execute_tool lookup",
        "chat scripted",
    } <= set(named)
    assert named["invoke_workflow dagmagic"]["parent_id"] not in by_id  # its run id's context, never exported
    assert parent("round 1") == "invoke_workflow dagmagic"
    assert parent("plan round 1") == parent("invoke_agent s2") == "round 1"
    assert parent("execute_tool lookup") == "invoke_agent s1"
    assert len({span["context"]["trace_id"] for span in received}) == 1
    attributes = named["invoke_agent s1"]["attributes"]
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert (attributes["dagmagic.run_id"], attributes["dagmagic.step_id"]) == (run.run_id, "s1")
    assert attributes["dagmagic.status"] == "completed"
    chats = [span for span in received if span["name"] == "chat scripted"]
    assert {span["attributes"]["dagmagic.purpose"] for span in chats} >= {"plan", "step", "analyze"}
    assert all(span["attributes"]["gen_ai.usage.input_tokens"] > 0 for span in chats)
    assert named["execute_tool lookup"]["attributes"]["gen_ai.tool.name"] == "lookup"
    everything = json.dumps(received)
    assert "found paris" in everything  # the content arrived, masked
    assert KEY not in everything and ENV_SECRET not in everything
