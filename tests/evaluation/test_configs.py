"""Named configs built over the session's own models, settings and tools."""

from __future__ import annotations

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.evaluation.configs import Config, as_configs
from dagmagic.testing import ScriptedLLM


def lookup(query: str) -> str:
    """Look something up."""
    return query


def test_without_configs_the_session_s_own_is_named_default() -> None:
    session = DagSession(ModelRegistry().register("m", ScriptedLLM({})), DagSettings(store="none"))
    assert as_configs(None, session) == [Config("default")]
    assert Config("default").options() == {}


def test_roles_settings_and_tools_are_built_over_the_session_s() -> None:
    session = DagSession(ModelRegistry().register("m", ScriptedLLM({})), DagSettings(store="none", max_concurrency=3))
    fast = ScriptedLLM({})
    settings = DagSettings(store="none", max_concurrency=9)
    small, mine = as_configs(
        {
            "small": {
                "models": {"smart": "openai/gpt-4o-mini", "general": "openai/gpt-4o-mini", "fast": fast},
                "settings": {"max_replan_rounds": 1},
                "tools": [lookup],
            },
            "mine": {"settings": settings},
        },
        session,
    )

    assert small.models is not None
    assert small.models.roles == {"smart": "openai/gpt-4o-mini", "general": "openai/gpt-4o-mini", "fast": "small-2"}
    assert small.models.for_role("fast").backend is fast
    assert small.settings is not None
    assert (small.settings.max_replan_rounds, small.settings.max_concurrency) == (1, 3)  # the rest is the session's
    assert small.tools == (lookup,)
    assert mine.settings is settings and mine.models is None and mine.tools is None
    assert set(mine.options()) == {"settings"}
