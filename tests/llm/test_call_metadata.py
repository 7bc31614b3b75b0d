"""Every litellm call carries the run, round, step and purpose in litellm's ``metadata``: its callbacks (Langfuse,
MLflow, Phoenix, a ``CustomLogger``) group a run's calls by them; the provider never sees them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.llm._litellm import import_litellm
from dagmagic.llm.litellm_backend import call_metadata
from dagmagic.llm.protocol import ChatRequest
from tests.fake_provider import Provider
from tests.llm.test_replay import GOAL, answer_like_a_model


def test_metadata_names_the_run_round_step_and_purpose_and_keeps_the_users() -> None:
    request = ChatRequest(model="m", messages=[], purpose="step", round=2, step_id="s3", run_id="abc123")
    metadata = call_metadata(request, {"tags": ["mine"], "session_id": "nb-7"})
    assert metadata["dagmagic"] == {"run_id": "abc123", "round": 2, "step_id": "s3", "purpose": "step"}
    assert metadata["trace_id"] == "dagmagic-abc123" and metadata["generation_name"] == "step s3"
    assert metadata["tags"] == ["mine"] and metadata["session_id"] == "nb-7"  # the user's own win


async def test_litellm_callbacks_see_every_call_of_a_run_grouped_and_the_provider_sees_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    litellm = import_litellm()
    from litellm.integrations.custom_logger import CustomLogger

    seen: list[dict[str, Any]] = []

    class Collector(CustomLogger):  # type: ignore[misc]
        async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            seen.append(kwargs["litellm_params"]["metadata"])

    monkeypatch.setattr(litellm, "callbacks", [Collector()])
    server = Provider()
    bodies: list[dict[str, Any]] = []
    answer = answer_like_a_model

    def recording(body: dict[str, Any]) -> str:
        bodies.append(body)
        return answer(body)

    server.answer = recording
    try:
        models = ModelRegistry().register("real", "openai/m", roles=["smart"], api_base=server.base, api_key="none")
        run = await DagSession(models, DagSettings(store="none")).run(GOAL)
        for _ in range(50):  # litellm calls its success callbacks after the call returns
            if len(seen) >= server.requests:
                break
            await asyncio.sleep(0.05)
    finally:
        server.close()
    assert run.status == "done", run.error
    assert len(seen) == server.requests == len(run.calls) >= 4
    ours = [metadata["dagmagic"] for metadata in seen]
    assert {m["run_id"] for m in ours} == {run.run_id}
    assert {m["purpose"] for m in ours} >= {"plan", "step", "analyze"}
    assert sorted(m["step_id"] for m in ours if m["purpose"] == "step") == ["s1", "s2"]
    assert all(m["round"] == 1 for m in ours if m["purpose"] != "plan")
    assert {metadata["trace_id"] for metadata in seen} == {f"dagmagic-{run.run_id}"}
    assert not any("metadata" in body or run.run_id in json.dumps(body) for body in bodies)
