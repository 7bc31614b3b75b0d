"""DagExecutor: event-driven dispatch, concurrency, timing, failures, stop, cancellation and no hangs.

Timing tests use real asyncio with short latencies and assert on the timestamps the executor records,
with ratios and margins that hold on a loaded machine (never absolute wall-clock limits).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise

import pytest

from dagmagic.engine.steps.executor import STOPPED_REASON, DagExecutor, StepFailure
from dagmagic.events import Event, StepCompleted, StepQueued, StepStarted
from dagmagic.models import ExecutionPlan, PlanStep

FINAL = {"completed", "failed", "skipped", "cancelled"}


def plan(*steps: tuple[str, list[str]] | str, round: int = 1) -> ExecutionPlan:
    """A plan from ids or (id, dependencies) pairs, in the order given."""
    built = []
    for spec in steps:
        sid, deps = (spec, []) if isinstance(spec, str) else spec
        built.append(PlanStep(id=sid, task=f"task {sid}", dependencies=deps))
    return ExecutionPlan(goal="the goal", steps=built, round=round)


@dataclass
class Recorder:
    """A ``run_step`` that sleeps per-step latencies and records what it saw."""

    latency: Mapping[str, float] = field(default_factory=dict)
    default: float = 0.0
    errors: Mapping[str, BaseException] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    seen_deps: dict[str, dict[str, PlanStep]] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    running: int = 0
    max_running: int = 0

    async def __call__(self, step: PlanStep, deps: dict[str, PlanStep]) -> str:
        self.started.append(step.id)
        self.seen_deps[step.id] = dict(deps)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        begin = time.time()
        try:
            await asyncio.sleep(self.latency.get(step.id, self.default))
            if step.id in self.errors:
                raise self.errors[step.id]
            return f"result of {step.id}"
        except asyncio.CancelledError:
            self.cancelled.append(step.id)
            raise
        finally:
            self.running -= 1
            self.intervals[step.id] = (begin, time.time())


def executor(p: ExecutionPlan, run_step: Recorder, *, concurrency: int = 4, timeout: float = 30.0, **kw: object):
    return DagExecutor(p, run_step, max_concurrency=concurrency, step_timeout=timeout, **kw)  # type: ignore[arg-type]


async def finishes(execution: Awaitable[ExecutionPlan]) -> ExecutionPlan:
    """The plan, or a clear failure well before the pytest timeout if execution hangs."""
    return await asyncio.wait_for(execution, timeout=10)


def makespan(p: ExecutionPlan) -> float:
    starts = [s.started_at for s in p.steps if s.started_at is not None]
    ends = [s.completed_at for s in p.steps if s.completed_at is not None]
    return max(ends) - min(starts)


def statuses(p: ExecutionPlan) -> dict[str, str]:
    return {s.id: s.status for s in p.steps}


# --- concurrency and order


async def test_concurrency_one_runs_steps_one_at_a_time_in_plan_order() -> None:
    rec = Recorder(default=0.2)
    p = plan("s3", "s1", "s2")
    await executor(p, rec, concurrency=1).execute()

    assert statuses(p) == {"s1": "completed", "s2": "completed", "s3": "completed"}
    assert rec.started == ["s3", "s1", "s2"]
    assert rec.max_running == 1
    ordered = sorted(p.steps, key=lambda s: s.started_at or 0)
    assert [s.id for s in ordered] == ["s3", "s1", "s2"]
    for before, after in pairwise(ordered):  # no two recorded run intervals overlap
        assert after.started_at is not None and before.completed_at is not None
        assert after.started_at >= before.completed_at
    assert makespan(p) / 0.2 >= 2.8  # three runs back to back


async def test_concurrency_three_runs_three_independent_steps_together() -> None:
    rec = Recorder(default=0.2)
    p = plan("s3", "s1", "s2")
    await executor(p, rec, concurrency=3).execute()

    assert statuses(p) == {"s1": "completed", "s2": "completed", "s3": "completed"}
    assert rec.started == ["s3", "s1", "s2"]  # launched in plan order
    assert rec.max_running == 3
    latest_start = max(s.started_at for s in p.steps if s.started_at)
    earliest_end = min(s.completed_at for s in p.steps if s.completed_at)
    assert latest_start < earliest_end  # all three intervals overlap
    assert makespan(p) / 0.2 < 2.0  # far from the 3x of a serial run
    assert all(s.result == f"result of {s.id}" for s in p.steps)
    assert all(s.attempts == 1 for s in p.steps)


async def test_concurrency_two_of_three_limits_to_two_and_speeds_up_over_serial() -> None:
    serial, parallel = plan("s1", "s2", "s3"), plan("s1", "s2", "s3")
    await executor(serial, Recorder(default=0.15), concurrency=1).execute()
    rec = Recorder(default=0.15)
    await executor(parallel, rec, concurrency=2).execute()

    assert rec.max_running == 2
    # two slots: s3 waits for the first of s1/s2, so two rounds instead of three
    assert makespan(serial) / makespan(parallel) > 1.3


async def test_newly_ready_dependents_start_in_plan_order() -> None:
    rec = Recorder(default=0.02)
    p = plan(("s4", ["s1"]), ("s2", ["s1"]), ("s3", ["s1"]), "s1")
    await executor(p, rec, concurrency=1).execute()

    assert rec.started == ["s1", "s4", "s2", "s3"]


async def test_ready_steps_start_s2_before_s10() -> None:
    # string order would start s1, s10, s11, s2, ...: the plan's order is the natural one
    ids = [f"s{i}" for i in range(1, 12)]
    rec = Recorder(default=0.0)
    p = plan(*ids)
    await executor(p, rec, concurrency=1).execute()
    assert rec.started == ids

    rec = Recorder(default=0.0)
    p = plan("s1", *((sid, ["s1"]) for sid in ids[1:]))
    await executor(p, rec, concurrency=1).execute()
    assert rec.started == ids


# --- dispatch without a barrier


async def test_a_step_starts_when_its_last_dependency_completes_beside_a_straggler() -> None:
    rec = Recorder(latency={"fast": 0.05, "a": 0.1, "b": 0.1, "slow": 0.6})
    p = plan(("b", ["a"]), "slow", ("a", ["fast"]), "fast")
    await executor(p, rec, concurrency=4).execute()

    assert set(statuses(p).values()) == {"completed"}
    a, b, slow = p.step("a"), p.step("b"), p.step("slow")
    assert a.completed_at and b.started_at and b.completed_at and slow.completed_at
    barrier_wait = slow.completed_at - a.completed_at  # what a level barrier would have held b back
    assert b.started_at - a.completed_at < barrier_wait / 2  # dispatched at a's completion, not at a level barrier
    assert b.completed_at < slow.completed_at  # the chain finished while the straggler ran
    critical_path = max(0.05 + 0.1 + 0.1, 0.6)
    assert makespan(p) / critical_path < 1.10


async def test_a_step_waits_for_its_last_dependency_not_its_first() -> None:
    rec = Recorder(latency={"s1": 0.05, "s2": 0.25, "s3": 0.01})
    p = plan("s1", "s2", ("s3", ["s1", "s2"]))
    await executor(p, rec).execute()

    s2, s3 = p.step("s2"), p.step("s3")
    assert s3.started_at and s2.completed_at
    assert s3.started_at >= s2.completed_at
    assert s2.run_time is not None and s3.started_at - s2.completed_at < s2.run_time / 2  # in s2's wake
    assert set(rec.seen_deps["s3"]) == {"s1", "s2"}
    assert rec.seen_deps["s3"]["s2"].result == "result of s2"
    assert all(d.status == "completed" for d in rec.seen_deps["s3"].values())


async def test_queue_time_and_run_time_are_recorded_apart() -> None:
    rec = Recorder(latency={"s1": 0.2, "s2": 0.1})
    p = plan("s1", "s2")
    await executor(p, rec, concurrency=1).execute()

    s1, s2 = p.step("s1"), p.step("s2")
    assert s1.queue_time is not None and s1.run_time is not None
    assert s2.queue_time is not None and s2.run_time is not None
    assert s1.queue_time < s2.queue_time / 4  # s1 got the slot at once
    assert s1.completed_at is not None and s2.started_at is not None
    assert s1.completed_at <= s2.started_at  # s2 waited while s1 ran (and, below, for about as long)
    assert 0.8 < s2.queue_time / s1.run_time < 1.25
    assert s2.run_time / s1.run_time < 0.8  # s2's own run is the shorter one, not counting its wait
    assert s1.queued_at is not None and s2.queued_at is not None
    assert s1.started_at is not None and s2.queued_at <= s1.started_at  # both became ready at the start


# --- failures


async def test_a_step_over_its_timeout_fails_with_timed_out() -> None:
    rec = Recorder(latency={"s1": 5.0, "s2": 0.05})
    p = plan("s1", "s2", ("s3", ["s1"]))
    await executor(p, rec, timeout=0.1).execute()

    s1 = p.step("s1")
    assert s1.status == "failed"
    assert s1.error == "timed out after 0.1s"
    assert s1.run_time is not None and s1.run_time < 2.5  # cut at the deadline, far before the 5 s sleep
    assert p.step("s2").status == "completed"
    assert p.step("s3").status == "skipped"
    assert p.step("s3").error == "Skipped — dependency s1 failed"


async def test_a_timeout_error_raised_by_the_step_itself_is_an_ordinary_failure() -> None:
    rec = Recorder(errors={"s1": TimeoutError("upstream API did not answer")})
    p = plan("s1", ("s2", ["s1"]), "s3")
    events: list[Event] = []
    await executor(p, rec, timeout=30.0, emit=events.append).execute()

    s1 = p.step("s1")
    assert s1.status == "failed"
    assert s1.error == "TimeoutError: upstream API did not answer"
    assert "timed out after" not in s1.error
    assert p.step("s2").status == "skipped"
    assert p.step("s2").error == "Skipped — dependency s1 failed"
    assert p.step("s3").status == "completed"
    assert [e.status for e in events if isinstance(e, StepCompleted) and e.step_id == "s1"] == ["failed"]


async def test_an_exception_fails_the_step_with_type_and_message() -> None:
    rec = Recorder(errors={"s1": ValueError("bad input")})
    p = plan("s1", "s2")
    await executor(p, rec).execute()

    assert p.step("s1").status == "failed"
    assert p.step("s1").error == "ValueError: bad input"
    assert p.step("s1").result is None
    assert p.step("s2").status == "completed"


class Abort(BaseException):
    """A library's own BaseException."""


@pytest.mark.parametrize("raised", [KeyboardInterrupt("from a tool"), Abort("from a tool"), GeneratorExit()])
async def test_what_is_not_an_exception_fails_only_its_step(raised: BaseException) -> None:
    rec = Recorder(errors={"s1": raised})
    p = plan("s1", "s2", ("s3", ["s1"]))
    await finishes(executor(p, rec).execute())

    detail = " (from a tool)" if str(raised) else ""
    assert p.step("s1").status == "failed"
    assert p.step("s1").error == f"the step was stopped by {type(raised).__name__}{detail}, which is not an Exception"
    assert (p.step("s2").status, p.step("s3").status) == ("completed", "skipped")


async def test_step_failure_keeps_reason_and_notes() -> None:
    rec = Recorder(errors={"s1": StepFailure("hit the iteration limit", notes="found 2 of 3 figures")})
    p = plan("s1")
    await executor(p, rec).execute()

    s1 = p.step("s1")
    assert s1.status == "failed"
    assert s1.error == "hit the iteration limit"
    assert s1.result == "found 2 of 3 figures"


async def test_a_failure_skips_dependents_transitively_and_independent_branches_go_on() -> None:
    rec = Recorder(default=0.02, errors={"s1": RuntimeError("boom")})
    p = plan("s1", ("s2", ["s1"]), ("s3", ["s2"]), ("s5", ["s3", "s4"]), "s4", ("s6", ["s4"]))
    events: list[Event] = []
    await executor(p, rec, emit=events.append).execute()

    assert statuses(p) == {
        "s1": "failed",
        "s2": "skipped",
        "s3": "skipped",
        "s4": "completed",
        "s5": "skipped",
        "s6": "completed",
    }
    assert p.step("s2").error == "Skipped — dependency s1 failed"
    assert p.step("s3").error == "Skipped — dependency s2 skipped"
    assert p.step("s5").error == "Skipped — dependency s3 skipped"
    assert set(rec.started) == {"s1", "s4", "s6"}
    skipped_events = {e.step_id: e.error for e in events if isinstance(e, StepCompleted) and e.status == "skipped"}
    assert skipped_events == {s: p.step(s).error for s in ("s2", "s3", "s5")}


# --- stop


async def test_stop_mid_run_lets_running_steps_finish_and_skips_the_rest() -> None:
    stop = asyncio.Event()
    rec = Recorder(latency={"s1": 0.3, "s2": 0.3, "s3": 0.05})
    # s1, s2 run; s3 waits for a slot; s4 depends on running s1; s5 on queued s3
    p = plan("s1", "s2", "s3", ("s4", ["s1"]), ("s5", ["s3"]))
    task = asyncio.create_task(executor(p, rec, concurrency=2, stop=stop).execute())
    await asyncio.sleep(0.1)
    assert statuses(p) == {"s1": "running", "s2": "running", "s3": "queued", "s4": "pending", "s5": "pending"}
    stop.set()
    result = await task

    assert result is p
    assert statuses(p) == {"s1": "completed", "s2": "completed", "s3": "skipped", "s4": "skipped", "s5": "skipped"}
    assert p.step("s1").result == "result of s1"
    for sid in ("s3", "s4", "s5"):
        assert p.step(sid).error == STOPPED_REASON
    assert sorted(rec.started) == ["s1", "s2"]


async def test_stop_set_before_execute_skips_everything_without_running() -> None:
    stop = asyncio.Event()
    stop.set()
    rec = Recorder()
    p = plan("s1", ("s2", ["s1"]), "s3")
    await executor(p, rec, stop=stop).execute()

    assert rec.started == []
    assert set(statuses(p).values()) == {"skipped"}
    assert {s.error for s in p.steps} == {STOPPED_REASON}
    assert all(s.started_at is None and s.attempts == 0 for s in p.steps)


# --- cancellation


async def test_cancelling_execute_cancels_running_steps_and_reraises() -> None:
    rec = Recorder(latency={"s1": 5.0, "s2": 5.0, "s3": 5.0})
    p = plan("s1", "s2", "s3", ("s4", ["s1"]))
    events: list[Event] = []
    task = asyncio.create_task(executor(p, rec, concurrency=2, emit=events.append).execute())
    await asyncio.sleep(0.1)
    assert statuses(p) == {"s1": "running", "s2": "running", "s3": "queued", "s4": "pending"}
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert statuses(p) == {"s1": "cancelled", "s2": "cancelled", "s3": "cancelled", "s4": "cancelled"}
    assert sorted(rec.cancelled) == ["s1", "s2"]  # the step coroutines themselves saw the cancellation
    assert rec.started == ["s1", "s2"]
    assert p.step("s1").error == "Cancelled"
    assert p.step("s3").error == "Cancelled before it started"
    assert all(s.completed_at is not None for s in p.steps)
    leftover = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("dagmagic:step:")]
    assert leftover == []
    await asyncio.sleep(0)  # let the cancelled stop watcher unwind
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("dagmagic:") and not t.done()]
    completed = {e.step_id: e.status for e in events if isinstance(e, StepCompleted)}
    assert completed == {"s1": "cancelled", "s2": "cancelled", "s3": "cancelled", "s4": "cancelled"}


# --- never hang


async def test_a_missing_earlier_round_reference_skips_the_step_instead_of_hanging() -> None:
    rec = Recorder()
    p = plan(("s1", ["r1.s9"]), ("s2", ["s1"]), "s3", round=2)
    await finishes(executor(p, rec, earlier={}).execute())

    assert statuses(p) == {"s1": "skipped", "s2": "skipped", "s3": "completed"}
    assert p.step("s1").error is not None and "r1.s9" in p.step("s1").error
    assert p.step("s2").error == "Skipped — dependency s1 skipped"
    assert rec.started == ["s3"]


async def test_a_failed_earlier_round_step_skips_its_dependents() -> None:
    earlier = {"r1.s2": PlanStep(id="s2", task="old", status="failed", error="ValueError: x")}
    rec = Recorder()
    p = plan(("s1", ["r1.s2"]), round=2)
    await finishes(executor(p, rec, earlier=earlier).execute())

    assert p.step("s1").status == "skipped"
    assert p.step("s1").error == "Skipped — dependency r1.s2 failed"
    assert rec.started == []


async def test_completed_earlier_round_steps_are_passed_without_running_them() -> None:
    old = PlanStep(id="s2", task="old task", status="completed", result="old result")
    rec = Recorder()
    p = plan(("s1", ["r1.s2"]), ("s2", ["s1", "r1.s2"]), round=2)
    await executor(p, rec, earlier={"r1.s2": old}).execute()

    assert statuses(p) == {"s1": "completed", "s2": "completed"}
    assert rec.started == ["s1", "s2"]  # r1.s2 was not run again
    assert rec.seen_deps["s1"] == {"r1.s2": old}
    assert rec.seen_deps["s2"]["r1.s2"].result == "old result"
    assert rec.seen_deps["s2"]["s1"] is p.step("s1")
    assert old.attempts == 0


async def test_a_cycle_or_unknown_dependency_ends_with_a_reason_instead_of_hanging() -> None:
    rec = Recorder(default=0.02)
    p = plan(("s1", ["s2"]), ("s2", ["s1"]), ("s3", ["ghost"]), "s4")
    await finishes(executor(p, rec).execute())

    # s1 cannot run (it waits on s2); failing it releases s2, which is skipped for depending on s1
    assert statuses(p) == {"s1": "failed", "s2": "skipped", "s3": "skipped", "s4": "completed"}
    assert p.step("s1").error == "Could not run: dependencies s2 never completed"
    assert p.step("s2").error == "Skipped — dependency s1 failed"
    assert p.step("s3").error is not None and "ghost" in p.step("s3").error
    assert all(s.status in FINAL for s in p.steps)


async def test_an_empty_plan_returns_at_once() -> None:
    p = plan()
    assert await executor(p, Recorder()).execute() is p


# --- events


async def test_events_come_queued_started_completed_per_step() -> None:
    rec = Recorder(default=0.02, errors={"s2": RuntimeError("x")})
    p = plan("s1", "s2", ("s3", ["s1"]), ("s4", ["s2"]), round=3)
    events: list[Event] = []
    await executor(p, rec, concurrency=1, emit=events.append).execute()

    per_step: dict[str, list[str]] = {}
    for event in events:
        assert isinstance(event, StepQueued | StepStarted | StepCompleted)
        assert event.round == 3
        per_step.setdefault(event.step_id, []).append(event.type)
    ran = ["step_queued", "step_started", "step_completed"]
    assert per_step == {"s1": ran, "s2": ran, "s3": ran, "s4": ["step_completed"]}
    completed = {e.step_id: (e.status, e.error) for e in events if isinstance(e, StepCompleted)}
    assert completed == {
        "s1": ("completed", None),
        "s2": ("failed", "RuntimeError: x"),
        "s3": ("completed", None),
        "s4": ("skipped", "Skipped — dependency s2 failed"),
    }
    # event times agree with the recorded timestamps
    started = {e.step_id: e.at for e in events if isinstance(e, StepStarted)}
    for sid, at in started.items():
        assert abs(at - (p.step(sid).started_at or 0)) < 0.05


# --- retries in three tiers


class Flaky:
    """A ``run_step`` whose steps raise the given errors in turn before they succeed; records every try."""

    def __init__(self, failures: Mapping[str, list[BaseException]], latency: float = 0.02) -> None:
        self.failures = {sid: list(errors) for sid, errors in failures.items()}
        self.latency = latency
        self.tries: list[tuple[str, float]] = []

    async def __call__(self, step: PlanStep, deps: dict[str, PlanStep]) -> str:
        self.tries.append((step.id, time.time()))
        await asyncio.sleep(self.latency)
        pending = self.failures.get(step.id)
        if pending:
            raise pending.pop(0)
        return f"result of {step.id}"

    def count(self, sid: str) -> int:
        return sum(1 for tried, _ in self.tries if tried == sid)


def retrying(p: ExecutionPlan, flaky: Flaky, *, delays: tuple[float, ...] = (0.3, 5.0), **kw: object) -> DagExecutor:
    from dagmagic.engine.steps.retries import RetryPolicy
    from dagmagic.errors import TransientProviderError

    return DagExecutor(
        p,
        flaky,
        max_concurrency=kw.pop("concurrency", 4),  # type: ignore[arg-type]
        step_timeout=30.0,
        transient=(TransientProviderError,),
        retries=RetryPolicy(immediate=1, delays=delays),
        **kw,  # type: ignore[arg-type]
    )


def rate_limited() -> BaseException:
    from dagmagic.errors import RateLimitError

    return RateLimitError("429 slow down", model="m")


def test_the_retry_policy_counts_its_tiers() -> None:
    from dagmagic.engine.steps.retries import RetryPolicy

    policy = RetryPolicy(immediate=1, delays=(30.0, 120.0, 600.0))
    assert [policy.delay_after(n) for n in range(1, 6)] == [0.0, 30.0, 120.0, 600.0, None]
    assert policy.tries == 5
    assert RetryPolicy(immediate=0, delays=()).delay_after(1) is None


async def test_a_step_failing_twice_with_a_rate_limit_completes_on_tier_two_while_its_sibling_runs() -> None:
    events: list[Event] = []
    flaky = Flaky({"s1": [rate_limited(), rate_limited()]}, latency=0.05)
    p = plan("s1", "s2", ("s3", ["s1", "s2"]))
    await finishes(retrying(p, flaky, concurrency=1, emit=events.append).execute())

    assert statuses(p) == dict.fromkeys(("s1", "s2", "s3"), "completed")
    s1 = p.step("s1")
    assert (s1.attempts, s1.failures, s1.retry_at) == (3, 2, None)
    assert [sid for sid, _ in flaky.tries] == ["s1", "s1", "s2", "s1", "s3"]  # s2 ran in s1's freed slot
    times = [at for _, at in flaky.tries]
    assert times[3] - times[1] >= 0.3 * 0.95  # the third try waited its delay; the second came at once
    retries = [e for e in events if e.type == "step_retrying"]
    assert [(e.step_id, e.failures) for e in retries] == [("s1", 1), ("s1", 2)]
    assert "RateLimitError" in retries[0].error
    assert retries[1].retry_at - retries[1].at == pytest.approx(0.3, abs=0.05)


async def test_retries_run_out_then_the_step_fails_for_good_and_only_its_branch_stops() -> None:
    flaky = Flaky({"s1": [rate_limited() for _ in range(5)]}, latency=0.0)
    p = plan("s1", ("s2", ["s1"]), "s3", ("s4", ["s3"]))
    await finishes(retrying(p, flaky, delays=(0.05, 0.05)).execute())

    assert statuses(p) == {"s1": "failed", "s2": "skipped", "s3": "completed", "s4": "completed"}
    s1 = p.step("s1")
    assert flaky.count("s1") == 4  # the try, one at once, two delayed
    assert s1.error is not None and s1.error.startswith("Failed for good after 4 tries: RateLimitError")
    assert p.step("s2").error == "Skipped — dependency s1 failed"


async def test_errors_that_are_not_transient_are_not_retried() -> None:
    flaky = Flaky({"s1": [ValueError("a tool's own complaint")]}, latency=0.0)
    p = plan("s1")
    await finishes(retrying(p, flaky).execute())
    assert flaky.count("s1") == 1 and p.step("s1").error == "ValueError: a tool's own complaint"


async def test_retry_now_cuts_the_wait_short() -> None:
    flaky = Flaky({"s1": [rate_limited(), rate_limited()]}, latency=0.0)
    p = plan("s1")
    runner = retrying(p, flaky, delays=(30.0,))
    execution = asyncio.ensure_future(runner.execute())
    while p.step("s1").status != "retrying" or p.step("s1").failures < 2:
        await asyncio.sleep(0.005)
    assert p.step("s1").retry_at is not None and p.step("s1").retry_at > time.time() + 20
    assert runner.retry_now("s1") and not runner.retry_now("nope")
    await finishes(execution)
    assert p.step("s1").status == "completed" and flaky.count("s1") == 3


async def test_a_stop_ends_a_wait_for_a_retry_and_a_cancel_cancels_it() -> None:
    for action in ("stop", "cancel"):
        flaky = Flaky({"s1": [rate_limited(), rate_limited()]}, latency=0.0)
        p = plan("s1", ("s2", ["s1"]))
        stop = asyncio.Event()
        execution = asyncio.ensure_future(retrying(p, flaky, delays=(30.0,), stop=stop).execute())
        while p.step("s1").status != "retrying" or p.step("s1").failures < 2:
            await asyncio.sleep(0.005)
        if action == "stop":
            stop.set()
            await finishes(execution)
            s1 = p.step("s1")
            assert s1.status == "failed" and s1.error is not None and s1.error.endswith("the run was stopped)")
            assert p.step("s2").status == "skipped"
        else:
            execution.cancel()
            with pytest.raises(asyncio.CancelledError):
                await execution
            assert statuses(p) == {"s1": "cancelled", "s2": "cancelled"}
        assert flaky.count("s1") == 2


async def test_a_resumed_step_waiting_for_its_retry_waits_out_what_is_left_and_keeps_its_tier() -> None:
    flaky = Flaky({"s1": [rate_limited()]}, latency=0.0)  # it fails once more after the resume
    p = plan("s1")
    s1 = p.step("s1")
    s1.status, s1.failures, s1.attempts, s1.retry_at = "retrying", 2, 3, time.time() + 0.2
    started = time.time()
    await finishes(retrying(p, flaky, delays=(0.05, 0.1)).execute())
    assert flaky.tries[0][1] - started >= 0.2 * 0.9  # waited what was left of the delay
    assert s1.status == "completed" and s1.failures == 3 and flaky.count("s1") == 2  # tier 3 used the 0.1 s delay


async def test_steps_completed_before_execution_count_as_done() -> None:
    rec = Recorder()
    p = plan("s1", ("s2", ["s1"]), ("s3", ["s2"]))
    s1 = p.step("s1")
    s1.status, s1.result = "completed", "kept from before"
    await finishes(executor(p, rec).execute())
    assert rec.started == ["s2", "s3"] and statuses(p) == dict.fromkeys(("s1", "s2", "s3"), "completed")
    assert rec.seen_deps["s2"]["s1"].result == "kept from before"
