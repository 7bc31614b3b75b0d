"""End to end in JupyterLab 4 and Debian's chromium: a scripted ``%%dag`` run drawn live by the widget.

Steps take about a second each so every state can be seen. Assertions are on the DOM hooks of the widget
(``.dagmagic-node[data-step-id][data-status]``, ``.dagmagic-answer``, ``.dagmagic-detail``, ...).
Screenshots land in ``test-output/e2e/`` for humans. Select or deselect these tests with ``-m browser``.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from playwright.sync_api import Locator, expect

from ..notebook.samples import FALLBACK_ERROR, tool_step_run, wide_run
from .conftest import CHROMIUM, WAIT_MS, NotebookPage

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),  # the first test also starts JupyterLab and chromium
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

ANSWER = (
    "The answer is **42**: the first half gives six, the second half gives seven, and six times seven makes "
    "forty-two, as both lookups agree."
)
ANSWER_WORDS = ANSWER.split(" ")
ANSWER_TEXT = ANSWER.replace("**", "")
"""The answer as the widget shows it, Markdown rendered."""

MODELS = textwrap.dedent(
    """
    import asyncio, pathlib
    from dagmagic.testing import ScriptedLLM

    PLAN = {"steps": [
        {"id": "s1", "task": "Look up the first half"},
        {"id": "s2", "task": "Look up the second half"},
        {"id": "s3", "task": "Multiply both halves", "dependencies": ["s1", "s2"]},
    ]}
    # the verdict writes the answer, streamed as it is written
    ACHIEVED = {"achieved": True, "confidence": 0.9, "reasoning": "Both halves are known.",
                "final_answer": " ".join(ANSWER_WORDS)}
    RESULTS = {"s1": "six", "s2": "seven", "s3": "forty-two"}

    async def step(request):
        # round 1's parallel pair waits for the test to create the gate file: their "running" state lasts
        # exactly as long as the test needs to look at it
        if request.round == 1 and request.step_id in ("s1", "s2"):
            while not pathlib.Path(GATE).exists():
                await asyncio.sleep(0.05)
        return RESULTS.get(request.step_id, "done")

    def scripted(**overrides):
        script = {
            "plan": [PLAN],
            "step": step,
            "analyze": [ACHIEVED],
            "synthesize": [[word + " " for word in ANSWER_WORDS]],
        }
        return ScriptedLLM({**script, **overrides}, latency={"step": 1.0}, chunk_delay=0.08)
    """
)


class Gate:
    """The file round 1's steps s1 and s2 wait for (in the notebook's folder, the kernel's working directory)."""

    def __init__(self, notebook: NotebookPage, name: str) -> None:
        self.name = f"{name}.gate"
        self.path = notebook.lab.root / self.name

    def open(self) -> None:
        self.path.touch()


def cells(gate: Gate, model: str, goal: str, options: str = "") -> list[str]:
    setup = f"GATE = {gate.name!r}\nANSWER_WORDS = {ANSWER_WORDS!r}\n{MODELS}\nllm = {model}"
    return ["%load_ext dagmagic", setup, f"%%dag --models llm {options}\n{goal}"]


def node(widget: Locator, step: str, round_index: int | None = None) -> Locator:
    """A step's box, in the given round (or the only one)."""
    scope = widget.locator(f'.dagmagic-round[data-round="{round_index}"]') if round_index else widget
    return scope.locator(f'.dagmagic-node[data-step-id="{step}"]')


def expect_waiting_for_the_gate(widget: Locator) -> None:
    """Round 1 planned: s1 and s2 run (held by the gate), s3 waits for both."""
    expect(widget.locator(".dagmagic-node")).to_have_count(3)
    expect(node(widget, "s1")).to_have_attribute("data-status", "running")
    expect(node(widget, "s2")).to_have_attribute("data-status", "running")
    expect(node(widget, "s3")).to_have_attribute("data-status", "pending")


def test_a_live_run_draws_the_dag_streams_the_answer_and_shows_a_steps_detail(notebook: NotebookPage) -> None:
    live_run(notebook)


def live_run(notebook: NotebookPage, screenshot: str = "live-run") -> None:
    """The DAG drawn live, the answer streamed, a step's detail opened."""
    gate = Gate(notebook, "live_run")
    notebook.open("live_run", cells(gate, "scripted()", "What is six times seven?"))
    notebook.run_all()
    widget = notebook.widget()

    # the DAG appears with its three steps: the parallel pair runs while the step that needs both waits
    expect_waiting_for_the_gate(widget)
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "running")
    gate.open()
    expect(node(widget, "s3")).to_have_attribute("data-status", "running")
    for step in ("s1", "s2", "s3"):
        expect(node(widget, step)).to_have_attribute("data-status", "completed")

    # the answer streams: first a part of it, then all of it
    body = widget.locator(".dagmagic-answer .dagmagic-answer-body")
    notebook.page.wait_for_function(
        """([el, full]) => {
            const text = el.innerText.trim().replace(/\\s+/g, " ");
            return text.length > 0 && text.length < full.length && full.startsWith(text);
        }""",
        arg=[body.element_handle(), ANSWER_TEXT],
        timeout=WAIT_MS,
    )
    expect(body).to_have_text(ANSWER_TEXT)
    expect(body.locator("strong")).to_have_text("42")  # rendered as Markdown
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    expect(notebook.widgets()).to_have_count(1)  # the live view and the cell's value: one visible widget
    expect(widget.locator(".dagmagic-verdict")).to_contain_text("achieved")
    expect(widget.locator(".dagmagic-trace")).to_contain_text("LLM calls")

    # a click on a step shows its detail: task, result
    node(widget, "s2").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s2"]')
    expect(detail).to_be_visible()
    expect(detail.locator(".dagmagic-detail-task")).to_have_text("Look up the second half")
    expect(detail).to_contain_text("seven")
    notebook.screenshot(screenshot, focus=detail)
    assert notebook.errors == []


def test_stop_skips_the_steps_not_started_and_answers_from_what_completed(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "stop")
    model = 'scripted(analyze=[{"achieved": False, "confidence": 0.4, "reasoning": "s3 never ran."}])'
    notebook.open("stop", cells(gate, model, "Stop me half-way"))
    notebook.run_all()
    widget = notebook.widget()

    expect_waiting_for_the_gate(widget)
    # what the run is doing, and for how long (it ticks between kernel messages)
    expect(widget.locator(".dagmagic-status")).to_have_text(re.compile(r"^running steps…( \d+s)?$"))
    widget.locator(".dagmagic-stop").click()
    expect(node(widget, "s3")).to_have_attribute("data-status", "skipped")  # at once, while s1 and s2 still run
    expect(node(widget, "s1")).to_have_attribute("data-status", "running")
    gate.open()
    expect(node(widget, "s1")).to_have_attribute("data-status", "completed")  # running steps finish
    expect(node(widget, "s2")).to_have_attribute("data-status", "completed")
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()

    # the answer is written from s1 and s2, streamed like any other, and says it is partial
    expect(widget.locator(".dagmagic-answer .dagmagic-answer-body")).to_have_text(ANSWER_TEXT)
    expect(widget.locator(".dagmagic-answer-partial")).to_be_visible()
    expect(widget.locator(".dagmagic-answer-partial")).to_contain_text("Partial answer")
    expect(widget.locator(".dagmagic-answer-fallback")).to_be_hidden()

    node(widget, "s3").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s3"]')
    expect(detail).to_contain_text("Skipped — you stopped the run")
    notebook.screenshot("stop", focus=widget.locator(".dagmagic-answer"))
    assert notebook.errors == []


def test_a_follow_up_triggers_a_visible_replan(notebook: NotebookPage) -> None:
    # round 1 alone would end the run: not achieved, but confident enough that replanning would not help;
    # only the follow-up can bring round 2
    model = (
        "scripted("
        'plan=[PLAN, {"steps": [{"id": "s1", "task": "Redo it in base 13", "dependencies": ["r1.s1", "r1.s2"]}]}], '
        'analyze=[{"achieved": False, "confidence": 0.95, "reasoning": "Not in the base asked for."}, ACHIEVED])'
    )
    gate = Gate(notebook, "follow_up")
    notebook.open("follow_up", cells(gate, model, "What is six times seven?"))
    notebook.run_all()
    widget = notebook.widget()

    expect_waiting_for_the_gate(widget)
    widget.locator(".dagmagic-followup-input").fill("Give it in base 13")
    widget.locator(".dagmagic-followup-send").click()
    expect(node(widget, "s3", 1)).to_have_attribute("data-status", "skipped")  # the follow-up skipped it at once
    gate.open()

    expect(widget.locator(".dagmagic-round")).to_have_count(2)
    expect(node(widget, "s1", 2)).to_contain_text("Redo it in base 13")
    second = widget.locator('.dagmagic-round[data-round="2"]')
    expect(second.locator(".dagmagic-round-followup")).to_have_text("Follow-up: Give it in base 13")  # its cause
    expect(second.locator(".dagmagic-diff-wrap")).to_contain_text("Compared with round 1")  # and what changed
    expect(node(widget, "s1", 2)).to_have_attribute("data-status", "completed")
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()

    first = widget.locator('.dagmagic-round[data-round="1"]')
    expect(first.locator(".dagmagic-round-summary")).to_contain_text("replan")
    first.locator(".dagmagic-round-toggle").click()  # earlier rounds are collapsed: open it for its verdict
    decision = first.locator('.dagmagic-decision[data-action="replan"]')
    expect(decision).to_contain_text(re.compile("follow-up", re.IGNORECASE))
    notebook.screenshot("follow-up", focus=decision)
    assert notebook.errors == []


def test_an_interrupted_run_is_offered_again_and_resumes_in_the_view(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "resume")
    first = cells(gate, "scripted()", "Resume me")
    first.insert(1, "%dag config store=resume.sqlite")
    notebook.open("resume", first)
    notebook.run_all()
    widget = notebook.widget()
    expect_waiting_for_the_gate(widget)
    widget.locator(".dagmagic-cancel").click()  # as Interrupt would: the run ends cancelled, s1 and s2 undone
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "cancelled")
    expect(widget.locator(".dagmagic-resume-offer")).to_be_visible()  # the live view offers to go on
    notebook.wait_until_done()

    # running the cell again does not pay for the run again: it shows the interrupted run with the offer
    notebook.page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    notebook.page.wait_for_function(
        "(id) => document.getElementById(id)?.innerText.includes('did not end: 0 of 3 steps completed')",
        arg=notebook.panel_id,
        timeout=WAIT_MS,
    )
    notebook.wait_until_done()
    offered = notebook.widgets().last
    expect(offered.locator(".dagmagic-resume-offer")).to_be_visible()
    expect(offered.locator(".dagmagic-resume-offer")).to_contain_text("did not end")
    notebook.screenshot("resume-offer", focus=offered)
    offered.locator(".dagmagic-resume").click()
    expect(offered.locator(".dagmagic-resume-offer")).to_be_hidden()
    expect(offered.locator(".dagmagic-status")).to_have_attribute("data-status", "running")
    expect_waiting_for_the_gate(offered)
    gate.open()
    for step in ("s1", "s2", "s3"):
        expect(node(offered, step)).to_have_attribute("data-status", "completed")
    expect(offered.locator(".dagmagic-answer .dagmagic-answer-body")).to_have_text(ANSWER_TEXT)
    expect(offered.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.screenshot("resumed", focus=offered)
    assert notebook.errors == []


def test_retry_now_runs_a_step_waiting_out_a_rate_limit(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "retry")
    gate.open()
    model = textwrap.dedent(
        """
        from dagmagic.errors import RateLimitError
        tries = []

        async def limited(request):
            tries.append(request.step_id)
            if request.step_id == "s1" and tries.count("s1") == 1:
                raise RateLimitError("429 slow down", model="scripted")
            return await step(request)

        llm = scripted(step=limited)
        """
    )
    setup = cells(gate, "None", "Wait for me")
    setup.insert(1, "%dag config step_immediate_retries=0 step_retry_delays=600 llm_retries=0")
    setup.insert(3, model)
    notebook.open("retry", setup)
    notebook.run_all()
    widget = notebook.widget()
    expect(node(widget, "s1")).to_have_attribute("data-status", "retrying")
    expect(node(widget, "s2")).to_have_attribute("data-status", "completed")  # its sibling went on meanwhile
    node(widget, "s1").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s1"]')
    expect(detail).to_contain_text("RateLimitError")
    expect(detail).to_contain_text(re.compile(r"retrying · 1 attempt · tries again at \S+"))
    notebook.screenshot("retry-now", focus=detail)
    detail.locator(".dagmagic-retry-now").click()
    expect(node(widget, "s1")).to_have_attribute("data-status", "completed")  # now, not in ten minutes
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    assert notebook.errors == []


def test_an_edited_plan_is_approved_in_the_view_and_runs_as_edited(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "approve")
    gate.open()
    notebook.open("approve", cells(gate, "scripted()", "Approve me", "--approve"))
    notebook.run_all()
    widget = notebook.widget()
    panel = widget.locator(".dagmagic-approval")
    expect(panel).to_be_visible()
    expect(widget.locator(".dagmagic-status")).to_have_text(re.compile(r"^waiting for your approval…( \d+s)?$"))
    for step in ("s1", "s2", "s3"):  # nothing runs while the plan waits
        expect(node(widget, step)).to_have_attribute("data-status", "pending")
    panel.locator('.dagmagic-approval-step[data-step-id="s2"] .dagmagic-approval-task').fill("Look up the other half")
    panel.locator('.dagmagic-approval-step[data-step-id="s3"] .dagmagic-approval-remove').click()
    expect(panel.locator(".dagmagic-approval-step")).to_have_count(2)
    notebook.screenshot("approval", focus=panel)
    panel.locator(".dagmagic-approve").click()
    expect(panel).to_be_hidden()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    expect(widget.locator(".dagmagic-node")).to_have_count(2)
    state = notebook.kernel_print(
        "r = dagmagic.last_run()\n"
        "print([(s.id, s.task, s.status) for s in r.plan.steps], r.rounds[0].approval)\n"
        "print(sorted(q.step_id for q in llm.requests_for('step')))"
    )
    assert state == (
        "[('s1', 'Look up the first half', 'completed'), ('s2', 'Look up the other half', 'completed')] approved\n"
        "['s1', 's2']\n"
    )
    assert notebook.errors == []


def test_a_refused_approval_says_why_in_the_approval_panel_only(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "refused")  # closed: the approved plan's first steps wait for it
    setup = cells(gate, "scripted()", "Refuse me", "--approve --bg -o run")
    # the plan is approved from Python while the view, its syncs held back, still shows it waiting
    setup.append(
        "import asyncio\nfrom dagmagic.notebook.display import widget_for\n"
        "while not run.awaiting_approval:\n    await asyncio.sleep(0.05)\n"
        "view = widget_for(run)\nview.sync()\nview.max_rate = 0.001\nrun.approve()"
    )
    notebook.open("refused", setup)
    notebook.run_all()
    notebook.wait_until_done()
    widget = notebook.widget()
    panel = widget.locator(".dagmagic-approval")
    expect(panel).to_be_visible()
    panel.locator(".dagmagic-approve").click()
    message = panel.locator(".dagmagic-message")
    expect(message).to_be_visible()  # beside the button that asked, its own answer
    expect(message.locator(".dagmagic-message-text")).to_have_text(
        "no plan of this run is waiting for approval (the run is executing)"
    )
    expect(panel.locator(".dagmagic-approve")).to_be_enabled()
    expect(widget.locator(".dagmagic-controls .dagmagic-message")).to_be_hidden()  # no other part took it
    notebook.screenshot("refused-approval", focus=panel)
    gate.open()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")  # the end syncs at once
    expect(panel).to_be_hidden()
    assert notebook.errors == []


def test_a_step_is_rerun_from_its_panel_with_an_edited_task(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "rerun")
    gate.open()
    notebook.open("rerun", cells(gate, "scripted()", "Re-run me"))
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    before = notebook.kernel_print("print(len(llm.requests_for('step')))")

    node(widget, "s2", 1).click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s2"]')
    detail.locator(".dagmagic-rerun-task").fill("Look up the second half again")
    notebook.screenshot("rerun-panel", focus=detail)
    detail.locator(".dagmagic-rerun").click()
    second = widget.locator('.dagmagic-round[data-round="2"]')
    expect(second.locator(".dagmagic-rerun-label")).to_contain_text("re-run of round 1 (s2)")
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    expect(second.locator('.dagmagic-diff li[data-step-id="s2"]')).to_contain_text("task")
    expect(node(widget, "s3", 2)).to_have_attribute("data-status", "completed")
    notebook.screenshot("rerun-round", focus=second)
    state = notebook.kernel_print(
        f"r = dagmagic.last_run()\nq = llm.requests_for('step')[{before.strip()}:]\n"
        "print(len(r.rounds), r.rounds[1].rerun_of, r.steps['s2'].task, sorted(x.step_id for x in q))"
    )
    assert state == "2 1 Look up the second half again ['s2', 's3']\n"  # s1 kept, s2 and s3 ran again
    assert notebook.errors == []


def test_a_breakpoint_shows_what_the_step_will_send_and_continue_runs_it(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "breakpoint")
    gate.open()
    notebook.open("breakpoint", cells(gate, "scripted()", "Break before s3", "--break s3"))
    notebook.run_all()
    widget = notebook.widget()
    expect(node(widget, "s3")).to_have_attribute("data-status", "paused")
    paused = widget.locator('.dagmagic-detail[data-step-id="s3"] .dagmagic-paused')
    expect(paused).to_be_visible()  # opened by itself
    expect(paused).to_contain_text("About to send")
    expect(paused.locator('.dagmagic-paused-message[data-role="user"]')).to_contain_text("six")  # s1's result
    expect(paused.locator('.dagmagic-paused-message[data-role="user"]')).to_contain_text("Multiply both halves")
    notebook.screenshot("breakpoint", focus=paused)
    paused.locator(".dagmagic-paused-task").fill("Multiply both halves, carefully")
    paused.locator(".dagmagic-continue").click()
    expect(node(widget, "s3")).to_have_attribute("data-status", "completed")
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    state = notebook.kernel_print(
        "r = dagmagic.last_run()\n"
        "kinds = [(e.type, getattr(e, 'action', '')) for e in r.events if getattr(e, 'step_id', None) == 's3'"
        " or getattr(e, 'text', None) == 's3']\n"
        "print(r.steps['s3'].task, r.steps['s3'].status, [q.step_id for q in llm.requests_for('step')].count('s3'))\n"
        "print([k for k in kinds if k[0] in ('step_paused', 'user_action', 'step_started')])"
    )
    assert state == (  # paused, then continued, then started: no call for s3 before Continue, one after
        "Multiply both halves, carefully completed 1\n"
        "[('step_paused', ''), ('user_action', 'continue'), ('step_started', '')]\n"
    )
    assert notebook.errors == []


def test_a_composite_step_shows_its_nested_dag_in_its_detail(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "subdag")
    gate.open()
    model = (
        'scripted(plan=[{"steps": [{"id": "s1", "task": "Look up the first half"}, '
        '{"id": "s2", "task": "Study the second half in depth", "dependencies": ["s1"], "tool_hint": "subplan"}]}, '
        '{"steps": [{"id": "s1", "task": "Find the digits"}, '
        '{"id": "s2", "task": "Add them", "dependencies": ["s1"]}]}], '
        'analyze=[{**ACHIEVED, "final_answer": "seven, from its digits"}, ACHIEVED])'
    )
    notebook.open("subdag", cells(gate, model, "Nest a step"))
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    expect(node(widget, "s2").locator(".dagmagic-node-subrun")).to_have_text("sub-DAG")
    expect(node(widget, "s2")).not_to_contain_text("subplan")  # the badge says it once
    node(widget, "s2").click()
    nested = widget.locator('.dagmagic-detail[data-step-id="s2"] .dagmagic-subrun')
    expect(nested).not_to_have_attribute("open", "")  # collapsed at first
    expect(nested.locator("summary")).to_have_text("Sub-DAG · 2 steps · done")
    nested.locator("summary").click()
    for step in ("s1", "s2"):
        expect(nested.locator(f'.dagmagic-node[data-step-id="{step}"]')).to_have_attribute("data-status", "completed")
    expect(nested.locator(".dagmagic-subrun-answer")).to_have_text("seven, from its digits")
    notebook.screenshot("subdag", focus=nested)
    state = notebook.kernel_print(
        "r = dagmagic.last_run()\nprint(r.steps['s2'].result, sorted({c.step_id for c in r.calls if c.step_id}))"
    )
    assert state == "seven, from its digits ['s1', 's2', 's2/s1', 's2/s2']\n"
    assert notebook.errors == []


def test_a_tool_step_shows_its_call_with_the_values_it_got(notebook: NotebookPage) -> None:
    """A run with tool steps (made by hand: what the engine records), shown by its cell: s2 called `add` directly,
    s3's direct call failed and an agent ran it.
    """
    state = tool_step_run().state.model_dump_json()
    show = "from dagmagic.engine.run.dag_run import DagRun\nfrom dagmagic.models import RunState\n"
    show += f"DagRun(RunState.model_validate_json({state!r}), read_only=True)"
    notebook.open("tool_steps", ["%load_ext dagmagic", show])
    notebook.run_all()
    notebook.wait_until_done()
    widget = notebook.widget()
    s2 = node(widget, "s2")
    expect(s2).to_have_attribute("data-status", "completed")
    expect(s2.locator(".dagmagic-node-call")).to_have_text("add(a=$s1 → 68.4, b=12)")
    expect(s2.locator(".dagmagic-badge-direct")).to_have_text("tool")
    expect(s2.locator(".dagmagic-badge-model")).to_have_count(0)  # no model ran it
    expect(node(widget, "s3").locator(".dagmagic-badge-model")).to_have_text("m")  # the agent that took over

    s2.click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s2"]')
    expect(detail.locator(".dagmagic-toolstep-call")).to_have_text("add(a=$s1 → 68.4, b=12)")
    expect(detail.locator('.dagmagic-toolstep-arg[data-arg="a"] .dagmagic-toolstep-value')).to_have_attribute(
        "title", "68.4"
    )
    expect(detail.locator(".dagmagic-toolstep-how")).to_have_text("Called directly: no LLM call.")
    notebook.screenshot("tool-step", focus=detail)
    node(widget, "s3").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s3"]')
    expect(detail.locator(".dagmagic-toolstep-how")).to_have_text(
        f"The direct call failed ({FALLBACK_ERROR}), so an agent ran the step."
    )
    assert notebook.errors == []


def test_a_saved_notebook_reopens_readable_without_its_kernel(notebook: NotebookPage) -> None:
    reopen_readable(notebook)


def reopen_readable(notebook: NotebookPage) -> None:
    """Run a cell, save, shut the kernel down, reopen: the whole run as static HTML, no widget error."""
    gate = Gate(notebook, "reopen")
    gate.open()
    notebook.open("reopen", cells(gate, "scripted()", "Reopen me **later**"))
    empty = (notebook.lab.root / "reopen.ipynb").stat().st_size
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    notebook.page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    saved = notebook.lab.root / "reopen.ipynb"
    notebook.page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=WAIT_MS)
    expect(notebook.widgets()).to_have_count(1)  # the live widget stays while the kernel lives
    text = saved.read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-view+json" not in text and "dagmagic-static" in text
    grown = saved.stat().st_size - empty
    print(f"saved notebook grew {grown} bytes for one run")
    assert grown <= 30_000

    notebook.lab.shut_down_kernels()  # the kernel is gone: nothing to draw a widget from
    page = notebook.page
    page.goto(notebook.url_of("reopen.ipynb", "reopened"))
    output = page.locator(".jp-OutputArea-output .dagmagic-static")
    expect(output).to_be_visible()
    expect(output.locator("details").first).to_contain_text("Round 1 · 3 steps · achieved")
    expect(output).to_contain_text("forty-two")
    expect(output.locator("strong").last).to_have_text("42")  # the answer's Markdown, rendered
    expect(page.get_by_text("model not found")).to_have_count(0)
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    notebook.screenshot("reopened", focus=output)


def test_clocks_tick_between_kernel_messages_and_the_timeline_and_trace_open(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "clocks")
    notebook.open("clocks", cells(gate, "scripted()", "Watch the clock"))
    notebook.run_all()
    widget = notebook.widget()
    expect_waiting_for_the_gate(widget)  # s1 and s2 run, held by the gate: no kernel message meanwhile
    elapsed = widget.locator(".dagmagic-total-elapsed .dagmagic-total-value")
    phase = widget.locator(".dagmagic-phase-time")
    first, first_phase = elapsed.inner_text(), phase.inner_text()
    notebook.page.wait_for_timeout(2_200)
    assert elapsed.inner_text() != first and phase.inner_text() != first_phase, (first, elapsed.inner_text())
    notebook.screenshot("clock-ticking", focus=widget.locator(".dagmagic-status"))
    gate.open()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    after = elapsed.inner_text() if elapsed.count() else ""
    notebook.page.wait_for_timeout(1_200)
    assert widget.locator(".dagmagic-total-elapsed .dagmagic-total-value").inner_text() == (
        after or widget.locator(".dagmagic-total-elapsed .dagmagic-total-value").inner_text()
    )  # an ended run's clock stands still

    timeline = widget.locator(".dagmagic-timeline")
    timeline.locator("summary").click()
    expect(timeline.locator(".dagmagic-timeline-bar--completed")).to_have_count(3)  # the steps' runs
    expect(timeline.locator(".dagmagic-timeline-bar--call-ok")).to_have_count(2)  # plan, the verdict+answer
    expect(timeline.locator(".dagmagic-timeline-bar--queued").first).to_be_attached()
    notebook.screenshot("timeline", focus=timeline)

    trace = widget.locator(".dagmagic-trace")
    trace.locator("summary").click()
    rows = trace.locator(".dagmagic-trace-row")
    expect(rows.first).to_contain_text("plan")  # start order
    expect(trace.locator(".dagmagic-trace-offset").first).to_have_text(re.compile(r"^\+\d"))
    rows.first.click()  # the plan
    detail = trace.locator('.dagmagic-trace-detail[data-index="0"]')
    expect(detail.locator('.dagmagic-trace-message[data-role="system"]')).to_contain_text("Plan how to reach")
    notebook.screenshot("trace-open", focus=detail)
    assert notebook.errors == []


def test_the_widget_follows_the_dark_theme(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "dark")
    gate.open()
    notebook.open("dark", cells(gate, "scripted()", "Draw me in the dark"))
    notebook.page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})"
    )
    notebook.page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=WAIT_MS)
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last

    def luminance(selector: str, prop: str) -> float:
        color = widget.locator(selector).first.evaluate(f"(el) => getComputedStyle(el).{prop}")
        red, green, blue = (int(v) for v in re.findall(r"\d+", color)[:3])
        return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255

    assert luminance(".dagmagic-goal", "color") > 0.6  # light text...
    assert luminance(".dagmagic-answer-body", "color") > 0.6
    page_bg = notebook.page.evaluate("() => getComputedStyle(document.querySelector('.jp-Notebook')).backgroundColor")
    assert sum(int(v) for v in re.findall(r"\d+", page_bg)[:3]) / (3 * 255) < 0.3  # ...on the dark page
    notebook.screenshot("dark-theme", focus=widget)
    notebook.page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})"
    )
    assert notebook.errors == []


def test_after_a_stop_the_view_says_so_plainly_and_long_results_open_in_place(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "plainly")
    long_result = "seven " * 1200  # 7,200 characters: cut at 4,000 in the synced state
    model = 'scripted(analyze=[{"achieved": False, "confidence": 0.4, "reasoning": "s3 never ran."}])\n' + (
        f"RESULTS['s2'] = {long_result!r}"
    )
    notebook.open("plainly", cells(gate, model, "Stop me and read"))
    notebook.run_all()
    widget = notebook.widget()
    expect_waiting_for_the_gate(widget)
    widget.locator(".dagmagic-stop").click()
    # the Stop is taken once the step it keeps from starting shows skipped (Python may take it a moment while
    # the kernel imports litellm in the background): only then may s1 and s2 finish
    expect(node(widget, "s3")).to_have_attribute("data-status", "skipped")
    gate.open()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    expect(widget.locator(".dagmagic-status")).to_contain_text("stopped by you")
    expect(widget.locator(".dagmagic-answer-partial")).to_be_visible()
    expect(widget.locator(".dagmagic-stop")).to_be_hidden()  # the controls of a running run are gone

    node(widget, "s3").click()
    reason = widget.locator('.dagmagic-detail[data-step-id="s3"] .dagmagic-detail-reason')
    expect(reason).to_have_text("Skipped — you stopped the run")  # neutral, not a red "Error"
    expect(widget.locator('.dagmagic-detail[data-step-id="s3"] .dagmagic-detail-error')).to_have_count(0)

    node(widget, "s2").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s2"]')
    expect(detail).to_contain_text("more characters)")
    detail.locator(".dagmagic-expand").click()
    expect(detail).not_to_contain_text("more characters)")  # the whole result, fetched on request
    assert detail.inner_text().count("seven") >= 1200
    expect(widget.locator(".dagmagic-answer .dagmagic-copy")).to_be_visible()
    notebook.screenshot("stopped-and-expanded", focus=detail)
    assert notebook.errors == []


def test_a_twelve_step_plan_stays_legible(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "twelve")
    gate.open()
    cities = ["Paris", "Berlin", "Zürich", "Kraków", "São Paulo", "Reykjavík", "Łódź", "Malmö", "Genève", "Köln"]
    steps = [{"id": f"s{i + 1}", "task": f"Find the population of {city} in 2023 from its statistics office"}
             for i, city in enumerate(cities)]  # fmt: skip
    steps.append({"id": "s11", "task": "Rank the ten cities by population", "dependencies": [s["id"] for s in steps]})
    steps.append({"id": "s12", "task": "Write the ranking as a table", "dependencies": ["s11"]})
    second = {"steps": [{"id": "s1", "task": "Check the top city again", "dependencies": ["r1.s11"]}]}
    model = (
        f"scripted(plan=[{{'steps': {steps!r}}}, {second!r}], "
        'analyze=[{"achieved": False, "confidence": 0.3, "reasoning": "check again"}, '
        '{"achieved": True, "confidence": 0.9, "reasoning": "fine"}])'
    )
    load, setup, cell = cells(gate, model, "Rank ten cities")
    notebook.open("twelve", [load, "%dag config plan_max_steps=12", setup, cell])
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    first = widget.locator('.dagmagic-round[data-round="1"]')
    first.locator(".dagmagic-round-toggle, summary, .dagmagic-round-head").first.click()
    boxes = first.locator(".dagmagic-node-box")
    expect(boxes).to_have_count(12)
    rects = [boxes.nth(i).bounding_box() for i in range(12)]
    for a in range(12):
        for b in range(a + 1, 12):
            ra, rb = rects[a], rects[b]
            assert ra and rb
            apart = (
                ra["x"] + ra["width"] <= rb["x"] + 0.5
                or rb["x"] + rb["width"] <= ra["x"] + 0.5
                or ra["y"] + ra["height"] <= rb["y"] + 0.5
                or rb["y"] + rb["height"] <= ra["y"] + 0.5
            )
            assert apart, f"boxes {a} and {b} overlap"
    tasks = [
        first.locator(f'.dagmagic-node[data-step-id="s{i}"] .dagmagic-node-task').text_content() or "" for i in (1, 3)
    ]
    assert tasks[0] != tasks[1] and "Paris" in tasks[0] and "Zürich" in tasks[1]  # two lines tell them apart
    expect(first.locator(".dagmagic-zoom")).to_be_visible()  # above 8 steps
    notebook.screenshot("twelve-steps", focus=first)
    latest = widget.locator('.dagmagic-round[data-round="2"]')
    expect(latest.locator(".dagmagic-node-ghost")).to_contain_text("r1.s11")  # a result of round 1, drawn apart
    assert notebook.errors == []


def test_what_to_know_about_the_whole_run_is_listed_under_its_header(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "unsaved")
    gate.open()
    load, setup, dag = cells(gate, "scripted()", "What is six times seven?")
    blocked = 'import pathlib\npathlib.Path("not-a-folder").write_text("x")\n%dag config store=not-a-folder/runs.sqlite'
    notebook.open("unsaved", [load, setup, blocked, dag])
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    warnings = widget.locator(".dagmagic-run-warnings")
    expect(warnings).to_be_visible()
    expect(warnings.locator("li")).to_have_count(1)
    expect(warnings.locator("li")).to_contain_text("This run is not saved")
    expect(warnings.locator("li")).to_contain_text("cannot be written")
    notebook.screenshot("run-warning", focus=widget.locator(".dagmagic-header"))
    assert notebook.errors == []


WORDS_MODELS = textwrap.dedent(
    """
    from dagmagic.testing import ScriptedLLM, ToolCall

    def lookup(city: str, year: int) -> str:
        \"\"\"The population of a city in a year.\"\"\"
        return "2,102,650"

    HINT = "a-model-" + "that-no-registry-knows-" * 18  # the planner's mistake, quoted in a long note
    PLAN = {"steps": [
        {"id": "s1", "task": "Look up the population of Paris"},
        {"id": "s2", "task": "Ask the city archive", "model_hint": HINT},
        {"id": "s3", "task": "Compare both", "dependencies": ["s1", "s2"]},
    ]}
    TABLE = ("| City | Population | Source |\\n|:--|--:|---|\\n"
             "| Paris | 2,102,650 | INSEE |\\n| Lyon | 522,250 | INSEE |")

    def step(request):
        if request.step_id == "s1":
            asked = any(message.get("role") == "tool" for message in request.messages)
            return "Paris: 2,102,650; Lyon: 522,250" if asked else ToolCall("lookup", {"city": "Paris", "year": 2024})
        return RuntimeError("the archive answered 503: try again later")

    llm = ScriptedLLM({
        "plan": [PLAN],
        "step": step,
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "The table is there.", "final_answer": TABLE}],
    })
    """
)


def test_the_view_says_why_a_step_has_no_result_opens_long_notes_and_keeps_table_alignment(
    jupyterlab: NotebookPage,
) -> None:
    notebook = jupyterlab
    cell = "%%dag --models llm --tools lookup\nCompare two cities"
    notebook.open("words", ["%load_ext dagmagic", WORDS_MODELS, cell])
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last

    # a failed step and the step it kept from running say why they have no result (not "No result yet.")
    node(widget, "s2").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s2"]')
    expect(detail.locator(".dagmagic-detail-no-result")).to_have_text(
        "No result: the step failed — RuntimeError: the archive answered 503: try again later"
    )
    node(widget, "s3").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s3"]')
    expect(detail.locator(".dagmagic-detail-no-result")).to_have_text(
        "No result: the step was skipped — dependency s2 failed."
    )
    notebook.screenshot("no-result-why", focus=detail)
    expect(widget).not_to_contain_text("No result yet.")

    # a long note of the round shows its start and opens in place to the whole of it
    note = widget.locator(".dagmagic-round-warnings li details.dagmagic-more").first
    expect(note.locator(".dagmagic-more-preview")).to_be_visible()
    expect(note.locator(".dagmagic-more-whole")).to_be_hidden()
    expect(note.locator("summary")).to_contain_text("Show all (")
    note.locator("summary").click()
    expect(note.locator(".dagmagic-more-whole")).to_be_visible()
    expect(note.locator(".dagmagic-more-whole")).to_contain_text("that-no-registry-knows-" * 18)
    expect(note.locator(".dagmagic-more-preview")).to_be_hidden()
    notebook.screenshot("long-note-open", focus=note)

    # the answer's table keeps the columns' Markdown alignment: left, right, and left by default
    table = widget.locator(".dagmagic-answer-body table")
    expect(table).to_be_visible()
    aligns = (
        table.locator("tbody tr")
        .first.locator("td")
        .evaluate_all("(cells) => cells.map((cell) => getComputedStyle(cell).textAlign)")
    )
    assert aligns == ["left", "right", "left"], aligns
    notebook.screenshot("answer-table", focus=table)

    # the trace shows the tool call s1 asked for with its arguments pretty-printed, as the step detail does
    trace = widget.locator(".dagmagic-trace")
    trace.locator("summary").first.click()
    trace.locator(".dagmagic-trace-row", has_text="s1").first.click()
    call = trace.locator(".dagmagic-trace-tool-call")
    expect(call.locator(".dagmagic-toolcall-name")).to_have_text("lookup")
    expect(call.locator("pre")).to_have_text('{\n  "city": "Paris",\n  "year": 2024\n}')
    notebook.screenshot("trace-tool-call", focus=call)
    assert notebook.errors == []


def test_a_stop_while_the_plan_waits_for_approval_says_the_plan_did_not_run(jupyterlab: NotebookPage) -> None:
    notebook = jupyterlab
    gate = Gate(notebook, "stop_approval")
    gate.open()
    notebook.open("stop_approval", cells(gate, "scripted()", "Stop me before I approve", "--approve"))
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-approval")).to_be_visible()
    widget.locator(".dagmagic-stop").click()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    expect(widget.locator(".dagmagic-status")).to_have_text("stopped by you")
    expect(widget.locator(".dagmagic-decision")).to_contain_text(
        "You stopped the run before approving this round's plan: it did not run."
    )
    expect(widget).not_to_contain_text("plan was ready")
    node(widget, "s1").click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s1"]')
    reason = "you stopped the run before approving the plan"
    expect(detail.locator(".dagmagic-detail-reason")).to_have_text(f"Skipped — {reason}")
    expect(detail.locator(".dagmagic-detail-no-result")).to_have_text(f"No result: the step was skipped — {reason}.")
    notebook.screenshot("stopped-before-approval", focus=widget)
    # the same words where a reader without the widget looks: the history and the saved (static) view
    said = notebook.kernel_print(
        "from dagmagic.notebook.fallbacks import run_markdown\n"
        "r = dagmagic.last_run()\nprint(r.status)\nprint(run_markdown(r))\n"
        "get_ipython().run_line_magic('dag', 'history')"
    )
    assert said.startswith("done\n") and "status: stopped by you" in said, said
    assert [line for line in said.splitlines() if "stopped by you" in line and "Stop me before" in line], said


def test_a_run_that_spends_its_rounds_shows_an_answer_saying_what_is_missing(notebook: NotebookPage) -> None:
    gate = Gate(notebook, "spent")
    gate.open()
    written = "Not fully reached: the 2024 figure is still missing. The halves are six and seven (2023)."
    model = (
        'scripted(analyze=[{"achieved": False, "confidence": 0.3, "reasoning": "The 2024 figure is still missing."}],'
        f" synthesize=[[word + ' ' for word in {written!r}.split(' ')]])"
    )
    notebook.open("spent", cells(gate, model, "Multiply the 2024 halves"))
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    expect(widget.locator(".dagmagic-round")).to_have_count(3)  # every round spent, none reached the goal
    answer = widget.locator(".dagmagic-answer")
    body = answer.locator(".dagmagic-answer-body")
    expect(body).to_contain_text(written)  # written, not a listing of 9 results
    expect(body).to_contain_text("Not fully answered. The 2024 figure is still missing.")  # what is missing, first
    expect(answer.locator(".dagmagic-answer-unreached")).to_be_visible()
    expect(answer.locator(".dagmagic-answer-unreached")).to_contain_text("Goal not reached")
    expect(answer.locator(".dagmagic-answer-fallback")).to_be_hidden()
    expect(answer.locator(".dagmagic-answer-partial")).to_be_hidden()
    notebook.screenshot("spent-rounds-answer", focus=answer)
    assert notebook.errors == []


SPLIT_WORDS = """(root) => {
    // every word of the view's text on one line: a word (up to 20 letters) whose letters sit on two lines
    // was broken inside ("Depend" / "encies")
    const split = [];
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const parent = node.parentElement;
        if (!parent || parent.closest("pre, code, svg, [hidden], details:not([open]) > :not(summary)")) continue;
        if (!parent.getClientRects().length) continue;
        for (const match of node.textContent.matchAll(/[\\p{L}\\p{N}]{2,20}/gu)) {
            const range = document.createRange();
            range.setStart(node, match.index);
            range.setEnd(node, match.index + match[0].length);
            const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
            if (tops.size > 1) split.push(match[0]);
        }
    }
    return split;
}"""


def test_a_wide_plan_reads_in_plan_order_at_a_readable_size_in_a_narrow_window(jupyterlab: NotebookPage) -> None:
    """A 14-step run at ~700 px with the file browser open: siblings left to right in plan order, text no smaller
    than 9 px (the graph scrolls instead), no word broken inside, a wide tool badge beside the step's cost, and a
    timeline that uses the width, with labels clear of its 0 s line and tooltips that say the whole task.
    """
    tab = jupyterlab
    tab.page.set_viewport_size({"width": 700, "height": 900})
    show = "from dagmagic.engine.run.dag_run import DagRun\nfrom dagmagic.models import RunState\n"
    show += f"DagRun(RunState.model_validate_json({wide_run().state.model_dump_json()!r}), read_only=True)"
    tab.open("wide", ["%load_ext dagmagic", show])
    tab.page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
    tab.page.wait_for_function("() => document.querySelector('.jp-FileBrowser')?.getClientRects().length > 0")
    tab.run_all()
    tab.wait_until_done()
    widget = tab.widget()
    expect(widget.locator(".dagmagic-node")).to_have_count(14)

    # 8: siblings left to right in plan order
    xs = [node(widget, f"s{i}").locator(".dagmagic-node-box").bounding_box() for i in range(2, 12)]
    lefts = [box["x"] for box in xs if box]
    assert len(lefts) == 10 and lefts == sorted(lefts), lefts
    ends = [node(widget, step).locator(".dagmagic-node-box").bounding_box() for step in ("s13", "s14")]
    assert ends[0] and ends[1] and ends[0]["x"] < ends[1]["x"]

    # 18: a readable size, the graph scrolls; the task's text at least 9 px high on the screen
    graph = widget.locator("svg.dagmagic-graph").first
    scale = graph.evaluate("(svg) => svg.getBoundingClientRect().width / svg.viewBox.baseVal.width")
    assert round(11 * scale, 1) >= 9, (
        f"the graph is drawn at {scale:.2f} of its size: 11 px text shows at {11 * scale:.1f} px"
    )
    wrap = widget.locator(".dagmagic-graph-pan").first
    assert wrap.evaluate("(el) => el.scrollWidth > el.clientWidth")  # wider than the window: it scrolls

    # 18: the wide tool badge and the cost, both visible, apart
    s5 = node(widget, "s5")
    s5.scroll_into_view_if_needed()
    badge = s5.locator(".dagmagic-badge-tool").bounding_box()
    cost = s5.locator(".dagmagic-node-cost").bounding_box()
    assert badge and cost, (badge, cost)
    assert badge["x"] + badge["width"] <= cost["x"] + 0.5, (badge, cost)
    tab.screenshot("wide-plan-narrow", focus=s5)

    # 18: no word broken inside a line, the detail open
    node(widget, "s3").click()
    expect(widget.locator('.dagmagic-detail[data-step-id="s3"]')).to_be_visible()
    timeline = widget.locator(".dagmagic-timeline")
    timeline.locator("summary").click()
    widget.locator(".dagmagic-trace > summary").click()
    expect(widget.locator(".dagmagic-trace-row").first).to_be_visible()
    split = widget.evaluate(SPLIT_WORDS)
    tab.screenshot("wide-plan-detail", focus=widget.locator(".dagmagic-detail"))
    assert split == [], f"words broken across lines: {split}"

    # 18: the timeline uses the width; labels end before its 0 s line; a bar's tooltip says the whole task
    svg = timeline.locator("svg.dagmagic-timeline-svg")
    used = svg.evaluate("(el) => el.getBoundingClientRect().width / el.parentElement.getBoundingClientRect().width")
    assert used > 0.95, f"the timeline uses {used:.0%} of its width"
    zero = timeline.locator(".dagmagic-timeline-tick").first.bounding_box()
    assert zero
    for label in timeline.locator(".dagmagic-timeline-label").all():
        box = label.bounding_box()
        assert box and box["x"] + box["width"] <= zero["x"], (label.text_content(), box, zero)
    task = "Find the population of Kraków in 2023 from its national statistics office"
    titles = timeline.locator(".dagmagic-timeline-bar title").all_text_contents()
    assert any(task in title for title in titles), titles[:4]
    tab.screenshot("wide-plan-timeline", focus=timeline)
    assert tab.errors == []


def seconds(text: str) -> float:
    """The header's elapsed time ("4.2s", "17s", "1m 05s") in seconds."""
    match = re.fullmatch(r"(?:(\d+)m )?([\d.]+)s", text.strip())
    assert match, text
    return int(match.group(1) or 0) * 60 + float(match.group(2))


def test_a_rerun_shows_its_new_round_what_it_reused_and_counts_only_running_time(notebook: NotebookPage) -> None:
    """A re-run clicked a while after the run ended: the detail follows the step into the new round, scrolled
    into view; the step carried over says it was reused; the elapsed time leaves out the wait before the click.
    """
    notebook.page.set_viewport_size({"width": 1000, "height": 700})
    gate = Gate(notebook, "rerun_feedback")
    gate.open()
    notebook.open("rerun_feedback", cells(gate, "scripted()", "Re-run me and watch"))
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    elapsed = widget.locator(".dagmagic-total-elapsed .dagmagic-total-value")
    before = seconds(elapsed.inner_text())

    notebook.page.wait_for_timeout(4_000)  # the run stands ended a while before the user re-runs a step
    node(widget, "s2", 1).click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s2"]')
    detail.locator(".dagmagic-rerun").click()
    second = widget.locator('.dagmagic-round[data-round="2"]')
    moved = second.locator('.dagmagic-detail[data-step-id="s2"]')
    expect(moved).to_be_visible()  # the detail shows the step's new run...
    expect(widget.locator('.dagmagic-round[data-round="1"] .dagmagic-detail')).to_have_count(0)  # ...not the old
    expect(second.locator(".dagmagic-round-toggle")).to_be_in_viewport()  # the new round, scrolled to
    reused = node(widget, "s1", 2)
    expect(reused).to_have_attribute("data-reused-from", "1")
    expect(reused.locator(".dagmagic-badge-reused")).to_have_text("reused")
    for step in ("s2", "s3"):  # run again: no mark
        expect(node(widget, step, 2)).not_to_have_attribute("data-reused-from", re.compile(".*"))
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.screenshot("rerun-feedback", focus=second.locator(".dagmagic-round-toggle"))

    after = seconds(elapsed.inner_text())
    timing = notebook.kernel_print(
        "r = dagmagic.last_run()\n"
        "ended = next(e.at for e in r.events if e.type == 'run_finished')\n"
        "again = next(e.at for e in r.events if e.type == 'user_action' and e.action == 'rerun')\n"
        "print(again - ended, r.state.finished_at - again)"
    )
    idle, rerun = (float(v) for v in timing.split())
    assert idle > 3.5, timing
    # the elapsed time grew by the re-run's running time (as shown: tenths below 10 s, whole seconds above), not
    # by the wait before it
    assert after == pytest.approx(before + rerun, abs=0.25 if after < 10 else 1.05), (before, after, timing)
    assert notebook.errors == []
