from __future__ import annotations

import pytest

from dagmagic import ConfigurationError, ModelRegistry
from dagmagic.testing import ScriptedLLM


def scripted() -> ScriptedLLM:
    return ScriptedLLM({"*": ["ok"]})


def test_missing_roles_fall_back() -> None:
    registry = (
        ModelRegistry().register("big", scripted(), roles=["smart"]).register("mid", scripted(), roles=["general"])
    )
    assert registry.for_role("smart").name == "big"
    assert registry.for_role("general").name == "mid"
    assert registry.for_role(None).name == "mid"
    assert registry.for_role("fast").name == "mid"  # fast -> general
    assert registry.for_role("reasoning").name == "big"  # reasoning -> smart
    assert registry.for_role("legal-expert").name == "mid"  # a custom role -> general


def test_fast_falls_back_to_smart_when_there_is_no_general() -> None:
    registry = ModelRegistry().register("big", scripted(), roles=["smart"])
    assert registry.for_role("fast").name == "big"
    assert registry.for_role("general").name == "big"


def test_one_model_without_roles_serves_every_role() -> None:
    registry = ModelRegistry().register("only", scripted())
    assert {registry.for_role(r).name for r in ("smart", "general", "fast", "reasoning", "custom")} == {"only"}


def test_a_custom_role_is_served_by_its_model() -> None:
    registry = ModelRegistry().register("g", scripted(), roles=["general"]).register("law", scripted(), roles=["legal"])
    assert registry.for_role("legal").name == "law"


def test_duplicate_names_raise() -> None:
    registry = ModelRegistry().register("m", scripted())
    with pytest.raises(ConfigurationError, match="already registered"):
        registry.register("m", scripted())


def test_a_role_has_one_model() -> None:
    registry = ModelRegistry().register("a", scripted(), roles=["smart"])
    with pytest.raises(ConfigurationError, match="role 'smart' is already played by 'a'"):
        registry.register("b", scripted(), roles=["smart"])


def test_an_empty_registry_raises_a_configuration_error_naming_the_variables() -> None:
    with pytest.raises(ConfigurationError, match="DAG_SMART_MODEL"):
        ModelRegistry().for_role("smart")


@pytest.mark.parametrize("bad", [42, None, ""])
def test_a_bad_model_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="model 'x'"):
        ModelRegistry().register("x", bad)


def test_an_unknown_name_lists_the_registered_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"\['a'\]"):
        ModelRegistry().register("a", scripted()).get("b")


def test_from_env_groups_roles_by_model() -> None:
    registry = ModelRegistry.from_env(
        {
            "DAG_SMART_MODEL": "openai/gpt-4.1",
            "DAG_GENERAL_MODEL": "openai/gpt-4.1-mini",
            "DAG_FAST_MODEL": "openai/gpt-4.1-mini",
        }
    )
    assert registry.roles == {
        "smart": "openai/gpt-4.1",
        "general": "openai/gpt-4.1-mini",
        "fast": "openai/gpt-4.1-mini",
    }
    assert registry.for_role("reasoning").name == "openai/gpt-4.1"
    assert len(registry) == 2


def test_from_env_with_nothing_set_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match=r"No model is configured.*DAG_SMART_MODEL.*DAG_GENERAL_MODEL"):
        ModelRegistry.from_env({})


def test_secrets_never_show_in_descriptions_or_reprs() -> None:
    registry = ModelRegistry().register("m", "openai/gpt-4.1", api_key="sk-secret-123456789", api_base="http://x")
    entry = registry.get("m")
    assert entry.describe()["options"] == {"api_key": "***", "api_base": "http://x"}
    assert "sk-secret" not in repr(registry) and "sk-secret" not in repr(entry)


def test_capabilities_can_be_declared() -> None:
    entry = ModelRegistry().register("m", scripted(), capabilities={"tool_call": False, "json_mode": True}).get("m")
    assert (entry.capabilities.tool_call, entry.capabilities.json_mode) == (False, True)
    with pytest.raises(ValueError, match="unknown capabilities"):
        ModelRegistry().register("n", scripted(), capabilities=("telepathy",))


def test_a_router_with_several_groups_needs_model_group() -> None:
    from dagmagic.llm._litellm import import_litellm

    router = import_litellm().Router(
        model_list=[
            {"model_name": "a", "litellm_params": {"model": "openai/gpt-4.1-mini"}},
            {"model_name": "b", "litellm_params": {"model": "openai/gpt-4.1"}},
        ]
    )
    with pytest.raises(ConfigurationError, match=r"model_group= naming one of the router's groups \['a', 'b'\]"):
        ModelRegistry().register("pool", router)
    assert ModelRegistry().register("pool", router, model_group="b").get("pool").target == "b"


async def test_warm_up_prepares_each_distinct_backend_once() -> None:
    class Warming(ScriptedLLM):
        warmed = 0

        async def warm_up(self) -> None:
            self.warmed += 1

    shared, other = Warming({"*": ["ok"]}), Warming({"*": ["ok"]})
    registry = (
        ModelRegistry()
        .register("a", shared, roles=["smart"])
        .register("b", shared, roles=["fast"])
        .register("c", other)
        .register("d", scripted())  # nothing to prepare
    )
    await registry.warm_up()
    assert (shared.warmed, other.warmed) == (1, 1)
