"""A notebook with a ``%%dag`` cell, executed by nbclient and converted by nbconvert: readers of the saved
notebook (GitHub, nbconvert, static viewers) see the answer and the step table without the widget.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.timeout(180)  # a kernel start, a run, then nbconvert in a subprocess

MODEL = textwrap.dedent(
    """
    from dagmagic.testing import ScriptedLLM

    llm = ScriptedLLM({
        "plan": [{"steps": [
            {"id": "s1", "task": "Find the population of Paris"},
            {"id": "s2", "task": "Find the population of Berlin"},
            {"id": "s3", "task": "Compare <both> cities", "dependencies": ["s1", "s2"]},
        ]}],
        "step": ["about 2.1 million", "about 3.8 million", "Berlin has more inhabitants"],
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "both known",
                     "final_answer": "Berlin has more inhabitants than Paris."}],
    })
    """
).strip()

GOAL = "Which city has more inhabitants, Paris or Berlin?"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAG_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", DAG_STORE="none", PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The notebook, executed by nbclient in a real kernel and saved."""
    folder = tmp_path_factory.mktemp("nbconvert")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext dagmagic"),
        nbformat.v4.new_code_cell(MODEL),
        nbformat.v4.new_code_cell(f"%%dag --models llm\n{GOAL}"),
    ]
    client = NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(folder)}})
    client.execute(env=_env())
    path = folder / "dag.ipynb"
    nbformat.write(nb, path)
    return path


def test_the_executed_notebook_holds_the_run_as_static_views_only(executed: Path) -> None:
    """No front end drew a widget while nbclient ran the cell: the file holds no widget view (JupyterLab would
    draw "Error displaying widget: model not found" for it) and no stand-in line, only the run's static views.
    """
    nb = nbformat.read(executed, as_version=4)
    *_, dag_cell = nb.cells
    shown = [output for output in dag_cell.outputs if output.get("data")]
    assert [output.output_type for output in shown] == ["execute_result"]
    (result,) = shown
    assert result.data["text/plain"] == (
        f"<DagRun done: '{GOAL}' rounds=1 steps=3/3 completed achieved=True confidence=0.90>"
    )
    assert {"text/markdown", "text/html"} <= set(result.data)
    assert "| s3 | completed | Compare &lt;both&gt; cities |" in result.data["text/markdown"]
    saved = executed.read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-view+json" not in saved
    assert "dagmagic live view" not in saved


def _refresh_module() -> Any:
    spec = importlib.util.spec_from_file_location("refresh", Path(__file__).parents[2] / "notebooks" / "refresh.py")
    assert spec is not None and spec.loader is not None
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    return refresh


def test_refresh_stores_the_static_views_without_a_live_view_line(tmp_path: Path) -> None:
    """``notebooks/refresh.py`` (how the tutorials are stored) keeps each run's static views and nothing else."""
    refresh = _refresh_module()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"%load_ext dagmagic\n{MODEL}"),
        nbformat.v4.new_code_cell(f"%%dag --models llm\n{GOAL}"),
    ]
    path = tmp_path / "tutorial.ipynb"
    nbformat.write(nb, path)
    refresh.refresh(path)
    stored = nbformat.read(path, as_version=4)
    (result,) = stored.cells[-1].outputs
    assert result.output_type == "execute_result" and "text/html" in result.data
    assert "dagmagic live view" not in path.read_text(encoding="utf-8")


def test_refresh_records_a_missing_cassette_beside_the_notebook_then_answers_from_it(tmp_path: Path) -> None:
    """A tutorial authored against a real model (07): its first refresh records the cassette it names, later
    ones answer from it (a changed model is not asked), wherever refresh.py runs the kernel.
    """
    refresh = _refresh_module()
    path = tmp_path / "tutorial.ipynb"

    def write(model: str) -> None:
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(f"%load_ext dagmagic\n{model}"),
            nbformat.v4.new_code_cell("%dag config cassette=tutorial.cassette.jsonl"),
            nbformat.v4.new_code_cell(f"%%dag --models llm -o run\n{GOAL}"),
            nbformat.v4.new_code_cell("print(run.answer)"),
        ]
        nbformat.write(nb, path)

    write(MODEL)
    refresh.refresh(path)
    cassette = tmp_path / "tutorial.cassette.jsonl"
    assert cassette.exists() and len(cassette.read_text(encoding="utf-8").splitlines()) > 1
    write(MODEL.replace("Berlin has more inhabitants than Paris.", "A changed model answers otherwise."))
    refresh.refresh(path)
    answer = nbformat.read(path, as_version=4).cells[-1].outputs[0]["text"]
    assert answer.strip() == "Berlin has more inhabitants than Paris."  # from the cassette


def test_nbconvert_markdown_shows_the_answer_and_the_step_table(executed: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nbconvert", "--to", "markdown", str(executed)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    markdown = executed.with_suffix(".md").read_text(encoding="utf-8")
    # nbconvert prefers text/html over text/markdown: the HTML view is what lands in the file
    assert "<details open><summary>Round 1 · 3 steps · achieved" in markdown  # every round, readable without JS
    for step, task in (("s1", "Find the population of Paris"), ("s2", "Find the population of Berlin")):
        assert re.search(rf"<details><summary><b>{step}</b> · completed · [0-9.]+s · {task}</summary>", markdown)
    assert "Compare &lt;both&gt; cities</summary>" in markdown  # escaped, not a tag
    assert "<b>Answer</b>" in markdown and "Berlin has more inhabitants than Paris." in markdown
    assert '<img src="data:image/svg+xml;base64,' in markdown  # the DAG drawing for static viewers
    assert f"<DagRun done: '{GOAL}'" not in markdown  # the rich views win over the repr
    assert "dagmagic live view" not in markdown  # no stand-in line for a widget nobody saw
