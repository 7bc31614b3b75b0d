"""How ``DagSettings`` reads the environment and words a bad value (``dagmagic.settings`` is the model itself).

A field lists the variables it is read from in its ``json_schema_extra`` (``env``); ``values_from_env``
collects the variables set for the fields not given as keywords; ``configuration_error`` turns pydantic's
``ValidationError`` into one ``ConfigurationError`` that names each bad value's source and what is accepted.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from dagmagic.errors import ConfigurationError

__all__ = ["configuration_error", "deprecated_env_var", "env", "env_var_names", "values_from_env"]

_SHOWN_CHARS = 40
"""A value longer than this is shown by its start and its length (a pasted blob is not echoed whole)."""


def env(*names: str, deprecated: str | None = None) -> dict[str, Any]:
    """The variables a field is read from, in order; a ``deprecated`` one last, read with a warning."""
    return {"env": [*names, *([deprecated] if deprecated else [])], "deprecated_env": deprecated}


def env_var_names(field: FieldInfo) -> list[str]:
    """The variables ``field`` is read from, in order (its ``env``)."""
    extra = field.json_schema_extra
    names = extra.get("env", []) if isinstance(extra, dict) else []
    return [str(name) for name in names] if isinstance(names, list) else []


def values_from_env(
    fields: Mapping[str, FieldInfo], given: Any, environ: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Field name -> (variable, raw value) for every field not given as a keyword and set in the environment."""
    found: dict[str, tuple[str, str]] = {}
    for name, field in fields.items():
        if name in given:
            continue
        for variable in env_var_names(field):
            if variable in environ:
                found[name] = (variable, environ[variable])
                if variable == deprecated_env_var(field):
                    warnings.warn(
                        f"{variable} is deprecated (other tools use that name too): set {env_var_names(field)[0]} "
                        "instead.",
                        FutureWarning,
                        stacklevel=4,
                    )
                break
    return found


def deprecated_env_var(field: FieldInfo) -> str | None:
    """The deprecated variable ``field`` is still read from, if any."""
    extra = field.json_schema_extra
    deprecated = extra.get("deprecated_env") if isinstance(extra, dict) else None
    return deprecated if isinstance(deprecated, str) else None


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    length = len(value) if isinstance(value, str) else len(text)
    return f"{text[:_SHOWN_CHARS]}… ({length:,} characters)"


_BOUNDS = (
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "<="),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.MinLen, "min_length", "of length >="),
)


def _accepted(field: FieldInfo) -> str:
    """What a field accepts, in words, from its type and constraints."""
    kinds = {int: "an integer", float: "a number", bool: "true or false", str: "text"}
    annotation = field.annotation
    if annotation in kinds:
        words = kinds[annotation]
    elif get_origin(annotation) is Literal:
        words = "one of " + ", ".join(str(choice) for choice in get_args(annotation))
    elif annotation == float | None:
        words = "a number"
    elif annotation == tuple[float, ...]:
        words = "numbers of seconds separated by commas (e.g. 30,120,600)"
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a value per key (llm_max_tokens)
        keys = ", ".join(annotation.model_fields)
        words = f"key=integer pairs separated by commas, an integer >= 1 or off each (keys: {keys}), or off"
    else:
        words = "a litellm model string (e.g. openai/gpt-4.1-mini)"
    bounds = [
        f"{sign} {getattr(meta, attr)}"
        for meta in field.metadata
        for kind, attr, sign in _BOUNDS
        if isinstance(meta, kind)
    ]
    accepted = " ".join([words, " and ".join(bounds)]).strip()
    return f"{accepted}, or none" if annotation == float | None else accepted


def configuration_error(
    exc: ValidationError,
    fields: Mapping[str, FieldInfo],
    from_env: Mapping[str, tuple[str, str]],
    given: Mapping[str, Any],
) -> ConfigurationError:
    """One error naming, for each of ``exc``'s errors, where the bad value came from and what ``fields`` accept."""

    def source_of(name: str) -> str | None:
        if name in from_env:
            variable, raw = from_env[name]
            return f"{variable}={_shown(raw)}"
        if name in given:
            return f"DagSettings({name}={_shown(given[name])})"
        return None

    lines = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else ""
        source = source_of(name)
        if source is None:
            involved = error.get("ctx", {}).get("fields", ())
            sources = [source_of(field) or _left_at_default(fields, field) for field in involved]
            lines.append(
                f"{error['msg']}: from {' and '.join(sources)}." if sources else f"DagSettings: {error['msg']}"
            )
            continue
        if name not in fields:
            lines.append(f"{source}: unknown setting; known settings are {', '.join(sorted(fields))}")
            continue
        field = fields[name]
        default = field.get_default(call_default_factory=True)
        shown = repr(default) if field.default_factory is None else f"'{default}'"
        lines.append(f"{source} is not accepted: expected {_accepted(field)} (default {shown}).")
    return ConfigurationError("\n".join(lines))


def _left_at_default(fields: Mapping[str, FieldInfo], name: str) -> str:
    field = fields[name]
    return f"{name} left at its default {field.default!r} ({env_var_names(field)[0]})"
