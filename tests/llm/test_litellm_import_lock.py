"""litellm is imported once per process, whatever the thread asks first: a run's warm-up that arrives while
``%load_ext dagmagic``'s background import is still going waits for it instead of importing again.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from types import ModuleType

import pytest

from dagmagic.llm import _litellm


class SlowImport:
    """Stands in for litellm's import: takes ``seconds``, counts how often it ran, and when."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.runs: list[tuple[float, float]] = []
        self.started = threading.Event()

    def __call__(self) -> ModuleType:
        began = time.monotonic()
        self.started.set()
        time.sleep(self.seconds)
        self.runs.append((began, time.monotonic()))
        return ModuleType("litellm")


@pytest.fixture
def slow_import(monkeypatch: pytest.MonkeyPatch) -> SlowImport:
    fake = SlowImport(0.3)
    monkeypatch.setattr(_litellm, "_litellm", None)  # as in a fresh kernel
    monkeypatch.setattr(_litellm, "_import_lock", threading.Lock())  # apart from any real import under way
    monkeypatch.setattr(_litellm, "_load", fake)
    return fake


async def test_a_warm_up_during_another_threads_import_waits_for_it_and_imports_nothing(
    slow_import: SlowImport,
) -> None:
    background = threading.Thread(target=_litellm.import_litellm, daemon=True)
    background.start()
    assert slow_import.started.wait(5)
    await _litellm.import_litellm_off_the_loop()
    returned = time.monotonic()
    background.join(5)
    assert len(slow_import.runs) == 1  # one import, not two
    assert returned >= slow_import.runs[0][1]  # the warm-up returned only once that import was done
    assert _litellm.import_litellm() is _litellm.import_litellm()


async def test_the_warm_up_keeps_the_loop_free_while_it_waits(slow_import: SlowImport) -> None:
    beats: list[float] = []

    async def tick() -> None:
        while True:
            beats.append(time.monotonic())
            await asyncio.sleep(0.01)

    ticker = asyncio.get_running_loop().create_task(tick())
    await _litellm.import_litellm_off_the_loop()
    ticker.cancel()
    assert len(slow_import.runs) == 1
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert max(gaps) < slow_import.seconds / 2, gaps  # the loop ran on while the import took its time


def test_an_import_that_failed_is_tried_again_by_the_next_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[BaseException | ModuleType] = [ImportError("no litellm"), ModuleType("litellm")]

    def flaky() -> ModuleType:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(_litellm, "_litellm", None)
    monkeypatch.setattr(_litellm, "_import_lock", threading.Lock())
    monkeypatch.setattr(_litellm, "_load", flaky)
    with pytest.raises(ImportError, match="no litellm"):
        _litellm.import_litellm()
    assert _litellm.import_litellm().__name__ == "litellm" and outcomes == []
