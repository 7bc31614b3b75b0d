"""``%dag replay RUN``: a run executed again with the notebook's code of now, answered from its recording, and how
every view says where a replay diverged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from dagmagic import DagRun
from dagmagic.diff import RunDiff
from dagmagic.notebook.fallbacks import run_html, run_markdown
from dagmagic.notebook.transformer import rewrite_dag_cell
from dagmagic.notebook.widget import widget_state

LOOKUP = '''
def lookup(city: str) -> str:
    """{doc}"""
    return "2.1 million"
'''


def run_cell(ip: InteractiveShell, code: str) -> object:
    result = ip.run_cell(code)
    if result.error_in_exec is not None:
        raise result.error_in_exec
    return result.result


def recorded(ip: InteractiveShell) -> DagRun:
    """Run 1 of the kernel: a goal planned with the notebook's ``lookup`` tool."""
    run_cell(ip, LOOKUP.format(doc="The population of a city."))
    run = run_cell(ip, "%%dag --models llm --tools lookup\nHow many people live in Paris?")
    assert isinstance(run, DagRun) and run.status == "done"
    return run


def last_line(text: str) -> str:
    """The line ``%dag replay`` prints once the replay ended (the cell's value follows it)."""
    said = [line for line in text.splitlines() if line.startswith(("Replayed ", "Replay of "))]
    assert len(said) == 1, text
    return said[0]


def test_a_replay_of_an_unchanged_run_says_it_is_identical(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    original = recorded(ip)
    asked = len(ip.user_ns["llm"].requests)
    capsys.readouterr()

    replayed = run_cell(ip, "%dag replay 1")

    assert isinstance(replayed, DagRun) and replayed.replay_of == original.run_id
    assert len(ip.user_ns["llm"].requests) == asked  # answered from the recording
    calls = len(original.calls)
    assert last_line(capsys.readouterr().out) == (
        f"Replayed {calls} calls of run {original.run_id}: identical answer, steps and verdicts."
    )
    difference = run_cell(ip, "%dag diff 2")  # the replay against the run it replays
    assert isinstance(difference, RunDiff) and difference.identical
    with pytest.raises(UsageError, match="replays no run"):
        run_cell(ip, "%dag diff 1")


def test_a_replay_after_a_tool_changed_says_where_it_diverged_and_what_changed(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    original = recorded(ip)
    run_cell(ip, LOOKUP.format(doc="The number of people living in a city, from its census."))  # edited
    capsys.readouterr()

    replayed = run_cell(ip, "%dag replay 1")

    assert isinstance(replayed, DagRun) and replayed.status == "failed"
    out = capsys.readouterr().out
    assert "[failed] diverged from the recording at the 'plan' call in round 1: it was not recorded\n" in out
    assert "-  lookup(city: string) — The population of a city." in out  # the diff, line by line
    assert last_line(out) == (
        f"Replay of run {original.run_id} diverged from the recording at the 'plan' call in round 1: it was not "
        "recorded; first change: - lookup(city: string) — The population of a city. / + lookup(city: string) — "
        "The number of people living in a city, from its census. `%dag diff 2` (or `replayed.diff(original)`) "
        "shows what changed."
    )
    difference = run_cell(ip, "%dag diff 2")
    assert isinstance(difference, RunDiff) and difference.diverged is not None


def test_a_replay_needs_no_model_in_a_new_kernel(
    ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.notebook import magics, session
    from dagmagic.notebook.session import NotebookSession

    run_cell(ip, f"%dag config store={tmp_path / 'runs.sqlite'}")
    original = recorded(ip)
    assert magics._active is not None
    magics._active.notebook = NotebookSession(magics._active)  # a new kernel, where no model is configured
    run_cell(ip, f"%dag config store={tmp_path / 'runs.sqlite'}")

    def no_model() -> None:
        raise UsageError(session.NO_MODEL_HELP)

    monkeypatch.setattr(session, "default_registry", no_model)
    capsys.readouterr()
    replayed = run_cell(ip, f"%dag replay {original.run_id[:6]} --tools lookup")
    assert isinstance(replayed, DagRun) and replayed.status == "done"
    assert last_line(capsys.readouterr().out).endswith("identical answer, steps and verdicts.")


def test_what_cannot_be_replayed_is_a_usage_error(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="no runs yet"):
        run_cell(ip, "%dag replay")
    recorded(ip)
    with pytest.raises(UsageError, match="--timing takes a number"):
        run_cell(ip, "%dag replay 1 --timing fast")
    with pytest.raises(UsageError, match="no run '7'"):
        run_cell(ip, "%dag replay 7")


def test_replay_alone_in_a_cell_is_awaited() -> None:
    assert "run_dag_line('replay', '3 --timing 1')" in rewrite_dag_cell(["%dag replay 3 --timing 1\n"])[0]


def test_the_static_views_and_the_widget_say_where_a_replay_diverged(ip: InteractiveShell) -> None:
    recorded(ip)
    run_cell(ip, LOOKUP.format(doc="The number of people living in a city, from its census."))
    replayed = run_cell(ip, "%dag replay 1")
    assert isinstance(replayed, DagRun)

    markdown = run_markdown(replayed)
    assert "diverged from the recording at the &#x27;plan&#x27; call in round 1: it was not recorded" in markdown
    assert "ReplayMismatch" not in markdown  # not the error's one long line
    assert "\n```text\nThe closest recorded call (plan · round 1 · model 'llm') differs:\n" in markdown  # its lines
    assert "\n-  lookup(city: string) — The population of a city.\n" in markdown
    assert f"replay of run {replayed.replay_of}" in markdown

    page = run_html(replayed)
    assert "diverged from the recording at the &#x27;plan&#x27; call in round 1" in page
    assert '<pre style="white-space: pre-wrap">The closest recorded call' in page
    assert "\n-  lookup(city: string) — The population of a city.\n" in page

    state = widget_state(replayed)["divergence"]
    assert state["headline"] == "diverged from the recording at the 'plan' call in round 1: it was not recorded"
    assert state["reason"].startswith("The closest recorded call (plan · round 1 · model 'llm') differs:\nmessages:")


def test_replay_is_a_command_and_in_the_help() -> None:
    from dagmagic.notebook.commands import COMMANDS
    from dagmagic.notebook.magics import DagMagics

    assert "replay" in COMMANDS
    help_text = DagMagics.dag.__doc__ or ""
    assert "%dag replay [RUN] [--timing X] [--tools a,b] [--bg]" in help_text
    assert "%dag diff RUN" in help_text
