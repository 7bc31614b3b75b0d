"""The configurations an evaluation compares: named variations of the session's models, settings and tools."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from dagmagic.evaluation._session import CellOptions, EvaluationSession
from dagmagic.llm import STANDARD_ROLES, ModelRegistry
from dagmagic.settings import DagSettings

__all__ = ["DEFAULT_CONFIG", "Config", "ConfigDescription", "as_configs", "describe"]

DEFAULT_CONFIG = "default"
"""The name of the session's own configuration, when no configs are given."""

_KEYS = ("models", "settings", "tools")

_NOT_DEFINING = frozenset({"store", "cassette", "record", "runs_in_memory", "cache", "otel", "scorer_timeout"})
"""Settings that say where runs are kept, replayed or traced (or how long scoring may take), not what a cell's run
does: workers (or a resume) may differ in them and still be one experiment. ``store`` may hold a password: it is
never described."""


@dataclass(frozen=True)
class Config:
    """One named configuration: what its cells' runs use instead of the session's own (None: the session's)."""

    name: str
    models: ModelRegistry | None = None
    settings: DagSettings | None = None
    tools: tuple[Any, ...] | None = None

    def options(self) -> CellOptions:
        """The run options of a cell run with this configuration."""
        options: CellOptions = {}
        if self.models is not None:
            options["models"] = self.models
        if self.settings is not None:
            options["settings"] = self.settings
        if self.tools is not None:
            options["tools"] = self.tools
        return options


def as_configs(configs: Mapping[str, Any] | None, session: EvaluationSession) -> list[Config]:
    """The configurations named in ``configs`` (``{"small": {"models": {"smart": "openai/gpt-4o-mini"}}}``), each
    built over the session's own: ``models`` a ``ModelRegistry`` or role → model (a model string or a backend;
    the roles not named fall back among the given models), ``settings`` a ``DagSettings`` or a dict of its fields
    (over the session's settings), ``tools`` what ``DagSession(tools=)`` takes. None: the session's own, named
    ``default``.
    """
    if configs is None:
        return [Config(DEFAULT_CONFIG)]
    if not isinstance(configs, Mapping) or not configs:
        raise TypeError('configs must be a dict of named configurations, like {"small": {"models": {...}}}')
    return [_config(str(name), spec, session) for name, spec in configs.items()]


def _config(name: str, spec: Any, session: EvaluationSession) -> Config:
    if not isinstance(spec, Mapping):
        raise TypeError(f"config {name!r} must be a dict of any of {', '.join(_KEYS)}; got {type(spec).__name__}")
    if unknown := sorted(set(map(str, spec)) - set(_KEYS)):
        raise ValueError(
            f"config {name!r} has {', '.join(map(repr, unknown))}, which a config does not take: "
            f"it takes {', '.join(_KEYS)}"
        )
    models = spec.get("models")
    settings = spec.get("settings")
    tools = spec.get("tools")
    return Config(
        name=name,
        models=None if models is None else _models(name, models),
        settings=None if settings is None else _settings(name, settings, session.settings),
        tools=None if tools is None else tuple(tools),
    )


def _models(name: str, models: Any) -> ModelRegistry:
    if isinstance(models, ModelRegistry):
        return models
    if not isinstance(models, Mapping) or not models:
        raise TypeError(
            f"config {name!r}: models must be a ModelRegistry or a dict of role → model, "
            'like {"smart": "openai/gpt-4o"}'
        )
    by_model: dict[object, tuple[Any, list[str]]] = {}  # one entry per model, serving every role it was named for
    for role, model in models.items():
        by_model.setdefault(model if isinstance(model, str) else ("backend", id(model)), (model, []))[1].append(role)
    registry = ModelRegistry()
    for number, (model, roles) in enumerate(by_model.values(), start=1):
        registry.register(model if isinstance(model, str) else f"{name}-{number}", model, roles)
    return registry


def _settings(name: str, settings: Any, base: DagSettings) -> DagSettings:
    if isinstance(settings, DagSettings):
        return settings
    if not isinstance(settings, Mapping):
        raise TypeError(f"config {name!r}: settings must be a DagSettings or a dict of its fields")
    try:
        return DagSettings.model_validate({**base.model_dump(), **settings})
    except ValidationError as exc:  # its own message names the setting and lists the known ones
        problem = exc.errors()[0]
        where = ".".join(map(str, problem["loc"]))
        raise ValueError(f"config {name!r}: {where + ': ' if where else ''}{problem['msg']}") from None


class ConfigDescription(BaseModel):
    """What a config's cells run with, as its experiment keeps it: given again under the experiment's name, a config
    described otherwise is another definition, which the experiment's cells never answered.
    """

    model_config = ConfigDict(frozen=True)

    models: dict[str, str]
    """Each standard role → its model's name (and what it calls, and its options masked, when there is more)."""
    settings: dict[str, Any]
    """Every setting that shapes a run, as JSON."""
    tools: list[str] | None = None
    """The config's own tools' names; None: the session's."""

    def changes(self, now: ConfigDescription) -> list[str]:
        """What differs in ``now``, one phrase each (``smart model a → b``)."""
        roles: dict[tuple[str, str], list[str]] = {}  # one model often plays every role: said once
        for role in dict.fromkeys([*self.models, *now.models]):
            if (before := self.models.get(role, "none")) != (after := now.models.get(role, "none")):
                roles.setdefault((before, after), []).append(role)
        changed = [f"{', '.join(names)} model {before} → {after}" for (before, after), names in roles.items()]
        changed += [
            f"setting {field} {_shown(self.settings, field)} → {_shown(now.settings, field)}"
            for field in dict.fromkeys([*self.settings, *now.settings])
            if self.settings.get(field) != now.settings.get(field)
        ]
        if self.tools != now.tools:
            changed.append(f"tools {_tools(self.tools)} → {_tools(now.tools)}")
        return changed


def describe(config: Config, session: EvaluationSession) -> ConfigDescription:
    """What ``config``'s cells run with in ``session`` (its own models and settings, else the session's)."""
    registry = config.models if config.models is not None else session.models
    models = {}
    for role in STANDARD_ROLES if len(registry) else ():
        entry = registry.for_role(role).describe()  # options masked: the description is stored
        shown = entry["name"] if entry["model"] == entry["name"] else f"{entry['name']} ({entry['model']})"
        options = f" {json.dumps(entry['options'], sort_keys=True, default=str)}" if entry["options"] else ""
        models[role] = shown + options
    settings = config.settings if config.settings is not None else session.settings
    return ConfigDescription(
        models=models,
        settings=settings.model_dump(mode="json", exclude=set(_NOT_DEFINING)),
        tools=None if config.tools is None else [_tool_name(tool) for tool in config.tools],
    )


def _shown(settings: dict[str, Any], field: str) -> str:
    return json.dumps(settings[field]) if field in settings else "unset"


def _tools(tools: list[str] | None) -> str:
    return "the session's" if tools is None else f"[{', '.join(tools)}]"


def _tool_name(tool: Any) -> str:
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", None) or type(tool).__name__)
