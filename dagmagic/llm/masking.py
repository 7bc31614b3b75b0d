"""A model's reply as a run takes it in: the keys dagmagic knows (registered ``api_key=``s, environment keys)
masked where they enter, so that nothing the run keeps of the reply (a step's result, the plan, the answer, the
events) holds one. A model may echo its own key, or one a prompt carried; masked by shape too
(``dagmagic._secrets.mask_secrets``), code it wrote would no longer run, so the record of the call is masked by
shape, the reply the run acts on only of the keys known.
"""

from __future__ import annotations

from dagmagic._secrets import SecretStreamMask, mask_known_secrets
from dagmagic.llm.protocol import ChatResponse, StreamChunk, ToolCallDelta

__all__ = ["StreamMasks", "known_masked"]


def known_masked(response: ChatResponse) -> ChatResponse:
    """``response`` with the known keys masked in its text and its tool calls' arguments."""
    calls = [call.model_copy(update={"arguments": mask_known_secrets(call.arguments)}) for call in response.tool_calls]
    return response.model_copy(update={"content": mask_known_secrets(response.content), "tool_calls": calls})


class StreamMasks:
    """Masks the known keys in a streamed reply as it arrives, in its text and in each tool call's arguments, a
    key cut over two pieces too (``SecretStreamMask``).
    """

    def __init__(self) -> None:
        self.text = SecretStreamMask()
        self.arguments: dict[int, SecretStreamMask] = {}

    def piece(self, chunk: StreamChunk) -> list[StreamChunk]:
        """``chunk`` as the run takes it in: none while all it says is held back (or it says nothing)."""
        if not chunk.text and not chunk.tool_calls:
            return []
        deltas = [
            delta.model_copy(update={"arguments": self._arguments(delta.index).feed(delta.arguments)})
            for delta in chunk.tool_calls
        ]
        shown = StreamChunk(text=self.text.feed(chunk.text) if chunk.text else "", tool_calls=deltas)
        return [shown] if shown.text or shown.tool_calls else []

    def flush(self) -> list[StreamChunk]:
        """What was held back, once the stream ended (it was no key)."""
        text = self.text.flush()
        held = [(index, mask.flush()) for index, mask in self.arguments.items()]
        deltas = [ToolCallDelta(index=index, arguments=arguments) for index, arguments in held if arguments]
        return [StreamChunk(text=text, tool_calls=deltas)] if text or deltas else []

    def _arguments(self, index: int) -> SecretStreamMask:
        return self.arguments.setdefault(index, SecretStreamMask())
