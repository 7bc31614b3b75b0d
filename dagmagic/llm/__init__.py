"""The LLM layer: every model call goes through ``ChatModel``; only this package touches litellm."""

from dagmagic.errors import StructuredOutputError
from dagmagic.llm._litellm import import_litellm
from dagmagic.llm.client import ChatModel, ChatResult, EventSink, as_chat_model
from dagmagic.llm.extraction import extract_json, extract_json_span
from dagmagic.llm.litellm_backend import LiteLLMBackend
from dagmagic.llm.protocol import (
    Capabilities,
    ChatBackend,
    ChatRequest,
    ChatResponse,
    StreamChunk,
    ToolCallData,
    ToolCallDelta,
)
from dagmagic.llm.record_modes import cassette_words
from dagmagic.llm.registry import ROLE_ENV, STANDARD_ROLES, ModelEntry, ModelRegistry
from dagmagic.llm.structured import StructuredResult, structured_llm_call

__all__ = [
    "ROLE_ENV",
    "STANDARD_ROLES",
    "Capabilities",
    "ChatBackend",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "ChatResult",
    "EventSink",
    "LiteLLMBackend",
    "ModelEntry",
    "ModelRegistry",
    "StreamChunk",
    "StructuredOutputError",
    "StructuredResult",
    "ToolCallData",
    "ToolCallDelta",
    "as_chat_model",
    "cassette_words",
    "extract_json",
    "extract_json_span",
    "import_litellm",
    "structured_llm_call",
]
