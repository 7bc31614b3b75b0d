"""The threads sync tools run in: their own, never the event loop's default executor.

litellm runs part of every model call in the loop's default executor (cpus + 4 threads). A sync tool that
hangs past its timeout keeps its thread (Python cannot stop a thread), so a handful of hung tools there would
starve every later model call. Here each call runs in a daemon thread of its own (it never holds up the
kernel's exit), at most ``DAG_TOOL_THREADS`` at once. A call past its timeout keeps its thread until it
returns: when such calls hold every thread, a new call is refused at once with their names
(``ToolThreadsExhausted``); when calls still within their time hold them, it waits for one, within its own
timeout. A result that arrives after its call timed out is ignored, and said so.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolThreads", "ToolThreadsExhausted", "ToolTimeout"]

log = logging.getLogger("dagmagic")

Outcome = tuple[Any, BaseException | None]
"""What a tool returned, or what it raised."""
Late = Callable[[str], object]
"""Told, on the event loop, that a call given up on has returned after all (the message says so)."""


class ToolThreadsExhausted(Exception):
    """Every tool thread is held by a call past its timeout: no sync tool can run now."""


class ToolTimeout(Exception):
    """A sync tool did not finish (or could not start) within its timeout."""


@dataclass
class _Call:
    name: str
    timeout: float
    loop: asyncio.AbstractEventLoop
    started: float = field(default_factory=time.monotonic)
    given_up: str | None = None
    """Why its caller stopped waiting ("timeout" or "cancelled"); its thread still runs."""
    late: Late | None = None
    outcome: Outcome | None = None


class ToolThreads:
    """Runs sync tool calls in threads of their own, counting those that outlive their timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[_Call] = []
        """Calls whose thread runs now, given up on or not."""
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    async def run(
        self,
        name: str,
        function: Callable[..., Any],
        arguments: dict[str, Any],
        *,
        threads: int,
        timeout: float,
        late: Late | None = None,
    ) -> Outcome:
        """``function(**arguments)`` in a thread, at most ``threads`` at once, within ``timeout`` seconds.

        Returns what it returned or raised; ``ToolTimeout`` past the timeout (``late`` hears of a result
        that comes after), ``ToolThreadsExhausted`` when calls past their timeout hold every thread.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        call = await self._take(name, threads, timeout, deadline, loop)
        result: asyncio.Future[Outcome] = loop.create_future()
        context = contextvars.copy_context()  # as asyncio.to_thread does: the tool sees the caller's context
        worker = threading.Thread(
            target=self._work,
            args=(call, context, function, arguments, result),
            name=f"dagmagic-tool:{name}",
            daemon=True,
        )
        worker.start()
        try:
            async with asyncio.timeout_at(deadline):
                return await result
        except TimeoutError:
            if self._give_up(call, "timeout", late):
                raise ToolTimeout(f"{name} did not finish within {timeout:g}s") from None
            assert call.outcome is not None  # it returned as the timeout struck: its result stands
            return call.outcome
        except asyncio.CancelledError:
            self._give_up(call, "cancelled", late)
            raise

    def held(self) -> list[str]:
        """The names of the calls holding a thread now, the ones given up on included."""
        with self._lock:
            return [call.name for call in self._held]

    async def _take(
        self, name: str, threads: int, timeout: float, deadline: float, loop: asyncio.AbstractEventLoop
    ) -> _Call:
        """A thread for the call: at once, or once a call within its time frees one."""
        while True:
            with self._lock:
                if len(self._held) < threads:
                    call = _Call(name, timeout, loop)
                    self._held.append(call)
                    return call
                stuck = [call for call in self._held if call.given_up]
                if len(stuck) == len(self._held):
                    raise ToolThreadsExhausted(
                        f"{len(stuck)} tool threads are still running past their timeout: {_names(stuck)}. "
                        f"{name} was not called. A tool that hangs (a network call without a timeout is the usual "
                        "cause) keeps its thread until it returns: give it a timeout of its own, or raise "
                        "DAG_TOOL_THREADS."
                    )
                freed: asyncio.Future[None] = loop.create_future()
                waiter = (loop, freed)
                self._waiting.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await freed
            except TimeoutError:
                raise ToolTimeout(
                    f"{name} did not start within {timeout:g}s: all {threads} tool threads were busy "
                    f"({self._describe_busy()})"
                ) from None
            finally:
                with self._lock:
                    if waiter in self._waiting:
                        self._waiting.remove(waiter)

    def _work(
        self,
        call: _Call,
        context: contextvars.Context,
        function: Callable[..., Any],
        arguments: dict[str, Any],
        result: asyncio.Future[Outcome],
    ) -> None:
        """The call's thread: call the tool, then hand its outcome over (or report it late), and free the thread."""
        try:
            outcome: Outcome = (context.run(function, **arguments), None)
        except BaseException as exc:  # handed over, not raised: the caller decides what each kind means
            outcome = (None, exc)
        with self._lock:
            self._held.remove(call)
            call.outcome = outcome
            given_up, late = call.given_up, call.late
            waiting, self._waiting = self._waiting, []
        for loop, freed in waiting:  # each waiter looks again; one of them gets the thread
            _call_soon(loop, _settle, freed, None)
        if given_up is None:
            _call_soon(call.loop, _settle, result, outcome)
            return
        message = _late_message(call, given_up, outcome)
        if late is None or not _call_soon(call.loop, late, message):
            log.warning("[dagmagic] %s", message)

    def _give_up(self, call: _Call, why: str, late: Late | None) -> bool:
        """Stop waiting for ``call`` (its thread runs on); False when it has returned already."""
        with self._lock:
            if call.outcome is not None:
                return False
            call.given_up, call.late = why, late
            return True

    def _describe_busy(self) -> str:
        with self._lock:
            stuck = [call for call in self._held if call.given_up]
            running = [call for call in self._held if not call.given_up]
        parts = [f"{len(stuck)} past their timeout: {_names(stuck)}"] if stuck else []
        parts += [f"{len(running)} running: {_names(running)}"] if running else []
        return "; ".join(parts)


def _names(calls: list[_Call]) -> str:
    counts = Counter(call.name for call in calls)
    return ", ".join(name if count == 1 else f"{name} ({count}×)" for name, count in counts.items())


def _late_message(call: _Call, why: str, outcome: Outcome) -> str:
    seconds = time.monotonic() - call.started
    raised = outcome[1]
    what = "returned" if raised is None else f"failed ({type(raised).__name__}: {raised})"
    after = f"past its {call.timeout:g}s timeout" if why == "timeout" else "after its call was cancelled"
    return f"The tool {call.name} {what} {seconds:.1f}s after it started, {after}: that result was ignored."


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: Any) -> bool:
    """Run ``callback`` on ``loop`` from another thread; False when the loop is closed."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop has closed (the test, or the kernel, went on without it)
        return False
    return True
