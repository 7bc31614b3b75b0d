"""A throwaway ``redis-server`` on 127.0.0.1 for the tests of shared rate limits: a free port, nothing written to
disk, stopped at the end.

Debian's ``redis-server`` and the ``redis`` Python package (litellm's client) are needed; without either the test
is skipped, or fails when ``DAGMAGIC_REQUIRE_REDIS`` is set (``.ci/run`` installs both and sets it).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

START_SECONDS = 10.0
"""How long redis-server may take to answer PING (it takes milliseconds)."""


def _missing() -> str | None:
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (Debian: apt-get install redis-server; bash .ci/run installs it)"
    if importlib.util.find_spec("redis") is None:
        return "the redis Python package is not installed (pip install 'dagmagic[redis]')"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server() -> Iterator[int]:
    """A ``redis-server`` on 127.0.0.1 with no persistence; its port."""
    problem = _missing()
    if problem is not None:
        if os.environ.get("DAGMAGIC_REQUIRE_REDIS"):  # CI: .ci/run installs them, so missing is a failure
            pytest.fail(problem)
        pytest.skip(problem)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="dagmagic-redis-") as folder:
        log = Path(folder) / "redis.log"
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--dir", folder, "--logfile", str(log)]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_SECONDS
            while not _answers(port):
                if server.poll() is not None or time.monotonic() > deadline:
                    said = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    pytest.fail(f"redis-server did not start on 127.0.0.1:{port}:\n{said}")
                time.sleep(0.05)
            yield port
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
