"""``%load_ext dagmagic`` starts litellm's import in a background thread, once, quietly."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
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


def test_the_import_waits_for_the_cell_that_loaded_it_to_end(
    monkeypatch: pytest.MonkeyPatch, ip: InteractiveShell
) -> None:
    imported_at: list[float] = []
    monkeypatch.setattr(preload, "_started", None)
    monkeypatch.setattr(preload, "_import_quietly", lambda: imported_at.append(time.monotonic()))
    monkeypatch.setattr(preload, "GRACE_SECONDS", 0.05)
    cell = ip.run_cell(
        "import time\n"
        "from dagmagic.notebook import preload\n"
        "preload.import_litellm_in_background(get_ipython())\n"
        "time.sleep(0.3)  # the rest of a cell that loads the extension\n"
        "cell_ending = time.monotonic()"
    )
    assert cell.success
    assert preload._started is not None
    preload._started.join(5)
    assert len(imported_at) == 1 and imported_at[0] > ip.user_ns.pop("cell_ending")


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


IMPORTING = """
def importing():
    return any(t.name == "dagmagic:litellm-import" and t.is_alive() for t in threading.enumerate())
"""

WATCH_LITELLM = """
import sys, time

class WhenLitellm:
    '''When litellm's import started (whichever thread started it) and when the demo's cell ended.'''

    started = None
    cell = ""
    demo_ended = None

    def find_spec(self, name, path=None, target=None):
        if name == "litellm" and WhenLitellm.started is None:
            WhenLitellm.started = time.monotonic()
        return None

def cell_started(info):
    WhenLitellm.cell = info.raw_cell

def cell_ended():  # registered before dagmagic's own hooks: it sees a cell's end first
    if WhenLitellm.cell.strip() == "%dag demo":
        WhenLitellm.demo_ended = time.monotonic()

sys.meta_path.insert(0, WhenLitellm())
get_ipython().events.register("pre_run_cell", cell_started)
get_ipython().events.register("post_execute", cell_ended)
"""

LITELLM_STATE = """
import json
started, ended = WhenLitellm.started, WhenLitellm.demo_ended
print(json.dumps({"during_demo": started is not None and (ended is None or started < ended),
                  "imported": "litellm" in sys.modules and not importing()}))
"""


@pytest.mark.timeout(300)
def test_the_demo_run_right_after_the_load_has_the_kernel_to_itself(tmp_path: Path) -> None:
    """Run All (or a quick Shift-Enter) sends ``%dag demo`` right behind ``%load_ext dagmagic``: its view shows
    while nothing else competes for the CPU; litellm's import waits until the kernel is idle, then still happens.
    """
    from .test_kernel import started_kernel

    with started_kernel(tmp_path) as fresh:
        fresh.execute(WATCH_LITELLM)
        load = fresh.submit("%load_ext dagmagic\nimport threading\n" + IMPORTING)
        demo = fresh.submit("%dag demo")
        submitted = time.monotonic()
        fresh.collect(load, submitted, timeout=60)
        ran = fresh.collect(demo, submitted, timeout=120)
        assert ran.status == "ok", ran.error
        assert fresh.widget_comm_id(demo)  # the demo's live view was shown
        state = json.loads(fresh.execute(LITELLM_STATE).stdout)
        assert not state["during_demo"], "litellm's import started while the demo ran"
        deadline = time.monotonic() + 240  # a wide margin: the import takes seconds of CPU, more on a busy machine
        while not state["imported"] and time.monotonic() < deadline:
            time.sleep(2)  # idle between looks, as a user reading the output is
            state = json.loads(fresh.execute(LITELLM_STATE).stdout)
        assert state["imported"], "litellm was never imported in the background"
