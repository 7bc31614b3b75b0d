"""Tools from plain Python functions: ``@tool`` or any callable, sync or async.

The name, description and JSON schema come from the signature, type hints and docstring (through a
pydantic model), arguments are validated before the call, and nothing a tool does crashes a step: a
validation error, an exception or a timeout becomes an observation the model can act on. What is not an
``Exception`` (``KeyboardInterrupt``, ``GeneratorExit``, a library's own ``BaseException``) fails the step
instead (``ToolInterrupted``), and never reaches the event loop; the run's own cancellation goes on. Sync
tools run in threads of their own (``dagmagic.engine.tools.threads``), so they never block other steps and a
hung one never starves the model calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import re
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from dagmagic._secrets import mask_secrets
from dagmagic.engine.tools.threads import Late, Outcome, ToolThreads, ToolThreadsExhausted, ToolTimeout
from dagmagic.errors import ConfigurationError
from dagmagic.models import safe_text
from dagmagic.settings import DagSettings

__all__ = [
    "Tool",
    "ToolInterrupted",
    "ToolOutcome",
    "arguments_object",
    "as_tools",
    "capped",
    "computing_name",
    "tool",
]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_COMPUTING = re.compile(r"calc|comput|math|arithm|eval|python", re.IGNORECASE)
_THREADS = ToolThreads()
"""Every sync tool's thread in this process: hung tools are the kernel's concern, whichever session called them."""


@dataclass(frozen=True)
class ToolOutcome:
    """What one call of a tool gave the model."""

    observation: str
    """The text the model sees."""
    error: str | None = None
    """``Type: message`` when the call failed (bad arguments, an exception, a timeout)."""
    duration: float = 0.0
    """Seconds."""

    def __post_init__(self) -> None:
        # every tool's result enters the run here: made storable (a lone surrogate must not drop the run) and
        # masked now, so no key reaches the model, the run or its views
        object.__setattr__(self, "observation", mask_secrets(safe_text(self.observation)))
        if self.error is not None:
            object.__setattr__(self, "error", mask_secrets(safe_text(self.error)))


class ToolInterrupted(Exception):
    """A tool raised a ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``, ``GeneratorExit``, a
    library's own): not a failure the model can act on, so its step fails with this message.
    """

    def __init__(self, name: str, raised: BaseException) -> None:
        detail = f" ({raised})" if str(raised) else ""
        super().__init__(
            f"the tool {name} raised {type(raised).__name__}{detail}, which is not an Exception: the step stopped "
            "there. A tool reports a failure by raising an Exception."
        )
        self.raised = raised


class Tool:
    """A function the step agent may call."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        computes: bool | None = None,
    ) -> None:
        """``computes``: the tool computes with the values it is given (a calculator, a code runner), so
        comparisons and sums over other steps' figures go to it; None infers it from the name (``calculate``,
        ``compute``, ``math``, ``eval``, ``python``, ``arithmetic``).
        """
        self.function = function
        self.name: str = name or str(getattr(function, "__name__", ""))
        summary, params = _parse_docstring(inspect.getdoc(function) or "")
        self.description = description or summary or f"Call {self.name}."
        self.timeout = timeout
        """Seconds one call may take; None uses the session's ``tool_timeout``."""
        self.computes: bool = computing_name(self.name) if computes is None else computes
        """Whether the tool computes with what it is given (figures compared, added, ranked) rather than looks
        something up.
        """
        # an object with an ``async def __call__`` is async too
        self.is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)
        problems = []
        if not _NAME.match(self.name):
            problems.append(
                "a tool name must be letters, digits, '_' or '-' (at most 64), starting with a letter; pass name=..."
            )
        self.arguments_model = _arguments_model(function, self.name, params, problems)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments."""
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        return schema

    def schema(self) -> dict[str, Any]:
        """The tool in the function-calling format litellm speaks."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, as if it were not a tool."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    async def run(
        self,
        arguments: dict[str, Any] | str | None,
        *,
        timeout: float,
        threads: int | None = None,
        late: Late | None = None,
    ) -> ToolOutcome:
        """Validate ``arguments``, call the function, and describe what happened as an observation.

        A sync function runs in a tool thread, at most ``threads`` at once (None: the ``tool_threads``
        default); ``late`` hears of a result that comes after the call timed out (else it is logged).
        """
        started = time.perf_counter()
        limit = self.timeout or timeout
        try:
            values = self._validate(arguments)
        except (ValidationError, ValueError) as exc:
            message = _validation_message(exc) if isinstance(exc, ValidationError) else str(exc)
            return ToolOutcome(
                f"Invalid arguments for {self.name}: {message}. Fix them and call {self.name} again.",
                error=f"{type(exc).__name__}: {message}",
                duration=time.perf_counter() - started,
            )
        scope = asyncio.timeout(limit)
        try:
            if self.is_async:
                async with scope:
                    value = await self.function(**values)
            else:  # a thread of its own: a slow sync tool must not stall the other steps
                threads = threads or DagSettings.model_fields["tool_threads"].default
                value = _raise_or_return(
                    await _THREADS.run(self.name, self.function, values, threads=threads, timeout=limit, late=late)
                )
                if inspect.isawaitable(value):  # a sync wrapper around an async function
                    async with scope:
                        value = await value
        except ToolTimeout as exc:
            return _failed(f"TimeoutError: {exc}", started)
        except ToolThreadsExhausted as exc:
            return _failed(f"ToolThreadsExhausted: {exc}", started)
        # the tool's own failure is information for the model, not a crash; SystemExit too (argparse's
        # error() raises it), which would otherwise stop the event loop itself
        except (Exception, SystemExit) as exc:
            if isinstance(exc, TimeoutError) and scope.expired():
                error = f"TimeoutError: {self.name} did not finish within {limit:g}s"
            else:  # a TimeoutError the tool raised itself is its own failure, not our limit
                error = f"{type(exc).__name__}: {exc}"
            return _failed(error, started)
        except asyncio.CancelledError as exc:
            if _being_cancelled():  # the run's cancellation (or the step's deadline) goes on
                raise
            raise ToolInterrupted(self.name, exc) from exc
        except BaseException as exc:  # left to propagate, a KeyboardInterrupt stops the event loop (the kernel)
            # and any other leaves the step's task dead with the step still "running"
            raise ToolInterrupted(self.name, exc) from exc
        try:
            observation = _observation(value)
        except Exception as exc:  # a broken __repr__ or __str__: the call happened, its result is not readable
            observation = (
                f"{self.name} ran, but its result cannot be shown: making text of its {type(value).__name__} raised "
                f"{type(exc).__name__}: {exc}."
            )
        return ToolOutcome(observation, duration=time.perf_counter() - started)

    def validation_problem(self, arguments: dict[str, Any] | str | None) -> str | None:
        """What is wrong with ``arguments`` for this tool, None when they validate (nothing is called)."""
        try:
            self._validate(arguments)
        except ValidationError as exc:
            return _validation_message(exc)
        except ValueError as exc:
            return str(exc)
        return None

    def _validate(self, arguments: dict[str, Any] | str | None) -> dict[str, Any]:
        model = self.arguments_model.model_validate(arguments_object(arguments))
        return {name: getattr(model, name) for name in type(model).model_fields}


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    computes: bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    computes: bool | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a function a tool: ``@tool`` or ``@tool(name=..., description=..., timeout=..., computes=...)``.

    The result still works as the plain function when called.
    """
    if function is not None:
        return Tool(function)
    return lambda fn: Tool(fn, name=name, description=description, timeout=timeout, computes=computes)


def computing_name(name: str) -> bool:
    """Whether a tool's name says it computes (``calculate``, ``math_eval``, ``python``), for a tool that does not
    say so itself.
    """
    return _COMPUTING.search(name) is not None


def capped(outcome: ToolOutcome, limit: int) -> ToolOutcome:
    """``outcome`` with its observation cut at ``limit`` characters, saying how much was left out."""
    if len(outcome.observation) <= limit:
        return outcome
    omitted = len(outcome.observation) - limit
    text = f"{outcome.observation[:limit]}\n[Observation truncated: {omitted} more characters]"
    return dataclasses.replace(outcome, observation=text)


def as_tools(items: Iterable[Tool | Callable[..., Any]]) -> list[Tool]:
    """Tools from tools and plain callables; duplicate names are refused."""
    tools = [item if isinstance(item, Tool) else Tool(item) for item in items]
    names = [t.name for t in tools]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigurationError(f"two tools share the name {', '.join(repeated)}; rename one with @tool(name=...)")
    return tools


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (first paragraph) and parameter descriptions, by griffe (Google, NumPy or Sphinx style, told
    apart by griffe's own detection).
    """
    summary = " ".join(doc.split("\n\n", 1)[0].split()) if doc else ""
    if summary.startswith((":param", "Args:", "Parameters")):
        summary = ""
    if not doc:
        return summary, {}
    import griffe  # here: 60 ms of import that `%load_ext dagmagic` need not pay

    logging.getLogger("griffe").setLevel(logging.ERROR)  # it warns of missing types: a tool's hints give them
    params: dict[str, str] = {}
    try:
        sections = griffe.Docstring(doc, parser="auto").parse()
    except Exception:  # a docstring griffe cannot read describes no parameter; the tool still works
        return summary, params
    for section in sections:
        if section.kind is griffe.DocstringSectionKind.parameters:
            for parameter in section.value:
                params[parameter.name.lstrip("*")] = " ".join(str(parameter.description or "").split())
    return summary, params


def _arguments_model(
    function: Callable[..., Any], name: str, descriptions: dict[str, str], problems: list[str]
) -> type[BaseModel]:
    """A pydantic model of the function's parameters; every problem (with ``problems``) is reported at once."""
    try:
        signature = inspect.signature(function)
        hints = _type_hints(function)
    except (TypeError, ValueError) as exc:
        problems.append(f"cannot read its signature ({exc})")
        raise ConfigurationError(f"tool {name!r}: " + "; ".join(problems)) from None
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            problems.append(f"{stars}{param.name} cannot be described to a model; name each argument")
            continue
        if param.kind is param.POSITIONAL_ONLY:
            problems.append(f"{param.name} is positional-only; tools are called with keywords")
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=descriptions.get(param.name)))
    if problems:
        raise ConfigurationError(f"tool {name!r}: " + "; ".join(problems))
    try:
        with warnings.catch_warnings():
            # a parameter named like a BaseModel method (json, copy, schema) works; pydantic's warning is noise
            warnings.filterwarnings("ignore", message="Field name .* shadows an attribute", category=UserWarning)
            return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:  # pydantic refuses a type it cannot validate
        raise ConfigurationError(f"tool {name!r}: its argument types cannot be validated ({exc})") from None


def _raise_or_return(outcome: Outcome) -> Any:
    """What a tool thread's call returned, or what it raised raised here: a ``GeneratorExit`` set on a future
    would be thrown into the awaiting task from outside, closing every coroutine it awaits on the way.
    """
    value, raised = outcome
    if raised is not None:
        raise raised
    return value


def _failed(error: str, started: float) -> ToolOutcome:
    return ToolOutcome(f"Error: {error}", error=error, duration=time.perf_counter() - started)


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _type_hints(function: Callable[..., Any]) -> dict[str, Any]:
    import typing

    # a callable object's hints are on its __call__
    target = function if inspect.isroutine(function) or inspect.isclass(function) else type(function).__call__
    try:
        return typing.get_type_hints(target)
    except Exception:  # unresolvable forward references: fall back to the raw annotations
        return dict(getattr(function, "__annotations__", {}))


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']} (got {error.get('input')!r})")
    return "; ".join(parts)


def _observation(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError):
        return repr(value)


def _jsonable(value: Any) -> Any:
    """Models inside a returned list or dict as JSON too, anything else as its ``str``."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else str(value)


def arguments_object(arguments: dict[str, Any] | str | None) -> dict[str, Any]:
    """A call's arguments as the JSON object they must be (a model may send them as text, or none at all);
    ``ValueError`` saying what is wrong otherwise.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments are not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ValueError("the arguments are not valid JSON (nested too deeply)") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"the arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments
