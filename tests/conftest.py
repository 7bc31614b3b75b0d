"""Shared test set-up: offline litellm, a clean DAG_* environment, and no network beyond loopback."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

_LOOPBACK = ("127.", "::1", "localhost")
_OLLAMA_DEFAULT_PORT = 11434
# The variables that make dagmagic pick models when none is set: a developer's own must not change outcomes.
_MODEL_DEFAULT_SOURCES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST", "OLLAMA_API_BASE")
_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and self.family in (socket.AF_INET, socket.AF_INET6) and not host.startswith(_LOOPBACK):
        raise ConnectionRefusedError(f"tests may not reach the network (tried {host})")
    if isinstance(address, tuple) and len(address) > 1 and address[1] == _OLLAMA_DEFAULT_PORT:
        raise ConnectionRefusedError("tests may not reach a real Ollama (they serve their own on another port)")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)
    for name in list(os.environ):
        if name.startswith("DAG_") or name == "MAX_CONCURRENCY" or name in _MODEL_DEFAULT_SOURCES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("DAG_STORE", "none")  # tests that save runs name a store of their own
    yield


_CALLBACK_LISTS = ("callbacks", "input_callback", "success_callback", "failure_callback")
_CALLBACK_LISTS += ("_async_success_callback", "_async_failure_callback")


def _router_callbacks() -> set[int]:
    """The ids of the callbacks litellm's Routers registered in its global lists (none before litellm loads)."""
    import sys

    litellm = sys.modules.get("litellm")
    if litellm is None:
        return set()
    return {
        id(callback)
        for name in _CALLBACK_LISTS
        for callback in getattr(litellm, name, [])
        if type(callback).__module__.startswith("litellm.router")
    }


@pytest.fixture(autouse=True)
def _routers_forgotten() -> Iterator[None]:
    """A ``litellm.Router`` puts its strategy's and checks' callbacks in litellm's global lists, where every later
    Router consults them (a usage-based strategy counted a later test's calls under the same deployment id and
    refused them by its own clock): the ones a test's Routers added go when it ends.
    """
    before = _router_callbacks()
    yield
    import sys

    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    added = _router_callbacks() - before
    for name in _CALLBACK_LISTS:
        kept = [callback for callback in getattr(litellm, name, []) if id(callback) not in added]
        setattr(litellm, name, kept)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A throwaway PostgreSQL server on 127.0.0.1 (``tests/postgres_server.py``) for the whole session; skipped
    when PostgreSQL or psycopg is missing, except with DAGMAGIC_REQUIRE_POSTGRES=1 (CI), where that fails.
    """
    from tests.postgres_server import PostgresServer, postgres_problem

    problem = postgres_problem()
    if problem is not None:
        if os.environ.get("DAGMAGIC_REQUIRE_POSTGRES"):  # CI: .ci/run installs both, so missing is a failure
            pytest.fail(f"DAGMAGIC_REQUIRE_POSTGRES is set, but {problem}")
        pytest.skip(problem)
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def temporal() -> Iterator[Any]:
    """A throwaway Temporal dev server on 127.0.0.1 (``tests/temporal_server.py``) for the whole session; skipped
    when the temporal CLI or temporalio is missing, except with DAGMAGIC_REQUIRE_TEMPORAL=1 (CI), where that fails.
    """
    from tests.temporal_server import TemporalServer, temporal_problem

    problem = temporal_problem()
    if problem is not None:
        if os.environ.get("DAGMAGIC_REQUIRE_TEMPORAL"):  # CI: .ci/run installs both, so missing is a failure
            pytest.fail(f"DAGMAGIC_REQUIRE_TEMPORAL is set, but {problem}")
        pytest.skip(problem)
    server = TemporalServer()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def store_path(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    """Where a test's run store is, on each backend: a SQLite file's path, or a fresh PostgreSQL database's URL
    (dropped after the test, its stores closed first).
    """
    if request.param == "sqlite":
        yield tmp_path / "runs.sqlite"
        return
    from dagmagic.store import RunStore

    server = request.getfixturevalue("postgres")
    url = server.database()
    yield url
    for location, store in list(RunStore._opened.items()):
        if str(location).endswith(url.rsplit("/", 1)[1]):
            store.close()
    server.drop(url)
