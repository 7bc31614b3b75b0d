"""DAG_STORE: a path is a SQLite store, a postgresql:// URL a PostgreSQL one, any other URL is refused (never taken
as a path), and a PostgreSQL URL without psycopg says what to install; a URL's password is never shown.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSettings
from dagmagic.errors import ConfigurationError, StoreUnavailable
from dagmagic.store import RunStore
from dagmagic.store_url import StoreURL, store_location


@pytest.mark.parametrize(
    "url", ["mysql://dag:pw-secret@127.0.0.1:3306/db", "http://127.0.0.1/store", "sqlite:///runs.sqlite"]
)
def test_a_url_of_a_scheme_the_store_does_not_support_is_refused_saying_what_dag_store_takes(
    url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAG_STORE", url)
    with pytest.raises(ConfigurationError) as refused:
        DagSettings()
    message = str(refused.value)
    scheme = url.split(":")[0]
    assert (
        message.startswith("DAG_STORE: ") and f"is a {scheme}:// URL, which the run store does not support" in message
    )
    assert "DAG_STORE takes a file path" in message and "postgresql://user@host:5432/database" in message
    assert "pw-secret" not in message
    with pytest.raises(ConfigurationError, match="does not support"):
        DagSettings(store=url)
    with pytest.raises(ConfigurationError, match="does not support"):
        RunStore.open(url)
    assert not os.listdir(tmp_path)  # no directory named after the scheme


def test_a_postgres_url_without_psycopg_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    real = importlib.util.find_spec

    def without_psycopg(name: str, *args: Any) -> Any:
        return None if name == "psycopg" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_psycopg)
    for url in ("postgresql://dag:pw-secret@127.0.0.1:5432/db", "postgres://dag@127.0.0.1/db"):
        assert isinstance(DagSettings(store=url).store_path, StoreURL)
        with pytest.raises(ConfigurationError) as refused:
            RunStore.open(url)
        assert 'pip install "dagmagic[postgres]"' in str(refused.value) and "pw-secret" not in str(refused.value)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://dag:s3cret@db.example:5432/runs", "postgresql://dag:***@db.example:5432/runs"),
        ("postgres://dag@127.0.0.1/runs", "postgres://dag@127.0.0.1/runs"),
        ("postgresql://127.0.0.1/runs?user=dag&password=s3cret", "postgresql://127.0.0.1/runs?user=dag&password=***"),
    ],
)
def test_a_store_url_is_shown_with_its_password_masked(url: str, shown: str) -> None:
    location = store_location(url)
    assert isinstance(location, StoreURL) and location.url == url
    assert str(location) == shown and "s3cret" not in repr(location)


def test_a_path_stays_a_path() -> None:
    assert store_location(".dagmagic/runs.sqlite") == Path(".dagmagic/runs.sqlite")
    assert store_location("C:\\\\runs\\\\runs.sqlite") == Path("C:\\\\runs\\\\runs.sqlite")
    assert DagSettings(store="none").store_path is None


@pytest.mark.parametrize(
    "url", ["postgresql://dag:pw-secret@[bad/db", "postgresql://h/db?user=dag&password=pw-secret&x=1"]
)
def test_a_postgres_url_libpq_cannot_read_is_unavailable_with_its_password_masked(url: str) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreUnavailable) as refused:
        RunStore.open(url)
    message = str(refused.value)
    assert "cannot be reached" in message and "pw-secret" not in message and "***" in message
