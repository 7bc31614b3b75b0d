"""A kernel's memory across many ``%%dag`` cells: the runs kept are the session's memory window
(``runs_in_memory``), not every run a cell's widget ever showed, and each cell adds little for good.

One real kernel runs a hundred small cells, the way a long notebook session does. IPython's output history
holds each cell's value (the run) until ``%reset -f out``; after it, what still holds a run is dagmagic's.
"""

from __future__ import annotations

import contextlib
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_kernel import SETUP, Kernel, started_kernel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CELLS = 100
WARM_UP = 20
"""Cells before the first measure: the first ones load code and fill caches once."""
RUNS_IN_MEMORY = 5

MEASURE_SETUP = textwrap.dedent(
    f"""
    import gc, tracemalloc
    from dagmagic.llm import import_litellm
    import_litellm()  # now, not in the background between the cells measured
    from dagmagic.engine import DagRun
    %dag config runs_in_memory={RUNS_IN_MEMORY}
    llm = scripted()

    def rss_kb():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))

    def measure():
        llm.requests.clear()  # the test double's own record of every request, not dagmagic's
        gc.collect()
        runs = sum(issubclass(type(thing), DagRun) for thing in gc.get_objects())  # no lazy module woken
        heap = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
        print(json.dumps({{"runs": runs, "heap": heap, "rss": rss_kb()}}))
    """
)


@contextlib.contextmanager
def measured_kernel(cwd: Path) -> Iterator[Kernel]:
    with started_kernel(cwd) as kernel:
        kernel.execute(SETUP, timeout=60)
        kernel.execute(MEASURE_SETUP, timeout=120)
        yield kernel


def run_cells(kernel: Kernel, first: int, last: int) -> None:
    for number in range(first, last):
        kernel.execute(f"%%dag --models llm\nWhat is question {number}?", timeout=60)


def measure(kernel: Kernel) -> dict[str, int]:
    """The runs alive, the heap traced and the process's RSS (KiB), once the output history is dropped."""
    kernel.execute("%reset -f out")
    figures: dict[str, int] = json.loads(kernel.execute("measure()").stdout)
    return figures


def per_cell(kernel: Kernel, *, trace: bool) -> tuple[dict[str, int], float, float]:
    """Run ``CELLS`` cells; the figures after the last, and the heap (KiB) and RSS (KiB) each cell kept between
    cell ``WARM_UP`` and the last.
    """
    run_cells(kernel, 0, 1)  # the first cell waits once for a front end (none here)
    if trace:
        kernel.execute("tracemalloc.start()")
    run_cells(kernel, 1, WARM_UP)
    early = measure(kernel)
    run_cells(kernel, WARM_UP, CELLS)
    late = measure(kernel)
    cells = CELLS - WARM_UP
    return late, (late["heap"] - early["heap"]) / cells / 1024, (late["rss"] - early["rss"]) / cells


def test_after_a_hundred_cells_only_the_runs_in_memory_are_alive(tmp_path: Path) -> None:
    with measured_kernel(tmp_path) as kernel:
        late, _, rss_kb = per_cell(kernel, trace=False)
    print(f"live runs after %reset -f out: {late['runs']}; RSS {rss_kb:.1f} KiB/cell")
    # each cell's widget held its run for good: all 100 alive after %reset -f out (IPython itself keeps the
    # last three values, in user_ns_hidden's _, __ and ___)
    assert late["runs"] <= RUNS_IN_MEMORY + 3, late


def test_a_cell_keeps_little_of_the_heap(tmp_path: Path) -> None:
    with measured_kernel(tmp_path) as kernel:
        _, heap_kb, rss_kb = per_cell(kernel, trace=True)
    print(f"heap {heap_kb:.1f} KiB/cell (RSS {rss_kb:.1f} KiB/cell, tracemalloc's own included)")
    assert heap_kb < 60, f"{heap_kb:.1f} KiB of heap kept per cell"
