from __future__ import annotations

import os
import subprocess
import sys

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
