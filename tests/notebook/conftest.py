"""An in-process IPython shell with dagmagic loaded, and a scripted model in its namespace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from dagmagic.testing import ScriptedLLM

TWO_STEPS = {"steps": [{"id": "s1", "task": "look {x} up"}, {"id": "s2", "task": "compare", "dependencies": ["s1"]}]}


def scripted(**overrides: Any) -> ScriptedLLM:
    script: dict[str, Any] = {
        "plan": [TWO_STEPS],
        "step": ["a result"],
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "fine", "final_answer": "The answer is 42."}],
        "synthesize": [["The answer ", "is 42."]],
    }
    return ScriptedLLM({**script, **overrides})


@pytest.fixture(scope="session")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    result = ip.run_cell("%load_ext dagmagic")
    assert result.success
    return ip


@pytest.fixture
def ip(shell: InteractiveShell) -> Iterator[InteractiveShell]:
    from dagmagic.notebook import magics

    shell.user_ns["llm"] = scripted()
    from dagmagic.notebook.session import NotebookSession

    instance = magics._active
    assert instance is not None
    instance.notebook = NotebookSession(instance)  # as in a new kernel: no runs, numbers from 1, no config
    yield shell
    for name in ("llm", "run", "myrun"):
        shell.user_ns.pop(name, None)
