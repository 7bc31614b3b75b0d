"""Comparisons made by hand (as ``RunComparison.between`` makes them), for the compare widget's tests: two runs of
twelve steps a side, some results differing word by word, one step only in each side, one result edited.
"""

from __future__ import annotations

from dagmagic.models import AnalysisResult, Usage
from dagmagic.side_by_side import Piece, RoundPair, RunComparison, Side, SideStep, StepPair

HOSTILE = "<img src=x onerror=alert(1)>"


def _step(
    ref: str, task: str, result: str, *, model: str, tokens: int, seconds: float, edited: bool = False
) -> SideStep:
    return SideStep(
        ref=ref,
        task=task,
        status="completed",
        result=result,
        model=model,
        tokens=tokens,
        cost=tokens * 1e-6,
        seconds=seconds,
        edited=edited,
    )


def twelve_a_side(*, live: bool = False, unmatched: bool = False) -> RunComparison:
    """Two runs of one goal with 12 steps each, aligned in 12 pairs: s3 and s7 with results that differ (words
    marked), the rest the same; b's s5 result was written by the user, s9's results are long. ``unmatched``: s12
    only in a and s13 only in b (13 pairs).
    """
    pairs: list[StepPair] = []
    for number in range(1, 13):
        ref = f"s{number}"
        task = f"Find fact {number} about the Louvre"
        base = f"Fact {number}: the museum holds {number * 1000} works in Paris."
        if number == 9:  # a long result: its cell shows the first lines until expanded
            base += " " + " ".join(f"Room {room} shows paintings of the {room}th century." for room in range(1, 9))
        if number == 12 and unmatched:
            a = _step(
                ref,
                "Check the opening hours",
                "Open 9 to 18, closed on Tuesdays.",
                model="small",
                tokens=120,
                seconds=1.0,
            )
            pairs.append(StepPair(a=a, b=None, change="removed"))
            continue
        a = _step(ref, task, base, model="small", tokens=100 + number, seconds=1.0 + number / 10)
        if number in (3, 7):
            changed = f"Fact {number}: the museum holds {number * 1000 + 500} works in Paris and {HOSTILE}."
            b = _step(ref, task, changed, model="big", tokens=150 + number, seconds=0.5 + number / 10)
            pieces = [
                Piece(op="same", text=f"Fact {number}: the museum holds "),
                Piece(op="removed", text=f"{number * 1000}"),
                Piece(op="added", text=f"{number * 1000 + 500}"),
                Piece(op="same", text=" works in Paris"),
                Piece(op="removed", text="."),
                Piece(op="added", text=f" and {HOSTILE}."),
            ]
            pairs.append(
                StepPair(
                    a=a,
                    b=b,
                    change="changed",
                    fields=["model", "result"],
                    result=pieces,
                    tokens_delta=b.tokens - a.tokens,
                    cost_delta=(b.cost or 0) - (a.cost or 0),
                    seconds_delta=(b.seconds or 0) - (a.seconds or 0),
                )
            )
            continue
        b = _step(ref, task, base, model="small", tokens=100 + number, seconds=1.0 + number / 10, edited=number == 5)
        pairs.append(
            StepPair(
                a=a,
                b=b,
                change="same",
                result=[Piece(op="same", text=base)],
                tokens_delta=0,
                cost_delta=0.0,
                seconds_delta=0.0,
            )
        )
    added = _step(
        "s13", "Find the nearest metro station", "Palais Royal – Musée du Louvre.", model="big", tokens=90, seconds=0.8
    )
    if unmatched:
        pairs.insert(11, StepPair(a=None, b=added, change="added"))
    a_answer = "The Louvre is in **Paris** and holds 35000 works."
    b_answer = "The Louvre is in **Paris** and holds about 38000 works."
    side_a = Side(
        label="run aaaa1111",
        run_id="aaaa1111",
        goal="Tell me about the Louvre",
        status="done",
        settings={"max_rounds": 3},
        models=["small"],
        usage=Usage(input_tokens=900, output_tokens=400, requests=14),
        cost=0.0013,
        seconds=14.2,
        answer=a_answer,
        calls={"plan": 1, "step": 12, "analyze": 1, "synthesize": 1},
    )
    side_b = Side(
        label="run bbbb2222",
        run_id="bbbb2222",
        goal="Tell me about the Louvre",
        status="running" if live else "done",
        live=live,
        settings={"max_rounds": 5},
        models=["small", "big"],
        usage=Usage(input_tokens=1000, output_tokens=500, requests=15),
        cost=0.0021,
        seconds=11.0,
        answer=b_answer,
        calls={"plan": 1, "step": 12, "analyze": 2, "synthesize": 1},
    )
    answer = [
        Piece(op="same", text="The Louvre is in **Paris** and holds "),
        Piece(op="removed", text="35000"),
        Piece(op="added", text="about 38000"),
        Piece(op="same", text=" works."),
    ]
    verdict_a = AnalysisResult(achieved=True, confidence=0.8, reasoning="All facts found.")
    verdict_b = AnalysisResult(achieved=True, confidence=0.9, reasoning="All facts found, with the metro.")
    return RunComparison(
        a=side_a,
        b=side_b,
        differences={"max_rounds": (3, 5)},
        rounds=[RoundPair(a=1, b=1, steps=pairs, verdict_a=verdict_a, verdict_b=verdict_b)],
        answer=answer,
    )
