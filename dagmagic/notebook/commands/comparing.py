"""``%dag compare A [B] [--rounds N M]``: two runs, two rounds of one, or two configs of an experiment, side by
side (``dagmagic.compare``). ``comparison`` reads the line into the comparison; the notebook shows what it makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from dagmagic.errors import DagError
from dagmagic.notebook._arguments import parse_words
from dagmagic.notebook.session import NotebookSession

if TYPE_CHECKING:
    from dagmagic.side_by_side import ExperimentComparison, RunComparison

__all__ = ["compare", "comparison"]


def compare(notebook: NotebookSession, rest: str) -> RunComparison | ExperimentComparison:
    """``%dag compare A B``: runs A and B side by side; ``%dag compare A``: a run whose latest round re-ran or
    continued from an earlier one, against that round; ``--rounds N M``: round N of A against round M (of B, or of
    A alone); ``%dag compare EXPERIMENT small large``: two configs, case by case (or two cells, by index).
    """
    return comparison(notebook, rest)


def comparison(notebook: NotebookSession, rest: str) -> RunComparison | ExperimentComparison:
    """The comparison ``%dag compare``'s line asks for. A and B: a run's number in ``%dag history``, its id (or
    the start of it), or a name in the notebook bound to a run; an experiment by variable, name or id.
    """
    from dagmagic.evaluation import Experiment
    from dagmagic.side_by_side import compare as compare_runs  # the first %dag command stays quick: imported when used

    args = parse_words("compare", rest, ("a",), (), optional=("b", "c"), pairs=("--rounds",))
    rounds = tuple(args.rounds) if args.rounds else None
    try:
        first = _named(notebook, args.a)
        if isinstance(first, Experiment):
            if args.b is None or args.c is None:
                raise UsageError(
                    f"%dag compare {args.a} needs two configs (or two cells): %dag compare {args.a} small large"
                )
            return compare_runs(first, _cell_or_config(args.b), _cell_or_config(args.c), rounds=rounds)
        if args.c is not None:
            raise UsageError("%dag compare takes two runs, A B; three words are for an experiment: EXPERIMENT a b")
        second = _named(notebook, args.b) if args.b is not None else None
        return compare_runs(first, second, rounds=rounds)
    except (DagError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _named(notebook: NotebookSession, word: str) -> Any:
    """What ``word`` names: a notebook variable holding a run or an experiment, an experiment of this kernel by
    name or id, else a run (``NotebookSession.find``: its number, its id, read back from the store).
    """
    from dagmagic.evaluation import Experiment

    bound = notebook.namespace.get(word)
    if isinstance(bound, Experiment) or hasattr(bound, "state"):
        return bound
    for experiment in reversed(notebook.experiments):
        if word in (experiment.name, experiment.id):
            return experiment
    return notebook.find(word)


def _cell_or_config(word: str) -> str | int:
    return int(word) if word.isdigit() else word
