"""What a cassette recognizes a request by: dagmagic's own varying parts (the planner's date, the python tool's
temporary directory) do not count, the user's content (commit hashes, uuids, timestamps in a goal) does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.errors import ConfigurationError, ReplayMismatch
from dagmagic.llm import cassette as cassette_module
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


# --- a broken or huge cassette line

GOAL = "Compare two things"


def recorded_cassette(path: Path) -> list[bytes]:
    forget_cassettes()
    run, _ = run_with(path, "all", GOAL)
    assert run.status == "done", run.error
    return path.read_bytes().splitlines()


def test_a_byte_that_is_not_utf8_names_the_file_and_line_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "ci.cassette.jsonl"
    lines = recorded_cassette(path)
    lines[2] = lines[2].replace(b"Compare", b"Comp\xffre", 1)
    path.write_bytes(b"\n".join(lines) + b"\n")

    forget_cassettes()
    with pytest.raises(ConfigurationError) as raised:
        run_with(path, "none", GOAL)
    message = str(raised.value)
    assert f"{path}, line 3" in message and "0xff" in message and "UTF-8" in message, message
    assert "record=all" in message  # what to do


def test_a_huge_recorded_line_that_cannot_match_is_never_normalized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ci.cassette.jsonl"
    lines = recorded_cassette(path)
    huge = json.loads(lines[2])
    huge["messages"] = [{"role": "user", "content": "word " * 4_000_000}]  # 20 MB, a step's huge tool output
    huge["digest"] = "n2:" + cassette_module.messages_digest(huge["messages"])  # as a recording writes it
    path.write_bytes(b"\n".join([*lines[:2], json.dumps(huge).encode(), *lines[2:]]) + b"\n")

    normalized: list[int] = []
    real = cassette_module._normalized_text
    monkeypatch.setattr(cassette_module, "_normalized_text", lambda text: normalized.append(len(text)) or real(text))
    forget_cassettes()
    replayed, calls = run_with(path, "none", GOAL)  # the recorded run: every call matches another line
    assert replayed.status == "done" and calls == 0, replayed.error
    forget_cassettes()
    missed, calls = run_with(path, "none", "Something else entirely")  # a miss: the closest call, the diff
    assert isinstance(missed.exception, ReplayMismatch) and calls == 0
    assert max(normalized) < 1_000_000, f"a text of {max(normalized):,} characters was normalized"
