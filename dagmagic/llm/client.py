"""``ChatModel``: the one seam every LLM call goes through.

It tags the call with its purpose, retries transient provider errors with backoff, translates errors,
and leaves an ``LLMCall`` record (usage, latency, cost, structured level) as an event. Given the model's
``CircuitBreaker`` (``dagmagic.llm.breaker``), it tells it of every try that got no answer and of every answer,
and refuses at once, with no call made, while it is open. Under a cost budget (``dagmagic.llm.budget``) it
reserves each call's estimated cost before the call starts, refuses the call when that does not fit
(``BudgetExceeded``), and charges the budget the call's cost in place of its reservation.
A ``litellm.Router`` that refuses a call by its own limits (its ``rpm``/``tpm``, which Redis can share among
processes) is waited out, not retried.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, Literal, TypeVar

import stamina

from dagmagic import errors
from dagmagic._secrets import mask_data, mask_secrets
from dagmagic.events import CallProgress, Event, LLMCallRecorded, RunWarning
from dagmagic.llm._litellm import translate_error
from dagmagic.llm.breaker import NO_ANSWER, CircuitBreaker
from dagmagic.llm.budget import CURRENT_BUDGET, Hold, estimate
from dagmagic.llm.cassette import request_digest, tool_names
from dagmagic.llm.masking import StreamMasks, known_masked
from dagmagic.llm.protocol import ChatBackend, ChatRequest, ChatResponse, StreamChunk
from dagmagic.llm.registry import ModelEntry, ModelRegistry
from dagmagic.models import LLMCall, Purpose, StructuredLevel, Usage
from dagmagic.settings import DagSettings

__all__ = ["CURRENT_RUN", "PROGRESS_SECONDS", "ChatModel", "ChatResult", "EventSink", "as_chat_model"]

CURRENT_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("dagmagic_current_run", default=None)
"""The id of the run whose task makes the call (set while a run is driven; its step tasks inherit it): litellm's
callbacks get it in each call's metadata."""

EventSink = Callable[[Event], object]
PROGRESS_SECONDS = 0.25
"""How often a stream tells how much of its reply has arrived: often enough for a counter that moves, rarely
enough that a reply of thousands of pieces costs a few events a second."""
_PHASE_CALLS = frozenset({"plan", "analyze", "synthesize"})
"""The calls a phase of the run is: a view shows that one is under way even when it is not streamed."""
_RETRY_AFTER_LIMIT = 60.0
"""The longest wait a provider's ``Retry-After`` gets honoured with (as litellm and the openai SDK do); a longer
one is the step's retry policy's business, not one call's."""
_RETRY_WAIT_LIMIT = 60.0
"""The longest wait between two tries of one call."""
_OWN_CAPS = frozenset({"max_tokens", "max_completion_tokens"})
"""litellm keywords by which a model registered with them caps its replies itself."""
_SLOT_WAIT = 0.25
"""About how long a call refused a Router's parallel-request slot waits before asking again: a slot frees as soon
as a call in flight ends."""

_T = TypeVar("_T")

# stamina logs each retry it schedules as a warning; a notebook would print them under the cell, where the call's
# retries are already shown. A user who configures logging still sees them.
logging.getLogger("stamina").addHandler(logging.NullHandler())


class ChatResult:
    """A reply and the record of the call that produced it."""

    def __init__(self, response: ChatResponse, call: LLMCall) -> None:
        self.response = response
        self.call = call

    @property
    def content(self) -> str:
        """The reply's text."""
        return self.response.content


class ChatModel:
    """A registered model bound to settings and an event sink."""

    def __init__(
        self,
        entry: ModelEntry,
        *,
        settings: DagSettings | None = None,
        emit: EventSink | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.entry = entry
        self.settings = settings or DagSettings()
        self.emit = emit
        self.breaker = breaker
        """The model's breaker in the run this model reports to (None: every call is tried)."""

    @property
    def name(self) -> str:
        """The registry entry's name."""
        return self.entry.name

    def _request(self, messages: list[dict[str, Any]], purpose: Purpose, **fields: Any) -> ChatRequest:
        return ChatRequest(
            model=self.entry.target,
            messages=messages,
            purpose=purpose,
            options=self.entry.options,
            run_id=CURRENT_RUN.get(),
            max_tokens=self._max_tokens(purpose),
            **fields,
        )

    def _max_tokens(self, purpose: Purpose) -> int | None:
        """The cap ``purpose``'s calls are sent; None when the model was registered with a cap of its own, which
        litellm gets with every call instead.
        """
        if _OWN_CAPS & self.entry.options.keys():
            return None
        return self.settings.llm_max_tokens.of(purpose)

    def _record(
        self,
        request: ChatRequest,
        *,
        level: StructuredLevel | None,
        started: float,
        retries: int,
        response: ChatResponse | None = None,
        error: BaseException | None = None,
        stream: bool = False,
        cancelled: bool = False,
        pieces: int = 0,
        hold: Hold | None = None,
    ) -> LLMCall:
        response = response or ChatResponse()
        call = LLMCall(
            purpose=request.purpose,
            model=self.name,
            round=request.round,
            step_id=request.step_id,
            messages=mask_data(request.messages),
            reply=mask_secrets(response.content),
            tool_calls=mask_data([tc.model_dump() for tc in response.tool_calls]),
            structured_level=level,
            stream=stream,
            retries=retries,
            pieces=pieces,
            usage=_usage(response),
            started_at=started,
            latency=time.time() - started,
            error=None if error is None else mask_secrets(f"{type(error).__name__}: {error}"),
            status="cancelled" if cancelled else "failed" if error is not None else "ok",
            tools=tool_names(request.tools),
            request_digest=request_digest(request),
            max_tokens=request.max_tokens,
            finish_reason=response.finish_reason,
            cached=response.cached,
            response_model=response.model,
        )
        if self.emit is not None:
            self.emit(LLMCallRecorded(call=call))
        budget = hold.budget if hold is not None else CURRENT_BUDGET.get()
        if budget is not None:
            budget.charge(call, hold)
        return call

    def _tries(self) -> AsyncIterable[stamina.Attempt]:
        """The tries of one call, by stamina: ``llm_retries`` more after the first for transient errors, each
        after an exponential backoff with jitter, so that parallel steps hit by one rate limit do not retry in
        lockstep; a provider's ``Retry-After`` is honoured (see ``_retry_wait``).

        A translated error is raised without the provider's exception chained to it: its words are in the
        message already, masked, where the chained original may show a key.
        """
        backoff = self.settings.llm_retry_backoff
        return stamina.retry_context(
            on=self._retry_wait,
            attempts=self.settings.llm_retries + 1,
            timeout=None,  # each try has its own bound (llm_timeout)
            wait_initial=backoff,
            wait_jitter=backoff,
            wait_max=_RETRY_WAIT_LIMIT,
        )

    def _retry_wait(self, error: BaseException) -> bool | float:
        """Whether ``error`` is worth another try; the seconds to wait first when the provider said how long."""
        if not isinstance(error, errors.TransientProviderError):
            return False
        if isinstance(error, errors.RateLimitError) and error.router_limit:
            return False  # its turn was waited for already, as long as llm_rate_limit_wait allows
        asked = error.retry_after
        if asked is not None and 0 < asked <= _RETRY_AFTER_LIMIT:
            # jittered too: the steps a provider told the same wait must not come back at the same instant
            return asked + random.uniform(0, self.settings.llm_retry_backoff)
        return True

    def _tally(self, error: BaseException, request: ChatRequest) -> BaseException:
        """Tell the breaker of a failed try; the error to go on with: the refusal once the breaker is open (a
        try that got no answer then is not retried), else ``error``.
        """
        breaker = self.breaker
        if breaker is None:
            return error
        if breaker.failed(error) and self.emit is not None:
            message = (
                f"Model {self.name!r} did not answer {breaker.unanswered} tries in a row (the last: "
                f"{breaker.last_error}): the run does not call it again and answers from what completed."
            )
            self.emit(RunWarning(message=message, round=request.round, step_id=request.step_id))
        return breaker.refusal() if breaker.open and isinstance(error, NO_ANSWER) else error

    def _progress(self, request: ChatRequest, started: float, pieces: int, *, stream: bool = False) -> None:
        if self.emit is not None:
            self.emit(
                CallProgress(
                    purpose=request.purpose,
                    model=self.name,
                    round=request.round,
                    step_id=request.step_id,
                    started_at=started,
                    pieces=pieces,
                    stream=stream,
                )
            )

    def _teller(self, request: ChatRequest, started: float) -> Callable[[int], None]:
        """What tells how many pieces of a stream have arrived: at once the first time, then at most every
        ``PROGRESS_SECONDS``.
        """
        last = float("-inf")

        def tell(pieces: int) -> None:
            nonlocal last
            if time.monotonic() - last >= PROGRESS_SECONDS:
                last = time.monotonic()
                self._progress(request, started, pieces, stream=True)

        return tell

    def _answered(self) -> None:
        if self.breaker is not None:
            self.breaker.answered()

    async def _admit(self, request: ChatRequest) -> Hold | None:
        """Refuse the call (none made, none recorded) when the run's budget cannot hold its estimated cost or
        the model's breaker is open; else what the budget holds for it until it is recorded.
        """
        budget = CURRENT_BUDGET.get()
        if budget is not None:
            budget.check()
        if self.breaker is not None:
            self.breaker.check()
        if budget is None:
            return None
        hold = await budget.reserve(estimate(self.entry, request))
        if self.breaker is not None and self.breaker.open:  # it opened while the call waited for room
            budget.release(hold)
            self.breaker.check()
        return hold

    def _check_may_call(self) -> None:
        """Refuse the try (no call made, none recorded) when the run's budget is spent or the model's breaker
        is open.
        """
        budget = CURRENT_BUDGET.get()
        if budget is not None:
            budget.check()
        if self.breaker is not None:
            self.breaker.check()

    def _translate(self, exc: BaseException) -> BaseException:
        """Our error for a backend's exception; a timeout of our own bound says which bound it was."""
        if isinstance(exc, _Overran):
            return errors.ProviderTimeoutError(
                f"the reply was still coming after {self.settings.llm_total_timeout:g} s "
                "(DAG_LLM_TOTAL_TIMEOUT): cut there",
                model=self.name,
            )
        if isinstance(exc, TimeoutError) and not str(exc):
            return errors.ProviderTimeoutError(
                f"no reply within {self.settings.llm_timeout:g} s (DAG_LLM_TIMEOUT)", model=self.name
            )
        return translate_error(exc, self.name)

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        purpose: Purpose,
        round: int | None = None,
        step_id: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        temperature: float | None = None,
        structured_level: StructuredLevel | None = None,
        reply_format: Literal["plan", "verdict"] | None = None,
    ) -> ChatResult:
        """One completion; transient errors are retried, fatal ones raised at once as ``ProviderError``."""
        request = self._request(
            messages,
            purpose,
            round=round,
            step_id=step_id,
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
            temperature=temperature,
            reply_format=reply_format,
        )
        hold = await self._admit(request)  # refused before any try: no call was made, none is recorded
        started = time.time()
        if purpose in _PHASE_CALLS:  # the whole run waits on it: said at once (steps show their own state)
            self._progress(request, started, 0)
        retries = 0
        response: ChatResponse | None = None
        try:
            async for attempt in self._tries():
                with attempt:
                    retries = attempt.num - 1
                    response = await self._complete_once(request, retry=retries > 0)
        except asyncio.CancelledError:  # the run moved on: the call still counts, its usage unknown
            self._record(request, level=structured_level, started=started, retries=retries, cancelled=True, hold=hold)
            raise
        except Exception as error:
            call = self._record(
                request, level=structured_level, started=started, retries=retries, error=error, hold=hold
            )
            if isinstance(error, errors.ProviderError):
                error.call = call
            raise
        assert response is not None  # the tries ended without an error: the last one answered
        self._answered()
        call = self._record(
            request, level=structured_level, started=started, retries=retries, response=response, hold=hold
        )
        return ChatResult(known_masked(response), call)

    async def _complete_once(self, request: ChatRequest, *, retry: bool) -> ChatResponse:
        """One try of a completion; its failure translated (and told to the breaker)."""

        async def complete() -> ChatResponse:
            total = self.settings.llm_total_timeout
            if total >= self.settings.llm_timeout:
                async with asyncio.timeout(self.settings.llm_timeout):
                    return await self.entry.backend.complete(request)
            try:
                async with asyncio.timeout(total):
                    return await self.entry.backend.complete(request)
            except TimeoutError:
                raise _Overran from None

        try:
            if retry:
                self._check_may_call()  # another call may have opened the breaker or spent the budget meanwhile
            return await self._in_turn(complete)
        except Exception as exc:
            raise self._tally(self._translate(exc), request) from None

    async def _in_turn(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        """``attempt()``, asked again for as long as a ``litellm.Router`` refuses it by its own limits: until the
        minute whose ``rpm``/``tpm`` is spent ends (litellm counts per calendar minute), or, when every parallel
        request is in flight, until one ends. No request was sent, so no retry is spent; the waits add up to
        ``llm_rate_limit_wait`` seconds at most, then the refusal is raised as a rate limit. Each wait is jittered
        so that the calls waiting for one window do not all come back at its first instant.
        """
        waited = 0.0
        while True:
            try:
                return await attempt()
            except Exception as exc:
                error = self._translate(exc)
                if not (isinstance(error, errors.RateLimitError) and error.router_limit):
                    raise
                jitter = random.uniform(0, self.settings.llm_retry_backoff)
                wait = jitter + (error.retry_after if error.retry_after is not None else _SLOT_WAIT)
                if waited + wait > self.settings.llm_rate_limit_wait:
                    raise error from None
            waited += wait
            await asyncio.sleep(wait)
            self._check_may_call()  # the budget may have been spent, or the breaker opened, meanwhile

    async def _first_piece(self, request: ChatRequest) -> tuple[AsyncIterator[StreamChunk], StreamChunk | None, float]:
        """A stream of the reply to ``request``, its first piece, and when (loop time) the try must end."""
        deadline = asyncio.get_running_loop().time() + self.settings.llm_total_timeout
        pieces = aiter(self.entry.backend.stream(request))
        return pieces, await self._next(pieces, deadline), deadline

    async def _next(self, pieces: AsyncIterator[StreamChunk], deadline: float) -> StreamChunk | None:
        """The stream's next piece, waited for at most ``llm_timeout`` seconds, and not past ``deadline``: pieces
        that keep coming must not hold the call for ever (a local model can write until its context is full).
        """
        left = deadline - asyncio.get_running_loop().time()
        if left >= self.settings.llm_timeout:
            return await _next_within(pieces, self.settings.llm_timeout)
        try:
            return await _next_within(pieces, max(left, 0.0))
        except TimeoutError:
            raise _Overran from None

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        purpose: Purpose,
        round: int | None = None,
        step_id: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        response_format: dict[str, Any] | None = None,
        temperature: float | None = None,
        structured_level: StructuredLevel | None = None,
        reply_format: Literal["plan", "verdict"] | None = None,
        on_finish: Callable[[str | None], object] | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """The reply in pieces. A transient error before the first piece is retried; after it, raised
        (a retry would repeat text the caller already showed). The call is recorded when the stream ends.
        ``on_finish`` is told why the reply ended, as the provider said (``"length"``: cut at its token limit;
        None when it did not say), after the last piece.
        """
        request = self._request(
            messages,
            purpose,
            round=round,
            step_id=step_id,
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
            temperature=temperature,
            reply_format=reply_format,
        )
        hold = await self._admit(request)  # refused before any try: no call was made, none is recorded
        started = time.time()
        tell = self._teller(request, started)
        tell(0)
        retries = 0
        text: list[str] = []
        received = 0
        final: ChatResponse | None = None
        failure: BaseException | None = None
        cancelled = flowing = False
        masks = StreamMasks()
        try:
            chunk: StreamChunk | None = None
            async for attempt in self._tries():  # retry only until the first piece arrives
                with attempt:
                    retries = attempt.num - 1
                    try:
                        if retries:
                            self._check_may_call()
                        first = await self._in_turn(functools.partial(self._first_piece, request))
                        pieces, chunk, deadline = first
                    except Exception as exc:
                        raise self._tally(self._translate(exc), request) from None
            self._answered()
            flowing = True
            while chunk is not None:
                if chunk.final is not None:
                    final = chunk.final
                else:
                    received += 1
                    for shown in masks.piece(chunk):
                        text.append(shown.text)
                        tell(len(text))
                        yield shown
                chunk = await self._next(pieces, deadline)
            for held in masks.flush():
                text.append(held.text)
                yield held
            (on_finish or _unheard)(getattr(final, "finish_reason", None))
        except asyncio.CancelledError:
            cancelled = True
            raise
        except Exception as exc:
            failure = self._translate(exc)
            # a failure before the first piece was told to the breaker on the way; one that overran was answering
            if flowing and not isinstance(exc, _Overran):
                failure = self._tally(failure, request)
            raise failure from None
        finally:
            response = final or ChatResponse()
            if not response.content:
                response = response.model_copy(update={"content": "".join(text)})
            self._record(
                request,
                level=structured_level,
                started=started,
                retries=retries,
                response=response,
                error=failure,
                stream=True,
                cancelled=cancelled,
                pieces=received,
                hold=hold,
            )


def _unheard(finish_reason: str | None) -> None:
    """No one asked how the reply ended."""


def _usage(response: ChatResponse) -> Usage:
    """What one call spent: a cached reply's tokens were spent when it was first answered, not now."""
    if response.cached:
        return Usage(requests=1, cost=0.0, cached_requests=1, saved_cost=response.saved_cost)
    return Usage(
        input_tokens=response.input_tokens,
        output_tokens=response.output_tokens,
        cached_input_tokens=response.cached_input_tokens,
        reasoning_tokens=response.reasoning_tokens,
        requests=1,
        cost=response.cost,
    )


class _Overran(Exception):
    """A try still under way when ``llm_total_timeout`` ran out."""


async def _next_within(pieces: AsyncIterator[StreamChunk], seconds: float) -> StreamChunk | None:
    async with asyncio.timeout(seconds):
        return await anext(pieces, None)


def as_chat_model(
    model: ChatModel | ModelEntry | ChatBackend | str,
    *,
    settings: DagSettings | None = None,
    emit: EventSink | None = None,
) -> ChatModel:
    """A ``ChatModel`` from any of the things users hold: a model string, a backend, an entry."""
    if isinstance(model, ChatModel):
        return model
    if isinstance(model, ModelEntry):
        return ChatModel(model, settings=settings, emit=emit)
    name = model if isinstance(model, str) else type(model).__name__
    entry = ModelRegistry().register(name, model).get(name)
    return ChatModel(entry, settings=settings, emit=emit)
