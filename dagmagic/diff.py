"""What differs between two rounds of a run, or two runs of a goal, and where a replay left its recording.

``RoundDiff`` (``run.diff(a, b)``) matches steps by what they are, not by id; ``RunDiff`` (``replayed.diff(original)``)
compares two runs round by round; ``Divergence`` reads a replay's mismatch back from the run's error. Each renders
itself as text and as Markdown for a notebook.
"""

from __future__ import annotations

import html
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from dagmagic.models import AnalysisResult, PlanStep, RoundRecord, RunState, split_round_reference
from dagmagic.models._text import cut

__all__ = ["Divergence", "RoundComparison", "RoundDiff", "RunDiff", "StepChange"]


class StepChange(BaseModel):
    """How one step differs between two rounds."""

    id: str
    """The step's id in the round it is in (``round``)."""
    change: Literal["added", "removed", "changed", "reused"]
    """``reused``: a step of an earlier round whose result the later round uses (``r1.s3``) without running it."""
    round: int | None = None
    """The round the step is in: the later one for ``added`` and ``changed``, the earlier one for ``removed``,
    the round whose result is used for ``reused``."""
    was: str | None = None
    """For ``changed``: the step's id in the earlier round, when a replan gave it another."""
    fields: list[str] = Field(default_factory=list)
    """For ``changed``: which of task, dependencies, model, status, result differ."""
    before: dict[str, Any] = Field(default_factory=dict)
    """Those fields' values in the first round."""
    after: dict[str, Any] = Field(default_factory=dict)
    """And in the second."""

    @property
    def ref(self) -> str:
        """How the later round names the step: its id, or ``rN.id`` for a step of another round."""
        return f"r{self.round}.{self.id}" if self.change == "reused" else self.id


_COMPARED = ("task", "dependencies", "model", "status", "result")


class RoundDiff(BaseModel):
    """What changed between two rounds of a run (``run.diff(a, b)``): a re-run against the round it re-ran,
    or a replan against the round before it.

    Steps are matched by what they are (task, tool and its arguments), not by id: a replan numbers its steps
    afresh, so its ``s3`` is often not the earlier ``s3``. Only rounds where ids keep their meaning (a re-run
    and the round it re-ran) also pair the steps left over by id, so that a re-run with an edited task shows
    as that step changed. An earlier step the later round depends on (``r1.s3``) is ``reused``, not removed.
    """

    a: int
    b: int
    changes: list[StepChange] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    """Ids (in round ``b``) of the steps that did not change."""
    renamed: dict[str, str] = Field(default_factory=dict)
    """Step id in round ``b`` -> its id in round ``a``, for matched steps a replan numbered differently."""

    @classmethod
    def between(cls, first: RoundRecord, second: RoundRecord, *, same_ids: bool | None = None) -> RoundDiff:
        """Compare ``first`` with ``second``. ``same_ids``: whether an id names the same step in both (default:
        when ``second`` re-ran ``first``).
        """
        if same_ids is None:
            same_ids = second.rerun_of == first.index
        pairs = matched_steps(first.plan.steps, second.plan.steps, same_ids=same_ids)
        old_ids = {old.id: new.id for old, new in pairs.values()}
        reused_refs = [d for step in second.plan.steps for d in step.dependencies if split_round_reference(d)]
        changes: list[StepChange] = []
        unchanged: list[str] = []
        renamed: dict[str, str] = {}
        for step in second.plan.steps:
            pair = pairs.get(step.id)
            if pair is None:
                after = step.model_dump(include=set(_COMPARED))
                changes.append(StepChange(id=step.id, change="added", round=second.index, after=after))
                continue
            before = _renumbered(pair[0], old_ids, first.index)
            fields = [name for name in _COMPARED if _value(before, name) != _value(step, name)]
            was = pair[0].id if pair[0].id != step.id else None
            if fields:
                changes.append(
                    StepChange(
                        id=step.id,
                        change="changed",
                        round=second.index,
                        was=was,
                        fields=fields,
                        before={name: getattr(pair[0], name) for name in fields},
                        after={name: getattr(step, name) for name in fields},
                    )
                )
            else:
                unchanged.append(step.id)
                if was is not None:
                    renamed[step.id] = was
        for ref in dict.fromkeys(reused_refs):
            index, sid = split_round_reference(ref) or (0, "")
            changes.append(StepChange(id=sid, change="reused", round=index))
        reused = {(c.round, c.id) for c in changes if c.change == "reused"}
        changes += [
            StepChange(id=step.id, change="removed", round=first.index, before=step.model_dump(include=set(_COMPARED)))
            for step in first.plan.steps
            if step.id not in old_ids and (first.index, step.id) not in reused
        ]
        return cls(a=first.index, b=second.index, changes=changes, unchanged=unchanged, renamed=renamed)

    def _repr_markdown_(self) -> str:
        lines = [f"**Round {self.a} → round {self.b}**", "", "| step | change | before | after |", "|---|---|---|---|"]
        for change in self.changes:
            what = change.change if change.change != "changed" else ", ".join(change.fields)
            name = change.ref + (f" (was {change.was})" if change.was else "")
            lines.append(f"| {name} | {what} | {_cell(change.before)} | {_cell(change.after)} |")
        if self.unchanged:
            names = [sid + (f" (was {self.renamed[sid]})" if sid in self.renamed else "") for sid in self.unchanged]
            lines += ["", f"Unchanged: {', '.join(names)}"]
        return "\n".join(lines)

    def __str__(self) -> str:
        parts = [f"{c.ref} {c.change}" + _detail(c) for c in self.changes]
        return f"round {self.a} -> {self.b}: " + ("; ".join(parts) or "no step changed")


_WHERE = re.compile(
    r"(?:ReplayMismatch: )?(?:Replay mismatch: )?"
    r"(?P<call>The '(?P<purpose>[^']+)' call(?: of step (?P<step>\S+))?(?: in round (?P<round>\d+))?)"
    r"(?P<rest>(?: was not recorded| was asked more often than recorded|: the recording has no calls left).*)",
    re.DOTALL,
)
"""A replay's mismatch as ``dagmagic.llm.replay`` words it: the call (``_where``), then why it had no answer."""
_CANCELLED_CALL = re.compile(
    r"(?:ReplayMismatch: )?(?:Replay mismatch: )?"
    r"(?P<purpose>[^ ·]+)(?: · step (?P<step>\S+))?(?: · round (?P<round>\d+))? · model '[^']*'"
    r"(?P<rest>: the recorded run moved on.*)",
    re.DOTALL,
)
"""The mismatch of a call the recorded run cancelled (``Interaction.describe()``, then why)."""


class Divergence(BaseModel):
    """Where a replayed run left its recording: the first model call the recording had no answer for
    (``run.divergence``; read from the run's error, so a run read back from the store knows it too).
    """

    purpose: str
    """The diverging call's purpose: ``plan``, ``step``, ``analyze``, ``synthesize``..."""
    step_id: str | None = None
    """Its step, for a step's call."""
    round: int | None = None
    """Its round."""
    reason: str
    """Why the recording had no answer, and (for a call it did not record) the closest recorded call with a
    unified diff of what changed."""

    @classmethod
    def of_error(cls, error: str | None) -> Divergence | None:
        """The divergence a run's ``error`` describes, None when it describes none (another failure)."""
        text = (error or "").split("\nHint: ")[0]
        match = _WHERE.fullmatch(text) or _CANCELLED_CALL.fullmatch(text)
        if match is None:
            return None
        rest = match.group("rest").lstrip(":").strip()
        reason = f"It {rest}" if rest.startswith("was ") else rest[:1].upper() + rest[1:]
        number = match.group("round")
        return cls(
            purpose=match.group("purpose"), step_id=match.group("step"), round=int(number) if number else None,
            reason=reason,
        )  # fmt: skip

    @property
    def call(self) -> str:
        """The call in words: ``the 'plan' call in round 1``, ``the 'step' call of step s2 in round 1``."""
        step = f" of step {self.step_id}" if self.step_id else ""
        round_ = f" in round {self.round}" if self.round else ""
        return f"the {self.purpose!r} call{step}{round_}"

    @property
    def headline(self) -> str:
        """One line: ``diverged from the recording at the 'plan' call in round 1``."""
        return f"diverged from the recording at {self.call}"

    @property
    def why(self) -> str:
        """The reason's first sentence: ``it was not recorded``."""
        first = self._sentences()[0].rstrip(".:")
        return first[:1].lower() + first[1:]

    @property
    def detail(self) -> str:
        """The rest of the reason: the closest recorded call and the diff of what changed ("" when none)."""
        return self._sentences()[1]

    def _sentences(self) -> tuple[str, str]:
        parts = re.split(r"(?<=[.:])\s", self.reason.strip(), maxsplit=1)
        return parts[0], parts[1] if len(parts) > 1 else ""

    @property
    def first_change(self) -> str:
        """The diff's first removed and added lines (``- old`` / ``+ new``), shortened; "" without a diff."""
        lines = self.reason.splitlines()
        removed = next((line for line in lines if line.startswith("-") and not line.startswith("---")), None)
        added = next((line for line in lines if line.startswith("+") and not line.startswith("+++")), None)
        return " / ".join(cut(line[0] + " " + line[1:].strip(), 100) for line in (removed, added) if line)

    @property
    def summary(self) -> str:
        """One line: the headline, why, and the first change."""
        change = f"; first change: {self.first_change}" if self.first_change else ""
        return f"{self.headline}: {self.why}{change}"

    def __str__(self) -> str:
        return f"{self.headline}.\n{self.reason}"


class RoundComparison(BaseModel):
    """One round of a run next to the same round of another (``RunDiff.rounds``)."""

    index: int
    """The round's number in both runs."""
    steps: RoundDiff
    """What changed in its steps (``a`` and ``b`` are both ``index``)."""
    verdict_before: AnalysisResult | None = None
    """The verdict the round got in the run compared with (the original)."""
    verdict_after: AnalysisResult | None = None
    """And in this run."""

    @property
    def verdict_changed(self) -> bool:
        """Whether the verdicts differ in what they say (reached or not, confidence, reasoning)."""
        return _verdict(self.verdict_before) != _verdict(self.verdict_after)

    @property
    def changed(self) -> bool:
        """Whether a step or the verdict differs."""
        return bool(self.steps.changes) or self.verdict_changed


def _verdict(analysis: AnalysisResult | None) -> tuple[bool, float, str] | None:
    return None if analysis is None else (analysis.achieved, round(analysis.confidence, 3), analysis.reasoning)


def _verdict_words(analysis: AnalysisResult | None) -> str:
    if analysis is None:
        return "none"
    return f"{'achieved' if analysis.achieved else 'not achieved'} ({analysis.confidence:.2f})"


class RunDiff(BaseModel):
    """What differs between two runs of a goal (``replayed.diff(original)``): round by round, the steps
    (``RoundDiff``) and the verdicts; the rounds one run has and the other not; the answers; and, for a replay
    that diverged from its recording, where.
    """

    before: str
    """The id of the run compared with (the original)."""
    after: str
    """The id of this run (the replay)."""
    replay: bool = False
    """Whether this run replays the other (``session.replay``)."""
    rounds: list[RoundComparison] = Field(default_factory=list)
    """The rounds both runs have, by number."""
    rounds_added: list[int] = Field(default_factory=list)
    """Rounds only this run has."""
    rounds_missing: list[int] = Field(default_factory=list)
    """Rounds only the other run has (a replay that ended earlier, or diverged, lacks them)."""
    answer_before: str = ""
    """The other run's answer."""
    answer_after: str = ""
    """This run's answer."""
    diverged: Divergence | None = None
    """Where this run left its recording, when it did."""

    @classmethod
    def between(cls, original: RunState, other: RunState) -> RunDiff:
        """Compare ``other`` (a replay, say) with ``original``, round by round."""
        before = {record.index: record for record in original.rounds}
        after = {record.index: record for record in other.rounds}
        rounds = [
            RoundComparison(
                index=index,
                steps=RoundDiff.between(before[index], after[index], same_ids=True),
                verdict_before=before[index].analysis,
                verdict_after=after[index].analysis,
            )
            for index in sorted(before.keys() & after.keys())
        ]
        return cls(
            before=original.run_id,
            after=other.run_id,
            replay=other.replay_of == original.run_id,
            rounds=rounds,
            rounds_added=sorted(after.keys() - before.keys()),
            rounds_missing=sorted(before.keys() - after.keys()),
            answer_before=original.answer,
            answer_after=other.answer,
            diverged=Divergence.of_error(other.error) if other.status == "failed" else None,
        )

    @property
    def answer_changed(self) -> bool:
        """Whether the answers differ."""
        return self.answer_before != self.answer_after

    @property
    def identical(self) -> bool:
        """Whether nothing differs: the same rounds, steps, verdicts and answer, and no divergence."""
        return not (
            self.diverged or self.rounds_added or self.rounds_missing or self.answer_changed
            or any(comparison.changed for comparison in self.rounds)
        )  # fmt: skip

    def _title(self) -> str:
        return f"{'replay' if self.replay else 'run'} {self.after} vs {'its original ' if self.replay else ''}" \
            f"run {self.before}"  # fmt: skip

    def _round_lines(self) -> list[str]:
        lines = []
        for comparison in self.rounds:
            parts = [f"{c.ref} {c.change}" + _detail(c) for c in comparison.steps.changes]
            if comparison.verdict_changed:
                words = f"{_verdict_words(comparison.verdict_before)} -> {_verdict_words(comparison.verdict_after)}"
                parts.append(f"verdict {words}")
            lines.append(f"round {comparison.index}: " + ("; ".join(parts) or "the same steps and verdict"))
        lines += [f"round {index}: only in {self.after}" for index in self.rounds_added]
        lines += [f"round {index}: only in {self.before}" for index in self.rounds_missing]
        return lines

    def __str__(self) -> str:
        if self.identical:
            return f"{self._title()}: identical (the same steps, verdicts and answer)"
        lines = [f"{self._title()}:"]
        if self.diverged is not None:
            lines.append(self.diverged.summary)
        lines += self._round_lines()
        if self.answer_changed:
            lines += ["answer changed:", f"  before: {cut(self.answer_before, 200)!r}",
                      f"  after:  {cut(self.answer_after, 200)!r}"]  # fmt: skip
        else:
            lines.append("answer: the same")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        lines = [f"**{_markdown_text(self._title())}**", ""]
        if self.identical:
            return "\n".join([*lines, "Identical: the same steps, verdicts and answer."])
        if self.diverged is not None:
            headline = self.diverged.headline
            lines += [
                f"**{_markdown_text(headline[:1].upper() + headline[1:])}**: {_markdown_text(self.diverged.why)}",
                "",
                _fenced(self.diverged.detail),
                "",
            ]
        lines += ["| round | step | change | before | after |", "|---|---|---|---|---|"]
        for comparison in self.rounds:
            for change in comparison.steps.changes:
                what = change.change if change.change != "changed" else ", ".join(change.fields)
                name = change.ref + (f" (was {change.was})" if change.was else "")
                row = (name, what, _cell(change.before), _cell(change.after))
                lines.append(f"| {comparison.index} | " + " | ".join(_table_text(cell) for cell in row) + " |")
            if comparison.verdict_changed:
                words = (_verdict_words(comparison.verdict_before), _verdict_words(comparison.verdict_after))
                lines.append(f"| {comparison.index} | verdict | changed | {words[0]} | {words[1]} |")
        lines += [f"| {index} | | only in this run | | |" for index in self.rounds_added]
        lines += [f"| {index} | | only in the original | | |" for index in self.rounds_missing]
        if self.answer_changed:
            lines += ["", "**Answer before**", "", _fenced(self.answer_before), "", "**Answer after**", "",
                      _fenced(self.answer_after)]  # fmt: skip
        else:
            lines += ["", "The same answer."]
        return "\n".join(lines)


def _markdown_text(text: str) -> str:
    """Text shown as itself in Markdown: HTML escaped, Markdown's specials backslashed."""
    return html.escape(re.sub(r"([\\`*_\[\]!|~$#])", r"\\\1", " ".join(text.split())), quote=False)


def _table_text(text: str) -> str:
    return _markdown_text(text.replace("\\|", "|"))


def _fenced(text: str) -> str:
    """``text`` as a fenced code block: shown as written (a diff keeps its lines), whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _detail(change: StepChange) -> str:
    """`` (was s3)``, `` (task, result)``: what a change's one line adds to its id and kind."""
    was = f" (was {change.was})" if change.was else ""
    return was + (f" ({', '.join(change.fields)})" if change.fields else "")


def _identity(step: PlanStep) -> tuple[str, str | None, str]:
    """What a step is, whatever its id: its task (case and spacing aside), its tool and the tool's arguments."""
    args = "" if step.tool_args is None else repr(sorted(step.tool_args.items()))
    return _value(step, "task"), step.tool_hint, args


def _value(step: PlanStep, name: str) -> Any:
    """A compared field's value: a task by its words (a replan that only re-cased it did not change it)."""
    value = getattr(step, name)
    return " ".join(value.lower().split()) if name == "task" else value


def matched_steps(old: list[PlanStep], new: list[PlanStep], *, same_ids: bool) -> dict[str, tuple[PlanStep, PlanStep]]:
    """New step id -> (old step, new step) for the steps that are the same in both: the same identity (the same
    id preferred among equals), then, when ``same_ids``, what is left with the same id.
    """
    pairs: dict[str, tuple[PlanStep, PlanStep]] = {}
    free = list(old)
    for step in new:
        alike = [o for o in free if _identity(o) == _identity(step)]
        if alike:
            match = next((o for o in alike if o.id == step.id), alike[0])
            free.remove(match)
            pairs[step.id] = (match, step)
    if same_ids:
        by_id = {o.id: o for o in free}
        for step in new:
            if step.id not in pairs and step.id in by_id:
                pairs[step.id] = (by_id.pop(step.id), step)
    return pairs


def _renumbered(step: PlanStep, new_ids: dict[str, str], index: int) -> PlanStep:
    """An earlier round's step with its dependencies named as the later round names them: a matched step by its
    new id, another one of that round by ``rN.id`` (which is how the later round would reuse it).
    """
    dependencies = [new_ids.get(d, d if split_round_reference(d) else f"r{index}.{d}") for d in step.dependencies]
    return step.model_copy(update={"dependencies": dependencies})


def _cell(values: dict[str, Any]) -> str:
    text = "; ".join(f"{name}: {str(value)[:80]}" for name, value in values.items())
    return text.replace("|", "\\|").replace("\n", " ")
