from __future__ import annotations

import pytest

from dagmagic import ConfigurationError, DagSettings


def test_defaults_match_the_design(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAG_STORE")  # the tests' own default is none
    s = DagSettings()
    assert (s.max_replan_rounds, s.replan_stop_confidence, s.max_concurrency) == (3, 0.8, 5)
    assert (s.step_timeout, s.step_max_iterations) == (600.0, 15)
    assert (s.plan_min_steps, s.plan_max_steps) == (1, 6)  # issue 42: asked for two, a small model invents one
    assert (s.analyzer_result_chars, s.synthesis_result_chars) == (10000, 10000)
    assert (s.replan_preview_chars, s.replan_older_preview_chars) == (500, 200)
    assert (s.planner_input_tokens, s.history_fallback_chars, s.max_message_chars) == (16000, 20000, 50000)
    assert s.structured_context_multiplier == 3.0
    assert (s.tool_selection_threshold, s.tool_selection_max, s.observation_max_chars) == (12, 6, 8000)
    assert s.citation_verification is True
    assert (s.step_immediate_retries, s.step_retry_delays) == (1, (30.0, 120.0, 600.0))
    assert s.store == ".dagmagic/runs.sqlite"
    assert (s.smart_model, s.general_model, s.fast_model, s.reasoning_model) == (None, None, None, None)


def test_environment_is_read_and_keywords_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_MAX_REPLAN_ROUNDS", "5")
    monkeypatch.setenv("DAG_CITATION_VERIFICATION", "false")
    monkeypatch.setenv("DAG_STEP_RETRY_DELAYS", "1, 2.5")
    monkeypatch.setenv("DAG_SMART_MODEL", "openai/gpt-4.1")
    s = DagSettings(max_replan_rounds=2)
    assert s.max_replan_rounds == 2
    assert s.citation_verification is False
    assert s.step_retry_delays == (1.0, 2.5)
    assert s.smart_model == "openai/gpt-4.1"


def test_max_concurrency_has_two_variables_and_the_prefixed_one_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_CONCURRENCY", "7")
    with pytest.warns(FutureWarning):  # still read, but deprecated
        assert DagSettings().max_concurrency == 7
    monkeypatch.setenv("DAG_MAX_CONCURRENCY", "9")
    assert DagSettings().max_concurrency == 9


@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("DAG_MAX_REPLAN_ROUNDS", "abc", "an integer >= 1"),
        ("DAG_MAX_REPLAN_ROUNDS", "0", "an integer >= 1"),
        ("DAG_REPLAN_STOP_CONFIDENCE", "1.7", "a number >= 0.0 and <= 1.0"),
        ("DAG_STEP_TIMEOUT", "-3", "a number > 0"),
        ("DAG_CITATION_VERIFICATION", "maybe", "true or false"),
        ("DAG_STEP_RETRY_DELAYS", "30,soon", "numbers of seconds separated by commas"),
    ],
)
def test_a_bad_value_names_the_variable_the_value_and_what_is_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, accepted: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        DagSettings()
    message = str(caught.value)
    assert f"{variable}={value!r}" in message
    assert accepted in message
    assert len(message.splitlines()) == 1


def test_a_bad_keyword_is_named_as_a_keyword() -> None:
    with pytest.raises(
        ConfigurationError, match=r"DagSettings\(max_concurrency=0\) is not accepted: expected an integer >= 1"
    ):
        DagSettings(max_concurrency=0)


def test_an_unknown_keyword_lists_the_known_settings() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown setting; known settings are .*max_concurrency"):
        DagSettings(max_concurency=3)


def test_several_bad_values_are_reported_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_MAX_REPLAN_ROUNDS", "0")
    monkeypatch.setenv("DAG_REPLAN_STOP_CONFIDENCE", "1.7")
    with pytest.raises(ConfigurationError) as caught:
        DagSettings()
    assert "DAG_MAX_REPLAN_ROUNDS" in str(caught.value) and "DAG_REPLAN_STOP_CONFIDENCE" in str(caught.value)


def test_min_steps_above_max_steps_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="plan_min_steps"):
        DagSettings(plan_min_steps=5, plan_max_steps=3)


def test_store_none_disables_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAG_STORE")
    assert DagSettings().store_path is not None
    monkeypatch.setenv("DAG_STORE", "none")
    assert DagSettings().store_path is None


def test_configuration_error_is_a_value_error() -> None:
    assert issubclass(ConfigurationError, ValueError)


def test_settings_round_trip_through_json() -> None:
    s = DagSettings(max_concurrency=3, step_retry_delays=(1.0, 2.0))
    assert DagSettings.model_validate_json(s.model_dump_json()) == s


def test_a_cross_field_error_names_each_variable_and_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_PLAN_MIN_STEPS", "8")
    with pytest.raises(ConfigurationError) as caught:
        DagSettings()
    message = str(caught.value)
    assert "DAG_PLAN_MIN_STEPS='8'" in message
    assert "plan_max_steps" in message and "DAG_PLAN_MAX_STEPS" in message  # the other side, by its variable
    monkeypatch.setenv("DAG_PLAN_MAX_STEPS", "6")
    with pytest.raises(ConfigurationError, match=r"DAG_PLAN_MIN_STEPS='8'.*DAG_PLAN_MAX_STEPS='6'"):
        DagSettings()


def test_a_huge_value_is_not_echoed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_MAX_REPLAN_ROUNDS", "9" * 5000)
    monkeypatch.setenv("DAG_STEP_TIMEOUT", "x" * 5000)
    with pytest.raises(ConfigurationError) as caught:
        DagSettings()
    message = str(caught.value)
    assert len(message) < 1000, len(message)
    assert "DAG_STEP_TIMEOUT" in message and "5,000 characters" in message


def test_the_unprefixed_max_concurrency_is_deprecated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_CONCURRENCY", "3")
    with pytest.warns(FutureWarning, match="DAG_MAX_CONCURRENCY"):
        assert DagSettings().max_concurrency == 3
    monkeypatch.setenv("DAG_MAX_CONCURRENCY", "4")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DagSettings().max_concurrency == 4  # the prefixed one is read: nothing to warn about


@pytest.mark.parametrize(
    "url",
    ["postgresql://dag:s3cret-pw-0417@db-host:5432/runs", "postgresql://dag@db-host/runs?password=s3cret-pw-0417"],
)
def test_a_store_urls_password_is_masked_wherever_settings_are_shown(url: str) -> None:
    settings = DagSettings(store=url)
    shown = {
        "repr": repr(settings),
        "str": str(settings),
        "json": settings.model_dump_json(),
        "json dict": repr(settings.model_dump(mode="json")),
    }
    leaks = [where for where, text in shown.items() if "s3cret" in text]
    assert leaks == [], f"the password shows in {leaks}: {shown[leaks[0]][:300] if leaks else ''}"
    assert all("***" in text and "db-host" in text for text in shown.values())
    # what connects is the URL as given
    assert settings.store == url and settings.store_path is not None and str(settings.store_path.url) == url
    assert DagSettings.model_validate(settings.model_dump()).store == url
