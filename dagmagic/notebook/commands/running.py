"""The subcommands that run the loop: ``%dag resume``, ``rerun``, ``replay`` and ``demo``. Alone in a cell they are
awaited there (the input transformer rewrites them, like a ``%%dag`` cell); these functions are what such a cell
awaits.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from dagmagic.notebook._arguments import names, parse_words
from dagmagic.notebook.commands.steering import act
from dagmagic.notebook.session import NO_STORE, NotebookSession

if TYPE_CHECKING:
    from dagmagic.engine import DagRun
    from dagmagic.store import RunStore

__all__ = ["attach", "demo", "demo_in_background", "fork", "replay", "replay_line", "rerun", "resume"]


async def resume(notebook: NotebookSession, line: str) -> DagRun | None:
    """``%dag resume [RUN] [options]``: continue a stored run that did not end, shown like a cell's run;
    ``%dag resume EXPERIMENT [options]``: run the cells of an experiment that did not end, its grid shown as
    ``%%dag eval --resume EXPERIMENT`` shows it (the options are that cell's: ``--configs``, ``--scorers``, ...).

    The key is a run's number here or whole id, else an experiment's name or id, else the start of a run's id.
    """
    words = shlex.split(line)
    key = words.pop(0) if words and not words[0].startswith("-") else ""
    store = notebook.store()
    if _names_experiment(notebook, store, key):
        await _resume_experiment(notebook, key, words)
        return None
    if store is None:
        path = notebook.settings(notebook.magics.parse("")).store_path
        problem = NO_STORE if path is None else f"there is no run store at {path} yet"
        if key:
            raise UsageError(f"nothing to resume: no experiment {key!r} ran in this kernel, and {problem}")
        raise UsageError(f"nothing to resume: {problem}")
    run_id = notebook.stored_id(store, key)
    summary = store.summary(run_id)
    if summary is None:
        what = f"no run or experiment {key!r}" if run_id == key else f"no run {run_id!r}"
        raise UsageError(f"{what} in the run store {store.path}; `%dag history` lists the stored runs and experiments")
    if not summary.interrupted:
        if summary.driver is not None:
            raise UsageError(
                f"run {run_id} is running ({summary.driver}): wait for it to end, or stop it there; "
                "there is nothing to resume"
            )
        raise UsageError(f"run {run_id} ended ({summary.status}): there is nothing to resume")
    options = shlex.join(words) if words else notebook.options.get(run_id, "")
    args = notebook.magics.parse(options)
    if not words:  # the options of the cell that started it, but awaited here
        args.bg = False
    run = notebook.resume(run_id, args, options)
    return await notebook.magics.present(run, args)


def _names_experiment(notebook: NotebookSession, store: RunStore | None, key: str) -> bool:
    """Whether ``%dag resume KEY`` means an experiment: KEY is not a run's number here nor a stored run's whole id,
    and names (or is the id of) an experiment of this kernel or of the store.
    """
    if not key or (key.isdigit() and 1 <= int(key) <= len(notebook.numbers)):
        return False
    if any(key in (experiment.id, experiment.name) for experiment in notebook.experiments):
        return True
    return store is not None and store.summary(key) is None and store.experiment_id(key) is not None


async def _resume_experiment(notebook: NotebookSession, key: str, words: list[str]) -> None:
    """Run the cells of experiment ``key`` that did not end, as a ``%%dag eval --resume KEY`` cell with the same
    options would.
    """
    from dagmagic.notebook.evaluation_cell import EvalCell

    try:
        cell = EvalCell(notebook, shlex.join(["--resume", key, *words]), "")
    except UsageError as exc:
        detail = str(exc).removeprefix("bad %%dag eval options: ")
        raise UsageError(
            f"%dag resume {key}: {detail}; an experiment takes the options of `%%dag eval --resume` "
            "(--configs VAR, --scorers a,b, --models VAR, --concurrency N, --max-cost USD)"
        ) from None
    await cell.run()


async def rerun(notebook: NotebookSession, line: str) -> DagRun:
    """``%dag rerun STEP [--task TEXT] [--model M] [--run RUN] [--bg]``: re-run a step, shown like a cell's run."""
    args = parse_words("rerun", line, ("step",), ("--task", "--model", "--run"), flags=("--bg",))
    run = notebook.find(args.run or "")
    if run.read_only and run.run_id in notebook.numbers:  # started here, no longer in memory: taken back
        run = notebook.reopen(run)
    act(lambda run: run.start_rerun(args.step, task=args.task, model=args.model), run)
    return await notebook.magics.present(run, args, again=True)


async def replay(notebook: NotebookSession, line: str) -> DagRun:
    """``%dag replay [RUN] [--timing X] [--tools a,b] [--bg]``: re-execute a run with the code, prompts, tools
    and settings of now, its model calls answered from its recording, shown like a cell's run; then one line:
    the same, or where it diverged.
    """
    args = parse_words("replay", line, (), ("--timing", "--tools"), optional=("run",), flags=("--bg",))
    try:
        timing = float(args.timing) if args.timing is not None else None
    except ValueError:
        raise UsageError(
            f"--timing takes a number (1 as recorded, 0.1 ten times faster), got {args.timing!r}"
        ) from None
    original = notebook.find(args.run or "")
    cell = notebook.magics.parse(notebook.options.get(original.run_id, ""))  # the tools and flags it ran with
    if args.tools is not None:
        cell.tools = args.tools
    settings = notebook.settings(cell)
    tools = [notebook.variable(name, "--tools") for name in names(cell.tools)]  # as the notebook defines them now
    try:
        session = notebook.session()
    except UsageError:  # no model is configured: a replay needs none, the session starts on the recording's
        from dagmagic.testing import replay as recorded

        session = notebook.session({"models": recorded(original), "settings": settings})
    allow_code = notebook.magics.allow_code
    run = notebook.numbered(
        lambda: session.start_replay(original, timing=timing, settings=settings, tools=tools, allow_code=allow_code),
        args,
        line,
    )
    await notebook.magics.present(run, args)
    if run.done():
        print(replay_line(run, original, notebook.numbers.index(run.run_id) + 1))
    return run


async def attach(notebook: NotebookSession, line: str) -> DagRun:
    """``%dag attach RUN [--on URL] [--bg] [-o NAME]``: a run on Temporal's workers (``%%dag --on``), followed again
    in this kernel — live while it runs, its controls reaching it — shown like a cell's run and awaited (``--bg``:
    not awaited). ``--on``: its Temporal address, when the store does not say it.
    """
    words = shlex.split(line)
    key = words.pop(0) if words and not words[0].startswith("-") else ""
    if not key:
        raise UsageError("%dag attach needs the run: `%dag attach RUN` (its id, or its number in `%dag history`)")
    args = notebook.magics.parse(shlex.join(words))
    run = notebook.numbered(lambda: notebook.attach(key, args.on), args, "")
    return await notebook.magics.present(run, args)


async def fork(notebook: NotebookSession, line: str) -> DagRun:
    """``%dag fork [RUN] --at STEP [--task TEXT | --result TEXT] [--bg]``: a new run from RUN's state at STEP (its
    task edited, or its result written by you), with the tools and settings RUN's cell had; shown like a cell's run,
    then one line: what it asked anew, and how to compare the two.
    """
    args = parse_words("fork", line, (), ("--at", "--task", "--result"), optional=("run",), flags=("--bg",))
    if not args.at:
        raise UsageError("%dag fork needs the step to fork at: `%dag fork RUN --at s2` (or --at r1.s2)")
    if args.task is not None and args.result is not None:
        raise UsageError("%dag fork takes --task (the step runs again with it) or --result (it does not run), not both")
    original = notebook.find(args.run or "")
    cell = notebook.magics.parse(notebook.options.get(original.run_id, ""))  # the tools and flags it ran with
    settings = notebook.settings(cell)
    tools = [notebook.variable(name, "--tools") for name in names(cell.tools)]
    session = notebook.session()
    allow_code = notebook.magics.allow_code
    run = notebook.numbered(
        lambda: session.start_fork(
            original, args.at, task=args.task, result=args.result, settings=settings, tools=tools,
            allow_code=allow_code,
        ),
        args,
        line,
    )  # fmt: skip
    await notebook.magics.present(run, args)
    if run.done():
        number = notebook.numbers.index(run.run_id) + 1
        calls = f"{len(run.calls)} call{'s' * (len(run.calls) != 1)}"
        print(
            f"Fork of run {original.run_id} at {run.forked_at} ({run.status}): {calls} asked anew, the rest kept. "
            f"`%dag compare {original.run_id} {number}` puts the two side by side."
        )
    return run


def replay_line(replayed: DagRun, original: DagRun, number: int) -> str:
    """What a replay found, in one line, and where to see more."""
    more = f"`%dag diff {number}` (or `replayed.diff(original)`) shows what changed."
    divergence = replayed.divergence
    if divergence is not None:
        said = f"Replay of run {original.run_id} {divergence.summary}"
        return f"{said}{'' if said.endswith('.') else '.'} {more}"
    if replayed.status != "done":
        error = (replayed.error or replayed.status).splitlines()[0]
        return f"Replay of run {original.run_id} ended {replayed.status}: {error}"
    difference = replayed.diff(original)
    calls = f"Replayed {len(replayed.calls)} call{'s' * (len(replayed.calls) != 1)} of run {original.run_id}"
    if difference.identical:
        return f"{calls}: identical answer, steps and verdicts."
    what = "a different answer" if difference.answer_changed else "the same answer"
    return f"{calls}: {what}, but not the same run. {more}"


async def demo(notebook: NotebookSession, _: str) -> DagRun:
    """``%dag demo``: the offline demonstration, like a ``%%dag`` cell."""
    from dagmagic.notebook.demo import run_demo

    return await run_demo(notebook)


def demo_in_background(notebook: NotebookSession, _: str) -> DagRun:
    """``%dag demo`` in a cell that cannot await it (one that also loads dagmagic): started in the background,
    its live view in the cell.
    """
    from dagmagic.notebook.demo import start_demo_in_background

    return start_demo_in_background(notebook)
