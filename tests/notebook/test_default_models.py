"""``%dag models`` and ``%%dag`` when no model is chosen: the models picked from a key or a local Ollama."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from dagmagic.engine.run.dag_run import DagRun
from tests.fake_ollama import CHAT_REFUSAL, fake_ollama, tag


def test_models_shows_what_a_key_picks_and_why(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    capsys.readouterr()
    ip.run_cell("%dag models")
    assert capsys.readouterr().out.splitlines() == [
        "smart      anthropic/claude-opus-4-7",
        "general    anthropic/claude-sonnet-4-6",
        "fast       anthropic/claude-haiku-4-5",
        "reasoning  anthropic/claude-opus-4-7   (falls back)",
        "Picked because ANTHROPIC_API_KEY is set; set DAG_SMART_MODEL (or --smart) to choose.",
    ]


def test_models_shows_a_chosen_model_without_picking(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("DAG_SMART_MODEL", "ollama/qwen3")
    capsys.readouterr()
    ip.run_cell("%dag models")
    out = capsys.readouterr().out
    assert out.startswith("smart      ollama/qwen3   [DAG_SMART_MODEL]\n")
    assert "openai/" not in out and "Picked because" not in out


def test_a_dag_cell_with_nothing_chosen_runs_on_the_local_ollama(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_ollama([tag("all-minilm:l6-v2", "bert"), tag("qwen2.5:0.5b", "qwen2")]) as ollama:
        monkeypatch.setenv("OLLAMA_HOST", ollama.host)
        result = ip.run_cell("%%dag --no-widget\nWhat is 2 + 2?")
    run = result.result
    assert isinstance(run, DagRun), result.error_in_exec
    assert {call.model for call in run.calls} == {"ollama_chat/qwen2.5:0.5b"}
    assert ollama.paths[0] == "/api/tags" and "/api/chat" in ollama.paths  # the chat went to the probed server
    assert run.status == "failed" and run.error is not None and CHAT_REFUSAL in run.error
