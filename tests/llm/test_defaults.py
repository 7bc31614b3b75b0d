"""Models picked when none is chosen: each provider key alone, their order, DAG_* winning, the Ollama probe.

The conftest clears every provider key, OLLAMA_HOST and OLLAMA_API_BASE and refuses Ollama's default port,
so a developer's own keys or Ollama change nothing here; each test sets what it needs.
"""

from __future__ import annotations

import datetime
import socket
import time
from collections.abc import Iterator

import pytest

from dagmagic import ConfigurationError, DagSettings, ModelRegistry
from dagmagic.llm.defaults import KEY_DEFAULTS, default_models, ollama_base_url, ollama_models
from tests.fake_ollama import fake_ollama, tag

KEYS = [variable for variable, _ in KEY_DEFAULTS]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, never listening, so no other test can take it meanwhile)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


@pytest.mark.parametrize(
    ("variable", "smart", "general", "fast"),
    [
        ("OPENAI_API_KEY", "openai/gpt-6.1-sol", "openai/gpt-6.1-terra", "openai/gpt-6-luna"),
        ("ANTHROPIC_API_KEY", "anthropic/claude-opus-4-7", "anthropic/claude-sonnet-4-6", "anthropic/claude-haiku-4-5"),
        ("GEMINI_API_KEY", "gemini/gemini-pro-latest", "gemini/gemini-flash-latest", "gemini/gemini-flash-lite-latest"),
    ],
)
def test_each_provider_key_alone_picks_its_models_and_says_so(
    monkeypatch: pytest.MonkeyPatch, variable: str, smart: str, general: str, fast: str
) -> None:
    monkeypatch.setenv(variable, "sk-test")
    registry = ModelRegistry.from_env()
    assert registry.roles == {"smart": smart, "general": general, "fast": fast}
    assert registry.for_role("reasoning").name == smart
    assert registry.chosen_because == f"{variable} is set"
    assert all(entry.options == {} for entry in registry)  # the key is litellm's to read, never copied


@pytest.mark.parametrize(
    ("present", "winner"),
    [
        (KEYS, "OPENAI_API_KEY"),
        (["GEMINI_API_KEY", "ANTHROPIC_API_KEY"], "ANTHROPIC_API_KEY"),
        (["GEMINI_API_KEY", "OPENAI_API_KEY"], "OPENAI_API_KEY"),
    ],
)
def test_keys_are_looked_for_in_order(monkeypatch: pytest.MonkeyPatch, present: list[str], winner: str) -> None:
    for variable in present:
        monkeypatch.setenv(variable, "sk-test")
    assert ModelRegistry.from_env().chosen_because == f"{winner} is set"


def test_an_empty_key_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "  ")
    monkeypatch.setenv("GEMINI_API_KEY", "sk-test")
    assert ModelRegistry.from_env().chosen_because == "GEMINI_API_KEY is set"


def test_a_key_wins_over_ollama_without_asking_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_ollama([tag("qwen2.5:0.5b")]) as ollama:
        monkeypatch.setenv("OLLAMA_HOST", ollama.host)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        assert ModelRegistry.from_env().chosen_because == "ANTHROPIC_API_KEY is set"
    assert ollama.paths == []


def test_any_dag_model_is_the_users_choice_and_nothing_is_added(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_ollama([tag("qwen2.5:0.5b")]) as ollama:
        monkeypatch.setenv("OLLAMA_HOST", ollama.host)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("DAG_FAST_MODEL", "ollama/phi4")
        registry = ModelRegistry.from_env()
    assert registry.roles == {"fast": "ollama/phi4"}
    assert {registry.for_role(role).name for role in ("smart", "general", "reasoning")} == {"ollama/phi4"}
    assert registry.chosen_because == "DAG_FAST_MODEL is set"
    assert ollama.paths == []


def test_several_dag_models_are_named_in_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_SMART_MODEL", "openai/gpt-4.1")
    monkeypatch.setenv("DAG_REASONING_MODEL", "openai/o4-mini")
    assert ModelRegistry.from_env().chosen_because == "DAG_SMART_MODEL, DAG_REASONING_MODEL are set"


def test_settings_with_a_model_are_a_choice_and_without_one_take_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "sk-test")
    chosen = ModelRegistry.from_settings(DagSettings(smart_model="openai/gpt-4.1-mini"))
    assert (chosen.roles, chosen.chosen_because) == ({"smart": "openai/gpt-4.1-mini"}, "smart_model is set")
    defaulted = ModelRegistry.from_settings(DagSettings())
    assert defaulted.chosen_because == "GEMINI_API_KEY is set"
    assert defaulted.for_role("smart").name == "gemini/gemini-pro-latest"


def test_a_session_without_models_uses_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    from dagmagic import DagSession

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    session = DagSession(settings=DagSettings(store="none"))
    assert session.models.chosen_because == "OPENAI_API_KEY is set"
    assert session.models.missing_credentials() == {}


def test_ollama_serves_its_first_chat_model_for_every_role(monkeypatch: pytest.MonkeyPatch) -> None:
    models = [tag("nomic-embed-text:latest", "nomic-bert"), tag("qwen2.5:0.5b", "qwen2"), tag("llama3.2:1b")]
    with fake_ollama(models) as ollama:
        monkeypatch.setenv("OLLAMA_HOST", ollama.host)
        registry = ModelRegistry.from_env()
    assert ollama.paths == ["/api/tags"]
    assert registry.roles == {role: "ollama_chat/qwen2.5:0.5b" for role in ("smart", "general", "fast")}
    assert len(registry) == 1
    assert registry.get("ollama_chat/qwen2.5:0.5b").options == {"api_base": ollama.base}
    assert registry.chosen_because == f"no provider key is set and Ollama at {ollama.host} serves qwen2.5:0.5b"
    assert registry.missing_credentials() == {}


def test_ollama_api_base_is_probed_before_ollama_host(monkeypatch: pytest.MonkeyPatch, closed_port: int) -> None:
    with fake_ollama([tag("gemma3:1b")]) as ollama:
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{closed_port}")
        monkeypatch.setenv("OLLAMA_API_BASE", f"{ollama.base}/")
        registry = ModelRegistry.from_env()
    assert registry.get("ollama_chat/gemma3:1b").options == {"api_base": ollama.base}


@pytest.mark.parametrize(
    "names",
    [["mxbai-embed-large"], ["all-minilm:l6-v2", "bge-m3"], ["snowflake-arctic-embed2"], []],
)
def test_an_ollama_with_only_embedding_models_offers_nothing(names: list[str]) -> None:
    with fake_ollama([tag(name) for name in names]) as ollama:
        assert ollama_models(ollama.base) == []


@pytest.mark.parametrize(
    ("status", "body"),
    [(200, b"<html>not ollama</html>"), (200, b'{"models": "none"}'), (200, b"[]"), (500, b"{}"), (404, b"")],
)
def test_an_answer_that_is_not_ollamas_list_offers_nothing(status: int, body: bytes) -> None:
    with fake_ollama([], status=status, body=body) as ollama:
        assert ollama_models(ollama.base) == []
        assert ollama.paths == ["/api/tags"]


def test_a_closed_port_answers_nothing_without_waiting_out_the_timeout(closed_port: int) -> None:
    timeout = 30.0
    started = time.monotonic()
    assert ollama_models(f"http://127.0.0.1:{closed_port}", timeout=timeout) == []
    assert time.monotonic() - started < timeout / 2  # refused at once, not waited out


def test_a_silent_server_is_given_up_on_after_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        assert ollama_models(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.2) == []
        assert time.monotonic() - started >= 0.2


def test_with_no_key_and_no_ollama_the_error_says_how_to_choose(
    monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{closed_port}")
    with pytest.raises(ConfigurationError) as caught:
        ModelRegistry.from_env()
    message = str(caught.value)
    for hint in ("DAG_SMART_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "models="):
        assert hint in message
    assert message.endswith(f"None of those keys is set and no Ollama answered at http://127.0.0.1:{closed_port}.")


def test_an_explicit_empty_environment_probes_only_the_default_ollama_address() -> None:
    # the conftest refuses port 11434, so this is the "nothing found" answer whatever runs on the machine
    assert default_models({}) is None


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "http://127.0.0.1:11434"),
        ({"OLLAMA_HOST": "0.0.0.0"}, "http://127.0.0.1:11434"),
        ({"OLLAMA_HOST": "0.0.0.0:9999"}, "http://127.0.0.1:9999"),
        ({"OLLAMA_HOST": "gpu-box"}, "http://gpu-box:11434"),
        ({"OLLAMA_HOST": "gpu-box:8080"}, "http://gpu-box:8080"),
        ({"OLLAMA_HOST": "http://gpu-box"}, "http://gpu-box:80"),
        ({"OLLAMA_HOST": "https://gpu-box/ollama/"}, "https://gpu-box:443/ollama"),
        ({"OLLAMA_HOST": "[::1]:11435"}, "http://[::1]:11435"),
        ({"OLLAMA_HOST": "::1"}, "http://[::1]:11434"),
        ({"OLLAMA_HOST": ":11436"}, "http://127.0.0.1:11436"),
        ({"OLLAMA_HOST": "gpu-box", "OLLAMA_API_BASE": "http://other:1234/"}, "http://other:1234"),
    ],
)
def test_the_ollama_address_is_read_as_ollama_and_litellm_read_it(environ: dict[str, str], expected: str) -> None:
    assert ollama_base_url(environ) == expected


DEFAULTS_CHOSEN_ON = datetime.date(2026, 12, 1)


@pytest.mark.parametrize("model", sorted({model for _, roles in KEY_DEFAULTS for model in roles.values()}))
def test_each_default_model_is_a_current_chat_model_litellm_knows(model: str) -> None:
    from dagmagic.llm._litellm import import_litellm

    litellm = import_litellm()
    info = litellm.get_model_info(model)
    assert info["mode"] == "chat"
    assert litellm.supports_function_calling(model=model)
    deprecation = litellm.model_cost.get(model.split("/", 1)[1], litellm.model_cost.get(model, {})).get(
        "deprecation_date"
    )
    # against the day the defaults were chosen, not today: a test must not start failing on a date by itself
    assert deprecation is None or datetime.date.fromisoformat(deprecation) > DEFAULTS_CHOSEN_ON, (
        f"{model} was retired on {deprecation} already when the defaults were chosen: pick its successor"
    )


def test_the_probe_ignores_proxies(monkeypatch: pytest.MonkeyPatch, closed_port: int) -> None:
    for variable in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    for variable in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(variable, f"http://127.0.0.1:{closed_port}")
    with fake_ollama([tag("qwen2.5:0.5b")]) as ollama:
        assert ollama_models(ollama.base) == ["qwen2.5:0.5b"]
