"""Interrupt ``%%dag`` cells at random moments in a real kernel: every run ends ``cancelled`` at once, the
user reads one line, the kernel stays usable, the store holds the run as it was, and ``%dag resume``
finishes it without running a completed step again.

One kernel serves the module. Its scripted model takes a run through every phase: planning, four steps
executing in parallel (s1 runs a python-tool script in a process of its own, s2 calls a notebook tool, s3
meets rate limits and waits for a delayed retry), analyzing, a replan round, a streamed answer; some cells
add ``--approve`` or ``--break``. The moments come from a seeded ``random.Random``, printed:
``DAGMAGIC_INTERRUPT_SEED=<seed>`` replays a failing sequence.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from dagmagic.testing import ScriptedRequest

from .conftest import scripted
from .test_kernel import WIDGET_VIEW, CellResult, Kernel, _parent

INTERRUPTS = 20
CANCEL_WITHIN = 2.0
"""Seconds from the interrupt to the run's ``finished_at`` (the issue's requirement)."""

SETUP = textwrap.dedent(
    """
    %load_ext dagmagic
    %config DagMagics.allow_code = True
    import asyncio, json, psutil
    from collections import Counter
    import dagmagic
    from dagmagic import errors
    from dagmagic.testing import ScriptedLLM, ToolCall

    ROUND_1 = {"steps": [
        {"id": "s1", "task": "work the first part out in python", "tool_hint": "python"},
        {"id": "s2", "task": "look up the second part with the lookup tool", "tool_hint": "lookup"},
        {"id": "s3", "task": "look up the third part"},
        {"id": "s4", "task": "combine the parts", "dependencies": ["s1", "s2", "s3"]},
    ]}
    ROUND_2 = {"steps": [
        {"id": "t1", "task": "check the combination"},
        {"id": "t2", "task": "check the units"},
        {"id": "t3", "task": "write the check up", "dependencies": ["t1", "t2"]},
    ]}
    STEP_SECONDS = {"s1": 0.05, "s2": 0.1, "s3": 0.2, "s4": 0.15, "t1": 0.2, "t2": 0.1, "t3": 0.15}
    ANSWER = [f"part {i} of the answer. " for i in range(24)]

    def lookup(q: str) -> str:
        "Look a value up."
        return f"found {q}"

    class Counted:
        '''A scripted model that counts how often each step starts (a tool's observation continues a step).'''

        def __init__(self, rate_limited=0):
            self.starts = Counter()
            self.rate_limited = rate_limited
            self.llm = ScriptedLLM(
                {
                    "plan": self.plan,
                    "step": self.step,
                    "analyze": self.analyze,
                    "synthesize": [ANSWER],
                },
                latency={"plan": 0.15, "analyze": 0.3, "synthesize": 0.1},
                chunk_delay=0.015,
            )

        def plan(self, request):
            return ROUND_1 if request.round == 1 else ROUND_2

        async def step(self, request):
            continued = any(message.get("role") == "tool" for message in request.messages)
            if not continued:
                self.starts[f"r{request.round}.{request.step_id}"] += 1
            await asyncio.sleep(STEP_SECONDS[request.step_id])
            if request.step_id == "s3" and self.starts["r1.s3"] <= self.rate_limited:
                raise errors.RateLimitError("429 slow down", model="scripted")
            if request.step_id == "s1" and not continued:  # a script in a process of its own
                return ToolCall("python", {"code": "import time; time.sleep(0.3); print('the first part')"})
            if request.step_id == "s2" and not continued:
                return ToolCall("lookup", {"q": "the second part"})
            return f"value of {request.step_id}"

        def analyze(self, request):
            if request.round == 1:
                return {"achieved": False, "confidence": 0.4, "reasoning": "the parts need a check"}
            return {"achieved": True, "confidence": 0.9, "reasoning": "checked", "final_answer": "".join(ANSWER)}

    def dagmagic_tasks():
        names = (t.get_name() for t in asyncio.all_tasks() if not t.done())
        return sorted(name for name in names if name.startswith("dagmagic:"))

    def steps_json(run):
        return {ref: [step.status, step.result] for ref, step in run.all_steps.items()}

    def phase_at_end(run):
        phases = [e.phase for e in run.events if e.type == "phase_changed" and e.phase != "finished"]
        waiting = {}  # the steps paused at a breakpoint or waiting for a delayed retry when the run ended
        for e in run.events:
            if e.type == "step_paused" or (e.type == "step_retrying" and e.retry_at > e.at + 0.05):
                waiting[e.step_id] = e.type.removeprefix("step_")
            elif e.type == "step_started":
                waiting.pop(e.step_id, None)
                if e.step_id == "s1":  # its script starts once the first reply (0.05 s) is in, and runs 0.3 s
                    waiting["s1"] = ("script running", e.at)
            elif e.type == "step_iteration" and e.step_id == "s1":
                waiting.pop("s1", None)
        script = waiting.pop("s1", None)
        if script is not None and run.state.finished_at - script[1] > 0.1:
            waiting["s1"] = script[0]
        phase = phases[-1] if phases else "starting"
        return " ".join([phase, *(f"({step_id} {what})" for step_id, what in sorted(waiting.items()))])

    def report(run):
        stored = dagmagic.load_run(run.run_id)
        print(json.dumps({
            "run_id": run.run_id, "status": run.status, "finished_at": run.state.finished_at,
            "stored_status": stored.status, "stored_finished_at": stored.state.finished_at,
            "phase": phase_at_end(run), "tasks": dagmagic_tasks(),
            "processes": [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)],
            "memory": steps_json(run), "stored": steps_json(stored),
            "starts": dict(model.starts), "answer": run.answer,
        }))
    """
)


@dataclass(frozen=True)
class Kind:
    """A kind of cell to interrupt: its options, and how the model and settings are set up for it."""

    name: str
    options: str = ""
    rate_limited: int = 0
    retry_delays: str = "0.3"
    waits: bool = False
    """The run waits for its reader (approval, breakpoint, a long retry): once resumed, it is helped on."""


FULL = Kind("full")
KINDS = [
    *[FULL] * 10,
    Kind("approve", "--approve", waits=True),
    Kind("approve", "--approve", waits=True),
    Kind("break", "--break s4", waits=True),
    Kind("break", "--break t3", waits=True),
    Kind("short retry", rate_limited=2, retry_delays="0.4"),
    Kind("short retry", rate_limited=2, retry_delays="0.4"),
    Kind("long retry", rate_limited=2, retry_delays="30", waits=True),
    Kind("long retry", rate_limited=2, retry_delays="30", waits=True),
    Kind("during resume"),
    Kind("between runs"),
]
assert len(KINDS) == INTERRUPTS


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    home = tmp_path_factory.mktemp("interrupts")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAG_")}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        DAG_STORE=str(home / "runs.sqlite"),
        DAG_LLM_RETRIES="0",  # a rate limit goes straight to the step's retries
    )
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(home), env=env)
    client = manager.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        session = Kernel(manager, client)
        session.execute(SETUP, timeout=60)
        yield session
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _report(kernel: Kernel, run: str = "dagmagic.last_run()") -> dict[str, Any]:
    out = kernel.execute(f"report({run})").stdout
    reported: dict[str, Any] = json.loads(out)
    return reported


def _prepare(kernel: Kernel, kind: Kind) -> None:
    kernel.execute(
        f"%dag config step_retry_delays={kind.retry_delays}\n"
        f"counted = Counted(rate_limited={kind.rate_limited})\nmodel = counted\nllm = counted.llm"
    )


def _cell(kind: Kind, goal: str) -> str:
    return f"%%dag --models llm --tools lookup --restart {kind.options}\n{goal}"


@dataclass
class Interrupted:
    """One interrupted cell: what its user saw, and when the interrupt was sent (wall clock)."""

    cell: CellResult
    msg_id: str
    interrupted_at: float
    delay: float


def _interrupt(kernel: Kernel, code: str, delay: float) -> Interrupted:
    submitted = time.monotonic()
    msg_id = kernel.submit(code)
    kernel.wait_for(
        lambda m: (
            m["msg_type"] == "status"
            and m["parent_header"].get("msg_id") == msg_id
            and m["content"]["execution_state"] == "busy"
        ),
        "the cell starting",
    )
    time.sleep(delay)
    interrupted_at = time.time()
    kernel.manager.interrupt_kernel()
    cell = kernel.collect(msg_id, submitted, timeout=30)
    return Interrupted(cell, msg_id, interrupted_at, delay)


def _check_cancelled(kernel: Kernel, interrupted: Interrupted, label: str) -> dict[str, Any]:
    """The run the interrupt ended: cancelled at once, nothing left running, every completed step stored."""
    cell = interrupted.cell
    assert cell.status == "error", f"{label}: the cell was not interrupted: {cell.result.get('text/plain')}"
    assert cell.reply["content"]["ename"] in ("CancelledError", "KeyboardInterrupt"), label
    assert "dagmagic" not in cell.error, f"{label}: the user sees dagmagic's internals:\n{cell.error}"
    assert cell.error.startswith("Interrupted") and "\n" not in cell.error.strip(), f"{label}: {cell.error}"
    assert kernel.execute("print(1 + 1)").stdout == "2\n", label
    report = _report(kernel)
    assert (report["status"], report["stored_status"]) == ("cancelled", "cancelled"), label
    lag = report["finished_at"] - interrupted.interrupted_at
    assert lag < CANCEL_WITHIN, f"{label}: the run ended {lag:.2f} s after the interrupt"
    assert report["stored_finished_at"] == report["finished_at"], label
    assert report["tasks"] == [], f"{label}: tasks left running: {report['tasks']}"
    assert report["processes"] == [], f"{label}: processes left running: {report['processes']}"
    completed = {ref: result for ref, (status, result) in report["memory"].items() if status == "completed"}
    stored = {ref: result for ref, (status, result) in report["stored"].items() if status == "completed"}
    assert stored == completed, f"{label}: completed in memory {completed}, stored {stored}"
    assert report["stored"] == report["memory"], f"{label}: in memory {report['memory']}, stored {report['stored']}"
    view = _view_state(kernel, interrupted.msg_id, lambda state: state.get("status") == "cancelled")
    assert view["resumable"] is True, f"{label}: the view does not offer to resume the run"
    drawn = {f"r{r['index']}.{node['id']}": node["status"] for r in view["rounds"] for node in r["nodes"]}
    assert drawn == {ref: status for ref, (status, _) in report["memory"].items()}, f"{label}: the view shows {drawn}"
    report["lag"] = lag
    return report


def _view_of(kernel: Kernel, msg_id: str) -> str:
    """The comm id of the widget the cell ``msg_id`` shows live: opened there, or by an earlier cell of the same
    run (a resumed run's widget is the one its first cell showed, which follows it).
    """
    shown = kernel.wait_for(
        lambda m: m["msg_type"] == "display_data" and _parent(m) == msg_id and WIDGET_VIEW in m["content"]["data"],
        "the cell's live view",
    )
    return str(shown["content"]["data"][WIDGET_VIEW]["model_id"])


def _view_state(
    kernel: Kernel, msg_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 10
) -> dict[str, Any]:
    """The state of the live view the cell ``msg_id`` shows, once ``check`` holds (its updates folded in)."""
    comm_id = _view_of(kernel, msg_id)
    opened = kernel.wait_for(lambda m: m["msg_type"] == "comm_open" and m["content"]["comm_id"] == comm_id, "open")
    state: dict[str, Any] = dict(opened["content"]["data"]["state"])
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        updates = kernel.updates(comm_id)
        for update in updates[seen:]:
            state.update(update["content"]["data"]["state"])
        seen = len(updates)
        if check(state):
            return state
        assert time.monotonic() < deadline, f"the view never showed the state asked for; it shows {state}"
        kernel._read(time.monotonic() + 0.1)


def _resume(kernel: Kernel, kind: Kind, run_id: str, label: str) -> dict[str, Any]:
    """Resume the run to its end with ``%dag resume``: done, answered, and no step that had completed started
    again. A run that waits for its reader (a plan to approve, a breakpoint, a retry 30 s away) is helped on
    through its view, as a reader would click.
    """
    before = _report(kernel)
    completed = [ref for ref, (status, _) in before["memory"].items() if status == "completed"]
    submitted = time.monotonic()
    msg_id = kernel.submit(f"%dag resume {run_id}")
    if kind.waits:
        _help_on(kernel, msg_id)
    cell = kernel.collect(msg_id, submitted, timeout=60)
    assert cell.result.get("text/plain", "").startswith("<DagRun done"), f"{label}: {cell.result} {cell.error}"
    after = _report(kernel)
    assert after["run_id"] == run_id, label
    assert (after["status"], after["stored_status"]) == ("done", "done"), label
    assert after["answer"] == "".join(f"part {i} of the answer. " for i in range(24)), label
    ran_again = {ref: (before["starts"][ref], after["starts"][ref]) for ref in completed}
    assert all(then == now for then, now in ran_again.values()), f"{label}: completed steps ran again: {ran_again}"
    assert after["tasks"] == [], label
    return after


def _help_on(kernel: Kernel, msg_id: str) -> None:
    """Until the cell ``msg_id`` ends, approve its view's waiting plan, continue its paused steps and retry its
    waiting ones now, with the messages the view's buttons send.
    """
    comm_id = _view_of(kernel, msg_id)
    last_sent = 0.0

    def act(state: dict[str, Any]) -> bool:
        nonlocal last_sent
        if any(m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_result" for _, m in kernel.log):
            return True
        if time.monotonic() - last_sent < 0.3:  # the view's state needs a moment to show what a click did
            return False
        nodes = [node for record in state["rounds"][-1:] for node in record["nodes"]]
        waiting = state.get("phase") == "awaiting_approval"
        actions: list[tuple[str, dict[str, Any]]] = [("approve", {})] if waiting else []
        actions += [("continue", {"step": n["id"]}) for n in nodes if n["status"] == "paused"]
        actions += [("retry_now", {"step": n["id"]}) for n in nodes if n["status"] == "retrying"]
        for name, msg in actions:
            kernel.request(comm_id, name, **msg)
            last_sent = time.monotonic()
        return False

    _view_state(kernel, msg_id, act, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_twenty_interrupts_at_random_moments(kernel: Kernel, record_property: Any) -> None:
    seed = int(os.environ.get("DAGMAGIC_INTERRUPT_SEED", random.SystemRandom().randrange(10**6)))
    print(f"DAGMAGIC_INTERRUPT_SEED={seed}")
    record_property("seed", seed)
    rng = random.Random(seed)

    _prepare(kernel, FULL)
    kernel.execute(_cell(FULL, "warm up: the first run imports the engine"), timeout=60)
    started = time.monotonic()
    calibration = kernel.execute(_cell(FULL, "calibrate the run"), timeout=60)
    duration = time.monotonic() - started
    assert calibration.result["text/plain"].startswith("<DagRun done: 'calibrate the run' rounds=2")
    print(f"an uninterrupted run takes {duration:.2f} s")

    kinds = list(KINDS)
    rng.shuffle(kinds)
    lags: list[float] = []
    phases: Counter[str] = Counter()
    for number, kind in enumerate(kinds, 1):
        delay = rng.uniform(0.0, duration)
        label = f"interrupt {number} ({kind.name}, {delay:.2f} s in; DAGMAGIC_INTERRUPT_SEED={seed})"
        if kind.name == "between runs":
            time.sleep(delay)
            kernel.manager.interrupt_kernel()
            time.sleep(0.2)
            assert kernel.execute("print(1 + 1)").stdout == "2\n", label
            continue
        _prepare(kernel, kind)
        interrupted = _interrupt(kernel, _cell(kind, f"goal number {number}"), delay)
        if interrupted.cell.status == "ok":  # the run had just ended: the interrupt met the kernel between runs
            assert _report(kernel)["status"] == "done", label
            assert kernel.execute("print(1 + 1)").stdout == "2\n", label
            phases["after the end"] += 1
            continue
        report = _check_cancelled(kernel, interrupted, label)
        lags.append(report["lag"])
        phases[report["phase"]] += 1
        statuses = Counter(status for status, _ in report["memory"].values())
        print(f"{label}: {report['phase']}, steps {dict(statuses)}, ended {report['lag']:.3f} s after")
        if kind.name == "during resume":
            again = _interrupt(kernel, f"%dag resume {report['run_id']}", rng.uniform(0.0, duration / 4))
            if again.cell.status == "ok":  # what was left of the run ended before the interrupt came
                assert _report(kernel)["status"] == "done", label
                phases["resume: after the end"] += 1
                continue
            resumed = _check_cancelled(kernel, again, f"{label}, then during its resume")
            lags.append(resumed["lag"])
            phases[f"resume: {resumed['phase']}"] += 1
        _resume(kernel, kind, report["run_id"], label)

    stderr = "".join(
        m["content"]["text"] for _, m in kernel.log if m["msg_type"] == "stream" and m["content"]["name"] == "stderr"
    )
    assert "Traceback" not in stderr and "Task was destroyed" not in stderr and "never retrieved" not in stderr, stderr
    print(f"phases interrupted: {dict(phases)}")
    print(f"interrupt -> finished_at: max {max(lags):.3f} s, mean {sum(lags) / len(lags):.3f} s")
    record_property("max_cancel_lag_s", round(max(lags), 3))
    assert len(phases) >= 3, f"the interrupts met too few phases: {dict(phases)}"


async def test_an_interrupted_cell_says_in_one_line_what_was_kept(ip: Any, tmp_path: Any) -> None:
    """IPython showed the CancelledError's traceback through a dozen of dagmagic's frames."""
    from dagmagic.notebook import magics

    magics._magics().overrides["store"] = str(tmp_path / "runs.sqlite")

    async def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":
            await asyncio.sleep(30)  # running when the cell is interrupted
        return "a result"

    ip.user_ns["llm"] = scripted(step=step)
    cell = asyncio.ensure_future(magics.run_dag_cell("--models llm", "a goal"))
    for _ in range(500):
        run = magics.last_run()
        if run is not None and run.steps.get("s1") and run.steps["s1"].status == "completed":
            break
        await asyncio.sleep(0.01)
    cell.cancel()  # what the kernel's Interrupt does to the cell
    with pytest.raises(asyncio.CancelledError) as interrupted:
        await cell
    run = magics.last_run()
    assert run is not None and run.status == "cancelled"
    told = interrupted.value._render_traceback_()  # type: ignore[attr-defined]
    assert told == [
        f"Interrupted: run {run.run_id} was cancelled (1 completed step kept); `%dag resume {run.run_id}` continues it."
    ]


async def test_a_run_interrupted_at_its_breakpoint_pauses_there_again_when_resumed(ip: Any, tmp_path: Any) -> None:
    """``%dag resume`` kept the cell's ``--approve`` and ``--step-through`` but dropped its ``--break``."""
    from dagmagic.notebook import magics

    magics._magics().overrides["store"] = str(tmp_path / "runs.sqlite")
    cell = asyncio.ensure_future(magics.run_dag_cell("--models llm --break s2", "a goal"))
    run = await _until(lambda: magics.last_run(), lambda run: run.paused == ["s2"])
    cell.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cell
    assert run.status == "cancelled"

    resumed_cell = asyncio.ensure_future(magics.run_dag_line("resume", run.run_id))
    resumed = await _until(lambda: magics.last_run(), lambda resumed: resumed.paused == ["s2"])
    assert resumed is not run and resumed.run_id == run.run_id
    resumed.resume_step("s2")
    assert (await resumed_cell).status == "done"


async def _until(get: Callable[[], Any], check: Callable[[Any], bool]) -> Any:
    for _ in range(500):
        value = get()
        if value is not None and check(value):
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {get()}")
