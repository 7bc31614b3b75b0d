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
    from dagmagic.settings import DagSettings

__all__ = ["config", "mcp_servers", "models"]


def models(notebook: NotebookSession, _: str) -> None:
    """``%dag models``: the model of each role, and why it was picked."""
    from dagmagic.llm import ROLE_ENV
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

    if not rest:
        if not notebook.overrides and not notebook.mcp_servers:
            print("Nothing set with %dag config: the defaults apply, with any DAG_* environment variables.")
        for key, value in sorted(notebook.overrides.items()):
            print(f"{key} = {_shown(key, value)!r}")
        if notebook.mcp_servers:
            print(f"mcp = {notebook.mcp_servers!r}")
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
        if key not in DagSettings.model_fields:
            raise UsageError(f"unknown setting {key!r}; see the README's configuration table")
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
