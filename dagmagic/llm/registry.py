"""``ModelRegistry``: which model plays which role (smart, general, fast, reasoning, or a custom one)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from dagmagic._secrets import is_secret_option, remember_secrets
from dagmagic.errors import ConfigurationError
from dagmagic.llm._litellm import import_litellm
from dagmagic.llm.defaults import default_models, ollama_base_url
from dagmagic.llm.litellm_backend import LiteLLMBackend, is_router, router_deployments
from dagmagic.llm.protocol import Capabilities, ChatBackend
from dagmagic.llm.wrapping import provider_backend

__all__ = ["ROLE_ENV", "STANDARD_ROLES", "ModelEntry", "ModelRegistry"]

STANDARD_ROLES = ("smart", "general", "fast", "reasoning")

ROLE_ENV = {role: f"DAG_{role.upper()}_MODEL" for role in STANDARD_ROLES}

_FALLBACKS: dict[str, tuple[str, ...]] = {
    "smart": ("general",),
    "general": ("smart",),
    "fast": ("general", "smart"),
    "reasoning": ("smart", "general"),
}
_CUSTOM_FALLBACK = ("general", "smart")

_NO_KEY_PROVIDERS = ("bedrock", "sagemaker", "vertex_ai", "ollama", "ollama_chat")
"""Providers whose credentials come from somewhere else (a cloud profile) or that need none."""

NO_MODEL_MESSAGE = (
    "No model is configured. Set DAG_SMART_MODEL (and optionally DAG_GENERAL_MODEL, DAG_FAST_MODEL, "
    "DAG_REASONING_MODEL) to a litellm model string such as 'openai/gpt-4.1-mini' or 'ollama/qwen3', "
    "or pass models=ModelRegistry().register(...). ModelRegistry.from_env() (a DagSession's default) picks "
    "models itself when OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY is set, or when Ollama runs "
    "(OLLAMA_HOST, default 127.0.0.1:11434)."
)


class ModelEntry:
    """One registered model: a name, the roles it plays, how to call it and what it supports."""

    def __init__(
        self,
        name: str,
        target: str,
        backend: ChatBackend,
        roles: tuple[str, ...],
        options: Mapping[str, Any],
        capabilities: Capabilities | None,
        context_window: int | None = None,
    ) -> None:
        self.name = name
        self.target = target
        """What the backend is asked for: a litellm model string, a router group, or ``name``."""
        self.backend = backend
        self.roles = roles
        self.options = dict(options)
        self._capabilities = capabilities
        self.context_window = context_window
        """Input tokens the model accepts, as declared at registration (None: ask litellm, else the default)."""

    @property
    def capabilities(self) -> Capabilities:
        """Declared at registration, else detected once (from litellm's model map for litellm models)."""
        if self._capabilities is None:
            self._capabilities = self.backend.capabilities(self.target)
        return self._capabilities

    def describe(self) -> dict[str, Any]:
        """A summary safe to show or save: secrets in the options are masked."""
        options = {key: "***" if is_secret_option(key) else value for key, value in self.options.items()}
        return {"name": self.name, "model": self.target, "roles": list(self.roles), "options": options}

    def __repr__(self) -> str:
        described = self.describe()
        return f"ModelEntry({described['name']!r}, {described['model']!r}, roles={described['roles']})"


class ModelRegistry:
    """Models by name and role. Missing roles fall back: fast -> general -> smart, reasoning -> smart.

    A registry with one model therefore serves every role with it.
    """

    def __init__(self) -> None:
        self._entries: dict[str, ModelEntry] = {}
        self._roles: dict[str, str] = {}
        self.chosen_because: str | None = None
        """How ``from_env``/``from_settings`` chose the models ("OPENAI_API_KEY is set"); None if built by hand."""

    def register(
        self,
        name: str,
        model: str | ChatBackend | Any,
        roles: Iterable[str] = (),
        *,
        capabilities: Capabilities | Iterable[str] | Mapping[str, bool] | None = None,
        model_group: str | None = None,
        context_window: int | None = None,
        **litellm_kwargs: Any,
    ) -> ModelRegistry:
        """Add a model and return the registry (calls chain).

        ``model`` is a litellm model string (``"openai/gpt-4.1-mini"``), an object implementing
        ``ChatBackend`` (such as ``ScriptedLLM``), or a ``litellm.Router``; for a router, ``model_group``
        names the group to call (optional when the router has one group). ``capabilities`` overrides
        detection, e.g. ``("tool_call", "json_mode")`` for a local server litellm does not know;
        ``context_window`` is the input tokens it accepts (else litellm's figure, else
        ``DagSettings.default_context_tokens``): the context guard keeps every prompt inside it.
        ``litellm_kwargs`` (``api_base``, ``api_key``, ``timeout``...) go to every call.
        """
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"a model needs a non-empty name, got {name!r}")
        if name in self._entries:
            raise ConfigurationError(f"a model named {name!r} is already registered; pick another name")
        if context_window is not None and (not isinstance(context_window, int) or context_window < 256):
            raise ConfigurationError(
                f"model {name!r}: context_window must be a number of tokens (at least 256), got {context_window!r}"
            )
        roles = tuple(roles)
        for role in roles:
            if role in self._roles:
                raise ConfigurationError(
                    f"role {role!r} is already played by {self._roles[role]!r}; "
                    "a role has one model (use a litellm Router to spread one role over deployments)"
                )
        target, backend = _resolve(name, model, model_group)
        remember_secrets(litellm_kwargs)
        if is_router(model):
            for deployment in router_deployments(model):
                remember_secrets(deployment.get("litellm_params") or {})
        declared = Capabilities.of(capabilities) if capabilities is not None else None
        self._entries[name] = ModelEntry(name, target, backend, roles, litellm_kwargs, declared, context_window)
        for role in roles:
            self._roles[role] = name
        return self

    def wrapped(self, wrap: Callable[[ModelEntry], ChatBackend]) -> ModelRegistry:
        """A copy whose entries are answered by ``wrap(entry)`` (a recording, replaying or caching backend around
        the entry's own): names, targets, roles, options, capabilities and context windows stay the same.
        """
        copy = ModelRegistry()
        copy.chosen_because = self.chosen_because
        copy._roles = dict(self._roles)
        for name, entry in self._entries.items():
            copy._entries[name] = ModelEntry(
                entry.name,
                entry.target,
                wrap(entry),
                entry.roles,
                entry.options,
                entry._capabilities,
                entry.context_window,
            )
        return copy

    def get(self, name: str) -> ModelEntry:
        """The entry registered under ``name``."""
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigurationError(
                f"no model named {name!r}; registered: {sorted(self._entries) or 'none'}"
            ) from None

    def for_role(self, role: str | None) -> ModelEntry:
        """The model for ``role`` (None means ``general``), following the fallbacks."""
        if not self._entries:
            raise ConfigurationError(NO_MODEL_MESSAGE)
        role = role or "general"
        for candidate in (role, *_FALLBACKS.get(role, _CUSTOM_FALLBACK)):
            if candidate in self._roles:
                return self._entries[self._roles[candidate]]
        return next(iter(self._entries.values()))

    def has_role(self, role: str) -> bool:
        """Whether a model was registered for exactly this role (no fallback)."""
        return role in self._roles

    @property
    def roles(self) -> dict[str, str]:
        """Role -> entry name, for the roles registered explicitly."""
        return dict(self._roles)

    def __iter__(self) -> Iterator[ModelEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"ModelRegistry({list(self._entries.values())!r})"

    async def warm_up(self) -> None:
        """Prepare every model for a run's first call: each distinct backend's ``warm_up()``, once, where it
        has one (``LiteLLMBackend`` imports litellm in a worker thread; ``ScriptedLLM`` needs nothing).
        """
        warmed: list[object] = []  # by identity: a backend need not be hashable
        for entry in self._entries.values():
            backend = entry.backend
            if any(backend is done for done in warmed):
                continue
            warmed.append(backend)
            warm_up = getattr(backend, "warm_up", None)
            if callable(warm_up):
                outcome = warm_up()
                if inspect.isawaitable(outcome):  # the protocol says async; a plain function is tolerated
                    await outcome

    def missing_credentials(self) -> dict[str, list[str]]:
        """For each litellm model with no key of its own, the key variables litellm says it needs and the
        environment lacks (``validate_environment``); checked before a run makes its first call.
        """
        missing: dict[str, list[str]] = {}
        for entry in self._entries.values():
            backend = provider_backend(entry.backend)
            if not isinstance(backend, LiteLLMBackend) or backend.router is not None:
                continue
            if any(is_secret_option(option) for option in entry.options):
                continue
            if entry.target.split("/", 1)[0] in _NO_KEY_PROVIDERS:
                continue
            litellm = import_litellm()
            provider = entry.target.split("/", 1)[0]
            if getattr(litellm, "api_key", None) or getattr(litellm, f"{provider}_key", None):
                continue  # set on litellm itself (litellm.api_key, litellm.openai_key, ...)
            try:
                report = litellm.validate_environment(model=entry.target)
            except Exception:  # a model litellm cannot place: its first call will say so
                continue
            names = [name for name in report.get("missing_keys") or [] if name.upper().endswith(("_KEY", "_TOKEN"))]
            if names and not report.get("keys_in_environment"):
                missing[entry.name] = names
        return missing

    @classmethod
    def from_settings(cls, settings: Any, environ: Mapping[str, str] | None = None) -> ModelRegistry:
        """The registry the settings' ``smart_model`` ... ``reasoning_model`` describe; with none of them set,
        the defaults ``environ`` (the process environment) offers, as in ``from_env``.
        """
        chosen = {role: (f"{role}_model", getattr(settings, f"{role}_model") or "") for role in STANDARD_ROLES}
        return cls._chosen_or_default(chosen, os.environ if environ is None else environ)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ModelRegistry:
        """One entry per distinct model named by ``DAG_SMART_MODEL``, ``DAG_GENERAL_MODEL``,
        ``DAG_FAST_MODEL`` and ``DAG_REASONING_MODEL``; the same model string serves all its roles.

        Any of them set is the user's choice: missing roles fall back among those models. With none set,
        models are picked from the first provider key found, else a local Ollama (``dagmagic.llm.defaults``),
        and ``chosen_because`` says which; with nothing found, a ``ConfigurationError`` says how to choose.
        """
        environ = os.environ if environ is None else environ
        chosen = {role: (variable, environ.get(variable, "")) for role, variable in ROLE_ENV.items()}
        return cls._chosen_or_default(chosen, environ)

    @classmethod
    def _chosen_or_default(cls, chosen: Mapping[str, tuple[str, str]], environ: Mapping[str, str]) -> ModelRegistry:
        """``chosen``: role -> (where it is set, the model or ""); the defaults only when no model is chosen."""
        chosen = {role: (where, model.strip()) for role, (where, model) in chosen.items() if model.strip()}
        registry = cls()
        if chosen:
            for model, roles in _by_model({role: model for role, (_, model) in chosen.items()}).items():
                registry.register(model, model, roles=roles)
            named = [where for where, _ in chosen.values()]
            registry.chosen_because = f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} set"
            return registry
        defaults = default_models(environ)
        if defaults is None:
            where = ollama_base_url(environ)
            raise ConfigurationError(f"{NO_MODEL_MESSAGE} None of those keys is set and no Ollama answered at {where}.")
        for model, roles in _by_model(defaults.roles).items():
            registry.register(model, model, roles=roles, **defaults.options)
        registry.chosen_because = defaults.chosen_because
        return registry


def _by_model(models: Mapping[str, str]) -> dict[str, list[str]]:
    """Role -> model, turned into model -> its roles: one entry per distinct model."""
    roles_of: dict[str, list[str]] = {}
    for role, model in models.items():
        roles_of.setdefault(model, []).append(role)
    return roles_of


def _resolve(name: str, model: Any, model_group: str | None) -> tuple[str, ChatBackend]:
    if isinstance(model, str):
        if not model.strip():
            raise ConfigurationError(f"model {name!r}: the model string is empty")
        return model.strip(), LiteLLMBackend()
    if is_router(model):
        groups = sorted({deployment["model_name"] for deployment in router_deployments(model)})
        group = model_group or (groups[0] if len(groups) == 1 else None)
        if group not in groups:
            raise ConfigurationError(f"model {name!r}: pass model_group= naming one of the router's groups {groups}")
        return str(group), LiteLLMBackend(router=model)
    if isinstance(model, ChatBackend):
        return name, model
    raise ConfigurationError(
        f"model {name!r}: expected a litellm model string, a litellm.Router or a ChatBackend "
        f"(like ScriptedLLM), got {type(model).__name__}"
    )
