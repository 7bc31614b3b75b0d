"""The opt-in ``python`` tool: model-written code runs in a separate process, never in the kernel.

Each call is a fresh ``python -I`` process in the session's own working directory, killed with its whole
process group at the timeout. Only a session created with ``allow_code=True`` has this tool: LLM output
is never executed without that explicit opt-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path

from dagmagic.engine.tools import Tool

__all__ = ["python_tool"]

_OUTPUT_LIMIT = 20000


def python_tool(timeout: float, workdir: Path | None = None) -> Tool:
    """The ``python`` tool, running code in ``workdir`` (a new temporary directory by default)."""
    directory = workdir or Path(tempfile.mkdtemp(prefix="dagmagic-code-"))

    async def python(code: str) -> str:
        """Run a Python script in a separate, fresh process and return its exit code and output.

        Print what you need to see: only standard output and standard error come back. Files written
        stay in the working directory for later calls.

        Args:
            code: The complete Python script to run.
        """
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-c",
            code,
            cwd=directory,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group, so the timeout kills its children too
        )
        chunks: list[bytes] = []  # read as it comes, so a killed script still shows what it printed
        try:
            await asyncio.wait_for(_collect(process, chunks), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            _kill(process)
            await process.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            head = f"Killed: the script ran longer than {timeout:g}s (an endless loop?)."
        else:
            head = f"exit code {process.returncode}"
        text = b"".join(chunks).decode("utf-8", errors="replace")
        if len(text) > _OUTPUT_LIMIT:
            text = f"{text[:_OUTPUT_LIMIT]}\n[output truncated: {len(text) - _OUTPUT_LIMIT} more characters]"
        return f"{head}\n{text}"

    # the step's own tool timeout must not cut the process short of its kill
    return Tool(python, name="python", timeout=timeout + 5)


async def _collect(process: asyncio.subprocess.Process, chunks: list[bytes]) -> None:
    assert process.stdout is not None
    while chunk := await process.stdout.read(65536):
        chunks.append(chunk)
    await process.wait()


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
