"""The supervisor of one ``python`` tool script: it owns every process the script starts and ends them all.

``code_tool`` runs ``python -I _code_supervisor.py PARENT_PID STATUS_FD COMMAND...``; this file imports only the
standard library, so that it starts fast and without the package. On Linux the supervisor makes itself a child
subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): a descendant whose parent dies (a daemon's double fork, a child
that left the process group with ``setsid()``) is re-parented to it rather than to init, so it stays findable.
When the script exits, or when the supervisor is told to stop (SIGTERM, SIGINT, SIGHUP, or the death of the
process that started it), it kills every process whose parent chain leads to it, reaps them, and ends with the
script's status (or by the signal that ended the script, so the caller sees the same return code). The
script's exit code is also written to STATUS_FD (``-``: none), which a sandbox in between passes on unchanged.

A subreaper that is killed (SIGKILL takes no handler) hands its orphans to init, where nothing finds them. So
on Linux there are two guards: the supervisor forks a second one, in a process group of its own, which starts
the script in a session of its own. The script's parent is the second guard; killing it leaves the script's
processes with the first, which ends them; killing the first (the second's parent) sends the second a SIGTERM,
on which it ends them. A group kill reaches one guard at most. What still escapes is a script that finds both
guards and SIGKILLs them within milliseconds; the sandbox (a PID namespace whose init cannot be killed from
inside) closes that too.

Elsewhere (no ``prctl``, no ``/proc``) it only runs and waits for the script, in its own process group; the
caller's ``killpg`` of that group is then the net, and it misses what left the group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
_CLEANUP_SECONDS = 5.0
"""How long the supervisor keeps killing a family that keeps forking before it gives up and exits."""


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def main(argv: list[str]) -> NoReturn:
    """Run ``argv[3:]`` as the script, then end every process it left behind and exit as it did."""
    status_fd = None if argv[2] == "-" else int(argv[2])
    _guard(int(argv[1]), argv[3:], status_fd, first=True)


def _guard(parent: int, command: list[str], status_fd: int | None, *, first: bool) -> NoReturn:
    """Start the script (or, as the first of two guards, the second guard), end its family, exit as it did."""
    owns_orphans = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _raise_stopped)
    exit_code: int | None = None
    stopped_by: int | None = None
    try:
        # a kernel (or first guard) that dies must not leave a runaway script behind
        if _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) and os.getppid() != parent:
            raise _Stopped(signal.SIGTERM)
        if owns_orphans and first:
            exit_code = _wait(_start_second_guard(command, status_fd))
        else:
            script = subprocess.Popen(command, start_new_session=owns_orphans)  # a group kill misses the guards
            exit_code = script.returncode = _wait(script.pid) if owns_orphans else script.wait()
            if status_fd is not None:
                with contextlib.suppress(OSError):
                    os.write(status_fd, f"{exit_code}\n".encode())
    except _Stopped as stop:
        stopped_by = stop.signum
    finally:
        _clean_up()
    if stopped_by is not None:
        _exit_by_signal(stopped_by)
    if exit_code is not None and exit_code < 0:
        _exit_by_signal(-exit_code)
    sys.exit(exit_code)


def _start_second_guard(command: list[str], status_fd: int | None) -> int:
    """Fork the guard that starts the script; its pid."""
    first = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setpgid(0, 0)  # a kill of the first guard's process group does not reach this one
        _guard(first, command, status_fd, first=False)
    except SystemExit as ending:
        os._exit(ending.code if isinstance(ending.code, int) else 1)
    finally:
        os._exit(1)  # never back into the first guard's stack


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stopped(signum)


def _wait(child: int) -> int:
    """The return code of ``child``; orphans re-parented meanwhile are reaped as they die."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def _clean_up() -> None:
    """End every descendant, even if a stop signal lands while this starts."""
    while True:
        try:
            for signum in _STOP_SIGNALS:  # a second SIGTERM must not cut the cleanup short
                signal.signal(signum, signal.SIG_IGN)
            _end_descendants()
            return
        except _Stopped:
            continue


def _end_descendants() -> None:
    """Kill and reap every descendant, again and again while some is still forking, for a bounded time."""
    if not os.path.isdir("/proc"):
        return
    me = os.getpid()
    deadline = time.monotonic() + _CLEANUP_SECONDS
    while True:
        _reap()
        family = list(_descendants(me))
        if not family or time.monotonic() > deadline:
            return
        for pid in family:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def _descendants(root: int) -> Iterator[int]:
    """Every process (zombies included) whose parent chain leads to ``root``, read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # the command name may hold spaces and parentheses: the fields start after the last ')'
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
        children.setdefault(parent, []).append(int(entry))
    pending = list(children.get(root, []))
    while pending:
        pid = pending.pop()
        yield pid
        pending.extend(children.get(pid, []))


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _exit_by_signal(signum: int) -> None:
    """End as the script did, by ``signum``, so the caller sees the same negative return code."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGABRT or SIGSEGV: no core file of the supervisor
    with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP take no handler: theirs is the default
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError, ValueError):
        os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal that does not end a process by default


def _prctl(option: int, value: int) -> bool:
    """Whether Linux's ``prctl(option, value)`` succeeded; False anywhere else."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


if __name__ == "__main__":
    main(sys.argv)
