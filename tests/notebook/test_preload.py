"""``%load_ext dagmagic`` starts litellm's import in a background thread, once, quietly."""

from __future__ import annotations

import threading
from types import ModuleType

import pytest
from IPython.core.interactiveshell import InteractiveShell

from dagmagic.llm import _litellm
from dagmagic.notebook import preload


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A process where nothing started the import yet; the threads the import ran in."""
    calls: list[str] = []
    monkeypatch.setattr(preload, "_started", None)
    monkeypatch.setattr(preload, "_import_quietly", lambda: calls.append(threading.current_thread().name))
    return calls


def test_starting_twice_starts_one_import(fresh: list[str]) -> None:
    first = preload.import_litellm_in_background()
    second = preload.import_litellm_in_background()
    assert first is second and first.daemon and first.name == "dagmagic:litellm-import"
    first.join(5)
    assert fresh == ["dagmagic:litellm-import"]


def test_loading_the_extension_twice_starts_one_import(fresh: list[str], ip: InteractiveShell) -> None:
    from dagmagic.notebook import load_ipython_extension

    load_ipython_extension(ip)
    load_ipython_extension(ip)  # %reload_ext calls it again
    assert preload._started is not None
    preload._started.join(5)
    assert fresh == ["dagmagic:litellm-import"]


def test_a_failing_background_import_prints_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hooked: list[object] = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    monkeypatch.setattr(preload, "_started", None)
    monkeypatch.setattr(_litellm, "_litellm", None)
    monkeypatch.setattr(_litellm, "_import_lock", threading.Lock())  # apart from any real import under way

    def broken() -> ModuleType:
        raise ImportError("litellm is not installed")

    monkeypatch.setattr(_litellm, "_load", broken)
    preload.import_litellm_in_background().join(5)
    assert capsys.readouterr() == ("", "") and hooked == []  # the run's own warm-up reports it
    with pytest.raises(ImportError, match="not installed"):  # ... as it does today
        _litellm.import_litellm()
