"""``%dag models`` and ``%dag config``: what is configured, and settings for later cells."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from dagmagic.errors import ConfigurationError
from dagmagic.notebook._arguments import expand_variables, names
from dagmagic.notebook.session import NO_MODEL_HELP, ROLES, NotebookSession, default_registry

if TYPE_CHECKING:
    from dagmagic.engine import MCPServer
    from dagmagic.llm import ModelRegistry
    from dagmagic.settings import DagSettings

__all__ = ["config", "mcp_servers", "models"]


def models(notebook: NotebookSession, _: str) -> None:
    """``%dag models``: the model of each role, and why it was picked."""
    from dagmagic.llm import ROLE_ENV
    from dagmagic.settings import DagSettings

    if notebook.default_models is not None:
        name, registry = notebook.default_models
        print(_roles(registry))
        print(f"Set with %dag config models={name}; a cell's --models or role options (--smart, ...) choose its own.")
        return
    specs = {role: getattr(notebook.magics, f"{role}_model") for role in ROLES}
    settings = DagSettings(**notebook.overrides)
    if not any(specs.values()) and not any(getattr(settings, f"{r}_model") for r in ROLES):
        try:
            registry = default_registry()
        except UsageError:
            print(NO_MODEL_HELP)
            return
        print(_roles(registry))
        print(f"Picked because {registry.chosen_because}; set DAG_SMART_MODEL (or --smart) to choose.")
        return
    for role in ROLES:
        spec = specs[role] or getattr(settings, f"{role}_model")
        source = "DagMagics" if specs[role] else ROLE_ENV[role]
        print(f"{role:10} {spec or '(falls back)'}" + (f"   [{source}]" if spec else ""))


def _roles(registry: ModelRegistry) -> str:
    """The model of each role, one line each, as ``%dag models`` shows them."""
    lines = []
    for role in ROLES:
        entry = registry.for_role(role)
        target = f" ({entry.target})" if entry.target != entry.name else ""
        fallback = "" if registry.has_role(role) else "   (falls back)"
        lines.append(f"{role:10} {entry.name}{target}{fallback}")
    return "\n".join(lines)


def config(notebook: NotebookSession, rest: str) -> None:
    """``%dag config key=value ...``: settings (and the models, tools and MCP servers) for later cells; alone,
    what is set.
    """
    from dagmagic.settings import DagSettings

    if not rest:
        _say_what_is_set(notebook)
        return
    # %dag takes goals literally (no_var_expand), but a setting's value often lives in a variable (a store
    # path): without this, `store=$path` silently named a file '$path' in the working directory.
    rest = expand_variables(rest, notebook.namespace)
    for pair in shlex.split(rest):
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"%dag config takes key=value pairs, got {pair!r}")
        if key == "mcp":
            notebook.mcp_servers = mcp_servers(value, notebook.namespace)
            print(_mcp_words(notebook.mcp_servers))
            continue
        if key in ("models", "tools"):
            print(_set_models(notebook, value) if key == "models" else _set_tools(notebook, value))
            continue
        if key not in DagSettings.model_fields:
            raise UsageError(f"unknown setting {key!r}; see the configuration reference (docs/configuration.md)")
        before = DagSettings(**notebook.overrides)
        try:
            after = DagSettings(**{**notebook.overrides, key: value})
        except ConfigurationError as exc:
            raise UsageError(str(exc)) from None
        notebook.overrides[key] = value
        was, now = getattr(before, key), getattr(after, key)
        change = f"(was {_shown(key, was)!r})" if was != now else "(unchanged)"
        print(f"{key} = {_shown(key, now)!r} {change}: from the next %%dag cell on.")
        if key == "cache":
            print(_cache_words(after))
        if key in ("cassette", "record"):
            from dagmagic.llm import cassette_words

            print(cassette_words(after))


def _say_what_is_set(notebook: NotebookSession) -> None:
    """``%dag config`` alone: every setting, model, tool and MCP server set with it."""
    if not (notebook.overrides or notebook.mcp_servers or notebook.default_models or notebook.default_tools):
        print("Nothing set with %dag config: the defaults apply, with any DAG_* environment variables.")
    for key, value in sorted(notebook.overrides.items()):
        print(f"{key} = {_shown(key, value)!r}")
    if notebook.default_models is not None:
        print(f"models = {notebook.default_models[0]}")
    if notebook.default_tools is not None:
        print(f"tools = {notebook.default_tools[0]}")
    if notebook.mcp_servers:
        print(f"mcp = {notebook.mcp_servers!r}")


def _set_models(notebook: NotebookSession, value: str) -> str:
    """``models=VAR``: the models of every later cell that chooses none (``none``: back to the usual choice)."""
    if value.strip().lower() in ("", "none"):
        notebook.default_models = None
        return (
            "models = none: later %%dag cells use --models, the role options, DAG_*_MODEL or a provider key, "
            "as without %dag config (see %dag models)."
        )
    name = value.strip()
    held = type(notebook.variable(name, f"models={value}")).__name__
    notebook.default_models = (name, notebook.models_of(name, f"models={value}"))
    return (
        f"models = {name} (a {held}): from the next %%dag cell on, every cell without --models or a role option "
        f"(--smart, ...) uses these models (after assigning {name} anew, run this again):\n"
        + _roles(notebook.default_models[1])
    )


def _set_tools(notebook: NotebookSession, value: str) -> str:
    """``tools=a,b``: the tools of every later cell without ``--tools`` (``none``: no tools)."""
    if value.strip().lower() in ("", "none"):
        notebook.default_tools = None
        return "tools = none: later %%dag cells' steps call only the tools their --tools names (and MCP servers')."
    listed = ", ".join(names(value))
    notebook.default_tools = (listed, notebook.tools_of(value, f"tools={value}"))
    return (
        f"tools = {listed}: from the next %%dag cell on, the steps of every cell without --tools may call them "
        "(a cell's --tools names its own instead)."
    )


def _shown(key: str, value: Any) -> Any:
    """A setting's value as the cell's output shows it (the notebook saves it): a store URL's password masked."""
    from dagmagic.store_url import shown_store

    return shown_store(value) if key == "store" and isinstance(value, str) else value


def mcp_servers(value: str, namespace: dict[str, Any]) -> list[MCPServer]:
    """The servers ``%dag config mcp=VALUE`` names: notebook variables holding ``MCPServer`` values (or lists of
    them), comma-separated; else one URL (http) or command line (stdio); ``none`` or nothing: no server.
    """
    from dagmagic.engine import MCPServer

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
