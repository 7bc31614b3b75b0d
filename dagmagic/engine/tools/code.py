"""The opt-in ``python`` tool: model-written code runs in a separate process, never in the kernel.

Only a session created with ``allow_code=True`` has this tool: LLM output is never executed without that
explicit opt-in. The code is untrusted (a prompt-injected model may have written it), so each call:

- is a fresh ``python -I`` process in the session's own working directory, with an allow-listed environment
  (PATH, locale, TZ, certificate paths, what Python needs to start): no provider key, token, secret or cloud
  credential, no ``DAG_*`` variable. HOME and TMPDIR are ``.home`` and ``.tmp`` inside the working directory;
- runs in a sandbox where bubblewrap can run (``_code_sandbox``): its own PID namespace (no other process
  visible, the kernel included), no network unless ``DAG_CODE_NETWORK=1``, a read-only view of the system and
  its working directory the only place it can write. Where no sandbox can be used (``sandbox_problem`` says
  why), the tool refuses to run scripts unless the user opted in (``without_sandbox``, the setting
  ``code_without_sandbox``): a script would run as the kernel's user, with that user's files, network and a
  view of its processes (the kernel's keys in ``/proc``);
- runs under a supervisor (``_code_supervisor``) that owns every process the script starts and kills them all
  when the script exits, at the timeout and when the call is cancelled: children that left the process group
  with ``setsid()`` and double-forked daemons too, and those of a script that kills its supervisor (Linux;
  elsewhere a ``killpg`` of the process group). The call ends when the supervisor does, whoever still holds
  the output pipe;
- is read while it runs, into a bounded buffer: the first 18,000 and the last 2,000 bytes come back, the bytes
  between are counted (``[output truncated: N more bytes]``). A script that writes more than 64 MiB is killed
  there rather than drained for its whole timeout: no use of this tool needs that much output.

``CodeWorkspace`` owns the working directory and the scripts running in it: a temporary ``dagmagic-code-*``
directory is removed by ``close()`` (``DagSession.close()``), when the workspace is garbage-collected, or at
interpreter exit; a directory the user gave is never removed.
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

from dagmagic.engine.tools import _code_sandbox
from dagmagic.engine.tools.functions import Tool

__all__ = ["CodeWorkspace", "python_tool"]

_OUTPUT_LIMIT = 20000
"""Bytes of a script's output that come back: its head and its tail."""
_TAIL_BYTES = 2000
_HEAD_BYTES = _OUTPUT_LIMIT - _TAIL_BYTES
_FLOOD_BYTES = 64 * 2**20
"""A script that writes more than this is killed."""
_READ_BYTES = 65536
_EXIT_POLL = 0.05
"""Seconds between looks at whether the supervisor ended (``Process.wait`` waits for the pipe to close too)."""
_LAST_OUTPUT = 1.0
"""Seconds the output is read on after the supervisor ended, while some escaped process still holds the pipe."""
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

    def __init__(
        self, timeout: float, workdir: Path | None = None, *, network: bool = False, without_sandbox: bool = False
    ) -> None:
        self.timeout = timeout
        """Seconds a script may run before it is killed."""
        self.network = network
        """Whether a sandboxed script may use the network (without a sandbox nothing keeps it from it)."""
        self.without_sandbox = without_sandbox
        """Whether scripts run where no sandbox can be used (the user's opt-in); else they are refused there."""
        self.sandbox_problem = _code_sandbox.sandbox_problem()
        """None when scripts run in the sandbox; else why no sandbox can be used here."""
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

            Args:
                code: The complete Python script to run.
            """
            return await self.run(code)

        # the step's own tool timeout must not cut the process short of its kill
        return Tool(
            python,
            name="python",
            description=self._description(),
            timeout=self.timeout + _STOP_GRACE + 3,
            computes=True,
        )

    @property
    def refusal(self) -> str | None:
        """Why no script runs here (no sandbox, and no opt-in to run without one); None when scripts run."""
        if self.sandbox_problem is None or self.without_sandbox:
            return None
        return (
            f"The python tool runs no script here: no sandbox can be used ({self.sandbox_problem}). Without one,"
            " model-written code runs as your user: it can read and change your files, read the environments of"
            " your processes in /proc (the kernel's API keys included) and use the network. To run it anyway, set"
            " DAG_CODE_WITHOUT_SANDBOX=1 (or DagSettings(code_without_sandbox=True))."
        )

    def _description(self) -> str:
        """What the model is told, the limits it will meet included."""
        if self.refusal is not None:
            return (
                "Would run a Python script, but scripts are refused here (no sandbox, and the user did not allow"
                " code without one): do not call it."
            )
        if self.sandbox_problem is not None:
            where = "It runs as the user, without a sandbox, with the user's files and network."
        else:
            network = "with network access" if self.network else "without network access"
            where = (
                f"It runs in a sandbox, {network}: no other process is visible, the system is read-only and"
                " only the working directory (and the temporary directory in it) can be written."
            )
        return (
            "Run a Python script in a separate, fresh process and return its exit code and output. Print what"
            " you need to see: only standard output and standard error come back, at most 20,000 bytes (the"
            f" beginning and the end). Files written stay in the working directory for later calls. {where}"
            f" It is killed after {self.timeout:g}s, with every process it started."
        )

    async def run(self, code: str) -> str:
        """Run ``code`` as a script here: its exit code (or why it was killed), then its output."""
        if self.closed:
            raise RuntimeError("the session that owns this python tool is closed; start a new session to run code")
        if (refusal := self.refusal) is not None:
            raise PermissionError(refusal)
        with _StatusPipe() as status:
            process = await asyncio.create_subprocess_exec(
                *self._command(code, status.argument),
                cwd=self.directory,
                env=_environment(self.directory),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: the net where the supervisor cannot own orphans
                pass_fds=status.passed,
            )
            status.started()
            self._running.add(process)
            output = _Output()
            verdict: str | None = None
            try:
                async with asyncio.timeout(self.timeout):
                    if await _read(process, output):
                        verdict = (
                            f"Killed: the script wrote more than {_FLOOD_BYTES // 2**20} MiB of output (printing"
                            " in a loop?); it was stopped there."
                        )
            except TimeoutError:
                verdict = f"Killed: the script ran longer than {self.timeout:g}s (an endless loop?)."
            finally:  # a cancelled call ends its processes too
                await _end(process, output)
                self._running.discard(process)
            exit_code = status.exit_code() if status.reported else process.returncode
        if self.closed:
            verdict = "Killed: the session was closed while the script ran."
        elif verdict is None and exit_code is None:
            ended = "; the sandbox ended every process the script started" if self.sandbox_problem is None else ""
            verdict = (
                f"Ended without an exit code (return code {process.returncode}): the supervisor running the script"
                f" was killed{ended}."
            )
        verdict = verdict or f"exit code {exit_code}"
        if output.held_open:
            verdict += (
                "\nA process the script started still holds its output: it escaped by killing the script's"
                " supervisors (only a sandbox prevents that) and may still run."
            )
        return f"{verdict}\n{output.text()}"

    def _command(self, code: str, status: str) -> list[str]:
        """The supervisor running ``code``, in the sandbox where there is one."""
        sandboxed = self.sandbox_problem is None
        # in the sandbox the supervisor's parent is the namespace's init, which outlives it
        parent = "1" if sandboxed else str(os.getpid())
        command = [sys.executable, "-I", str(_SUPERVISOR), parent, status, sys.executable, "-I", "-c", code]
        return _code_sandbox.sandboxed(command, self.directory, network=self.network) if sandboxed else command


def python_tool(
    timeout: float, workdir: Path | None = None, *, network: bool = False, without_sandbox: bool = False
) -> Tool:
    """The ``python`` tool, running code in ``workdir`` (a new temporary directory by default).

    ``network``: a sandboxed script may use the network. ``without_sandbox``: scripts run even where no sandbox
    can be used (else they are refused there). The tool owns its ``CodeWorkspace``: a temporary directory goes
    when the tool is garbage-collected.
    """
    return CodeWorkspace(timeout, workdir, network=network, without_sandbox=without_sandbox).tool()


class _StatusPipe:
    """Where the supervisor writes the script's exit code: a sandbox in between reports a signal as 128+N."""

    def __init__(self) -> None:
        self._read: int | None = None
        self._write: int | None = None
        if os.name == "posix":  # elsewhere no descriptor is passed: the supervisor's own return code stands
            self._read, self._write = os.pipe()
            os.set_blocking(self._read, False)

    @property
    def argument(self) -> str:
        return "-" if self._write is None else str(self._write)

    @property
    def reported(self) -> bool:
        """Whether the supervisor is given the pipe (POSIX); elsewhere its own return code stands."""
        return self._read is not None

    @property
    def passed(self) -> tuple[int, ...]:
        return () if self._write is None else (self._write,)

    def started(self) -> None:
        """The supervisor holds its own copy now; ours would keep the pipe open."""
        self._close_write()

    def exit_code(self) -> int | None:
        """What the supervisor wrote: None when it did not (it was killed before the script ended)."""
        if self._read is None:
            return None
        with contextlib.suppress(BlockingIOError):
            written = os.read(self._read, 64).decode(errors="replace").strip()
            return int(written) if re.fullmatch(r"-?\d+", written) else None
        return None

    def _close_write(self) -> None:
        if self._write is not None:
            os.close(self._write)
            self._write = None

    def __enter__(self) -> _StatusPipe:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close_write()
        if self._read is not None:
            os.close(self._read)
            self._read = None


class _Output:
    """What a script printed, within a bound: its first and last bytes, and how many were in between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.held_open = False
        """The supervisor ended and a process still held the pipe: it escaped (without a sandbox)."""

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
    """Read the output as it comes until the supervisor ends; True when the script wrote too much.

    The pipe's end does not mark the end of the call: a process that escaped the supervisor may hold it.
    """
    reading = asyncio.ensure_future(_read_to_end(process, output))
    try:
        while not reading.done() and process.returncode is None:
            await asyncio.wait({reading}, timeout=_EXIT_POLL)
        if not reading.done():  # the rest of what the script wrote is in the pipe
            await asyncio.wait({reading}, timeout=_LAST_OUTPUT)
        if not reading.done():
            output.held_open = True
            _let_go_of_the_pipe(process)
            return False
        flooded = reading.result()
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
    if not flooded:
        await process.wait()  # the script closed its output and runs on: the timeout bounds this
    return flooded


def _let_go_of_the_pipe(process: asyncio.subprocess.Process) -> None:
    """Close our end of the output pipe that an escaped process holds (asyncio's Process has no public way)."""
    transport = getattr(process, "_transport", None)
    if isinstance(transport, asyncio.SubprocessTransport):
        transport.close()


async def _read_to_end(process: asyncio.subprocess.Process, output: _Output) -> bool:
    assert process.stdout is not None
    while chunk := await process.stdout.read(_READ_BYTES):
        output.add(chunk)
        if output.total > _FLOOD_BYTES:
            return True
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
