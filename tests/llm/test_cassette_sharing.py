"""Several kernels recording into one cassette at once (processes of their own): every call each recorded is
kept, the file loads, and each kernel's runs replay from it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

import pytest

from dagmagic.llm.replay import forget_cassettes
from dagmagic.testing import Cassette
from tests.llm.cassette_writers import kernel, provider, record

GOALS = 4


def goals_of(kernel_name: str) -> list[str]:
    return [f"Question {number} asked in kernel {kernel_name}" for number in range(GOALS)]


def record_at_once(path: Path, models: dict[str, str], mode: str) -> int:
    """Each kernel (name: model) recording its goals in a process of its own, all at once: the calls made."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(len(models)), context.Queue()
    kernels = [
        context.Process(target=record, args=(name, str(path), model, goals_of(name), mode, barrier, results))
        for name, model in models.items()
    ]
    for process in kernels:
        process.start()
    made = dict(results.get(timeout=300) for _ in kernels)
    for process in kernels:
        process.join(timeout=60)
    assert all(isinstance(calls, int) for calls in made.values()), made
    return sum(made.values())


def replays_without_a_call(path: Path, kernel_name: str, model: str) -> None:
    forget_cassettes()
    llm = provider()
    session = kernel(model, llm, str(path), "none")
    for goal in goals_of(kernel_name):
        run = asyncio.run(session.run(goal))
        assert run.status == "done", f"{goal!r} did not replay: {run.error}"
    assert llm.requests == []


@pytest.mark.parametrize(
    ("mode", "models"),
    [
        ("once", {"a": "alpha", "b": "beta", "c": "gamma"}),  # no file yet: each kernel records its own model
        ("once", {"a": "same", "b": "same", "c": "same"}),  # ... or all the same model
        ("new_episodes", {"a": "alpha", "b": "beta", "c": "gamma"}),  # each replays the file, records the rest
    ],
)
def test_kernels_recording_one_cassette_at_once_keep_every_call(
    tmp_path: Path, mode: str, models: dict[str, str]
) -> None:
    path = tmp_path / "shared.cassette.jsonl"
    before = {"first": "recorded-before"} if mode == "new_episodes" else {}
    expected = record_at_once(path, before, "all") if before else 0
    expected += record_at_once(path, models, mode)

    loaded = Cassette.load(path)
    assert len(loaded) == expected, f"{expected - len(loaded)} of {expected} recorded calls lost"
    assert set(loaded.models) == {*models.values(), *before.values()}
    for name, model in {**before, **models}.items():
        replays_without_a_call(path, name, model)


def test_a_line_cut_by_a_dying_kernel_stays_apart_from_the_next_kernels_lines(tmp_path: Path) -> None:
    path = tmp_path / "shared.cassette.jsonl"
    first = record_at_once(path, {"a": "alpha"}, "all")
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the kernel died writing its last call
    second = record_at_once(path, {"b": "beta"}, "new_episodes")

    assert len(Cassette.load(path)) == first - 1 + second
    replays_without_a_call(path, "b", "beta")
