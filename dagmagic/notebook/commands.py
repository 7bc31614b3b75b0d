"""The ``%dag`` subcommands: each a function of the kernel's ``NotebookSession`` and the rest of the line.

``resume``, ``rerun``, ``replay`` and ``demo`` run the loop: alone in a cell they are awaited there (the input
transformer rewrites them, like a ``%%dag`` cell); these functions are what such a cell awaits.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from dagmagic.errors import ConfigurationError, DagError
from dagmagic.notebook.session import NO_MODEL_HELP, NO_STORE, ROLES, NotebookSession, default_registry, names

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun
    from dagmagic.engine.tools.mcp import MCPServer
    from dagmagic.settings import DagSettings
    from dagmagic.store import RunStore
    from dagmagic.store.experiments import ExperimentSummary

__all__ = ["COMMANDS", "dispatch", "replay", "replay_line", "rerun", "resume", "settings_told_in_one_line"]

_HISTORY_ROWS = 20
_EXPERIMENT_ROWS = 10
_NOT_DONE = ("failed", "running", "cancelled", "pending", "not_started")
"""Cell statuses ``%dag history`` counts after the done ones, in this order."""

Command = Callable[[NotebookSession, str], Any]


def dispatch(notebook: NotebookSession, line: str) -> Any:
    """Run ``%dag <subcommand> ...``."""
    words = shlex.split(line) if line.strip() else []
    if not words:
        raise UsageError(f"%dag needs a subcommand: {', '.join(COMMANDS)} (see %dag?)")
    command, rest = words[0], line.strip()[len(words[0]) :].strip()
    handler = COMMANDS.get(command)
    if handler is None:
        raise UsageError(f"unknown %dag subcommand {command!r}; known: {', '.join(COMMANDS)}")
    with settings_told_in_one_line():
        return handler(notebook, rest)


@contextmanager
def settings_told_in_one_line() -> Iterator[None]:
    """A bad ``DAG_*`` value met by any subcommand is the user's to fix: one line, as ``%%dag`` says it."""
    try:
        yield
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None


# --- what is configured


def models(notebook: NotebookSession, _: str) -> None:
    """``%dag models``: the model of each role, and why it was picked."""
    from dagmagic.llm.registry import ROLE_ENV
    from dagmagic.settings import DagSettings

    specs = {role: getattr(notebook.magics, f"{role}_model") for role in ROLES}
    settings = DagSettings(**notebook.overrides)
    if not any(specs.values()) and not any(getattr(settings, f"{r}_model") for r in ROLES):
        try:
            registry = default_registry()
        except UsageError:
            print(NO_MODEL_HELP)
            return
        for role in ROLES:
            fallback = "" if registry.has_role(role) else "   (falls back)"
            print(f"{role:10} {registry.for_role(role).name}{fallback}")
        print(f"Picked because {registry.chosen_because}; set DAG_SMART_MODEL (or --smart) to choose.")
        return
    for role in ROLES:
        spec = specs[role] or getattr(settings, f"{role}_model")
        source = "DagMagics" if specs[role] else ROLE_ENV[role]
        print(f"{role:10} {spec or '(falls back)'}" + (f"   [{source}]" if spec else ""))


def config(notebook: NotebookSession, rest: str) -> None:
    """``%dag config key=value ...``: settings for later cells; alone, what is set."""
    from dagmagic.settings import DagSettings
    from dagmagic.store_url import StoreURL

    if not rest:
        if not notebook.overrides and not notebook.mcp_servers:
            print("Nothing set with %dag config: the defaults apply, with any DAG_* environment variables.")
        for key, value in sorted(notebook.overrides.items()):
            shown = str(StoreURL(value)) if key == "store" and isinstance(value, str) else value  # its password
            print(f"{key} = {shown!r}")
        if notebook.mcp_servers:
            print(f"mcp = {notebook.mcp_servers!r}")
        return
    # %dag takes goals literally (no_var_expand), but a setting's value often lives in a variable (a store
    # path): without this, `store=$path` silently named a file '$path' in the working directory.
    rest = _expand_variables(rest, notebook.namespace)
    for pair in shlex.split(rest):
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"%dag config takes key=value pairs, got {pair!r}")
        if key == "mcp":
            notebook.mcp_servers = mcp_servers(value, notebook.namespace)
            print(_mcp_words(notebook.mcp_servers))
            continue
        if key not in DagSettings.model_fields:
            raise UsageError(f"unknown setting {key!r}; see the README's configuration table")
        before = DagSettings(**notebook.overrides)
        try:
            after = DagSettings(**{**notebook.overrides, key: value})
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        notebook.overrides[key] = value
        was, now = getattr(before, key), getattr(after, key)
        change = f"(was {was!r})" if was != now else "(unchanged)"
        print(f"{key} = {now!r} {change}: from the next %%dag cell on.")
        if key == "cache":
            print(_cache_words(after))
        if key in ("cassette", "record"):
            from dagmagic.llm.replay import cassette_words

            print(cassette_words(after))


def mcp_servers(value: str, namespace: dict[str, Any]) -> list[MCPServer]:
    """The servers ``%dag config mcp=VALUE`` names: notebook variables holding ``MCPServer`` values (or lists of
    them), comma-separated; else one URL (http) or command line (stdio); ``none`` or nothing: no server.
    """
    from dagmagic.engine.tools.mcp import MCPServer

    value = value.strip()
    if value.lower() in ("", "none"):
        return []
    parts = names(value)
    if all(part in namespace for part in parts):
        servers: list[MCPServer] = []
        for part in parts:
            held = namespace[part]
            found = list(held) if isinstance(held, list | tuple) else [held]
            if not found or not all(isinstance(item, MCPServer) for item in found):
                raise UsageError(
                    f"mcp={part}: {part} is a {type(held).__name__}, not an MCPServer; define it with "
                    "MCPServer.stdio(command, *args) or MCPServer.http(url), or give mcp a command line or a URL"
                )
            servers.extend(found)
        return list(dict.fromkeys(servers))
    try:
        return [MCPServer.parse(value)]
    except ValueError as exc:
        raise UsageError(f"mcp={value}: {exc}") from None


def _mcp_words(servers: list[MCPServer]) -> str:
    if not servers:
        return "mcp = []: later %%dag cells use no MCP server (one already started stops with the kernel)."
    return (
        f"mcp = {servers!r}: from the next %%dag cell on, its steps may call their tools. Each server starts "
        "with the first cell that needs it and serves every later one; it stops with the kernel."
    )


def _cache_words(settings: DagSettings) -> str:
    """What the ``cache`` setting now means, in words."""
    path = settings.cache_path
    if path is None:
        return "Model calls are not cached: every request goes to its provider."
    return (
        f"A request identical to one already answered (same model, messages, tools and parameters) is answered "
        f"again from {path} with no call and no cost; delete the file to empty it."
    )


# --- runs: listing, showing, comparing


def history(notebook: NotebookSession, _: str) -> None:
    """``%dag history``: the stored runs (or, without a store, this kernel's), then the experiments."""
    from dagmagic.engine.run.queries import STOPPED_BY_YOU
    from dagmagic.store.experiments import ExperimentSummary
    from dagmagic.store.lease import HOST

    store = notebook.store()
    numbers = {run_id: number for number, run_id in enumerate(notebook.numbers, 1)}
    if store is None:
        if not notebook.runs:
            print("No runs yet.")
        for run in notebook.runs:
            print(
                _history_line(
                    numbers.get(run.run_id), run.run_id, run.status_words, run.state.started_at, run.cost, run.goal
                )
            )
        _experiments_history(
            ExperimentSummary(
                experiment.id,
                experiment.name,
                experiment.definition.created_at,
                dict(Counter(cell.status for cell in experiment.cells)),
                _total(cell.cost for cell in experiment.cells),
            )
            for experiment in reversed(notebook.experiments[-_EXPERIMENT_ROWS:])
        )
        return
    summaries = store.runs(limit=_HISTORY_ROWS)
    if not summaries:
        print(f"No runs yet in {store.path}.")
    shared = any(summary.host != HOST for summary in summaries)  # a team's store: say which machine ran each
    for summary in summaries:
        status = "interrupted" if summary.interrupted else STOPPED_BY_YOU if summary.stopped_by_user else summary.status
        number = numbers.get(summary.run_id)
        host = summary.host if shared else None
        print(_history_line(number, summary.run_id, status, summary.started_at, summary.cost, summary.goal, host))
    if any(summary.interrupted for summary in summaries):
        print("`%dag resume RUN` continues an interrupted run.")
    _experiments_history(store.experiments(limit=_EXPERIMENT_ROWS))


def _experiments_history(summaries: Iterable[ExperimentSummary]) -> None:
    """The second part of ``%dag history``: the latest experiments (none: nothing is said)."""
    listed = list(summaries)
    if not listed:
        return
    print("Experiments:")
    for summary in listed:
        statuses = summary.statuses
        others = "".join(
            f" · {statuses[status]} {status.replace('_', ' ')}" for status in _NOT_DONE if statuses.get(status)
        )
        cells = f"{statuses.get('done', 0)} of {summary.cells} cells done{others}"
        price = f"${summary.cost:.4f}" if summary.cost is not None else "-"
        print(f"     {summary.experiment_id}  {summary.name[:24]:24}  {when(summary.created_at)}  {price:>9}  {cells}")
    unfinished = next((summary for summary in listed if summary.finished < summary.cells), None)
    if unfinished is not None:
        print(f"`%dag resume {unfinished.name}` runs the cells of an experiment that did not end.")


def _total(costs: Iterable[float | None]) -> float | None:
    known = [cost for cost in costs if cost is not None]
    return sum(known) if known else None


def show(notebook: NotebookSession, rest: str) -> None:
    """``%dag show [RUN]``: the run's view again."""
    from dagmagic.notebook.display import show_live

    show_live(notebook.find(rest))


def trace(notebook: NotebookSession, rest: str) -> None:
    """``%dag trace [RUN]``: every LLM call of the run."""
    from dagmagic.notebook.progress import trace_table

    print(trace_table(notebook.find(rest)))


def diff(notebook: NotebookSession, rest: str) -> Any:
    """``%dag diff A B [RUN]``: what changed between two rounds; ``%dag diff RUN``: between a replay and the run
    it replays.
    """
    words = shlex.split(rest)
    if len(words) == 1:
        replayed = notebook.find(words[0])
        if replayed.replay_of is None:
            raise UsageError(
                f"run {replayed.run_id} replays no run: `%dag diff RUN` compares a replay with its original; "
                "`%dag diff A B [RUN]` compares two rounds"
            )
        return replayed.diff(notebook.find(replayed.replay_of))
    args = parse_words("diff", rest, ("a", "b"), (), optional=("run",))
    run = notebook.find(args.run or "")
    try:
        return run.diff(int(args.a), int(args.b))
    except ValueError:
        raise UsageError(f"%dag diff takes two round numbers, got {args.a!r} and {args.b!r}") from None
    except DagError as exc:
        raise UsageError(str(exc)) from None


def export(notebook: NotebookSession, rest: str) -> None:
    """``%dag export PATH``: a copy of the run store that is safe to move, share or back up."""
    args = parse_words("export", _expand_variables(rest, notebook.namespace), ("PATH",), ())
    store = notebook.store()
    if store is None:
        path = notebook.settings(notebook.magics.parse("")).store_path
        raise UsageError(f"nothing to export: {NO_STORE if path is None else f'there is no run store at {path} yet'}")
    try:
        target = store.export(args.PATH)
    except DagError as exc:
        raise UsageError(str(exc)) from None
    print(f"Copied the run store {store.path} to {target}.")


# --- the user's word to a running run


def _act(action: Callable[[DagRun], object], run: DagRun) -> None:
    try:
        action(run)
    except (DagError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def approve(notebook: NotebookSession, rest: str) -> None:
    """``%dag approve [RUN]``: run the plan waiting for approval."""
    _act(lambda run: run.approve(), notebook.waiting(rest))


def reject(notebook: NotebookSession, rest: str) -> None:
    """``%dag reject WHY``: plan again, told why."""
    if not rest:
        raise UsageError("%dag reject needs the reason, e.g. %dag reject use one step per country")
    _act(lambda run: run.reject(rest), notebook.waiting(""))


def continue_(notebook: NotebookSession, rest: str) -> None:
    """``%dag continue [STEP]``: run the paused step, on to the next breakpoint."""
    _act(lambda run: run.resume_step(rest or None), notebook.running())


def step(notebook: NotebookSession, rest: str) -> None:
    """``%dag step [STEP]``: run the paused step, then pause before the next one."""
    _act(lambda run: run.step_over(rest or None), notebook.running())


def skip(notebook: NotebookSession, rest: str) -> None:
    """``%dag skip STEP``: skip a paused step, or one not started."""
    if not rest:
        raise UsageError("%dag skip needs the step's id, e.g. %dag skip s3")
    _act(lambda run: run.skip(rest), notebook.running())


def stop(notebook: NotebookSession, _: str) -> None:
    """``%dag stop``: answer now from what completed."""
    _act(lambda run: run.stop(), notebook.running())


def followup(notebook: NotebookSession, rest: str) -> None:
    """``%dag followup TEXT``: steer the running run."""
    if not rest:
        raise UsageError("%dag followup needs the text of the follow-up")
    _act(lambda run: run.follow_up(rest), notebook.running())


# --- commands that run the loop: awaited alone in their cell


def _awaited(command: str, work: Callable[[NotebookSession, str], Coroutine[Any, Any, Any]]) -> Command:
    def run_here(notebook: NotebookSession, rest: str) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a terminal without autoawait: run it here, to the end
            return asyncio.run(work(notebook, rest))
        raise UsageError(f"run `%dag {command}` alone in its cell (it is awaited there)")

    return run_here


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
    _act(lambda run: run.start_rerun(args.step, task=args.task, model=args.model), run)
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
        from dagmagic.store.replay import replay as recorded

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


COMMANDS: dict[str, Command] = {
    "models": models,
    "config": config,
    "history": history,
    "show": show,
    "resume": _awaited("resume", resume),
    "rerun": _awaited("rerun", rerun),
    "replay": _awaited("replay", replay),
    "approve": approve,
    "reject": reject,
    "continue": continue_,
    "step": step,
    "skip": skip,
    "diff": diff,
    "stop": stop,
    "followup": followup,
    "trace": trace,
    "export": export,
    "demo": _awaited("demo", demo),
}
"""Every subcommand, in the order ``%dag?`` lists them."""


# --- helpers


def parse_words(
    command: str,
    line: str,
    positional: tuple[str, ...],
    options: tuple[str, ...],
    optional: tuple[str, ...] = (),
    flags: tuple[str, ...] = (),
) -> Any:
    """A subcommand's arguments, or a ``UsageError`` that shows its usage."""
    parser = argparse.ArgumentParser(prog=f"%dag {command}", add_help=False, exit_on_error=False)
    for name in positional:
        parser.add_argument(name)
    for name in optional:
        parser.add_argument(name, nargs="?")
    for option in options:
        parser.add_argument(option)
    for flag in flags:
        parser.add_argument(flag, action="store_true")
    try:
        return parser.parse_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit, ValueError) as exc:
        detail = f": {exc}" if isinstance(exc, argparse.ArgumentError) else ""
        raise UsageError(f"{parser.format_usage().strip()}{detail}") from None


def _expand_variables(text: str, namespace: dict[str, Any]) -> str:
    """``$name`` and ``{expression}`` from the notebook's namespace, as IPython expands other magics' lines;
    the text as written when it does not expand.
    """
    from IPython.utils.text import DollarFormatter

    try:
        return DollarFormatter().vformat(text, args=[], kwargs=namespace)
    except Exception:
        return text


def when(timestamp: float | None) -> str:
    """A timestamp as ``%dag history`` shows it."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp)) if timestamp else "-"


def _history_line(
    number: int | None,
    run_id: str,
    status: str,
    started: float | None,
    cost: float | None,
    goal: str,
    host: str | None = None,
) -> str:
    price = f"${cost:.4f}" if cost is not None else "-"
    machine = f"{host[:20]:20}  " if host is not None else ""
    return f"{number or '':>3}  {run_id}  {status:14}  {when(started)}  {price:>9}  {machine}{goal[:60]!r}"
