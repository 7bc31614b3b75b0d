"""Real providers misbehaving, through the real litellm path against a local HTTP server: a provider that
echoes the key it was given in its 401, and one that accepts the request and never answers.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry, errors
from dagmagic.notebook.fallbacks import run_html, run_markdown
from dagmagic.notebook.widget import widget_state

MODEL = "openai/gpt-4.1-mini"


class Provider:
    """An OpenAI-compatible endpoint on loopback that misbehaves as told."""

    def __init__(self) -> None:
        self.mode = "echo-401"
        self.requests = 0
        self.release = threading.Event()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                provider.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if provider.mode == "hang":
                    provider.release.wait(60)  # accepted, and no answer
                    return
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                body = json.dumps(
                    {
                        "error": {
                            "message": f"Incorrect API key provided: {key}. Check it at your provider.",
                            "type": "invalid_request_error",
                            "code": "invalid_api_key",
                        }
                    }
                ).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[Provider]:
    served = Provider()
    served.thread.start()
    yield served
    served.close()


KEYS = {
    "environment": ("sk-canary-environment-0123456789", {}),
    "api_key=": ("canary-tok", {"api_key": "canary-tok"}),
    "32 hex": ("0123456789abcdef0123456789abcdef", {"api_key": "0123456789abcdef0123456789abcdef"}),
}


@pytest.mark.parametrize("where", list(KEYS))
async def test_a_key_the_provider_echoes_is_never_shown(
    where: str, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, options = KEYS[where]
    monkeypatch.setenv("OPENAI_API_KEY", key if where == "environment" else "sk-other-key-not-the-canary-000")
    registry = ModelRegistry().register("gpt", MODEL, api_base=provider.base, **options)
    run = await DagSession(registry, DagSettings(store="none", llm_retries=0)).run("goal")

    assert provider.requests >= 1 and run.status == "failed"
    assert run.error is not None and "Authentication failed" in run.error and "***" in run.error
    with pytest.raises(errors.RunFailedError) as caught:
        run.raise_for_status()
    shown = {
        "run.error": run.error,
        "calls": json.dumps([call.model_dump(mode="json") for call in run.calls]),
        "events": json.dumps([event.model_dump(mode="json") for event in run.events]),
        "markdown": run_markdown(run),
        "html": run_html(run),
        "widget": json.dumps(widget_state(run), default=str),
        "str(exception)": str(run.exception),
        "repr(exception)": repr(run.exception),
        "traceback": "".join(traceback.format_exception(caught.value)),
        "repr(registry)": repr(registry) + json.dumps([entry.describe() for entry in registry]),
    }
    leaks = [name for name, text in shown.items() if key in text]
    assert leaks == [], f"the key shows in {leaks}"
    assert isinstance(run.exception, errors.AuthenticationError) and run.exception.hint in run.error


# litellm creates its request coroutine before our timeout cancels the call; when the cancel lands first, the
# coroutine is collected unawaited (seen once in 8 CI runs): litellm's to own, not a leak of ours
@pytest.mark.filterwarnings("ignore:coroutine 'OpenAIChatCompletion.acompletion' was never awaited:RuntimeWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_provider_that_never_answers_cannot_hold_the_run(provider: Provider) -> None:
    provider.mode = "hang"
    registry = ModelRegistry().register("gpt", MODEL, api_base=provider.base, api_key="sk-local-test-key-000000")
    settings = DagSettings(
        store="none",
        llm_timeout=0.3,
        llm_retries=0,
        max_replan_rounds=1,
        step_immediate_retries=0,
        step_retry_delays=(),
    )
    run = await DagSession(registry, settings).run("goal")

    assert run.status == "done" and run.answer  # the loop always answers, degraded
    assert run.calls and all(call.status == "failed" for call in run.calls)
    assert all("no reply within 0.3 s (DAG_LLM_TIMEOUT)" in (call.error or "") for call in run.calls)
    assert {call.purpose for call in run.calls} >= {"plan", "step", "analyze"}
    assert [step.status for step in run.plan.steps] == ["failed"]  # the goal as one step, timed out
