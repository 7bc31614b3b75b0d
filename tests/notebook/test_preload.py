"""``%load_ext dagmagic`` imports in the background what a ``%%dag`` cell uses (at the first pause), and litellm once
a litellm model is in sight; a cell never imports those modules while the background thread does.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from dagmagic.llm import ROLE_ENV
from dagmagic.llm.defaults import KEY_DEFAULTS
from dagmagic.notebook import preload

KEYS = (*preload.MODEL_VARIABLES, *preload.PROVIDER_KEYS)


@pytest.fixture
def no_model_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """No variable names a litellm model."""
    for name in KEYS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def preloaders(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., preload.Preloader]]:
    """Make ``Preloader``s on the test's shell (a short grace); they stop listening to it afterwards."""
    made: list[preload.Preloader] = []
    monkeypatch.setattr(preload, "GRACE_SECONDS", 0.05)

    def make(**kwargs: Any) -> preload.Preloader:
        kwargs.setdefault("import_the_modules", lambda: None)
        kwargs.setdefault("import_litellm", lambda: None)
        loader = preload.Preloader(ip, kwargs.pop("magics", None), **kwargs)
        made.append(loader)
        return loader

    yield make
    for loader in made:
        loader.stop()
        loader.modules.join(5)


def test_the_names_read_without_the_llm_layer_are_its_own() -> None:
    assert set(preload.MODEL_VARIABLES) == set(ROLE_ENV.values())
    assert tuple(name for name, _ in KEY_DEFAULTS) == preload.PROVIDER_KEYS


def test_the_modules_wait_for_the_loading_cell_and_a_pause(
    ip: InteractiveShell, preloaders: Callable[..., preload.Preloader]
) -> None:
    imported_at: list[float] = []
    ip.user_ns["make"] = lambda: preloaders(import_the_modules=lambda: imported_at.append(time.monotonic()))
    cell = ip.run_cell(
        "import time\nloader = make()\ntime.sleep(0.3)  # the rest of the loading cell\nended = time.monotonic()"
    )
    assert cell.success
    loader = ip.user_ns.pop("loader")
    loader.modules.join(5)
    assert len(imported_at) == 1 and imported_at[0] > ip.user_ns.pop("ended") + preload.GRACE_SECONDS


def test_a_cell_started_while_the_modules_are_imported_waits_for_them_a_dag_cell_does_not(
    ip: InteractiveShell, preloaders: Callable[..., preload.Preloader]
) -> None:
    importing, imported_at = threading.Event(), []

    def slow_import() -> None:
        importing.set()
        time.sleep(0.4)
        imported_at.append(time.monotonic())

    loader = preloaders(import_the_modules=slow_import)
    assert importing.wait(5)
    asked = time.monotonic()
    loader._cell_starts(SimpleNamespace(raw_cell="%%dag --models llm\nA goal"))  # it awaits them, off the loop
    assert time.monotonic() - asked < 0.3 and not imported_at
    assert ip.run_cell("import time\nstarted = time.monotonic()").success
    assert imported_at and ip.user_ns.pop("started") >= imported_at[0]  # it waited for the import to end


def test_modules_ready_imports_them_in_a_worker_thread_while_the_loop_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []

    def slow_import() -> None:
        threads.append(threading.current_thread().name)
        time.sleep(0.3)

    monkeypatch.setattr(preload, "_modules_imported", threading.Event())
    monkeypatch.setattr(preload, "_import_cell_modules", slow_import)

    async def ready_while_ticking() -> float:
        gaps: list[float] = []

        async def tick() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.005)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        ticking = asyncio.create_task(tick())
        await preload.modules_ready()
        await preload.modules_ready()  # imported: at once
        ticking.cancel()
        return max(gaps)

    assert asyncio.run(ready_while_ticking()) < 0.2  # the loop ticked through the 0.3 s import
    assert len(threads) == 1 and threads[0] != threading.main_thread().name


def test_a_dag_cell_during_the_background_import_waits_for_that_one(monkeypatch: pytest.MonkeyPatch) -> None:
    importing, calls = threading.Event(), []

    def slow_import() -> None:
        calls.append(time.monotonic())
        importing.set()
        time.sleep(0.3)

    monkeypatch.setattr(preload, "_modules_imported", threading.Event())
    monkeypatch.setattr(preload, "_import_cell_modules", slow_import)
    loader = preload.Preloader(import_litellm=lambda: None)  # no shell: the import begins at once
    assert importing.wait(5)
    asyncio.run(preload.modules_ready())
    assert preload._modules_imported.is_set() and len(calls) == 1  # imported once, by the background thread
    loader.modules.join(5)


@pytest.mark.usefixtures("no_model_named")
def test_a_provider_key_starts_litellms_import_once_the_loading_cell_ended(
    ip: InteractiveShell, preloaders: Callable[..., preload.Preloader], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    imported_at: list[float] = []
    ip.user_ns["make"] = lambda: preloaders(import_litellm=lambda: imported_at.append(time.monotonic()))
    assert ip.run_cell("import time\nloader = make()\ntime.sleep(0.3)\nended = time.monotonic()").success
    loader = ip.user_ns.pop("loader")
    assert loader.litellm is not None
    loader.litellm.join(5)
    ended = ip.user_ns.pop("ended")
    assert len(imported_at) == 1 and ended < imported_at[0] < ended + preload.GRACE_SECONDS  # no pause awaited


@pytest.mark.usefixtures("no_model_named")
def test_litellm_is_imported_only_once_a_cell_brings_a_litellm_model(
    ip: InteractiveShell, preloaders: Callable[..., preload.Preloader]
) -> None:
    imported: list[str] = []
    loader = preloaders(import_litellm=lambda: imported.append(threading.current_thread().name))
    assert ip.run_cell("from dagmagic import ModelRegistry\nscripted = ModelRegistry().register('m', llm)").success
    loader.modules.join(5)
    time.sleep(0.1)
    assert loader.litellm is None and not imported  # a ScriptedLLM alone needs no litellm
    assert ip.run_cell("real = ModelRegistry().register('gpt', 'openai/gpt-4.1-mini')").success
    assert loader.litellm is not None
    loader.litellm.join(5)
    assert imported == [preload.LITELLM_THREAD]
    for name in ("scripted", "real"):
        ip.user_ns.pop(name)


@pytest.mark.usefixtures("no_model_named")
def test_a_key_set_in_a_cell_or_a_model_configured_brings_litellm_in_sight(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.notebook import magics

    configured = magics._active
    assert not preload.litellm_model_in_sight(ip.user_ns, configured)
    monkeypatch.setitem(os.environ, "OPENAI_API_KEY", "sk-test-0123456789")  # as os.environ[...] = ... in a cell
    assert preload.litellm_model_in_sight(ip.user_ns, configured)
    monkeypatch.delitem(os.environ, "OPENAI_API_KEY")
    assert configured is not None
    monkeypatch.setitem(configured.notebook.overrides, "fast_model", "openai/gpt-4.1-nano")  # %dag config
    assert preload.litellm_model_in_sight(ip.user_ns, configured)
    monkeypatch.setattr(configured.notebook, "overrides", {})
    monkeypatch.setattr(configured, "smart_model", "openai/gpt-4.1")  # %config DagMagics.smart_model
    assert preload.names_a_litellm_model(configured)


def test_failing_background_imports_print_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hooked: list[object] = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)

    def broken() -> None:
        raise ImportError("not installed")

    loader = preload.Preloader(import_the_modules=broken, import_litellm=broken)
    loader.modules.join(5)
    assert loader.litellm is not None
    loader.litellm.join(5)
    assert capsys.readouterr() == ("", "") and hooked == []  # where they are needed, they are imported and told


def test_loading_the_extension_twice_starts_one_preloader(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.notebook import load_ipython_extension

    monkeypatch.setattr(preload, "_started", None)
    monkeypatch.setattr(preload, "_import_litellm_only", lambda: None)
    load_ipython_extension(ip)
    first = preload._started
    load_ipython_extension(ip)  # %reload_ext calls it again
    assert first is not None and preload._started is first
    first.stop()
    assert first.modules.daemon and first.modules.name == preload.MODULES_THREAD


RACE = """
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_cell("from dagmagic.notebook import preload; preload.GRACE_SECONDS = 0.0")
ip.run_cell('''from dagmagic.testing import ScriptedLLM
llm = ScriptedLLM({"plan": [{"steps": [{"id": "s1", "task": "t"}]}], "step": ["r"],
                   "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok"}], "synthesize": [["a"]]})''')
assert ip.run_cell("%load_ext dagmagic").success
time.sleep(float(sys.argv[1]))
result = ip.run_cell(sys.argv[2])
from dagmagic.notebook import preload
preload._started.modules.join(30)
print(json.dumps({"ok": result.success, "error": repr(result.error_in_exec or result.error_before_exec)}))
"""
PLAIN_CELL = (
    "from dagmagic import DagSession, DagSettings, ModelRegistry, tool\n"
    "import dagmagic.notebook.display, dagmagic.session, dagmagic.evaluation"
)
DAG_CELL = "%%dag --models llm --no-widget\nA goal"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("offset", "cell"), [(0.0, PLAIN_CELL), (0.03, PLAIN_CELL), (0.0, DAG_CELL), (0.05, DAG_CELL)])
def test_a_cell_importing_while_the_background_thread_imports_ends_well(
    offset: float, cell: str, tmp_path: Path
) -> None:
    """The real imports in a fresh process, the background thread's and a cell's at once (the cell right behind
    the load, or a moment later): no deadlock, no half-made module, whichever comes first.
    """
    env = {**os.environ, "DAG_STORE": "none"}
    out = subprocess.run(
        [sys.executable, "-c", RACE, str(offset), cell],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ok": True, "error": "None"}, out.stdout[-3000:]


WATCH_LITELLM = """
import json, os, sys, threading, time
for name in KEYS:
    os.environ.pop(name, None)

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

def importing():
    return any(t.name == "dagmagic:import-litellm" and t.is_alive() for t in threading.enumerate())

sys.meta_path.insert(0, WhenLitellm())
get_ipython().events.register("pre_run_cell", cell_started)
get_ipython().events.register("post_execute", cell_ended)
"""

LITELLM_STATE = """
started, ended = WhenLitellm.started, WhenLitellm.demo_ended
print(json.dumps({"during_demo": started is not None and (ended is None or started < ended),
                  "started": started is not None, "imported": "litellm" in sys.modules and not importing(),
                  "modules": preload._modules_imported.is_set()}))
"""


@pytest.mark.timeout(300)
def test_the_demo_right_after_the_load_has_the_kernel_to_itself_and_litellm_waits_for_a_model(tmp_path: Path) -> None:
    """Run All (or a quick Shift-Enter) sends ``%dag demo`` right behind ``%load_ext dagmagic``: its view shows
    while nothing else competes for the CPU. Its ``ScriptedLLM`` needs no litellm, so nothing imports it, not
    even once the kernel is idle; a cell that registers a litellm model starts its import in the background.
    """
    from .test_kernel import started_kernel

    with started_kernel(tmp_path) as fresh:
        fresh.execute(f"KEYS = {KEYS!r}\n" + WATCH_LITELLM)
        load = fresh.submit("%load_ext dagmagic\nfrom dagmagic.notebook import preload")
        demo = fresh.submit("%dag demo")
        submitted = time.monotonic()
        fresh.collect(load, submitted, timeout=60)
        ran = fresh.collect(demo, submitted, timeout=120)
        assert ran.status == "ok", ran.error
        assert fresh.widget_comm_id(demo)  # the demo's live view was shown
        time.sleep(preload.GRACE_SECONDS + 1.0)  # idle, as a user reading the output is
        state = json.loads(fresh.execute(LITELLM_STATE).stdout)
        assert state == {**state, "started": False, "modules": True}, state
        fresh.execute("from dagmagic import ModelRegistry\nmodels = ModelRegistry().register('m', 'openai/gpt-4.1')")
        deadline = time.monotonic() + 240  # a wide margin: the import takes seconds of CPU, more on a busy machine
        while not state["imported"] and time.monotonic() < deadline:
            time.sleep(1)
            state = json.loads(fresh.execute(LITELLM_STATE).stdout)
        assert state["imported"], "litellm was never imported in the background"
