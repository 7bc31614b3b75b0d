"""What an evaluation needs of the session it runs in: its models, settings and store, and starting a cell's run.

``DagSession`` has all of it; the evaluation package names only these members, so that it builds on any session
without importing ``dagmagic.session`` (which imports the evaluation package to run experiments).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from dagmagic.llm import ModelRegistry
from dagmagic.settings import DagSettings

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun
    from dagmagic.store import RunStore

__all__ = ["CellOptions", "EvaluationSession"]


class CellOptions(TypedDict, total=False):
    """What a cell's run has of its own instead of its session's: its config's models, settings and tools."""

    models: ModelRegistry
    settings: DagSettings
    tools: Iterable[Any]


class EvaluationSession(Protocol):
    """The session an evaluation runs its cells in (``DagSession``)."""

    @property
    def models(self) -> ModelRegistry:
        """The session's models: a judge given none grades with them."""
        ...

    @property
    def settings(self) -> DagSettings:
        """The session's settings: a config's settings are built over them."""
        ...

    @property
    def store(self) -> RunStore | None:
        """Where the experiment and its cells' runs are recorded (None when the store is off)."""
        ...

    @property
    def runs(self) -> Sequence[DagRun]:
        """The runs the session keeps in memory, the latest last."""
        ...

    def store_problem(self) -> str | None:
        """Why the session has no run store, if it has none."""
        ...

    def start(self, goal: str, *, conversation: bool = ..., **options: Unpack[CellOptions]) -> DagRun:
        """A new run of ``goal`` (outside the conversation for a cell), started on the running loop."""
        ...

    def start_resume(self, run_id: str, **options: Unpack[CellOptions]) -> DagRun:
        """The stored run ``run_id``, cut mid-run, continued where it was cut."""
        ...

    def reopen(self, run_id: str, **options: Unpack[CellOptions]) -> DagRun:
        """The stored run ``run_id``, which ended, taken back."""
        ...
