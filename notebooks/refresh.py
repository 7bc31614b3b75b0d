"""Execute the tutorial notebooks and store their outputs as readers and nbval should see them.

    python notebooks/refresh.py                 # every notebooks/NN_*.ipynb
    python notebooks/refresh.py 03_replanning   # some of them

Each notebook runs top to bottom in a fresh kernel, offline (``ScriptedLLM``), in a temporary working
directory (its run store included). Then the live widgets' views and state are dropped — GitHub cannot draw
them and nbval does not compare them — so each ``%%dag`` cell keeps its static views (Markdown, HTML, SVG),
which is what a reader without a kernel sees. CI then re-runs every notebook with
``pytest --nbval notebooks/`` and compares the outputs stored here, so a notebook that no longer matches the
library fails CI: run this script and commit the notebooks after changing what they show.

A notebook authored against a real model (07) keeps its model calls in a cassette beside it,
``NN_name.cassette.jsonl``: the kernel finds a copy of it in its working directory and replays it, so
refreshing stays offline. To record it anew, delete the cassette and refresh with the model's server up: the
calls are recorded (``record=once`` records a missing cassette), the cassette is copied back beside the
notebook, and the notebook runs once more from it, so that what is stored is what CI sees.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SECONDS_ALLOWED = 60.0
CELL_SECONDS = 120
RECORDING_CELL_SECONDS = 1800
"""A cell that calls a real, slow model while recording its cassette may take this long."""


def cassette_of(path: Path) -> Path:
    """Where the notebook at ``path`` keeps its recorded model calls, if it uses a cassette."""
    return path.with_name(f"{path.stem}.cassette.jsonl")


def records(path: Path, nb: nbformat.NotebookNode) -> bool:
    """Whether refreshing ``path`` records its cassette (it names one that does not exist yet)."""
    cassette = cassette_of(path)
    named = any(cassette.name in cell.source for cell in nb.cells)
    return named and not cassette.exists()


def strip_widgets(nb: nbformat.NotebookNode) -> None:
    """Drop widget state and widget views, and what stood in for them; keep every other output (the static
    views among them).
    """
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # nbclient's timestamps: noise in every diff
        outputs = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            data.pop(WIDGET_VIEW, None)
            ours = "dagmagic" in (output.get("metadata") or {})
            if output.get("output_type") in ("display_data", "execute_result") and (
                not data or (ours and set(data) <= {"text/plain"})
            ):
                continue  # an emptied live view, or a widget's stand-in: the run's static view is the other output
            outputs.append(output)
        if cell.cell_type == "code":
            cell.outputs = outputs


def refresh(path: Path) -> float:
    """Execute ``path`` in place (with its cassette, see the module docstring); return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    started = time.monotonic()
    if records(path, nb):
        execute(nb, cassette_of(path), RECORDING_CELL_SECONDS)
    execute(nb, cassette_of(path), CELL_SECONDS)  # just recorded: stored as CI sees it, answered from the cassette
    seconds = time.monotonic() - started
    strip_widgets(nb)
    nbformat.write(nb, path)
    return seconds


def execute(nb: nbformat.NotebookNode, cassette: Path, timeout: int) -> None:
    """Run ``nb`` in a fresh kernel in a temporary directory holding a copy of ``cassette`` (a cassette it
    records there is copied back).
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("DAG_")}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    with tempfile.TemporaryDirectory(prefix="dagmagic-tutorial-") as workdir:
        copy = Path(workdir) / cassette.name
        if cassette.exists():
            shutil.copyfile(cassette, copy)
        # the notebook's path, as Jupyter tells a notebook's kernel (%dag history lists this notebook's runs)
        env["JPY_SESSION_NAME"] = str(Path(workdir) / cassette.name.replace(".cassette.jsonl", ".ipynb"))
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": workdir}})
        client.execute(env=env)
        if copy.exists() and not cassette.exists():
            shutil.copyfile(copy, cassette)


def main(names: list[str]) -> int:
    """Refresh the named notebooks (all when none); 1 when one took longer than a tutorial may."""
    paths = [HERE / f"{name.removesuffix('.ipynb')}.ipynb" for name in names] or sorted(HERE.glob("[0-9][0-9]_*.ipynb"))
    slow = []
    for path in paths:
        recording = records(path, nbformat.read(path, as_version=4))
        seconds = refresh(path)
        print(f"{path.name}: {seconds:.1f} s" + (f" (recorded {cassette_of(path).name})" if recording else ""))
        if seconds > SECONDS_ALLOWED and not recording:
            slow.append(path.name)
    if slow:
        print(f"over {SECONDS_ALLOWED:g} s: {', '.join(slow)}", file=sys.stderr)
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
