from __future__ import annotations

from dagmagic.notebook.progress import trace_table

from .samples import FALLBACK_ERROR, tool_step_run


def test_the_trace_shows_a_tool_step_as_its_direct_call_among_the_llm_calls() -> None:
    calls, totals = trace_table(tool_step_run()).split("\n\n")
    header, *lines = calls.splitlines()
    at = header.index("step")
    steps = [line[at : at + 4].strip() for line in lines]  # the step column
    # in the order things started: the direct calls after s1's model call, before the agent that replaced s3's
    assert steps == ["", "s1", "s2", "s3", "s3", "s3", ""]
    purposes = [line[header.index("purpose") :].split()[0] for line in lines]
    assert purposes == ["plan", "step", "direct", "direct", "step", "step", "analyze"]
    assert [line.split()[0] for line in lines] == ["1", "2", "direct", "direct", "3", "4", "5"]  # run.calls[N - 1]
    s2, s3 = lines[2], lines[3]
    assert s2.startswith(f"{'':>1}  {'direct call':11}  {'—':5}  {1:>5}  s2    add(")
    assert s2.endswith("add(a=$s1 → 68.4, b=12) · 0 LLM calls · 0.25s")  # the tool, its planned and real arguments
    assert 'search(query="population of $s1 million" → "population of 68.4 million", limit="many")' in s3
    assert s3.endswith(f"· failed: {FALLBACK_ERROR} · an agent ran the step")
    assert f"{'direct call':16}   2 tool calls, no LLM call" in totals.splitlines()


def test_a_plan_cut_says_in_the_terminal_how_to_allow_more() -> None:
    from dagmagic.events import RunWarning
    from dagmagic.models import PlanCut
    from dagmagic.notebook.progress import progress_line

    cut = PlanCut(planned=14, kept=6, dropped=["a"] * 8)
    line = progress_line(RunWarning(message="the plan had 14 steps: kept the first 6", round=1, plan_cut=cut))
    assert line == (
        "[round 1] warning: the plan had 14 steps: kept the first 6 "
        "(to allow more: DAG_PLAN_MAX_STEPS=14, or %dag config plan_max_steps=14 in a notebook)"
    )
