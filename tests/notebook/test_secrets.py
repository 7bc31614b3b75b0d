"""Key canaries through a real kernel: a notebook whose model's provider echoes the key in its errors is run
by nbclient and saved (outputs, widget state and all); neither the saved file, nor the run store, nor anything
the kernel printed holds a key.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.fake_provider import Provider

pytestmark = pytest.mark.timeout(180)  # a kernel start and two runs through a misbehaving provider

REGISTERED_KEY = "sk-canary-notebook-registered-5566778899"
ENVIRONMENT_KEY = "sk-canary-notebook-environment-1122334455"


@pytest.fixture
def provider() -> Iterator[Provider]:
    served = Provider()
    yield served
    served.close()


def test_a_saved_notebook_and_its_store_hold_no_key(provider: Provider, tmp_path: Path) -> None:
    provider.modes = ["429", "500"]  # every call fails, each error echoing the key it was sent
    store = tmp_path / "runs.sqlite"
    setup = textwrap.dedent(
        f"""
        import os
        from dagmagic import ModelRegistry
        registry = (
            ModelRegistry()
            .register("gpt", "openai/gpt-4.1-mini", api_base="{provider.base}", api_key=os.environ["MY_PROVIDER_KEY"])
        )
        # a second registry, whose key comes from the environment (a run's first call is its smart model's plan)
        from_env = ModelRegistry().register("env", "openai/gpt-4.1-mini", api_base="{provider.base}")
        """
    ).strip()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext dagmagic"),
        nbformat.v4.new_code_cell(setup),
        nbformat.v4.new_code_cell(
            "%dag config llm_retries=1 llm_retry_backoff=0 step_retry_delays= max_replan_rounds=1\n"
        ),
        nbformat.v4.new_code_cell("%%dag --models registry\nWhat does a 404 status mean?"),
        nbformat.v4.new_code_cell("%%dag --models from_env\nWhat does a 500 status mean?"),
        nbformat.v4.new_code_cell("%dag trace"),
        nbformat.v4.new_code_cell("%dag history"),
        nbformat.v4.new_code_cell("_.error if hasattr(_, 'error') else None"),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAG_")}
    env |= {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DAG_STORE": str(store),
        "MY_PROVIDER_KEY": REGISTERED_KEY,
        "OPENAI_API_KEY": ENVIRONMENT_KEY,
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env=env)
    saved = tmp_path / "secrets.ipynb"
    nbformat.write(nb, saved)

    assert {REGISTERED_KEY, ENVIRONMENT_KEY} <= set(provider.keys_seen)  # both were sent, and echoed back
    text = saved.read_text()
    assert "Provider server error" in text or "Rate limited" in text  # the faults are in the outputs...
    assert "application/vnd.jupyter.widget-state+json" in text  # ...and the widgets' state nbclient kept
    assert '"goal": "What does a 500 status mean?"' in text  # the run's own state among it
    stored = b"".join(path.read_bytes() for path in tmp_path.iterdir() if path.name.startswith("runs.sqlite"))
    assert len(stored) > 10_000
    for key in (REGISTERED_KEY, ENVIRONMENT_KEY):
        assert key not in text, f"the saved notebook shows {key}"
        assert key.encode() not in stored, f"the run store holds {key}"
    errors = [o for cell in nb.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == [], json.dumps(errors)[:2000]
