"""``LiteLLMBackend``: the ``ChatBackend`` that calls litellm (``acompletion``, or a ``litellm.Router``), and what
only it needs: the metadata litellm's callbacks get, litellm's replies turned into ``ChatResponse``, token counts.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator
from typing import Any

from dagmagic.llm._litellm import import_litellm, import_litellm_off_the_loop
from dagmagic.llm.protocol import Capabilities, ChatRequest, ChatResponse, StreamChunk, ToolCallData, ToolCallDelta

__all__ = ["LiteLLMBackend", "call_metadata", "is_router", "router_deployments"]

_DIGITS = re.compile(r"\d+")


class LiteLLMBackend:
    """Calls ``litellm.acompletion``, or a ``litellm.Router`` model group when given one."""

    def __init__(self, router: Any | None = None) -> None:
        self.router = router

    async def warm_up(self) -> None:
        """Import litellm in a worker thread: its import takes seconds of CPU, which the first call or count
        would otherwise spend on the event loop, freezing every widget, clock and other run meanwhile.
        """
        await import_litellm_off_the_loop()

    def count_tokens(self, model: str, text: str) -> int:
        """Tokens of ``text`` by litellm's ``token_counter``: the model's own tokenizer when litellm knows it,
        else tiktoken's default encoding.

        That encoding groups up to three digits in a token, where the open models served locally (Qwen,
        Llama 2, Mistral) spend a token per digit: measured against Qwen2.5's own tokenizer, tiktoken counted
        0.56 of a CSV table's tokens, 0.71 of a JSON list's; with a token per digit, 1.00 of both (and of
        prose and code). So unless the model is one whose tokenizer is tiktoken's, every digit counts as a
        token.
        """
        tokens = int(import_litellm().token_counter(model=model, text=text))
        return tokens if _tiktoken_is_exact(model) else tokens + _digit_surplus(text)

    def context_window(self, model: str) -> int | None:
        """The input window litellm's model map gives ``model``; None when the map does not have it."""
        try:
            info = import_litellm().get_model_info(model)
        except Exception:  # models missing from litellm's map
            return None
        window = info.get("max_input_tokens") or info.get("max_tokens")
        return int(window) if window else None

    def estimate_cost(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        """USD a call of so many tokens costs at litellm's prices (a router group's dearest deployment); None
        when litellm has no price for it.
        """
        litellm = import_litellm()
        costs: list[float] = []
        for target in self._deployments(model):
            try:
                prompt, reply = litellm.cost_per_token(
                    model=target, prompt_tokens=input_tokens, completion_tokens=output_tokens
                )
            except Exception:  # litellm raises for models missing from its map
                continue
            costs.append(float(prompt) + float(reply))
        return max(costs) if costs else None

    def capabilities(self, model: str) -> Capabilities:
        """From litellm's model map; an unknown model supports neither (text extraction still works)."""
        litellm = import_litellm()
        targets = self._deployments(model)

        def every(check: Any) -> bool:
            try:
                return all(bool(check(model=target)) for target in targets)
            except Exception:  # litellm raises for models missing from its map
                return False

        return Capabilities(
            tool_call=every(litellm.supports_function_calling),
            json_mode=every(litellm.supports_response_schema),
            stream=True,
        )

    def _within_output_limit(self, model: str, cap: int) -> int:
        """``cap``, lowered to the fewest output tokens litellm knows any of ``model``'s deployments to allow: a
        provider refuses a ``max_tokens`` above its model's (gpt-3.5-turbo: 4096) rather than cutting it.
        """
        limits = [limit for target in self._deployments(model) if (limit := _output_limit(target))]
        return min([cap, *limits])

    def _deployments(self, model: str) -> list[str]:
        if self.router is None:
            return [model]
        deployments = [d for d in router_deployments(self.router) if d.get("model_name") == model]
        return [d["litellm_params"]["model"] for d in deployments] or [model]

    def _arguments(self, request: ChatRequest, stream: bool) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "model": request.model,
            "messages": request.messages,
            "drop_params": True,
            "num_retries": 0,  # retries happen once, above the boundary, for every backend alike
        }
        if request.max_tokens is not None:
            arguments["max_tokens"] = self._within_output_limit(request.model, request.max_tokens)
        arguments.update(request.options)  # the model's own keywords win (its own max_tokens among them)
        for name in ("tools", "tool_choice", "response_format", "temperature"):
            value = getattr(request, name)
            if value is not None:
                arguments[name] = value
        arguments["metadata"] = call_metadata(request, arguments.get("metadata"))
        if stream:
            arguments["stream"] = True
            arguments["stream_options"] = {"include_usage": True}
        return arguments

    async def _acompletion(self, arguments: dict[str, Any]) -> Any:
        litellm = import_litellm()  # for a router too: its exceptions are translated once litellm is set up
        if self.router is not None:
            return await self.router.acompletion(**arguments)
        return await litellm.acompletion(**arguments)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """One ``acompletion`` call."""
        return _response(await self._acompletion(self._arguments(request, stream=False)))

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """A streamed ``acompletion`` call; the whole reply is rebuilt with ``stream_chunk_builder``."""
        litellm = import_litellm()
        chunks: list[Any] = []
        async for chunk in await self._acompletion(self._arguments(request, stream=True)):
            chunks.append(chunk)
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            tool_deltas = [
                ToolCallDelta(
                    index=getattr(tc, "index", 0) or 0,
                    id=tc.id,
                    name=tc.function.name if tc.function else None,
                    arguments=(tc.function.arguments or "") if tc.function else "",
                )
                for tc in (getattr(delta, "tool_calls", None) or [])
            ]
            if delta.content or tool_deltas:
                yield StreamChunk(text=delta.content or "", tool_calls=tool_deltas)
        built = litellm.stream_chunk_builder(chunks, messages=request.messages) if chunks else None
        yield StreamChunk(final=_response(built) if built is not None else ChatResponse())


def call_metadata(request: ChatRequest, given: Any = None) -> dict[str, Any]:
    """The ``metadata`` litellm gets with ``request``: what litellm's callbacks (Langfuse, MLflow, Phoenix, your own
    ``CustomLogger``) need to group a run's calls, under ``dagmagic`` (run id, round, step, purpose), plus the names
    Langfuse reads (``trace_id``: one trace per run; ``generation_name``; ``tags``). Metadata registered with the
    model (``register(..., metadata={...})``) is kept, and wins where both set a key. litellm does not send it
    to the provider.
    """
    ours = {"run_id": request.run_id, "round": request.round, "step_id": request.step_id, "purpose": request.purpose}
    where = " ".join(part for part in (request.purpose, request.step_id) if part)
    metadata: dict[str, Any] = {"dagmagic": ours, "generation_name": where, "tags": ["dagmagic", request.purpose]}
    if request.run_id:
        metadata["trace_id"] = f"dagmagic-{request.run_id}"
    return {**metadata, **(given if isinstance(given, dict) else {})}


_TIKTOKEN_PROVIDERS = ("openai", "azure", "text-completion-openai")


@functools.lru_cache(maxsize=256)
def _tiktoken_is_exact(model: str) -> bool:
    """Whether ``model`` is an OpenAI model litellm knows (tiktoken is its tokenizer), not a local one."""
    litellm = import_litellm()
    try:
        name, provider, *_ = litellm.get_llm_provider(model)
    except Exception:  # a model string litellm cannot place
        return False
    return provider in _TIKTOKEN_PROVIDERS and (name in litellm.model_cost or model in litellm.model_cost)


@functools.lru_cache(maxsize=256)
def _output_limit(model: str) -> int | None:
    """The most output tokens litellm's model map gives ``model``; None when it does not know the model."""
    try:
        limit = import_litellm().get_model_info(model).get("max_output_tokens")
    except Exception:  # models missing from litellm's map
        return None
    return int(limit) if isinstance(limit, int) and limit > 0 else None


def is_router(model: Any) -> bool:
    """Whether ``model`` looks like a ``litellm.Router``."""
    return hasattr(model, "acompletion") and (hasattr(model, "registry") or hasattr(model, "model_list"))


def router_deployments(router: Any) -> list[dict[str, Any]]:
    """Every deployment of a router (``registry().all()`` since litellm 1.110, ``model_list`` before)."""
    if callable(getattr(router, "registry", None)):
        return list(router.registry().all())
    return list(router.model_list or [])


def _response(raw: Any) -> ChatResponse:
    """A litellm ``ModelResponse`` as a ``ChatResponse``, priced with ``litellm.completion_cost`` (which prices
    prompt-cache reads at the model's ``cache_read_input_token_cost``).
    """
    litellm = import_litellm()
    choice = raw.choices[0]
    message = choice.message
    usage = getattr(raw, "usage", None)
    try:
        cost: float | None = float(litellm.completion_cost(completion_response=raw))
    except Exception:  # litellm raises when it has no price for the model
        cost = None
    return ChatResponse(
        content=message.content or "",
        tool_calls=[
            ToolCallData(id=tc.id or f"call_{i}", name=tc.function.name, arguments=tc.function.arguments or "")
            for i, tc in enumerate(message.tool_calls or [])
        ],
        input_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        output_tokens=getattr(usage, "completion_tokens", 0) or 0,
        cached_input_tokens=_cached_input_tokens(usage),
        reasoning_tokens=_count(getattr(usage, "completion_tokens_details", None), "reasoning_tokens"),
        cost=cost,
        finish_reason=choice.finish_reason,
        model=getattr(raw, "model", None) or None,
    )


def _cached_input_tokens(usage: Any) -> int:
    """Prompt tokens read from the provider's cache: OpenAI's ``prompt_tokens_details.cached_tokens``, or
    Anthropic's ``cache_read_input_tokens`` where litellm left only that.
    """
    return _count(getattr(usage, "prompt_tokens_details", None), "cached_tokens") or _count(
        usage, "cache_read_input_tokens"
    )


def _count(holder: Any, name: str) -> int:
    """A token count litellm may leave out, set to None, or (a mock, a dict) give in another shape: 0 then."""
    value = holder.get(name) if isinstance(holder, dict) else getattr(holder, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _digit_surplus(text: str) -> int:
    """Tokens a per-digit tokenizer spends on numbers beyond tiktoken's three digits a token."""
    return sum(len(run) - (len(run) + 2) // 3 for run in _DIGITS.findall(text))
