"""The opt-in ``python`` tool: model-written code runs in a separate process, never in the kernel.

Only a session created with ``allow_code=True`` has this tool: LLM output is never executed without that
explicit opt-in. The code is untrusted (a prompt-injected model may have written it), so each call:

- is a fresh ``python -I`` process in the session's own working directory, with an allow-listed environment
  (PATH, locale, TZ, certificate paths, what Python needs to start): no provider key, token, secret or cloud
  credential, no ``DAG_*`` variable. HOME and TMPDIR are ``.home`` and ``.tmp`` inside the working directory;
- runs under a supervisor (``_code_supervisor``) that owns every process the script starts and kills them all
  when the script exits, at the timeout and when the call is cancelled: children that left the process group
  with ``setsid()`` and double-forked daemons too (Linux; elsewhere a ``killpg`` of the process group);
- is read while it runs, into a bounded buffer: the first 18,000 and the last 2,000 bytes come back, the bytes
  between are counted (``[output truncated: N more bytes]``). A script that writes more than 64 MiB is killed
  there rather than drained for its whole timeout: no use of this tool needs that much output.

``CodeWorkspace`` owns the working directory and the scripts running in it: a temporary ``dagmagic-code-*``
directory is removed by ``close()`` (``DagSession.close()``), when the workspace is garbage-collected, or at
interpreter exit; a directory the user gave is never removed.

This is not a sandbox: the script runs as the kernel's user, with that user's files and network.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import weakref
from pathlib import Path

from dagmagic.engine.tools import Tool

__all__ = ["CodeWorkspace", "python_tool"]

_OUTPUT_LIMIT = 20000
"""Bytes of a script's output that come back: its head and its tail."""
_TAIL_BYTES = 2000
_HEAD_BYTES = _OUTPUT_LIMIT - _TAIL_BYTES
_FLOOD_BYTES = 64 * 2**20
"""A script that writes more than this is killed."""
_READ_BYTES = 65536
_STOP_GRACE = 2.0
"""Seconds the supervisor has to kill the script's processes before its whole process group is killed."""
_SUPERVISOR = Path(__file__).with_name("_code_supervisor.py")

_PASSED_VARIABLES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "LD_LIBRARY_PATH",  # a Python built with shared libraries elsewhere cannot start without it
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        # Windows: Python and its subprocesses need these to start
        "SYSTEMROOT",
        "WINDIR",
        "COMSPEC",
        "PATHEXT",
    }
)
# even a passed name (a locale variable) is dropped when it looks like it holds a credential
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)


class CodeWorkspace:
    """The ``python`` tool's working directory and the scripts running in it; ``close()`` ends both.

    Without ``workdir`` the directory is a new temporary ``dagmagic-code-*`` one, removed by ``close()``, when
    this object is garbage-collected, or at interpreter exit. A ``workdir`` given is used and never removed.
    """

    def __init__(self, timeout: float, workdir: Path | None = None) -> None:
        self.timeout = timeout
        """Seconds a script may run before it is killed."""
        self.directory = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="dagmagic-code-"))
        """Where scripts run; files they write stay there for later calls."""
        self._running: set[asyncio.subprocess.Process] = set()
        # the finalizer holds no reference to self, so garbage collection can trigger it
        owned = None if workdir is not None else self.directory
        self._finalizer = weakref.finalize(self, _release, self._running, owned)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran (or the workspace was collected): no script runs here any more."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Kill every script still running with all its processes, and remove the directory if it is ours.

        Calling it again does nothing.
        """
        self._finalizer()

    def tool(self) -> Tool:
        """The ``python`` tool, running code in this workspace."""

        async def python(code: str) -> str:
            """Run a Python script in a separate, fresh process and return its exit code and output.

            Print what you need to see: only standard output and standard error come back, at most 20,000
            bytes (the beginning and the end). Files written stay in the working directory for later calls.

            Args:
                code: The complete Python script to run.
            """
            return await self.run(code)

        # the step's own tool timeout must not cut the process short of its kill
        return Tool(python, name="python", timeout=self.timeout + _STOP_GRACE + 3)

    async def run(self, code: str) -> str:
        """Run ``code`` as a script here: its exit code (or why it was killed), then its output."""
        if self.closed:
            raise RuntimeError("the session that owns this python tool is closed; start a new session to run code")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            str(_SUPERVISOR),
            str(os.getpid()),
            sys.executable,
            "-I",
            "-c",
            code,
            cwd=self.directory,
            env=_environment(self.directory),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: the net where the supervisor cannot own orphans
        )
        self._running.add(process)
        output = _Output()
        verdict: str | None = None
        try:
            async with asyncio.timeout(self.timeout):
                if await _read(process, output):
                    verdict = (
                        f"Killed: the script wrote more than {_FLOOD_BYTES // 2**20} MiB of output (printing in a"
                        " loop?); it was stopped there."
                    )
        except TimeoutError:
            verdict = f"Killed: the script ran longer than {self.timeout:g}s (an endless loop?)."
        finally:  # a cancelled call ends its processes too
            await _end(process, output)
            self._running.discard(process)
        if self.closed:
            verdict = "Killed: the session was closed while the script ran."
        return f"{verdict or f'exit code {process.returncode}'}\n{output.text()}"


def python_tool(timeout: float, workdir: Path | None = None) -> Tool:
    """The ``python`` tool, running code in ``workdir`` (a new temporary directory by default).

    The tool owns its ``CodeWorkspace``: a temporary directory goes when the tool is garbage-collected.
    """
    return CodeWorkspace(timeout, workdir).tool()


class _Output:
    """What a script printed, within a bound: its first and last bytes, and how many were in between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = _HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - _TAIL_BYTES)]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        if not dropped:
            return (self.head + self.tail).decode("utf-8", errors="replace")
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        head = decoder.decode(bytes(self.head), final=False)  # a character cut at the end stays in the decoder
        cut_at_head = len(decoder.getstate()[0])
        tail = bytes(self.tail)
        cut_at_tail = next((i for i, byte in enumerate(tail[:4]) if byte & 0xC0 != 0x80), 0)  # not a continuation
        dropped += cut_at_head + cut_at_tail
        return f"{head}\n[output truncated: {dropped} more bytes]\n{tail[cut_at_tail:].decode('utf-8', 'replace')}"


async def _read(process: asyncio.subprocess.Process, output: _Output) -> bool:
    """Read the output to its end as it comes; True when the script wrote too much and reading stopped."""
    assert process.stdout is not None
    while chunk := await process.stdout.read(_READ_BYTES):
        output.add(chunk)
        if output.total > _FLOOD_BYTES:
            return True
    await process.wait()
    return False


async def _drain(process: asyncio.subprocess.Process, output: _Output) -> None:
    assert process.stdout is not None
    while chunk := await process.stdout.read(_READ_BYTES):
        output.add(chunk)
    await process.wait()  # which also waits for the pipe to close


async def _end(process: asyncio.subprocess.Process, output: _Output) -> None:
    """Have the supervisor kill every process of the script, then kill its process group: the net elsewhere."""
    try:
        if process.returncode is None:
            _send(process, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_drain(process, output), _STOP_GRACE)
    finally:  # also when a second cancellation lands while we wait
        _kill_group(process)
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_drain(process, output), _STOP_GRACE)


def _send(process: asyncio.subprocess.Process, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    if not hasattr(os, "killpg"):
        _send(process, signal.SIGTERM)  # Windows: TerminateProcess
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _environment(directory: Path) -> dict[str, str]:
    """The allow-listed variables, with a HOME and a TMPDIR of the script's own."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if (name.upper() in _PASSED_VARIABLES or name.upper().startswith("LC_")) and not _SECRET_NAME.search(name)
    }
    home, temporary = directory / ".home", directory / ".tmp"
    home.mkdir(exist_ok=True)
    temporary.mkdir(exist_ok=True)
    environment.update(
        HOME=str(home),
        USERPROFILE=str(home),
        TMPDIR=str(temporary),
        TEMP=str(temporary),
        TMP=str(temporary),
        PYTHONIOENCODING="utf-8",  # for the Pythons the script starts; ``-I`` ignores it for the script itself
    )
    return environment


def _release(running: set[asyncio.subprocess.Process], directory: Path | None) -> None:
    """Stop the scripts still running, then remove ``directory`` (None: a directory the user gave)."""
    for process in list(running):
        _send(process, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE
    while any(not _has_ended(process) for process in running) and time.monotonic() < deadline:
        time.sleep(0.01)
    if directory is not None:
        for _ in range(3):  # a script killed meanwhile may have written one more file
            shutil.rmtree(directory, ignore_errors=True)
            if not directory.exists():
                return


def _has_ended(process: asyncio.subprocess.Process) -> bool:
    """Whether the supervisor exited (a zombie not yet reaped by the event loop counts); True where unknown."""
    if process.returncode is not None:
        return True
    try:
        return Path(f"/proc/{process.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True
