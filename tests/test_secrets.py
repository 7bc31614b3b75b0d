"""The secrets masking knows of the environment are worked out again only when the environment changed: a change
through ``os.environ`` (or ``os.environ`` replaced) is seen by the next mask, and no mask reads the environment
otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from dagmagic import _secrets
from dagmagic._secrets import mask_known_secrets, mask_secrets

KEY = "env0secret0value0for0masking0tests"
OTHER = "another0secret0value0of0that0variable"


@pytest.fixture
def environment_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times masking has read the environment's variables since."""
    mask_secrets("warm up: os.environ watched from now on")
    watched = type(os.environ)
    assert watched is _secrets._WatchedEnviron
    reads: list[int] = []
    items = watched.items

    def counted(self: Any) -> Any:
        reads.append(1)
        return items(self)

    monkeypatch.setattr(watched, "items", counted)
    yield reads


def test_masking_reads_the_environment_again_only_once_it_changed(
    environment_reads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    mask_secrets("pytest changed PYTEST_CURRENT_TEST as the test began: read once")
    environment_reads.clear()
    for _ in range(1000):
        assert mask_secrets(f"a step's result with {KEY} in it") == f"a step's result with {KEY} in it"
    assert environment_reads == []  # a thousand masks, the environment never read
    monkeypatch.setenv("ACME_SERVICE_TOKEN", KEY)  # what os.environ["ACME_SERVICE_TOKEN"] = ... in a cell does
    assert mask_secrets(f"a step's result with {KEY} in it") == "a step's result with *** in it"
    assert mask_known_secrets(KEY) == "***"
    assert len(environment_reads) == 1  # read once, for the change


def test_every_way_of_changing_the_environment_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    text = f"{KEY} {OTHER}"
    assert mask_secrets(text) == text
    monkeypatch.setitem(os.environ, "ACME_API_KEY", KEY)
    assert mask_secrets(text) == f"*** {OTHER}"
    monkeypatch.setitem(os.environ, "ACME_API_KEY", OTHER)  # a key replaced: the old value is no secret now
    assert mask_secrets(text) == f"{KEY} ***"
    os.environ.pop("ACME_API_KEY")
    assert mask_secrets(text) == text
    os.environ.update({"ACME_TOKEN": KEY})
    assert mask_secrets(text) == f"*** {OTHER}"
    os.environ.setdefault("ACME_SECRET", OTHER)
    assert mask_secrets(text) == "*** ***"
    del os.environ["ACME_TOKEN"], os.environ["ACME_SECRET"]
    assert mask_secrets(text) == text
    monkeypatch.setitem(os.environb, b"ACME_PASSWORD", OTHER.encode())  # os.environb shares os.environ's variables
    assert mask_secrets(text) == f"{KEY} ***"


def test_a_mapping_put_in_place_of_os_environ_is_read_as_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    replaced = {"HOME": "/home/someone", "ACME_API_KEY": KEY}
    monkeypatch.setattr(os, "environ", replaced)
    assert mask_secrets(f"{KEY} {OTHER}") == f"*** {OTHER}"
    replaced["ACME_TOKEN"] = OTHER  # a plain dict says nothing of its changes: it is compared with a copy
    assert mask_secrets(f"{KEY} {OTHER}") == "*** ***"


def test_the_watched_environment_is_still_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    mask_secrets("x")
    assert isinstance(os.environ, os._Environ) and repr(os.environ).startswith("environ({")
    monkeypatch.setenv("DAGMAGIC_TEST_VARIABLE", "seen by a child process")
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['DAGMAGIC_TEST_VARIABLE'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "seen by a child process"
    assert os.getenv("DAGMAGIC_TEST_VARIABLE") == "seen by a child process"
