from __future__ import annotations

import asyncio
import gc
import os
import re
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import dagmagic
from dagmagic import DagRun
from dagmagic.notebook.display import widget_for
from dagmagic.notebook.magics import NO_MODEL_HELP
from dagmagic.notebook.transformer import rewrite_dag_cell
from dagmagic.testing import ScriptedLLM

from .conftest import TWO_STEPS, scripted
from .test_widget import FrontEnd

INTERRUPT = """
for _ in range(500):
    if job.steps.get("s1") and job.steps["s1"].status == "completed":
        break
    await asyncio.sleep(0.01)
job.cancel()
await job
"""


def run_cell(ip: InteractiveShell, code: str) -> object:
    result = ip.run_cell(code)
    if result.error_in_exec is not None:
        raise result.error_in_exec
    return result.result


def usage_error(ip: InteractiveShell, code: str, capsys: pytest.CaptureFixture[str]) -> str:
    result = ip.run_cell(code)
    assert type(result.error_in_exec).__name__ == "UsageError", result.error_in_exec
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return str(result.error_in_exec)


def test_a_dag_cell_returns_the_finished_run(ip: InteractiveShell) -> None:
    run = run_cell(ip, "%%dag --models llm\nWhat is {x}? Use $HOME literally.")
    assert isinstance(run, DagRun) and run.status == "done"
    assert run.answer == "The answer is 42."
    assert run.goal == "What is {x}? Use $HOME literally."  # taken literally: never interpolated
    assert dagmagic.last_run() is run
    assert ip.user_ns["_"] is run


def test_a_key_set_with_os_environ_in_a_cell_is_masked_in_the_next_run(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "acme0key0set0in0a0cell0mid0session"
    monkeypatch.setenv("ACME_SERVICE_TOKEN", "")
    monkeypatch.delenv("ACME_SERVICE_TOKEN")  # unset now, and again after the test (the cell sets it)
    ip.user_ns["echo"] = scripted(step=[f"the service answered with {key}"])
    before = run_cell(ip, "%%dag --models echo\nAsk the service")  # masking's secrets worked out and kept
    assert isinstance(before, DagRun) and key in before.steps["s1"].result  # no variable holds it yet
    run_cell(ip, f"import os\nos.environ['ACME_SERVICE_TOKEN'] = {key!r}")
    after = run_cell(ip, "%%dag --models echo\nAsk the service again")
    assert isinstance(after, DagRun) and after.steps["s1"].result == "the service answered with ***"
    ip.user_ns.pop("echo")


def test_output_binds_the_run(ip: InteractiveShell) -> None:
    run = run_cell(ip, "%%dag --models llm -o myrun\ngoal")
    assert ip.user_ns["myrun"] is run


def test_successive_cells_form_one_conversation_and_new_starts_fresh(ip: InteractiveShell) -> None:
    llm = ip.user_ns["llm"]
    run_cell(ip, "%%dag --models llm\nfirst question")
    run_cell(ip, "%%dag --models llm\nsecond question")
    assert "User: first question" in llm.requests_for("plan")[1].prompt
    run_cell(ip, "%%dag --models llm --new\nthird question")
    assert "Previous conversation" not in llm.requests_for("plan")[2].prompt


def test_context_adds_short_reprs_of_variables(ip: InteractiveShell) -> None:
    ip.user_ns["budget"] = {"eur": 1200}
    run = run_cell(ip, "%%dag --models llm --context budget\nplan a trip")
    assert isinstance(run, DagRun)
    assert run.goal.endswith("Context from the notebook:\n- budget = {'eur': 1200}")


def test_tools_are_picked_from_the_namespace(ip: InteractiveShell) -> None:
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    ip.user_ns["lookup"] = lookup
    run_cell(ip, "%%dag --models llm --tools lookup\ngoal")
    offered = ip.user_ns["llm"].requests_for("step")[0].tools
    assert [t["function"]["name"] for t in offered] == ["lookup"]


def test_options_override_settings(ip: InteractiveShell) -> None:
    ip.user_ns["llm"] = scripted(analyze=[{"achieved": False, "confidence": 0.1, "reasoning": "no"}])
    run = run_cell(ip, "%%dag --models llm --max-rounds 2 --concurrency 1 --step-timeout 30\ngoal")
    assert isinstance(run, DagRun) and len(run.rounds) == 2


def test_max_cost_is_parsed_as_usd(ip: InteractiveShell) -> None:
    magics = ip.magics_manager.registry["DagMagics"]
    assert magics.parse("--max-cost 0.05").max_cost == 0.05
    assert magics.parse("--max-cost $2").max_cost == 2.0
    assert magics.parse("").max_cost is None
    assert magics.notebook.settings(magics.parse("--max-cost 0.05")).max_cost == 0.05


def test_max_cost_stops_the_run_with_a_partial_answer(ip: InteractiveShell) -> None:
    ip.user_ns["llm"] = ScriptedLLM(scripted().script, price=(1e-4, 1e-4))
    run = run_cell(ip, "%%dag --models llm --max-cost 0.0001\ngoal")
    assert isinstance(run, DagRun) and run.partial and run.status == "done"
    assert ip.user_ns["llm"].requests == []  # the plan's estimate alone is more than the budget
    assert "Stopped: the cost budget of 0.0001 USD was reached" in run.answer


def test_config_traits_are_defaults(ip: InteractiveShell) -> None:
    ip.user_ns["llm"] = scripted(analyze=[{"achieved": False, "confidence": 0.1, "reasoning": "no"}])
    run_cell(ip, "%config DagMagics.max_rounds = 1")
    try:
        run = run_cell(ip, "%%dag --models llm\ngoal")
        assert isinstance(run, DagRun) and len(run.rounds) == 1
    finally:
        run_cell(ip, "%config DagMagics.max_rounds = None")


def test_dag_config_sets_settings_for_later_cells(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    ip.user_ns["llm"] = scripted(analyze=[{"achieved": False, "confidence": 0.1, "reasoning": "no"}])
    run_cell(ip, "%dag config max_replan_rounds=1")
    run = run_cell(ip, "%%dag --models llm\ngoal")
    assert isinstance(run, DagRun) and len(run.rounds) == 1
    message = usage_error(ip, "%dag config max_replan_rounds=0", capsys)
    assert "max_replan_rounds" in message and "expected an integer >= 1" in message


def test_dag_config_expands_notebook_variables(ip: InteractiveShell, tmp_path: Path) -> None:
    ip.user_ns["store_path"] = tmp_path / "runs.sqlite"
    run_cell(ip, "%dag config store=$store_path max_replan_rounds={1 + 1}")
    magics = ip.magics_manager.registry["DagMagics"]
    assert magics.overrides == {"store": str(tmp_path / "runs.sqlite"), "max_replan_rounds": "2"}


def test_role_options_take_model_variables(ip: InteractiveShell) -> None:
    ip.user_ns["small"] = scripted(step=["from the small model"])
    plan = {"steps": [{"id": "s1", "task": "t", "model_hint": "fast"}]}
    ip.user_ns["llm"] = scripted(plan=[plan])
    run = run_cell(ip, "%%dag --smart llm --fast small\ngoal")
    assert isinstance(run, DagRun)
    assert run.steps["s1"].result == "from the small model" and run.steps["s1"].model == "small"


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("%%dag --bogus\ngoal", "unrecognized arguments: --bogus"),
        ("%%dag --models nothing_here\ngoal", "no variable named 'nothing_here'"),
        ("%%dag --models llm --tools nope\ngoal", "--tools: there is no variable named 'nope'"),
        ("%%dag --models llm --context nope\ngoal", "--context: there is no variable named 'nope'"),
        ("%%dag --models llm\n   ", "needs a goal"),
        ("%%dag --models llm --smart llm\ngoal", "either --models or the role options"),
        ("%%dag --models llm --concurrency 0\ngoal", "expected an integer >= 1"),
        ("%%dag --models llm --max-cost abc\ngoal", "--max-cost: takes an amount in USD, 0 or more (e.g. 0.05)"),
        ("%%dag --models llm --max-cost -1\ngoal", "--max-cost: takes an amount in USD, 0 or more (e.g. 0.05)"),
        ("%dag", "needs a subcommand"),
        ("%dag fly", "unknown %dag subcommand 'fly'"),
        ("%dag stop", "no run is running"),
        ("%dag show 7", "no run '7'; see %dag history"),
    ],
)
def test_bad_input_is_one_clear_line(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str, expected: str
) -> None:
    assert expected in usage_error(ip, cell, capsys)


def test_no_model_configured_names_the_variables_models_and_the_demo(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    message = usage_error(ip, "%%dag\ngoal", capsys)
    assert message == NO_MODEL_HELP
    assert "DAG_SMART_MODEL" in message and "--models" in message and "%dag demo" in message


def test_background_returns_at_once_and_the_run_can_be_awaited(ip: InteractiveShell) -> None:
    ip.user_ns["llm"] = scripted(step=["slow"])
    ip.user_ns["llm"].latency = {"step": 0.3}
    started = time.perf_counter()
    run = run_cell(ip, "%%dag --models llm --bg\ngoal")
    assert isinstance(run, DagRun) and run.status == "running"
    returned = time.perf_counter() - started
    finished = run_cell(ip, "await _")
    assert finished is run and run.status == "done"
    assert returned < sum(r.run_time or 0 for r in run.steps.values())  # it returned before the steps ran


def test_history_show_and_trace(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_cell(ip, "%%dag --models llm\nfirst goal")
    capsys.readouterr()
    run_cell(ip, "%dag history")
    assert re.search(rf"  1  {run.run_id}  done +\S+ \S+ +\S+  first goal\n", capsys.readouterr().out)
    run_cell(ip, "%dag trace 1")
    trace = capsys.readouterr().out
    assert "analyze" in trace and "total" in trace and "plan" in trace


def test_history_is_a_table_of_this_notebooks_runs_and_all_lists_the_store(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 41: no header, only the first row numbered, and every notebook's runs (one store for the folder)
    store = tmp_path / "runs.sqlite"
    run_cell(ip, f"%dag config store={store}")
    elsewhere = (
        "from dagmagic import DagSession, DagSettings, ModelRegistry\n"
        f"_other = DagSession(ModelRegistry().register('llm', llm), DagSettings(store={str(store)!r}))\n"
        "await _other.run({goal!r})"
    )
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "other.ipynb"))
    theirs = run_cell(ip, elsewhere.format(goal="another notebook's goal"))
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "this.ipynb"))
    earlier = run_cell(ip, elsewhere.format(goal="this notebook's goal, an earlier kernel"))
    mine = run_cell(
        ip, "%%dag --models llm --no-widget\nthis notebook's goal, this kernel, a goal long enough to be cut"
    )
    assert isinstance(theirs, DagRun) and isinstance(earlier, DagRun) and isinstance(mine, DagRun)
    capsys.readouterr()

    run_cell(ip, "%dag history")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Runs of this notebook: 2; %dag history --all for the whole store (3)."
    assert re.fullmatch(r" +# +run +status +started +cost +goal", lines[1]), lines
    assert re.fullmatch(rf" +1 +{mine.run_id} +done +.*this notebook's goal, this kernel.*", lines[2]), lines
    assert re.fullmatch(rf" +2 +{earlier.run_id} +done +.*an earlier kernel", lines[3]), lines
    assert theirs.run_id not in "\n".join(lines)
    assert len({line.index(" done ") for line in lines[2:4]}) == 1  # the columns line up

    run_cell(ip, "%dag history --all")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"All runs in the store {store}: 3."
    numbered = {line.split()[1]: line.split()[0] for line in lines[2:5]}
    assert numbered == {mine.run_id: "1", earlier.run_id: "2", theirs.run_id: "3"}
    shown = run_cell(ip, "%dag trace 3")  # the number a row shows is the one the commands take
    assert shown is None and "another notebook" not in capsys.readouterr().err


def test_trace_is_a_table_whose_columns_do_not_shift_and_marks_failed_calls() -> None:
    from dagmagic.models import LLMCall, Usage
    from dagmagic.notebook.progress import trace_table

    from .samples import tool_step_run

    run = tool_step_run()
    long_id = "fetch_the_population_of_every_city"
    calls = run.state.calls
    calls[1] = calls[1].model_copy(update={"step_id": long_id})
    calls.append(
        LLMCall(
            purpose="step",
            model="a-model-with-a-rather-long-name",
            round=1,
            step_id="s9",
            usage=Usage(),
            started_at=calls[-1].started_at + 1,
            error="ProviderError: 503",
            status="failed",
        )
    )
    lines = trace_table(run).split("\n\n")[0].splitlines()
    header, rows = lines[0], lines[1:]
    assert header.split() == [
        "#",
        "purpose",
        "model",
        "round",
        "step",
        "level",
        "retry",
        "in",
        "out",
        "latency",
        "cost",
        "status",
    ]
    llm_rows = [row for row in rows if "direct call" not in row]
    for column in ("round", "retry", "latency", "cost"):  # right-aligned columns end where their header ends
        end = header.index(column) + len(column)
        assert all(row[end - 1] != " " and row[end] == " " for row in llm_rows), (column, rows)
    assert rows[1].split()[4] == long_id and "a-model-with-a-rather-long-name" in rows[-1]
    assert rows[-1].endswith("failed: ProviderError: 503") and all(row.endswith(" ok") for row in llm_rows[:-1])
    assert [row.split()[0] for row in llm_rows] == [str(n) for n in range(1, len(calls) + 1)]  # run.calls[N - 1]


def test_help_lists_every_option_and_subcommand(ip: InteractiveShell) -> None:
    doc = ip.find_cell_magic("dag").__doc__
    for option in ("--bg", "--models", "--tools", "--context", "--max-rounds", "--no-widget", "-o"):
        assert option in doc
    for sub in ("models", "config", "history", "show", "resume", "stop", "followup", "trace", "demo", "export"):
        assert f"%dag {sub}" in doc


def test_the_transformer_rewrites_only_dag_cells() -> None:
    assert rewrite_dag_cell(["x = 1\n"]) == ["x = 1\n"]
    assert rewrite_dag_cell(["%%dag?\n"]) == ["%%dag?\n"]
    assert rewrite_dag_cell(["%%dagger\n", "x\n"]) == ["%%dagger\n", "x\n"]
    assert "run_dag_line('resume', 'abc --models m')" in rewrite_dag_cell(["%dag resume abc --models m\n"])[0]
    assert "run_dag_line('resume', '')" in rewrite_dag_cell(["%dag resume\n"])[0]
    assert "run_dag_line('rerun', 's2 --task \"x y\"')" in rewrite_dag_cell(['%dag rerun s2 --task "x y"\n'])[0]
    assert rewrite_dag_cell(["%dag rerun s2\n", "x = 1\n"]) == ["%dag rerun s2\n", "x = 1\n"]  # not alone
    assert rewrite_dag_cell(["%dag resumes\n"]) == ["%dag resumes\n"]


def test_loading_the_extension_leaves_litellms_import_to_a_background_thread() -> None:
    code = (
        "import time, sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\n"
        "t = time.perf_counter(); ip.run_line_magic('load_ext', 'dagmagic'); dt = time.perf_counter() - t\n"
        "from dagmagic.notebook import preload\n"
        "print(dt, preload._started.litellm.is_alive())"
    )
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    env["OPENAI_API_KEY"] = "sk-test-" + "0" * 24  # a provider key: the default models are litellm's
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    seconds, importing = out.stdout.split()
    assert importing == "True"  # the load returned while litellm was still being imported
    assert float(seconds) > 0  # the figure itself goes to the benchmark, not a test


def test_demo_runs_offline(ip: InteractiveShell) -> None:
    from dagmagic.notebook import demo

    session = demo.demo_session()
    for model in session.models:
        model.backend.latency = 0.0  # type: ignore[attr-defined]
        model.backend.chunk_delay = 0.0  # type: ignore[attr-defined]
    run = asyncio.run(session.run(demo.DEMO_GOAL))
    assert run.status == "done" and run.achieved and len(run.rounds) == 2
    first = run.rounds[0].plan
    assert first.step("s3").status == "failed" and first.step("s4").status == "skipped"
    assert "4.7 times" in run.answer and "| Paris | 2,102,650 |" in run.answer  # the whole answer, by the verdict
    assert {c.purpose for c in run.calls} == {"plan", "step", "analyze"}
    assert {c.name for s in first.steps for c in s.tool_calls} == {"city_population", "city_area"}


def test_terminal_ipython_prints_a_line_per_step(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    run_cell(ip, "%%dag --models llm\ngoal")
    out = capsys.readouterr().out
    for line in ("[round 1] s1 started", "[round 1] s1 completed", "[round 1] s2 completed", "The answer is 42."):
        assert line in out
    assert "[done] achieved=True confidence=0.90" in out


def test_cell_help_shows_the_options(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    ip.run_cell("%%dag?")
    shown = capsys.readouterr().out
    assert "--max-rounds" in shown and "%dag followup TEXT" in shown
    assert re.search(r"^\s*%%dag \[-o NAME\]", shown, re.MULTILINE), shown[:400]  # the cell magic's options


@pytest.mark.parametrize("store", ["none", "runs.sqlite"])
def test_history_says_a_run_the_user_stopped_was_stopped_by_you(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path, store: str
) -> None:
    if store != "none":
        run_cell(ip, f"%dag config store={tmp_path / store}")
    ip.user_ns["llm"] = scripted(analyze=[{"achieved": False, "confidence": 0.4, "reasoning": "s2 missing"}])
    ip.user_ns["llm"].latency = {"step": 0.3}
    stopped = run_cell(ip, "%%dag --models llm --bg --no-widget -o run\nstop me")
    assert isinstance(stopped, DagRun)
    wait_then_stop = "import asyncio\nfor _ in range(500):\n    if run.steps: break\n    await asyncio.sleep(0.01)\n"
    run_cell(ip, wait_then_stop + "run.stop()\nawait run")
    ip.user_ns["llm"] = scripted()
    finished = run_cell(ip, "%%dag --models llm --no-widget\nlet me finish")
    assert isinstance(finished, DagRun) and stopped.status == finished.status == "done"
    capsys.readouterr()
    run_cell(ip, "%dag history")
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if stopped.run_id in line and "stopped by you" in line], lines
    assert [line for line in lines if finished.run_id in line and " done " in line], lines


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_history_names_the_machine_of_each_run_once_the_store_holds_another_machines(
    ip: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    from dagmagic.store.lease import HOST

    from ..stored import connect

    store = str(tmp_path / "runs.sqlite") if backend == "sqlite" else request.getfixturevalue("postgres").database()
    run_cell(ip, f"%dag config store={store}")
    theirs = run_cell(ip, "%%dag --models llm --no-widget\ntheir goal")
    ip.user_ns["llm"] = scripted()
    capsys.readouterr()
    run_cell(ip, "%dag history")
    assert HOST not in capsys.readouterr().out  # one machine: no column for it
    assert isinstance(theirs, DagRun)
    with connect(store) as db:  # as a kernel on another machine wrote it
        db.execute("UPDATE runs SET host = 'machine-a' WHERE run_id = ?", (theirs.run_id,))
    mine = run_cell(ip, "%%dag --models llm --no-widget\nmy goal")
    assert isinstance(mine, DagRun)
    capsys.readouterr()
    run_cell(ip, "%dag history")
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if theirs.run_id in line and "machine-a" in line], lines
    assert [line for line in lines if mine.run_id in line and HOST in line], lines


def test_the_terminals_last_line_says_a_run_the_user_stopped_was_stopped_by_you() -> None:
    from dagmagic.events import RunFinished
    from dagmagic.notebook.progress import progress_line

    assert progress_line(RunFinished(status="done", stopped_by_user=True)) == (
        "[stopped by you] achieved=False confidence=0.00"
    )
    assert progress_line(RunFinished(status="done")) == "[done] achieved=False confidence=0.00"


def test_terminal_lines_say_when_an_answer_is_dropped_or_partial() -> None:
    from dagmagic.events import AnswerCleared, AnswerReady
    from dagmagic.notebook.progress import progress_line

    assert progress_line(AnswerCleared(reason="a follow-up arrived")) == (
        "(the answer being written was dropped: a follow-up arrived)"
    )
    assert progress_line(AnswerReady(answer="Only Paris.", partial=True)) == (
        "\n(partial answer: the run was stopped before it finished)\nOnly Paris.\n"
    )
    assert progress_line(AnswerReady(answer="Both.")) == "\nBoth.\n"


async def _hangs_on_s2(request: Any) -> str:
    if request.step_id == "s2":
        await asyncio.sleep(3600)
    return f"value of {request.step_id}"


def _interrupted_run(ip: InteractiveShell, tmp_path: Path) -> DagRun:
    """A stored run of 'the goal' cancelled with s1 completed and s2 running."""
    run_cell(ip, f"%dag config store={tmp_path / 'runs.sqlite'}")
    ip.user_ns["hanging"] = scripted(step=_hangs_on_s2)
    ip.user_ns["asyncio"] = asyncio
    job = run_cell(ip, "%%dag --models hanging --bg -o job\nthe goal")
    run_cell(ip, INTERRUPT)
    assert isinstance(job, DagRun) and job.status == "cancelled"
    assert {sid: step.status for sid, step in job.steps.items()} == {"s1": "completed", "s2": "cancelled"}
    return job


def test_a_cell_whose_last_run_was_interrupted_offers_it_and_resume_finishes_it(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _interrupted_run(ip, tmp_path)
    capsys.readouterr()

    offered = run_cell(ip, "%%dag --models llm\nthe goal")  # the same goal again: the cell ends at once
    assert isinstance(offered, DagRun) and offered.read_only and offered.run_id == job.run_id
    out = capsys.readouterr().out
    assert f"The last run of this goal ({job.run_id}, " in out
    assert "1 of 2 steps completed" in out and f"%dag resume {job.run_id}" in out and "--restart" in out
    assert widget_for(offered).resumable  # the view offers Resume and Start over

    run_cell(ip, "%dag history")
    assert re.search(rf"  1  {job.run_id}  interrupted .*  the goal\n", capsys.readouterr().out)

    llm = ip.user_ns["llm"]
    resumed = run_cell(ip, "%dag resume --models llm")  # the latest interrupted run
    assert isinstance(resumed, DagRun) and resumed.run_id == job.run_id and resumed.status == "done"
    assert [request.step_id for request in llm.requests_for("step")] == ["s2"]  # s1's result was kept
    assert resumed.steps["s1"].result == "value of s1" and resumed.answer == "The answer is 42."
    assert dagmagic.last_run() is resumed

    fresh = run_cell(ip, "%%dag --models llm\nthe goal")  # that run ended: nothing is offered any more
    assert isinstance(fresh, DagRun) and fresh.run_id != job.run_id and fresh.status == "done"
    with pytest.raises(UsageError, match="nothing to resume"):
        run_cell(ip, "%dag resume --models llm")


def test_the_offered_views_buttons_resume_or_start_over(ip: InteractiveShell, tmp_path: Path) -> None:
    job = _interrupted_run(ip, tmp_path)
    offered = run_cell(ip, "%%dag --models llm -o myrun\nthe goal")
    widget = ip.user_ns["widget"] = widget_for(offered)
    # the button's request, on the loop as in a kernel
    click = "await asyncio.sleep(0)\nwidget._on_message(None, {'kind': 'anywidget-command', 'id': 1, 'name': %r}, [])"
    run_cell(ip, click % "resume")
    assert widget.run is not offered and widget.run.run_id == job.run_id and not widget.resumable
    resumed = run_cell(ip, "await myrun")  # bound like the cell's own run
    assert resumed is widget.run and resumed.status == "done" and resumed.steps["s1"].result == "value of s1"

    again = _interrupted_run(ip, tmp_path / "again")
    offered = run_cell(ip, "%%dag --models llm\nthe goal")
    assert offered.run_id == again.run_id
    widget = ip.user_ns["widget"] = widget_for(offered)
    run_cell(ip, click % "restart")
    fresh = run_cell(ip, "await widget.run")
    assert fresh is widget.run and fresh.run_id != again.run_id and fresh.status == "done"


def test_the_offered_views_resume_keeps_the_cells_breakpoints(ip: InteractiveShell, tmp_path: Path) -> None:
    job = _interrupted_run(ip, tmp_path)
    offered = run_cell(ip, "%%dag --models llm --break s2\nthe goal")
    assert offered.run_id == job.run_id
    widget = ip.user_ns["widget"] = widget_for(offered)
    resume = {"kind": "anywidget-command", "id": 1, "name": "resume", "msg": {}}
    run_cell(ip, f"await asyncio.sleep(0)\nwidget._on_message(None, {resume!r}, [])")
    resumed = widget.run
    run_cell(ip, "for _ in range(200):\n    if widget.run.paused: break\n    await asyncio.sleep(0.01)")
    assert resumed.paused == ["s2"]  # paused before s2, as the cell asked, instead of running through it
    resumed.resume_step()
    assert run_cell(ip, "await widget.run").status == "done"


def test_restart_skips_the_offer_and_resume_names_runs(ip: InteractiveShell, tmp_path: Path) -> None:
    job = _interrupted_run(ip, tmp_path)
    fresh = run_cell(ip, "%%dag --models llm --restart\nthe goal")
    assert fresh.run_id != job.run_id and fresh.status == "done"
    with pytest.raises(UsageError, match="ended \\(done\\): there is nothing to resume"):
        run_cell(ip, f"%dag resume {fresh.run_id}")
    with pytest.raises(UsageError, match="no run or experiment 'ffffffffffff' in the run store"):
        run_cell(ip, "%dag resume ffffffffffff")
    ip.user_ns["hanging"] = scripted()  # the model the run was started with no longer hangs
    resumed = run_cell(ip, f"%dag resume {job.run_id[:6]}")  # a unique start of its id; the cell's options
    assert resumed.run_id == job.run_id and resumed.status == "done"  # awaited, though that cell had --bg
    assert ip.user_ns["job"] is resumed


def test_show_and_trace_read_runs_of_other_kernels_from_the_store(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _interrupted_run(ip, tmp_path)
    from dagmagic.notebook import magics

    assert magics._active is not None
    magics._active.runs.clear()  # as in a new kernel
    run_cell(ip, f"%dag trace {job.run_id}")
    assert "plan" in capsys.readouterr().out


def test_export_copies_the_run_store_safely(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cell(ip, f"%dag config store={tmp_path / 'runs.sqlite'}")
    run = run_cell(ip, "%%dag --models llm\nfirst goal")
    assert isinstance(run, DagRun)
    ip.user_ns["target"] = str(tmp_path / "backup.sqlite")
    capsys.readouterr()
    run_cell(ip, "%dag export $target")  # a path in a variable, as %dag config takes one
    assert f"to {tmp_path / 'backup.sqlite'}" in capsys.readouterr().out
    assert dagmagic.load_run(run.run_id, store=str(tmp_path / "backup.sqlite")).status == "done"
    assert "exists already" in usage_error(ip, "%dag export $target", capsys)
    assert "%dag export PATH" in usage_error(ip, "%dag export", capsys)


def test_export_without_a_store_says_so(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "nothing to export: DAG_STORE is none" in usage_error(ip, f"%dag export {tmp_path / 'x.sqlite'}", capsys)


def test_resume_without_a_store_says_how_to_keep_runs(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="nothing to resume: DAG_STORE is none; set it"):
        run_cell(ip, "%dag resume --models llm")


WAIT_FOR = """
for _ in range(500):
    if {condition}:
        break
    await asyncio.sleep(0.01)
"""


def test_debugging_from_the_line_magic(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    ip.user_ns["asyncio"] = asyncio
    ip.user_ns["llm"] = scripted(plan=[TWO_STEPS, {"steps": [{"id": "s1", "task": "all at once"}]}])
    run_cell(ip, "%%dag --models llm --approve --bg -o job\nthe goal")
    run_cell(ip, WAIT_FOR.format(condition="job.awaiting_approval"))
    run_cell(ip, "%dag reject one step will do")
    run_cell(ip, WAIT_FOR.format(condition="job.awaiting_approval and len(job.rounds) == 2"))
    assert "The user rejected this plan: one step will do" in ip.user_ns["llm"].requests_for("plan")[1].prompt
    run_cell(ip, "%dag approve")
    finished = run_cell(ip, "await job")
    assert finished.status == "done" and [s.task for s in finished.plan.steps] == ["all at once"]
    with pytest.raises(UsageError, match="no plan is waiting for approval"):
        run_cell(ip, "%dag approve")

    ip.user_ns["llm"] = scripted()
    paused = run_cell(ip, "%%dag --models llm --break s2 --bg -o job\nanother goal")
    run_cell(ip, WAIT_FOR.format(condition="job.paused"))
    assert paused.paused == ["s2"] and paused.steps["s2"].status == "paused"
    run_cell(ip, "%dag continue s2")
    assert run_cell(ip, "await job").status == "done"

    again = run_cell(ip, "%dag rerun s2 --bg")  # s2 still has its breakpoint: the re-run pauses there too
    run_cell(ip, WAIT_FOR.format(condition="job.paused"))
    assert again is paused and again.paused == ["s2"] and len(again.rounds) == 2
    run_cell(ip, "%dag continue")
    run_cell(ip, "await job")
    run_cell(ip, "job.clear_breakpoints()")
    capsys.readouterr()
    rerun = run_cell(ip, '%dag rerun s2 --task "compare again"')
    assert rerun is paused and len(rerun.rounds) == 3 and rerun.steps["s2"].task == "compare again"
    diff = run_cell(ip, "%dag diff 1 3")
    assert [change.id for change in diff.changes] == ["s2"] and "task" in diff.changes[0].fields
    with pytest.raises(UsageError, match="no round 4"):
        run_cell(ip, "%dag diff 1 4")
    with pytest.raises(UsageError, match="usage: %dag rerun"):
        run_cell(ip, "%dag rerun")
    with pytest.raises(UsageError, match="no step 's9' in the latest round"):
        run_cell(ip, "%dag rerun s9")


def test_step_through_from_a_cell(ip: InteractiveShell) -> None:
    ip.user_ns["asyncio"] = asyncio
    run = run_cell(ip, "%%dag --models llm --step-through --bg -o job\nstep by step")
    for sid in ("s1", "s2"):
        run_cell(ip, WAIT_FOR.format(condition="job.paused"))
        assert run.paused == [sid]
        run_cell(ip, "%dag step")
    assert run_cell(ip, "await job").status == "done"


def test_terminal_lines_for_nested_steps_breakpoints_and_approval() -> None:
    from dagmagic.events import ApprovalRequested, PhaseChanged, StepPaused, StepStarted
    from dagmagic.notebook.progress import progress_line

    assert progress_line(StepStarted(round=1, step_id="s1", model="m", depth=1, scope="s2")) == (
        "[round 1] s2/s1 started (m)"
    )
    assert progress_line(PhaseChanged(phase="planning", depth=1, scope="s2")) is None
    assert "%dag continue" in str(progress_line(StepPaused(round=2, step_id="s3", messages=[], tools=[])))
    assert progress_line(ApprovalRequested(round=1)) == (
        "[round 1] the plan waits for approval: %dag approve, or %dag reject WHY"
    )


def test_models_and_config_with_nothing_set_say_so(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for role in ("SMART", "GENERAL", "FAST", "REASONING"):
        monkeypatch.delenv(f"DAG_{role}_MODEL", raising=False)
    capsys.readouterr()
    run_cell(ip, "%dag config")
    assert capsys.readouterr().out == (
        "Nothing set with %dag config: the defaults apply, with any DAG_* environment variables.\n"
    )
    run_cell(ip, "%dag models")
    out = capsys.readouterr().out
    assert out.startswith("No model is configured") and "(falls back)" not in out
    assert out.count("No model is configured") == 1, out


def test_a_model_given_with_models_is_named_after_its_variable(ip: InteractiveShell) -> None:
    run = run_cell(ip, "%%dag --models llm\ngoal")
    assert {step.model for step in run.steps.values()} == {"llm"}  # what the views show, not "ScriptedLLM"
    assert {call.model for call in run.calls} == {"llm"}


def test_runs_beyond_runs_in_memory_are_read_back_from_the_store_by_number(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cell(ip, f"%dag config store={tmp_path / 'runs.sqlite'} runs_in_memory=2")
    first, *_ = [run_cell(ip, f"%%dag --models llm\ngoal {n}") for n in range(4)]
    from dagmagic.notebook import magics

    assert magics._active is not None and [run.goal for run in magics._active.runs] == ["goal 2", "goal 3"]
    assert isinstance(first, DagRun) and all(run is not first for run in magics._active.runs)
    capsys.readouterr()
    run_cell(ip, "%dag trace 1")  # run 1 left memory: read back from the store
    assert "plan" in capsys.readouterr().out
    rerun = run_cell(ip, '%dag rerun s2 --run 1 --task "compare again"')
    assert isinstance(rerun, DagRun) and rerun.run_id == first.run_id and rerun.status == "done"
    assert len(rerun.rounds) == 2 and rerun.steps["s2"].task == "compare again"
    assert dagmagic.load_run(first.run_id, store=str(tmp_path / "runs.sqlite")).steps["s2"].task == "compare again"


def test_a_run_no_longer_in_memory_without_a_store_says_so(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cell(ip, "%dag config runs_in_memory=1")
    for n in range(2):
        run_cell(ip, f"%%dag --models llm\ngoal {n}")
    message = usage_error(ip, "%dag show 1", capsys)
    assert "is no longer in memory" in message and "DAG_STORE is none" in message
    assert run_cell(ip, "%dag show 2") is None  # the latest is kept


def _shown_then_dropped(ip: InteractiveShell) -> tuple[Any, weakref.ref[DagRun]]:
    """The widget of a cell's run, once later cells made the session (runs_in_memory=1) let that run go."""
    first = run_cell(ip, "%%dag --models llm\ngoal 0")
    assert isinstance(first, DagRun)
    widget, shown = widget_for(first), weakref.ref(first)
    del first
    for n in (1, 2, 3):  # three: IPython's user_ns_hidden keeps the last three values (_, __, ___) even so
        run_cell(ip, f"%%dag --models llm\ngoal {n}")
    ip.displayhook.flush()  # IPython's output history (Out, _) holds each cell's value: what %reset out drops
    gc.collect()
    return widget, shown


def test_a_widget_of_a_run_let_go_takes_it_back_from_the_store_for_its_controls(
    ip: InteractiveShell, tmp_path: Path
) -> None:
    run_cell(ip, f"%dag config store={tmp_path / 'runs.sqlite'} runs_in_memory=1")
    widget, shown = _shown_then_dropped(ip)
    assert shown() is None and not widget.in_memory  # the widget did not keep it
    front = FrontEnd(widget)
    detail = front.ask("call_detail", index=0)  # read back from the store, with the cell's options
    assert detail["ok"] and detail["value"]["messages"], detail
    assert front.ask("full_text", round=1, step="s1") == {"ok": True, "value": {"text": "a result"}}
    assert widget.in_memory and widget.run.goal == "goal 0" and widget.run.can_rerun  # taken back: re-runnable
    assert widget_for(widget.run) is widget  # still the run's widget


def test_a_widget_of_a_run_let_go_without_a_store_says_why_its_controls_cannot_act(ip: InteractiveShell) -> None:
    run_cell(ip, "%dag config runs_in_memory=1")
    widget, shown = _shown_then_dropped(ip)
    assert shown() is None
    refusal = FrontEnd(widget).refused("call_detail", index=0)
    assert f"run {widget.run_id} is no longer in memory" in refusal and "DAG_STORE is none" in refusal, refusal
    assert widget.answer == "The answer is 42."  # what it draws stays


@pytest.mark.parametrize("command", ["%dag history", "%dag models", "%dag resume", "%dag demo"])
def test_a_bad_setting_in_the_environment_is_one_line_for_every_subcommand(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("DAG_MAX_CONCURRENCY", "many")
    message = usage_error(ip, command, capsys)
    assert "DAG_MAX_CONCURRENCY='many'" in message


def test_dag_config_says_what_it_set(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    run_cell(ip, "%dag config plan_max_steps=14")
    assert capsys.readouterr().out == "plan_max_steps = 14 (was 6): from the next %%dag cell on.\n"
    run_cell(ip, "%dag config plan_max_steps=20 max_replan_rounds=2")
    assert capsys.readouterr().out == (
        "plan_max_steps = 20 (was 14): from the next %%dag cell on.\n"
        "max_replan_rounds = 2 (was 3): from the next %%dag cell on.\n"
    )


def test_dag_config_cache_on_answers_a_cell_run_again_from_the_cache(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    verdict = {"achieved": True, "confidence": 0.9, "reasoning": "fine"}  # no final answer: synthesis writes it
    llm = ip.user_ns["llm"] = scripted(step=["a result " * 100], analyze=[verdict])
    ip.user_ns["cache_path"] = tmp_path / "cache.sqlite"
    run_cell(ip, "%dag config cache=$cache_path")
    said = capsys.readouterr().out
    assert f"cache = '{tmp_path / 'cache.sqlite'}' (was 'off')" in said and "answered again from" in said
    first = run_cell(ip, "%%dag --models llm --new\ngoal")
    sent = len(llm.requests)
    run_cell(ip, "%dag config synthesis_result_chars=200")
    again = run_cell(ip, "%%dag --models llm --new\ngoal")
    assert isinstance(first, DagRun) and isinstance(again, DagRun)
    assert [request.purpose for request in llm.requests[sent:]] == ["synthesize"]
    assert again.usage.cached_requests == len(again.calls) - 1
    run_cell(ip, "%dag trace")
    assert "cached" in capsys.readouterr().out
    run_cell(ip, "%dag config cache=off")
    assert "not cached" in capsys.readouterr().out


def test_dag_config_cassette_records_a_cell_then_replays_it_in_a_new_kernel(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dagmagic.llm.replay import forget_cassettes

    forget_cassettes()
    llm = ip.user_ns["llm"] = scripted(step=["a result"])
    ip.user_ns["tape"] = tmp_path / "nb.cassette.jsonl"
    run_cell(ip, "%dag config cassette=$tape")
    assert "recorded to" in capsys.readouterr().out
    first = run_cell(ip, "%%dag --models llm --new\ngoal")
    made = len(llm.requests)
    assert isinstance(first, DagRun) and made > 0 and (tmp_path / "nb.cassette.jsonl").exists()

    forget_cassettes()  # as a new kernel would
    run_cell(ip, "%dag config record=none")
    said = capsys.readouterr().out
    assert f"holds {made} recorded calls" in said and "no provider call" in said
    again = run_cell(ip, "%%dag --models llm --new\ngoal")
    assert isinstance(again, DagRun) and again.answer == first.answer
    assert len(llm.requests) == made  # every call answered from the cassette
    run_cell(ip, "%dag config cassette=none")
    assert "no cassette is set" in capsys.readouterr().out.lower()


def test_dag_otel_without_opentelemetry_is_a_usage_error_saying_what_to_install(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as without the extra `otel`
    monkeypatch.setenv("DAG_OTEL", "1")
    message = usage_error(ip, "%%dag --models llm\nthe goal", capsys)
    assert 'pip install "dagmagic[otel]"' in message and "DAG_OTEL" in message


def test_config_shows_a_store_urls_password_masked(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    run_cell(ip, "%dag config store=postgresql://dag:s3cret-pw@127.0.0.1:5432/runs")
    capsys.readouterr()
    run_cell(ip, "%dag config")
    shown = capsys.readouterr().out
    assert "store = 'postgresql://dag:***@127.0.0.1:5432/runs'" in shown and "s3cret" not in shown


def test_setting_a_store_url_confirms_it_with_its_password_masked(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    run_cell(ip, "%dag config store=postgresql://dag:s3cret-pw@127.0.0.1:5432/runs")
    run_cell(ip, "%dag config store=postgresql://dag:other-s3cret@127.0.0.1:5432/runs")  # "(was ...)" names the old
    shown = capsys.readouterr().out
    assert shown.count("postgresql://dag:***@127.0.0.1:5432/runs") == 3, shown
    assert "s3cret" not in shown, shown
    magics = ip.magics_manager.registry["DagMagics"]
    assert magics.overrides["store"] == "postgresql://dag:other-s3cret@127.0.0.1:5432/runs"  # what connects


def test_dag_followup_says_what_the_follow_up_will_do(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    ip.user_ns["llm"] = scripted()  # its verdict finds the goal met: the answer takes the follow-up in
    ip.user_ns["llm"].latency = {"step": 0.3}
    run_cell(ip, "%%dag --models llm --bg --no-widget -o run\nsteer me")
    wait = (
        "import asyncio\nfor _ in range(500):\n    if run.phase == 'executing': break\n    await asyncio.sleep(0.01)\n"
    )
    run_cell(ip, wait)
    capsys.readouterr()
    run_cell(ip, "%dag followup also cover Spain")
    said = capsys.readouterr().out
    assert said.startswith("Follow-up sent: steps not started are skipped") and "answer takes it into account" in said
    run = run_cell(ip, "await run\nrun")
    assert isinstance(run, DagRun) and len(run.rounds) == 1
    assert run.rounds[0].answered_follow_ups == ["also cover Spain"]
