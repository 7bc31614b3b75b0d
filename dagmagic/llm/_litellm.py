"""The only door to litellm: its lazy import and the translation of its exceptions into ``dagmagic.errors``."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from types import ModuleType

from dagmagic import errors
from dagmagic._secrets import mask_secrets

__all__ = ["import_litellm", "import_litellm_off_the_loop", "mask_secrets", "translate_error"]

_litellm: ModuleType | None = None
"""litellm once imported and set up by ``import_litellm``."""
_import_lock = threading.Lock()
_clock = time.time
"""The wall clock a Router's minute windows are read from (a test moves it with litellm's)."""
_ROUTER_LIMIT_CHECKS = frozenset({"TPM_RPM_LIMITS", "MODEL_RATE_LIMIT_CHECK"})
"""What litellm's own rpm/tpm checks put as the method of the request they refuse (none is sent): the
``enforce_model_rate_limits`` pre-call check, and the ``usage-based-routing-v2`` strategy."""


def import_litellm() -> ModuleType:
    """litellm, imported on first use, once: a thread that asks while another imports it waits for that import
    (``%load_ext dagmagic`` starts one in the background). A failed import is tried again by the next caller.
    """
    global _litellm
    if _litellm is None:
        with _import_lock:
            if _litellm is None:
                _litellm = _load()
    return _litellm


def _load() -> ModuleType:
    """Import and set up litellm; the local price list avoids its network fetch at import."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # else unknown models print a provider list to stdout
    if litellm.disable_hf_tokenizer_download is None:
        # counting tokens for a llama-named model would otherwise fetch a tokenizer from the Hugging Face hub,
        # blocking the event loop (23 s of retries offline); tiktoken's count is close enough for the guard
        litellm.disable_hf_tokenizer_download = True
    return litellm


async def import_litellm_off_the_loop() -> None:
    """Import litellm in a worker thread, once: its import takes seconds of CPU, which on the event loop would
    freeze every widget, clock and other run meanwhile (a litellm model's first call or count imports it otherwise).
    An import already under way in another thread is waited for there, not on the loop.
    """
    if _litellm is None:
        await asyncio.to_thread(import_litellm)


def _raised_by_litellm(exc: BaseException) -> ModuleType | None:
    """litellm, when ``exc`` is one of its exceptions: a backend of the user's (or a ``ScriptedLLM`` injecting
    faults) may raise them though dagmagic never imported litellm itself, so what decides is the exception's class,
    whose module is then loaded already.
    """
    if any(cls.__module__.partition(".")[0] == "litellm" for cls in type(exc).__mro__):
        return sys.modules.get("litellm")
    return None


def _litellm_classes(exc: BaseException) -> list[tuple[type[BaseException], type[errors.ProviderError]]]:
    """Litellm exception -> ours, most specific first (Timeout subclasses APIConnectionError)."""
    litellm = _litellm or _raised_by_litellm(exc)
    if litellm is None:  # not litellm's: nothing here can match it
        return []
    return [
        (litellm.AuthenticationError, errors.AuthenticationError),
        (litellm.PermissionDeniedError, errors.PermissionDeniedError),
        (litellm.NotFoundError, errors.UnknownModelError),
        (litellm.RateLimitError, errors.RateLimitError),
        (litellm.Timeout, errors.ProviderTimeoutError),
        (litellm.APIConnectionError, errors.ProviderConnectionError),
        (litellm.InternalServerError, errors.ServerError),
        (litellm.ServiceUnavailableError, errors.ServerError),
        (litellm.BadGatewayError, errors.ServerError),
        (litellm.ContextWindowExceededError, errors.ContextWindowExceededError),
        (litellm.BadRequestError, errors.BadRequestError),
        (litellm.UnprocessableEntityError, errors.BadRequestError),
    ]


def _retry_after(exc: BaseException) -> float | None:
    """The seconds a provider's ``Retry-After`` header asks for (a number or an HTTP date), read as litellm's
    own retries read it; None when it did not say.
    """
    from litellm.utils import _get_retry_after_from_exception_header

    response = getattr(exc, "response", None)
    headers = getattr(exc, "litellm_response_headers", None) or getattr(response, "headers", None)
    if not headers:
        return None
    seconds = _get_retry_after_from_exception_header(headers)
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def _router_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``litellm.Router`` refusing a call by its own limits, before sending it: a deployment's
    ``rpm``/``tpm`` reached this minute, or all of its parallel requests in flight.
    """
    from litellm.types.router import RouterErrors

    try:
        method = exc.response.request.method  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # no response, or an httpx.Response without its request
        method = None
    if method in _ROUTER_LIMIT_CHECKS:
        return True
    return RouterErrors.max_parallel_requests_exceeded.value in str(exc)


def _rest_of_minute() -> float:
    """Seconds until the next minute begins: a Router counts ``rpm``/``tpm`` per calendar minute (UTC), and its
    refusal says 60 s, the longest a window can still last.
    """
    return 60.0 - _clock() % 60.0


def translate_error(exc: BaseException, model: str | None) -> BaseException:
    """The dagmagic error for an exception a backend raised; other exceptions come back unchanged.

    Cancellation is never translated: it is control flow, not a provider failure.
    """
    if isinstance(exc, (errors.ProviderError, asyncio.CancelledError)):
        return exc
    message = mask_secrets(str(exc)).removeprefix("litellm.").strip()
    for theirs, ours in _litellm_classes(exc):
        if isinstance(exc, theirs):
            if ours is errors.BadRequestError and "LLM Provider NOT provided" in message:
                ours = errors.UnknownModelError
            error = ours(message.split("\n")[0] if ours is errors.UnknownModelError else message, model=model)
            if isinstance(error, errors.TransientProviderError):
                error.retry_after = _retry_after(exc)
            if isinstance(error, errors.RateLimitError) and _router_limit(exc):
                error.router_limit = True
                if error.retry_after is not None and error.retry_after <= 60:
                    error.retry_after = _rest_of_minute()
            return error
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status >= 500:
        return errors.ServerError(message, model=model)
    if isinstance(exc, TimeoutError):
        return errors.ProviderTimeoutError(message or "no answer in time", model=model)
    if isinstance(exc, ConnectionError):
        return errors.ProviderConnectionError(message, model=model)
    return exc
