"""``%dag fork``: a stored run forked in a kernel that did not run it, through ``jupyter_client``."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from dagmagic import DagRun
from dagmagic.notebook.fallbacks import run_markdown
from dagmagic.notebook.transformer import rewrite_dag_cell
from dagmagic.notebook.widget_state import widget_state

from .test_kernel import CRASHABLE, SETUP, started_kernel
from .test_replays import LOOKUP, run_cell


def test_a_run_stored_by_one_kernel_is_forked_in_another_asking_only_what_changed(tmp_path: Path) -> None:
    store, first_calls, second_calls = tmp_path / "runs.sqlite", tmp_path / "first.txt", tmp_path / "second.txt"
    with started_kernel(tmp_path) as kernel:
        kernel.execute(SETUP, timeout=60)
        kernel.execute(f"{CRASHABLE}\n%dag config store={store}\nfirst = counting({str(first_calls)!r})")
        cell = kernel.execute("%%dag --models first\na goal to fork", timeout=60)
        assert cell.result["text/plain"].startswith("<DagRun done: 'a goal to fork'"), cell.result
        said = kernel.execute("r = dagmagic.last_run()\nprint(json.dumps([r.run_id, r.answer]))").stdout
        run_id, answer = json.loads(said)
    assert answer == "Answer from value of s1, value of s2, value of s3"

    with started_kernel(tmp_path) as kernel:  # a new kernel: the run is only in the store
        kernel.execute(SETUP, timeout=60)
        kernel.execute(
            f"{CRASHABLE}\n%dag config store={store}\nsecond = counting({str(second_calls)!r})\n"
            "%dag config models=second"
        )
        cell = kernel.execute(f"%dag fork {run_id} --at s2 --result 'value of s2, as I say it'", timeout=60)
        assert cell.status == "ok", cell.stdout + cell.stderr
        assert cell.result["text/plain"].startswith("<DagRun done: 'a goal to fork'"), cell.result
        line = next(text for text in cell.stdout.splitlines() if text.startswith("Fork of run"))
        assert re.fullmatch(
            rf"Fork of run {run_id} at r1\.s2 \(done\): \d+ calls? asked anew, the rest kept\. .*", line
        )
        report = json.loads(
            kernel.execute(
                "f = dagmagic.last_run()\n"
                "print(json.dumps([f.forked_from, f.forked_at, f.answer, sorted({c.purpose for c in f.calls}),"
                " f.steps['s2'].edited, [r.purpose for r in second.requests]]))"
            ).stdout
        )
        history = kernel.execute("%dag history --all").stdout
    forked_from, forked_at, forked_answer, purposes, edited, asked = report
    assert (forked_from, forked_at, edited) == (run_id, "r1.s2", True)
    assert "plan" not in purposes and "plan" not in asked  # the plan and s1 were kept, not asked again
    assert Counter(second_calls.read_text().split()) == {"s3": 1}  # only what depends on s2 ran
    assert Counter(first_calls.read_text().split()) == {"s1": 1, "s2": 1, "s3": 1}
    assert forked_answer == "Answer from value of s1, value of s2, value of s3"  # the verdict read the edited s2
    assert f"(fork of {run_id} at r1.s2) a goal to fork" in history, history


def test_what_cannot_be_forked_is_a_usage_error_and_fork_alone_in_a_cell_is_awaited(ip: InteractiveShell) -> None:
    assert "run_dag_line('fork', '3 --at s2')" in rewrite_dag_cell(["%dag fork 3 --at s2\n"])[0]
    run_cell(ip, LOOKUP.format(doc="The population of a city."))
    run_cell(ip, "%%dag --models llm --tools lookup\nHow many people live in Paris?")
    with pytest.raises(UsageError, match=r"needs the step to fork at: `%dag fork RUN --at s2`"):
        run_cell(ip, "%dag fork 1")
    with pytest.raises(UsageError, match=r"takes --task .* or --result .*, not both"):
        run_cell(ip, "%dag fork 1 --at s1 --task a --result b")
    forked = run_cell(ip, "%dag fork 1 --at s1 --result 'two million'")
    assert isinstance(forked, DagRun) and forked.forked_at == "r1.s1" and forked.steps["s1"].edited
    assert "fork of run" in run_markdown(forked)
    assert widget_state(forked)["forked"] == f"fork of run {forked.forked_from} at r1.s1"  # the widget's header
