"""The guard between a session and one stdio MCP server: the server ends with the session's process, and no
message of it bigger than a bound reaches the session.

``connections`` runs ``python -I _stdio_guard.py PARENT_PID MAX_MESSAGE_BYTES COMMAND...`` in place of the
server's command; this file imports only the standard library, so that it starts fast and without the package.
The server gets the guard's stdin and stderr, in a process group of its own; its stdout goes through the guard.

- The server ends with its parent (the kernel), however that ends: a server busy inside a call reads no stdin,
  so the end of its stdin does not end it. On Linux the guard asks for a SIGTERM when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``); everywhere a thread sees its parent change (``getppid``) within a quarter of a
  second. On SIGTERM, SIGINT or SIGHUP (the SDK's own stop too) the guard ends the server's process group:
  SIGTERM, then SIGKILL. A process that left that group (``setsid``) is not reached.
- A message longer than MAX_MESSAGE_BYTES is read here and dropped, never sent on: the SDK's reading of it would
  take minutes of the session's event loop. When its JSON-RPC ``id`` stands at either end of it (where servers put it),
  the request it answers gets an error saying why; the server serves on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import IO, NoReturn

_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
_WATCH_SECONDS = 0.25
_STOP_GRACE = 1.0
"""Seconds the server has to end on SIGTERM before its group is killed (the SDK waits 2 s, then kills us)."""
_EDGE = 65536
"""Bytes kept of each end of a message too big to send on: where its id is looked for."""
_READ = 2**20
_ID = rb'(-?\d+|"(?:[^"\\]|\\.)*")'
_ID_FIRST = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID)
_ID_LAST = re.compile(rb'"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*\Z')

_server: subprocess.Popen[bytes] | None = None
_stopping = False


def main(argv: list[str]) -> NoReturn:
    """Run ``argv[3:]`` as the server, relay its messages within the bound, end it with our parent."""
    global _server
    parent, limit, command = int(argv[1]), int(argv[2]), argv[3:]
    for signum in _STOP_SIGNALS:
        signal.signal(signum, _stop)
    if _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) and os.getppid() != parent:
        sys.exit(1)  # the parent died before the request: nobody is there to serve
    try:
        _server = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
    except OSError as exc:  # said in a line of stderr, which the session shows, not a traceback of the guard
        print(f"cannot start {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(127)
    if _stopping:  # a stop signal that came before the server started
        _end_server()
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), daemon=True).start()
    assert _server.stdout is not None
    _relay(_server.stdout, limit)
    code = _server.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(_server.pid, signal.SIGKILL)  # what the server left behind in its group
    sys.exit(code)


def _relay(source: IO[bytes], limit: int) -> None:
    """Copy each line (one JSON-RPC message) to our stdout; answer one too long with an error instead."""
    out = sys.stdout.buffer
    while line := source.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            out.write(line)
        else:
            out.write(_refusal(line, source, limit))
        with contextlib.suppress(BrokenPipeError):
            out.flush()


def _refusal(start: bytes, source: IO[bytes], limit: int) -> bytes:
    """Read the rest of a message too long to send on, keeping its ends; the error answering it (or nothing)."""
    size, head, tail = len(start), start[:_EDGE], bytearray(start[-_EDGE:])
    while not tail.endswith(b"\n") and (more := source.readline(_READ)):
        size += len(more)
        tail += more
        del tail[: max(0, len(tail) - _EDGE)]
    found = _ID_FIRST.search(head) or _ID_LAST.search(bytes(tail).rstrip())
    if found is None:
        return b""  # no request to answer: its caller waits for its tool timeout
    message = (
        f"the MCP server's answer is {size / 2**20:.1f} MiB, more than the {limit / 2**20:g} MiB an answer may be:"
        " dagmagic dropped it unread (ask the tool for less: a page, a range, a filter)"
    )
    answer = {"jsonrpc": "2.0", "id": json.loads(found.group(1)), "error": {"code": -32603, "message": message}}
    return json.dumps(answer).encode() + b"\n"


def _watch(parent: int) -> None:
    """Where no parent-death signal exists: our parent died when we were handed to another."""
    while os.getppid() == parent:
        time.sleep(_WATCH_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


def _stop(signum: int, frame: FrameType | None) -> None:
    global _stopping
    _stopping = True
    if _server is not None:
        _end_server()
        os._exit(128 + signum)


def _end_server() -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left of it after a grace."""
    assert _server is not None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(_server.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        _server.wait(_STOP_GRACE)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(_server.pid, signal.SIGKILL)


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
