"""Notebook costs: ``%load_ext dagmagic`` time, widget messages per second while an answer streams at
200 tokens/s, and the bytes one run adds to a saved notebook. Run: ``python benchmarks/notebook_costs.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

LOAD_RUNS = 5
TOKENS = 400
TOKENS_PER_SECOND = 200.0

LOAD_EXT = """
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()   # a kernel has IPython loaded before any extension
started = time.perf_counter()
ip.run_line_magic("load_ext", "dagmagic")
print(time.perf_counter() - started)
"""

MODEL = """
from dagmagic.testing import ScriptedLLM
llm = ScriptedLLM({
    "plan": [{"steps": [{"id": "s1", "task": "look up a"}, {"id": "s2", "task": "look up b"},
                        {"id": "s3", "task": "compare", "dependencies": ["s1", "s2"]}]}],
    "step": ["a result of about this length, with a number: 42"],
    "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "both found", "final_answer": "42"}],
    "synthesize": [[f"word{i} " for i in range(200)]],
}, latency=0.05, chunk_delay=0.005)
"""


def load_ext_seconds() -> float:
    """Median wall time of ``%load_ext dagmagic`` in a fresh process that already imported IPython."""
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    times = [
        float(
            subprocess.run([sys.executable, "-c", LOAD_EXT], capture_output=True, text=True, env=env, check=True).stdout
        )
        for _ in range(LOAD_RUNS)
    ]
    return statistics.median(times)


async def widget_rate() -> tuple[int, float, float]:
    """(comm messages, stream seconds, messages per second) while TOKENS stream at TOKENS_PER_SECOND."""
    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.notebook.widget import DagWidget
    from dagmagic.testing import ScriptedLLM

    llm = ScriptedLLM(
        {
            "plan": [{"steps": [{"id": "s1", "task": "t"}]}],
            "step": ["r"],
            "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok"}],
            "synthesize": [[f"t{i} " for i in range(TOKENS)]],
        },
        chunk_delay=1 / TOKENS_PER_SECOND,
    )
    settings = DagSettings(store="none", domain_routing=False)
    run = DagSession(ModelRegistry().register("m", llm), settings).start("goal")
    widget = DagWidget(run)
    sent: list[float] = []
    original = widget.comm.send

    def counting_send(*args: Any, **kwargs: Any) -> Any:
        sent.append(asyncio.get_running_loop().time())
        return original(*args, **kwargs)

    widget.comm.send = counting_send
    await run
    deltas = [e.at for e in run.events if e.type == "answer_delta"]
    seconds = deltas[-1] - deltas[0]
    during = [t for t in sent if t]  # every message sent while the run went on
    widget.close()
    return len(during), seconds, len(during) / max(seconds, 1e-9)


def saved_bytes() -> tuple[int, int]:
    """Bytes one more ``%%dag`` run adds to a notebook executed by nbclient: (with widget state, without)."""
    import nbformat
    from nbclient import NotebookClient

    def notebook(runs: int) -> Any:
        cells = [nbformat.v4.new_code_cell("%load_ext dagmagic"), nbformat.v4.new_code_cell(MODEL)]
        cells += [nbformat.v4.new_code_cell(f"%%dag --models llm\nGoal number {i}") for i in range(runs)]
        return nbformat.v4.new_notebook(cells=cells)

    sizes = {}
    with tempfile.TemporaryDirectory() as folder:
        for runs in (1, 2):
            nb = notebook(runs)
            NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True).execute()
            with_state = len(nbformat.writes(nb).encode())
            nb.metadata.pop("widgets", None)
            without = len(nbformat.writes(nb).encode())
            sizes[runs] = (with_state, without)
            Path(folder, f"{runs}.ipynb").write_text(json.dumps(nb))
    return sizes[2][0] - sizes[1][0], sizes[2][1] - sizes[1][1]


def main() -> None:
    """Print every figure."""
    load = load_ext_seconds()
    print(f"%load_ext dagmagic: {load:.3f} s (median of {LOAD_RUNS} fresh processes; target < 0.3 s)")
    messages, seconds, rate = asyncio.run(widget_rate())
    print(
        f"widget: {messages} state messages while {TOKENS} tokens streamed over {seconds:.2f} s at "
        f"{TOKENS_PER_SECOND:g} tokens/s = {rate:.1f} messages/s (target <= 20)"
    )
    with_state, without = saved_bytes()
    print(f"saved notebook: +{with_state:,} bytes per run with widget state, +{without:,} without it")


if __name__ == "__main__":
    main()
