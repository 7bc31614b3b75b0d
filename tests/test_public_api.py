from __future__ import annotations

import os
import subprocess
import sys
import types

import dagmagic
import dagmagic.llm


def _isort_order(name: str) -> tuple[int, str]:
    """CONSTANTS, then Classes, then functions: the order ruff's RUF022 keeps ``__all__`` in."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_every_name_exists() -> None:
    for module in (dagmagic, dagmagic.llm):
        assert list(module.__all__) == sorted(module.__all__, key=_isort_order)
        for name in module.__all__:
            assert hasattr(module, name), name


PUBLIC = {
    # DESIGN §2: the session, the run, settings, models and tools
    "DagSession",
    "DagRun",
    "DagSettings",
    "ModelRegistry",
    "tool",
    "Tool",
    "MCPServer",
    # the data of a run
    "AnalysisResult",
    "ExecutionPlan",
    "LLMCall",
    "PlanStep",
    "RoundRecord",
    "Usage",
    # errors a user catches
    "ConfigurationError",
    "DagError",
    "ProviderError",
    "StructuredOutputError",
    # two runs side by side (DESIGN §7)
    "compare",
    # the store, the notebook
    "export_store",
    "load_run",
    "last_run",
    "load_ipython_extension",
    "unload_ipython_extension",
}


def test_all_is_the_public_surface_and_nothing_public_is_left_out() -> None:
    assert set(dagmagic.__all__) == PUBLIC
    defined_here = {
        name for name in dir(dagmagic) if not name.startswith("_") and _defined_here(getattr(dagmagic, name))
    }
    assert defined_here == PUBLIC


def _defined_here(value: object) -> bool:
    """A name of dagmagic's own, not a submodule."""
    if isinstance(value, types.ModuleType):
        return False
    return str(getattr(value, "__module__", "")).startswith("dagmagic")


def test_the_contract_names_available_so_far() -> None:
    from dagmagic import DagSettings, ModelRegistry  # noqa: F401
    from dagmagic.llm import StructuredOutputError, structured_llm_call  # noqa: F401
    from dagmagic.testing import ScriptedLLM, ToolCall  # noqa: F401

    assert issubclass(StructuredOutputError, ValueError)


def test_importing_dagmagic_does_not_import_litellm() -> None:
    code = "import sys, dagmagic, dagmagic.llm, dagmagic.testing; print('litellm' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "False"


def test_dagmagic_compare_is_the_function_whatever_was_imported_before() -> None:
    code = "import dagmagic.side_by_side, dagmagic.comparison, dagmagic; print(dagmagic.compare.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "compare"
