"""``%%dag eval``: evaluate the kernel's workflow over a dataset from a cell, its grid updated in place.

The cell body is the goal template (``Compare {a} and {b}``), filled from each case; with goals and an empty
body, the goals as they are. Options name notebook variables (``--cases``, ``--configs``, ``--scorers``); a
scorer name that is not a variable may be one of the built-in scorers that need no argument
(``exact_match``, ``contains``, ``matches``, ``numeric``, ``no_failed_steps``), made with their defaults.
"""

from __future__ import annotations

import asyncio
import string
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from dagmagic.errors import DagError
from dagmagic.notebook._arguments import names, usd
from dagmagic.notebook.display import widget_view

if TYPE_CHECKING:
    from dagmagic.evaluation import Cell, Experiment
    from dagmagic.notebook.experiment_widget import ExperimentWidget
    from dagmagic.notebook.session import NotebookSession

__all__ = ["UPDATES_PER_SECOND", "EvalCell", "eval_cases", "eval_scorers", "parse_eval", "widget_view"]

UPDATES_PER_SECOND = 4
"""At most this many syncs of the live grid a second while cells change (and always one at the end)."""

_BUILT_IN_SCORERS = ("exact_match", "contains", "matches", "numeric", "no_failed_steps")
"""Built-in scorer factories that work without arguments: ``--scorers`` accepts their names."""


@magic_arguments("%dag eval")  # the usage line reads "%%dag eval [--cases VAR] ..."
@argument("--cases", metavar="VAR", help="Goals, dicts with a 'goal' (or the template's keys), or a DataFrame.")
@argument("--configs", metavar="VAR", help='A dict of named configs: {"small": {"models": {...}}, ...}.')
@argument("--scorers", metavar="a,b", help="Notebook functions (case, run) -> score, or built-in scorer names.")
@argument("--repeat", type=int, default=1, metavar="N", help="Runs of each case with each config.")
@argument("--max-cost", type=usd, metavar="USD", help="No cell starts once this much was spent.")
@argument("--concurrency", type=int, metavar="N", help="Cells running at once.")
@argument("--models", metavar="VAR", help="A ModelRegistry (or one model) for configs that name no models.")
@argument("--name", metavar="NAME", help="The experiment's name (resume it by this name).")
@argument("--on", metavar="URL", help="Run the cells on Temporal's workers: temporal://HOST:PORT/NAMESPACE.")
@argument("--resume", metavar="NAME", help="Run the cells of experiment NAME that did not end.")
@argument("-o", "--output", metavar="VAR", help="Also bind the Experiment to this variable.")
def _eval_options(line: str) -> None:
    """The options of ``%%dag eval`` (only their declaration: ``parse_eval`` reads them)."""


def parse_eval(line: str) -> Any:
    """The options of a ``%%dag eval`` line, the word ``eval`` left out (``UsageError`` for bad ones)."""
    try:
        args = parse_argstring(_eval_options, line)
    except UsageError as exc:
        raise UsageError(f"bad %%dag eval options: {exc}") from None
    except SystemExit:  # argparse's own exit on bad input
        raise UsageError(f"bad %%dag eval options: {line!r}; see docs/evaluation.md") from None
    if args.cases is None and args.resume is None:
        raise UsageError("%%dag eval needs --cases VAR: a notebook variable holding goals, dicts or a DataFrame")
    if args.repeat < 1:
        raise UsageError(f"--repeat takes a whole number of at least 1, not {args.repeat}")
    if args.concurrency is not None and args.concurrency < 1:
        raise UsageError(f"--concurrency takes a whole number of at least 1, not {args.concurrency}")
    return args


def eval_cases(cases: Any, template: str) -> Any:
    """What ``session.evaluate`` takes as cases, and its ``goal=``: a DataFrame with the template, or a list whose
    dicts (or goals, as ``{goal}``) filled the template (``UsageError`` for what does not fit).
    """
    from dagmagic.evaluation import is_dataframe

    template = template.strip()
    if is_dataframe(cases):
        if len(cases) == 0:
            raise UsageError("--cases: the DataFrame has no rows to evaluate")
        return cases, template or None
    if isinstance(cases, str | Mapping) or not hasattr(cases, "__iter__"):
        raise UsageError(
            f"--cases must hold a list of goals, of dicts, or a DataFrame; it holds a {type(cases).__name__}"
        )
    items = list(cases)
    if not items:
        raise UsageError("--cases holds no cases: give at least one goal")
    if not template:
        return items, None
    fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    if any(not field or not field.isidentifier() for field in fields):
        raise UsageError(f"the goal template {template!r} must name keys in braces, like {{a}}")
    filled = []
    for number, item in enumerate(items, start=1):
        values: Any = {"goal": item} if isinstance(item, str) else item
        if not isinstance(values, Mapping):
            raise UsageError(f"--cases: case {number} is a {type(item).__name__}; a template takes goals or dicts")
        if missing := [field for field in fields if field not in values]:
            raise UsageError(
                f"the goal template names {', '.join(missing)}, which case {number} lacks; "
                f"it has {', '.join(map(str, values)) or 'no keys'}"
            )
        case: dict[str, Any] = {"goal": template.format(**{field: values[field] for field in fields})}
        case.update({key: values[key] for key in ("id", "expected") if key in values})
        metadata = {str(key): value for key, value in values.items() if key not in ("id", "expected", "metadata")}
        case["metadata"] = {**metadata, **dict(values.get("metadata") or {})}
        filled.append(case)
    return filled, None


def eval_scorers(notebook: NotebookSession, spec: str | None) -> list[Callable[..., Any]]:
    """The scorers ``--scorers a,b`` names: notebook variables holding callables, else built-in scorer names."""
    scorers = []
    for name in names(spec):
        if name in notebook.namespace:
            found = notebook.namespace[name]
        elif name in _BUILT_IN_SCORERS:
            from dagmagic import evaluation

            found = getattr(evaluation, name)()
        else:
            raise UsageError(
                f"--scorers: there is no variable named {name!r} in the notebook, nor a built-in scorer of that "
                f"name without arguments ({', '.join(_BUILT_IN_SCORERS)})"
            )
        if not callable(found):
            raise UsageError(f"--scorers: {name!r} holds a {type(found).__name__}, not a function (case, run)")
        scorers.append(found)
    return scorers


class EvalCell:
    """One ``%%dag eval`` cell: starts the experiment and shows it as it runs.

    Where a front end draws widgets (a person's JupyterLab, Notebook 7, VS Code), the grid is a live widget
    (``ExperimentWidget``), its state sent at most ``UPDATES_PER_SECOND`` times a second, beside the static grid
    (HTML and Markdown) that the saved notebook keeps, brought up to date once the experiment stops. Where
    nothing draws widgets (nbclient, papermill, nbval, a terminal), nothing is redrawn while it runs: the static
    grid is shown once, at the end (nbval rejects display updates).
    """

    def __init__(self, notebook: NotebookSession, line: str, body: str) -> None:
        self.notebook = notebook
        self.args = parse_eval(line)
        self.body = body
        self._widget: ExperimentWidget | None = None
        self._display_id: str | None = None
        self._last_update = 0.0
        self._pending: asyncio.TimerHandle | None = None
        self._experiment: Experiment | None = None
        self._started_at = time.time()

    async def run(self) -> Experiment:
        """The experiment once it stopped; Interrupt cancels it, keeping finished cells, and re-raises."""
        args = self.args
        configs = self.notebook.variable(args.configs, "--configs") if args.configs else None
        scorers = eval_scorers(self.notebook, args.scorers)
        cases, goal = (
            (None, None) if args.resume else eval_cases(self.notebook.variable(args.cases, "--cases"), self.body)
        )
        session = self._session()
        configs = self._with_models(configs)
        experiment: Experiment
        try:
            if args.resume:
                experiment = session.start_resume_evaluation(
                    args.resume,
                    configs=configs,
                    scorers=scorers or None,
                    concurrency=args.concurrency,
                    max_cost=args.max_cost,
                    on_cell=self._changed,
                    on=args.on,
                )
            else:
                experiment = session.start_evaluation(
                    cases,
                    goal=goal,
                    configs=configs,
                    scorers=scorers,
                    repeat=args.repeat,
                    concurrency=args.concurrency,
                    max_cost=args.max_cost,
                    name=args.name,
                    on_cell=self._changed,
                    on=args.on,
                )
        except (DagError, KeyError, TypeError, ValueError) as exc:
            where = f"--resume {args.resume}: " if args.resume else ""
            raise UsageError(f"{where}{exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}") from None
        self._show(experiment)
        try:
            await experiment.wait()
        except asyncio.CancelledError as exc:
            self._final(experiment)
            told = f"Interrupted: {self._resume_hint(experiment)} runs the cells that did not end."
            setattr(exc, "_render_traceback_", lambda: [told])  # noqa: B010 (not the class's attribute)
            raise
        await self._front_end_word()
        self._final(experiment)
        return experiment

    def _session(self) -> Any:
        """The kernel's session (made over ``--models``'s models when this cell is its first use)."""
        if not self.args.models:
            return self.notebook.session()
        return self.notebook.session(self._options())

    def _options(self) -> dict[str, Any]:
        return self.notebook.run_options(self.notebook.magics.parse(f"--models {self.args.models}"))

    def _with_models(self, configs: Any) -> Any:
        """``--models``'s models for each config that names none (without ``--configs``: the one config,
        ``default``). A resumed experiment without ``--configs`` keeps the configs it ran with.
        """
        if not self.args.models or (configs is None and self.args.resume):
            return configs
        models = self._options()["models"]
        if configs is None:
            return {"default": {"models": models}}
        if not isinstance(configs, Mapping):
            return configs  # as_configs says what is wrong with it
        return {
            name: {**spec, "models": models} if isinstance(spec, Mapping) and "models" not in spec else spec
            for name, spec in configs.items()
        }

    def _resume_hint(self, experiment: Experiment) -> str:
        options = "".join(
            f" --{option} {value}"
            for option, value in (("configs", self.args.configs), ("scorers", self.args.scorers))
            if value
        )
        return f"`%%dag eval --resume {experiment.name}{options}`"

    def _static(self, experiment: Experiment) -> dict[str, str]:
        from dagmagic.notebook.experiment_view import experiment_mimebundle

        return experiment_mimebundle(experiment, resume_hint=self._resume_hint(experiment), started_at=self._started_at)

    def _show(self, experiment: Experiment) -> None:
        """Bind ``-o``'s variable; where a front end may draw widgets, show the live grid."""
        from IPython.display import display

        from dagmagic.notebook.display import front_end_known, marker_of_experiment, might_draw_widgets
        from dagmagic.notebook.experiment_widget import ExperimentWidget

        self._experiment = experiment
        if self.args.output:
            self.notebook.namespace[self.args.output] = experiment
        if not self.notebook.magics.widget or not (front_end_known() or might_draw_widgets()):
            return
        self._widget = ExperimentWidget(
            experiment, resume_hint=self._resume_hint(experiment), started_at=self._started_at
        )
        self._display_id = f"dagmagic-{uuid.uuid4().hex}"
        bundle = {**self._static(experiment), **widget_view(self._widget)}
        display(bundle, raw=True, metadata=marker_of_experiment(experiment), display_id=self._display_id)

    def _changed(self, cell: Cell) -> None:
        """A cell changed: send the grid now, or once the throttle allows (a sync already planned covers this one)."""
        if self._widget is None or self._pending is not None:
            return
        wait = self._last_update + 1 / UPDATES_PER_SECOND - time.monotonic()
        if wait <= 0:
            self._update()
        else:
            self._pending = asyncio.get_running_loop().call_later(wait, self._update)

    def _update(self) -> None:
        self._pending = None
        if self._widget is not None:
            self._last_update = time.monotonic()
            self._widget.sync()

    async def _front_end_word(self) -> None:
        """Give a front end that has not said yet that it made the live grid a moment to say so (an experiment
        can end before its word arrives).
        """
        from dagmagic.notebook.display import FRONT_END_WAIT, front_end_known

        if self._widget is None or front_end_known():
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FRONT_END_WAIT
        while not self._widget.front_end and loop.time() < deadline:
            await asyncio.sleep(0.02)

    def _final(self, experiment: Experiment) -> None:
        """The experiment stopped: the live grid's last state and, beside it, the static grid as it ended (what
        the saved notebook keeps); where no front end drew the live grid, the static grid alone.
        """
        from IPython.display import display, update_display

        from dagmagic.notebook.display import front_end_known, marker_of_experiment

        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        metadata = marker_of_experiment(experiment)
        if self._widget is None:
            display(self._static(experiment), raw=True, metadata=metadata)
            return
        self._update()
        drawn = self._widget.front_end or front_end_known()
        bundle = {**self._static(experiment), **(widget_view(self._widget) if drawn else {})}
        update_display(bundle, raw=True, metadata=metadata, display_id=self._display_id)
