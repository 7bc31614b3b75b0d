"""``RunQueries``: what can be read of a run, without changing it: its goal, status, rounds, steps, answer,
verdict, calls, usage and cost, two rounds compared, and the run compared with another (a replay with its
original). ``DagRun`` is these queries over its state, plus its event log and its inbox.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Final, Literal, overload

from dagmagic.diff import Divergence, RoundDiff, RunDiff
from dagmagic.errors import DagError
from dagmagic.events import Event, RunFinished
from dagmagic.models import (
    AnalysisResult,
    ExecutionPlan,
    LLMCall,
    PlanStep,
    RoundRecord,
    RunPhase,
    RunState,
    RunStatus,
    Usage,
)

__all__ = ["STOPPED_BY_YOU", "RunQueries"]

STOPPED_BY_YOU: Final = "stopped by you"
"""How every view names the status of a run the user's Stop ended (its ``status`` stays ``done``)."""


def _rerun_of(rounds: dict[int, RoundRecord], later: int, earlier: int) -> bool:
    """Whether round ``later`` comes from round ``earlier`` by re-runs (its steps are copies keeping their ids)."""
    seen: set[int] = set()
    index: int | None = later
    while index is not None and index not in seen:
        if index == earlier:
            return True
        seen.add(index)
        record = rounds.get(index)
        index = record.rerun_of if record is not None else None
    return False


class RunQueries:
    """Read-only queries over ``state``, a run's state."""

    state: RunState
    events: list[Event]

    @overload
    def diff(self, a: int, b: int) -> RoundDiff: ...

    @overload
    def diff(self, a: RunQueries, b: None = None) -> RunDiff: ...

    def diff(self, a: int | RunQueries, b: int | None = None) -> RoundDiff | RunDiff:
        """What changed between rounds ``a`` and ``b`` (1-based): steps added, removed, reused (``rN.id``), or
        with another task, dependencies, model, status or result; steps are matched by what they are.

        ``diff(other)``, ``other`` another run (the original of a replay: ``replayed.diff(original)``): what
        differs between it and this run, round by round (steps and verdicts), the rounds only one has, the
        answers, and where this run diverged from its recording (a ``RunDiff``).
        """
        if isinstance(a, RunQueries):
            if b is not None:
                raise TypeError("diff(other_run) compares two runs; diff(a, b) two rounds of this run")
            return RunDiff.between(a.state, self.state)
        if b is None or isinstance(a, bool) or not isinstance(a, int):
            raise TypeError("diff() takes two round numbers, diff(1, 2), or another run, diff(original)")
        rounds = {record.index: record for record in self.rounds}
        missing = [index for index in (a, b) if index not in rounds]
        if missing:
            raise DagError(f"no round {missing[0]}; this run has rounds 1 to {len(self.rounds)}")
        return RoundDiff.between(rounds[a], rounds[b], same_ids=_rerun_of(rounds, b, a))

    @property
    def run_id(self) -> str:
        """Unique id of the run."""
        return self.state.run_id

    @property
    def goal(self) -> str:
        """The goal as the user wrote it."""
        return self.state.goal

    @property
    def status(self) -> RunStatus:
        """``running``, ``done``, ``failed`` or ``cancelled``."""
        return self.state.status

    @property
    def stopped_by_user(self) -> bool:
        """Whether the user's Stop ended the run: it is ``done`` and its last word was a Stop (a follow-up or a
        re-run after it overrides it).
        """
        if self.state.status != "done":
            return False
        finished = (e for e in reversed(self.events) if isinstance(e, RunFinished) and not e.depth)
        last = next(finished, None)
        return last is not None and last.stopped_by_user

    @property
    def status_words(self) -> str:
        """The status as the views say it: ``stopped by you`` for a run the user's Stop ended, else ``status``."""
        return STOPPED_BY_YOU if self.stopped_by_user else self.status

    @property
    def phase(self) -> RunPhase:
        """What the run is doing: ``starting``, ``planning``, ``executing``, ``analyzing``, ``synthesizing``,
        ``finished``.
        """
        return self.state.phase

    @property
    def answer(self) -> str:
        """The answer being written now (it grows while synthesis streams; a superseded one is cleared)."""
        return self.state.answer

    @property
    def partial(self) -> bool:
        """Whether the answer covers only what completed before the run was stopped (by the user, because a model
        stopped answering, or because its cost budget was spent: ``DAG_MAX_COST``).
        """
        decision = self.rounds[-1].decision if self.rounds else None
        return bool(decision and decision.partial)

    @property
    def follow_ups(self) -> list[str]:
        """Follow-ups a plan or the final answer has seen; ``pending_follow_ups`` holds those still waiting."""
        return list(self.state.follow_ups)

    @property
    def pending_follow_ups(self) -> list[str]:
        """Follow-ups no plan and no answer has seen yet."""
        return list(self.state.pending_follow_ups)

    @property
    def follow_ups_so_far(self) -> list[str]:
        """Every follow-up so far: those a plan or the answer has seen, then those still pending."""
        return [*self.state.follow_ups, *self.state.pending_follow_ups]

    @property
    def objective(self) -> str:
        """The goal with every follow-up so far (those not yet planned for too): what the steps work towards,
        the verdict judges and the answer answers.
        """
        return "".join([self.goal, *(f"\n\n[User follow-up]: {text}" for text in self.follow_ups_so_far)])

    @property
    def error(self) -> str | None:
        """Why the run failed."""
        return self.state.error

    @property
    def replay_of(self) -> str | None:
        """The id of the run this one replays (``session.replay``), None for a run of its own."""
        return self.state.replay_of

    @property
    def forked_from(self) -> str | None:
        """The run this one was forked from (``run.fork``), None for a run of its own."""
        return self.state.forked_from

    @property
    def forked_at(self) -> str | None:
        """The step of ``forked_from`` it was forked at, as ``rN.id``."""
        return self.state.forked_at

    @property
    def divergence(self) -> Divergence | None:
        """Where the run left the recording it was answered from (a replay, or a cassette) and why: the call
        that ended it; None when it did not.
        """
        return Divergence.of_error(self.state.error) if self.state.status == "failed" else None

    @property
    def rounds(self) -> list[RoundRecord]:
        """Every round so far."""
        return self.state.rounds

    @property
    def plan(self) -> ExecutionPlan | None:
        """The latest round's plan."""
        return self.state.rounds[-1].plan if self.state.rounds else None

    @property
    def steps(self) -> dict[str, PlanStep]:
        """The latest round's steps by id."""
        return {step.id: step for step in self.plan.steps} if self.plan else {}

    def step(self, ref: str) -> PlanStep:
        """A step of any round: ``"s3"`` in the latest round, ``"r1.s3"`` in round 1 (``KeyError`` saying
        which steps there are otherwise).
        """
        match = re.fullmatch(r"r(\d+)\.(.+)", ref)
        index, step_id = (int(match.group(1)), match.group(2)) if match else (len(self.rounds), ref)
        for record in self.rounds:
            if record.index == index:
                return record.plan.step(step_id)
        raise KeyError(f"no round {index} (this run has {len(self.rounds)})")

    @property
    def all_steps(self) -> dict[str, PlanStep]:
        """Every step of every round, by ``rN.id``, in round order."""
        return {f"r{record.index}.{step.id}": step for record in self.rounds for step in record.plan.steps}

    def to_dataframe(self, what: Literal["steps", "calls"] = "steps") -> Any:
        """Every step of every round (or every LLM call) as a pandas DataFrame, one row each."""
        try:
            pd = importlib.import_module("pandas")
        except ImportError:
            raise ImportError("run.to_dataframe() needs pandas: pip install pandas") from None
        if what == "calls":
            rows = [
                {
                    "purpose": c.purpose, "model": c.model, "round": c.round, "step": c.step_id,
                    "status": c.status, "input_tokens": c.usage.input_tokens, "output_tokens": c.usage.output_tokens,
                    "cost": c.cost, "cached": c.cached, "latency_s": c.latency, "retries": c.retries, "error": c.error,
                    "started": pd.to_datetime(c.started_at, unit="s") if c.started_at else None,
                }
                for c in self.calls
            ]  # fmt: skip
            return pd.DataFrame(rows)
        rows = [
            {
                "round": int(ref[1 : ref.index(".")]), "step": s.id, "status": s.status, "task": s.task,
                "dependencies": ", ".join(s.dependencies), "model": s.model, "attempts": s.attempts,
                "run_s": s.run_time, "input_tokens": s.usage.input_tokens, "output_tokens": s.usage.output_tokens,
                "cost": s.usage.cost, "result": s.result, "error": s.error,
            }
            for ref, s in self.all_steps.items()
        ]  # fmt: skip
        return pd.DataFrame(rows)

    @property
    def analysis(self) -> AnalysisResult | None:
        """The latest verdict."""
        for record in reversed(self.state.rounds):
            if record.analysis is not None:
                return record.analysis
        return None

    @property
    def achieved(self) -> bool:
        """Whether the latest verdict says the goal was reached."""
        return self.analysis.achieved if self.analysis else False

    @property
    def confidence(self) -> float:
        """The latest verdict's confidence."""
        return self.analysis.confidence if self.analysis else 0.0

    @property
    def calls(self) -> list[LLMCall]:
        """Every LLM call, in order."""
        return self.state.calls

    @property
    def usage(self) -> Usage:
        """Tokens and cost of every call."""
        return self.state.usage

    @property
    def cost(self) -> float | None:
        """USD spent (litellm pricing); None when no call's price is known."""
        return self.usage.cost

    def usage_by(self, key: Literal["purpose", "round", "step"]) -> dict[Any, Usage]:
        """Usage grouped by purpose, round, or step (``(round, step_id)``; calls outside steps are left out)."""
        groups: dict[Any, Usage] = {}
        for call in self.state.calls:
            if key == "purpose":
                group: Any = call.purpose
            elif key == "round":
                group = call.round
            elif call.step_id is not None:
                group = (call.round, call.step_id)
            else:
                continue
            groups[group] = groups.get(group, Usage()) + call.usage
        return groups

    def __repr__(self) -> str:
        goal = self.goal if len(self.goal) <= 60 else f"{self.goal[:57]}..."
        steps = self.steps.values()
        completed = sum(step.status == "completed" for step in steps)
        qualifiers = [STOPPED_BY_YOU] * self.stopped_by_user + ["partial answer"] * (self.partial and bool(self.answer))
        status = f"{self.status} ({', '.join(qualifiers)})" if qualifiers else self.status
        return (
            f"<DagRun {status}: {goal!r} rounds={len(self.rounds)} "
            f"steps={completed}/{len(steps)} completed achieved={self.achieved} confidence={self.confidence:.2f}>"
        )
