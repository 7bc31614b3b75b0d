"""Every exception dagmagic raises on purpose.

The tree, by whose mistake it is::

    DagError
    ├── ConfigurationError (ValueError)      the user's set-up: bad setting, no model, duplicate name
    ├── StructuredOutputError (ValueError)   a model never produced output of the requested shape
    ├── PlanningError (ValueError)           the model gave no readable plan
    ├── RunFailedError                       run.raise_for_status() on a run that failed
    ├── StoreError                           the run store's file cannot be used (foreign, damaged, newer)
    ├── StoreUnavailable                     the run store cannot be written here: runs go on unsaved
    ├── BudgetExceeded                       the run's cost budget is spent: no further LLM call starts
    ├── MCPServerError                       an MCP server did not start, or went away (named, with its stderr)
    ├── ScorerError (ValueError)             a scorer could not score a cell: no ``expected``, no judge verdict
    └── ProviderError                        a model provider refused or failed a call
        ├── FatalProviderError               raised at once, never retried
        │   ├── AuthenticationError *        missing or wrong API key
        │   ├── PermissionDeniedError *      the key may not use this model
        │   ├── BadRequestError              the provider rejected the request itself
        │   │   └── ContextWindowExceededError   ... as too long for the model's window
        │   ├── UnknownModelError *          no such model or provider
        │   ├── ProviderUnavailableError     the model did not answer several tries in a row: not called again
        │   └── ReplayMismatch *             a replayed run asked a call its recording does not hold
        └── TransientProviderError           retried with backoff before giving up
            ├── RateLimitError
            ├── ProviderTimeoutError
            ├── ServerError                  5xx from the provider
            └── ProviderConnectionError

``*``: ``RUN_ENDING``, a step meeting one ends the whole run (every other call would meet it too); a bad
request ends only its step, and so does a model that stopped answering (``ProviderUnavailableError``: the
run's other models may still answer, and the run answers from what completed). ``PlanningError`` remains for
callers of the planner; the goal loop repairs a plan instead. Only ``dagmagic.llm`` turns litellm's exceptions
into these, in one place (``llm/_litellm.py``); ``ProviderUnavailableError`` comes from its circuit breakers
(``llm/breaker.py``). ``BudgetExceeded`` is control flow, not a failure: the goal loop meets it where a call
would start, starts nothing more, and answers from what completed (``llm/budget.py``).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "RUN_ENDING",
    "AuthenticationError",
    "BadRequestError",
    "BudgetExceeded",
    "ConfigurationError",
    "ContextWindowExceededError",
    "DagError",
    "FatalProviderError",
    "MCPServerError",
    "PermissionDeniedError",
    "PlanningError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimitError",
    "ReplayMismatch",
    "RunFailedError",
    "ScorerError",
    "ServerError",
    "StoreError",
    "StoreUnavailable",
    "StructuredOutputError",
    "TransientProviderError",
    "UnknownModelError",
]


class DagError(Exception):
    """Base of every exception dagmagic raises on purpose."""


class ConfigurationError(DagError, ValueError):
    """The user's configuration is wrong: the message says what was wrong and what is accepted."""


class StructuredOutputError(DagError, ValueError):
    """Every level of ``structured_llm_call`` failed to produce a value of the requested shape."""


class PlanningError(DagError, ValueError):
    """The model gave no readable plan (the planner then plans the goal as one step)."""


class RunFailedError(DagError):
    """``run.raise_for_status()`` on a run that failed; the run itself is on ``.run``."""

    def __init__(self, run: Any) -> None:
        super().__init__(f"The run failed: {run.error}")
        self.run = run


class StoreError(DagError):
    """The run store's file cannot be used: it is another program's, damaged, or from a newer dagmagic.
    The message names the path and what to do; the file is left as it is.
    """


class StoreUnavailable(DagError):
    """The store cannot be written here (a read-only directory, say): runs go on without being saved."""


class BudgetExceeded(DagError):
    """The run's cost budget (``DAG_MAX_COST``) has no room left for the call's estimated cost: the LLM call was
    not started. The message says the budget and what was spent (and the call's estimate, when the spend had not
    reached the budget); the run answers from what completed, marked partial.
    """


class MCPServerError(DagError):
    """An MCP server did not start, or stopped answering; the message names it (with its stderr's last lines)."""


class ScorerError(DagError, ValueError):
    """A scorer could not score an evaluation's cell: the case lacks the ``expected`` it compares with, or the
    judge model gave no readable verdict. The evaluation records it as that cell's error; the others go on.
    """


class ProviderError(DagError):
    """A model provider refused or failed a call.

    ``provider_message`` is the provider's own words (with anything that looks like a key masked),
    ``hint`` what the user can do about it.
    """

    kind = "Provider error"
    hint = ""

    def __init__(self, provider_message: str, *, model: str | None = None, hint: str | None = None) -> None:
        self.provider_message = provider_message
        self.model = model
        self.call: object | None = None
        """The ``LLMCall`` record of the failed call, once the client has recorded it."""
        if hint is not None:
            self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = f" for model {self.model!r}" if self.model else ""
        text = f"{self.kind}{where}: {self.provider_message}"
        return f"{text}\nHint: {self.hint}" if self.hint else text


class FatalProviderError(ProviderError):
    """Retrying cannot help: raised at once."""


class AuthenticationError(FatalProviderError):
    """The provider did not accept the API key."""

    kind = "Authentication failed"
    hint = (
        "set the provider's key in the environment the kernel runs in "
        "(OPENAI_API_KEY, ANTHROPIC_API_KEY, ...) and restart the kernel; keys are never stored by dagmagic."
    )


class PermissionDeniedError(FatalProviderError):
    """The key is valid but may not use this model."""

    kind = "Permission denied"
    hint = "this key may not use this model: pick another model or ask the account owner for access."


class BadRequestError(FatalProviderError):
    """The provider rejected the request (too long, an unsupported parameter, a policy)."""

    kind = "Bad request"
    hint = "the provider rejected the request itself; shorten the input or drop unsupported options."


class ContextWindowExceededError(BadRequestError):
    """The provider rejected the request as too long for the model's window. A step whose model's window was
    not known learns it from this and tries once more, its prompt fitted (``ContextGuard.learn_window``).
    """

    kind = "Prompt too long"
    hint = (
        "the prompt is longer than the model's window: give the window (register(..., context_window=N), or "
        "DAG_DEFAULT_CONTEXT_TOKENS=N for every model whose window litellm does not know) and prompts are "
        "compacted to fit it."
    )

    @property
    def window(self) -> int | None:
        """The window the provider's message states (tokens), None when it states none."""
        for pattern in _WINDOW_STATED:
            found = pattern.search(self.provider_message)
            if found:
                return int(found.group(1).replace(",", ""))
        return None


_WINDOW_STATED = (
    re.compile(r"maximum context length is ([\d,]+)", re.IGNORECASE),  # OpenAI and servers that copy it (vLLM)
    re.compile(r"\bn_ctx\W{1,4}(\d+)"),  # llama.cpp's error body
    re.compile(r"context (?:size|length|window|limit)(?: is| of)?\s*\(?([\d,]{3,})", re.IGNORECASE),
    re.compile(r"while limit is ([\d,]+)", re.IGNORECASE),  # Cerebras
)
"""Where providers state the window in their message."""


class UnknownModelError(FatalProviderError):
    """The model or provider name is not known."""

    kind = "Unknown model"
    hint = (
        "use a litellm model string with its provider, e.g. 'openai/gpt-4.1-mini', "
        "'anthropic/claude-sonnet-4-5' or 'ollama/qwen3'."
    )


class ProviderUnavailableError(FatalProviderError):
    """The model did not answer ``limit`` tries in a row (each timed out or could not connect): for the rest of the
    run every call to it fails at once with this error, instead of waiting out another timeout.
    """

    kind = "No answer"
    hint = (
        "check that the provider is running and reachable (the model's api_base, the network); if it is only "
        "slow, raise DAG_LLM_TIMEOUT (or DAG_LLM_UNANSWERED_LIMIT)."
    )

    def _render(self) -> str:
        text = f"Model {self.model!r} did not answer: {self.provider_message}"
        return f"{text}\nHint: {self.hint}"


class ReplayMismatch(FatalProviderError):
    """A replay was asked for a call its recording does not hold: the run diverged from the recorded one here.

    It ends the run (every later call would diverge too); the message names the call (``purpose``, ``step_id``)
    and shows the closest recorded call and what changed.
    """

    kind = "Replay mismatch"
    hint = (
        "the run asked what the recording does not hold (a changed goal, prompt, tool or setting). If the change "
        "is meant, record again: record=new_episodes records only what is new, record=all everything."
    )

    def __init__(
        self,
        provider_message: str,
        *,
        model: str | None = None,
        hint: str | None = None,
        purpose: str | None = None,
        step_id: str | None = None,
    ) -> None:
        self.purpose = purpose
        """The diverging call's purpose (``plan``, ``step``, ``analyze``...)."""
        self.step_id = step_id
        """Its step, for a step's call."""
        super().__init__(provider_message, model=model, hint=hint)

    def _render(self) -> str:
        return f"{self.kind}: {self.provider_message}\nHint: {self.hint}"


class TransientProviderError(ProviderError):
    """Might succeed later: retried with backoff."""

    retry_after: float | None = None
    """Seconds the provider asked to wait before the next try (its ``Retry-After`` header), when it said."""


class RateLimitError(TransientProviderError):
    """Too many requests or tokens per minute."""

    kind = "Rate limited"
    hint = "lower max_concurrency, add deployments with a litellm Router, or wait."

    router_limit: bool = False
    """Refused by a ``litellm.Router``'s own limit (a deployment's ``rpm``/``tpm``, its parallel requests) before
    any request was sent: the call waits its turn (``llm_rate_limit_wait``) without spending a retry."""


class ProviderTimeoutError(TransientProviderError):
    """The provider did not answer in time."""

    kind = "Timed out"


class ServerError(TransientProviderError):
    """The provider failed (5xx)."""

    kind = "Provider server error"


class ProviderConnectionError(TransientProviderError):
    """The provider could not be reached."""

    kind = "Connection failed"
    hint = "check the network and the model's api_base."


RUN_ENDING: tuple[type[ProviderError], ...] = (
    AuthenticationError,
    PermissionDeniedError,
    UnknownModelError,
    ReplayMismatch,
)
"""Errors that end a whole run when a step meets one: every other call would meet it too."""
