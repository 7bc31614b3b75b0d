"""What a cassette recognizes a request by: dagmagic's own varying parts (the planner's date, the python tool's
temporary directory) do not count, the user's content (commit hashes, uuids, timestamps in a goal) does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.errors import ReplayMismatch
from dagmagic.llm.replay import forget_cassettes
from tests.llm.cassette_writers import provider

PAIRS = {
    "commit": (
        "What changed in commit 3f2a9c01b7de4a5e6f708192a3b4c5d6e7f80912?",
        "What changed in commit 0a1b2c3d4e5f60718293a4b5c6d7e8f901234567?",
    ),
    "short commit": ("Review commit 3f2a9c01b7de", "Review commit 0a1b2c3d4e5f"),
    "uuid": (
        "Summarize ticket 123e4567-e89b-12d3-a456-426614174000",
        "Summarize ticket 9b2f1c3e-5d4a-4b6c-8e7f-0a1b2c3d4e5f",
    ),
    "timestamp": (
        "What failed in the deploy at 2026-12-02T10:00:01Z?",
        "What failed in the deploy at 2027-01-15T08:30:00Z?",
    ),
}


def run_with(path: Path, mode: str, goal: str) -> tuple[Any, int]:
    llm = provider()
    registry = ModelRegistry().register("scripted", llm, roles=["smart", "general"])
    run = asyncio.run(DagSession(registry, DagSettings(store="none", cassette=str(path), record=mode)).run(goal))
    return run, len(llm.requests)


@pytest.mark.parametrize("kind", PAIRS)
def test_a_goal_about_another_commit_uuid_or_time_is_not_answered_from_the_first_ones_recording(
    tmp_path: Path, kind: str
) -> None:
    recorded_goal, other_goal = PAIRS[kind]
    path = tmp_path / "ci.cassette.jsonl"
    forget_cassettes()
    run_with(path, "all", recorded_goal)

    forget_cassettes()
    replayed, calls = run_with(path, "none", recorded_goal)
    assert replayed.status == "done" and calls == 0  # the same goal replays

    forget_cassettes()
    missed, calls = run_with(path, "none", other_goal)
    assert isinstance(missed.exception, ReplayMismatch), (
        f"{other_goal!r} answered from the recording of {recorded_goal!r}"
    )
    assert calls == 0

    forget_cassettes()
    live, calls = run_with(path, "new_episodes", other_goal)
    assert live.status == "done" and calls > 0, f"{other_goal!r} made {calls} calls: answered from the recording"
