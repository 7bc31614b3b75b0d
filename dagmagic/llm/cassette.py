"""Recorded model calls: what a request was (normalized, so a replay can recognize it) and what answered it,
and cassette files holding them (JSON lines: a header naming the models, then one call per line; a kernel that
records a model the header does not name appends a header line naming it: the file is only appended to).

A request is recognized by its purpose, step, model, its ``max_tokens`` and a digest of its normalized messages
and of what else it asked (tool schemas, tool choice, response format, temperature). Normalizing drops what
dagmagic itself puts into a request that differs between two runs of the same thing (``_VOLATILE``), never the
user's content.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from dagmagic._secrets import mask_secrets
from dagmagic.errors import ConfigurationError
from dagmagic.llm.protocol import ChatRequest, ChatResponse, ToolCallDelta
from dagmagic.models import LLMCall, ModelCard, Purpose, StructuredLevel

if sys.platform != "win32":
    import fcntl

__all__ = [
    "CASSETTE_VERSION",
    "Cassette",
    "Interaction",
    "RecordedChunk",
    "RequestKey",
    "messages_digest",
    "normalized_messages",
    "request_digest",
    "request_key",
    "tool_names",
]

log = logging.getLogger("dagmagic")

CASSETTE_VERSION = 1

_VOLATILE = (
    (
        "Today is ",
        re.compile(r"Today is \d{4}-\d{2}-\d{2} \(the year is \d{4}\)"),
        "Today is <date> (the year is <year>)",
    ),
    (
        "dagmagic-code-",
        re.compile(r"(?:[^\s\"'`<>()\[\]]*[/\\])?dagmagic-code-[a-z0-9_]{8}\b"),
        "<python tool directory>",
    ),
)
"""What dagmagic itself puts into a request that differs between two runs of the same thing: the date the
planner is told, and the python tool's temporary working directory (``tempfile``'s name, wherever the temporary
directory is). Nothing else: ids, hashes and timestamps in a goal or a tool's result are what it is about, and a
request about another commit must not be answered from the recording of the first."""


_NORMALIZING = "n2"
"""The version of ``_VOLATILE`` a recorded ``Interaction.digest`` was made with: a digest made under other rules
is not trusted (it is computed again)."""


def _normalized_text(text: str) -> str:
    for marker, pattern, replacement in _VOLATILE:
        if marker in text:  # a plain search first: most texts hold neither, and a long one costs its regex seconds
            text = pattern.sub(replacement, text)
    return text


def _normalized(value: Any) -> Any:
    if isinstance(value, str):
        return _normalized_text(value)
    if isinstance(value, dict):
        return {key: _normalized(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_normalized(item) for item in value]
    return value


def normalized_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as a replay compares them: masked (a recording never holds a key) and without what differs
    between runs of the same request.
    """
    masked: list[dict[str, Any]] = json.loads(mask_secrets(json.dumps(list(messages), ensure_ascii=False)))
    return [_normalized(message) for message in masked]


def _digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def request_digest(request: ChatRequest) -> str:
    """A digest of what ``request`` asks besides its messages: tool schemas, tool choice, response format and
    temperature (``LLMCall.request_digest``).
    """
    asked = {
        "tools": request.tools or [],
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
        "temperature": request.temperature,
    }
    return _digest(_normalized(asked))


class RequestKey(BaseModel, frozen=True):
    """What a replay matches a request by."""

    model: str
    """The registry entry's name."""
    purpose: Purpose
    step_id: str | None
    messages: str
    """Digest of the normalized messages."""
    asked: str
    """``request_digest``."""
    max_tokens: int | None = None
    """The cap the request was sent: a reply recorded under another cap may have been cut elsewhere."""


def messages_digest(messages: Sequence[dict[str, Any]]) -> str:
    """The digest of ``messages`` normalized (``RequestKey.messages``)."""
    return _digest(normalized_messages(messages))


def request_key(model: str, request: ChatRequest) -> RequestKey:
    """The key of ``request`` made to the registry entry named ``model``."""
    return RequestKey(
        model=model,
        purpose=request.purpose,
        step_id=request.step_id,
        messages=messages_digest(request.messages),
        asked=request_digest(request),
        max_tokens=request.max_tokens,
    )


class RecordedChunk(BaseModel):
    """A piece of a streamed reply and when it came (seconds after the request)."""

    at: float = 0.0
    text: str = ""
    tool_calls: list[ToolCallDelta] = Field(default_factory=list)


class Interaction(BaseModel):
    """One model call as recorded: the request, and its reply, error or cancellation."""

    model: str
    """The registry entry's name."""
    target: str = ""
    """What the backend was asked for (a litellm model string...)."""
    purpose: Purpose
    round: int | None = None
    step_id: str | None = None
    digest: str = ""
    """``messages_digest`` of the messages when recorded, after the version of the normalizing (``n2:…``): a
    replay indexes the calls by it without reading their messages, however long (written before them). A line
    whose messages are edited by hand needs it removed."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    """The tool schemas offered (None in a recording read from a run store, which keeps only ``tool_names``)."""
    tool_names: list[str] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = None
    asked: str = ""
    """``request_digest`` of the request."""
    max_tokens: int | None = None
    """The ``max_tokens`` it was sent; None in a recording made before calls were capped, which answers a
    request whatever its cap (its reply was not cut by one)."""
    structured_level: StructuredLevel | None = None
    """The structured-output level the call tried (read from a run store: it tells what the model supported)."""
    stream: bool = False
    outcome: Literal["ok", "error", "cancelled"] = "ok"
    response: ChatResponse | None = None
    chunks: list[RecordedChunk] | None = None
    """A streamed reply's pieces as they came (None: split from ``response`` on replay); a stream that broke
    off, the pieces before it did (read from a run store: what text came, as one piece)."""
    error: str | None = None
    """``Type: message`` of a call that failed."""
    latency: float = 0.0

    @property
    def key(self) -> RequestKey:
        """What a replay matches this by."""
        version, _, digest = self.digest.partition(":")
        return RequestKey(
            model=self.model,
            purpose=self.purpose,
            step_id=self.step_id,
            messages=digest if version == _NORMALIZING and digest else messages_digest(self.messages),
            asked=self.asked,
            max_tokens=self.max_tokens,
        )

    @classmethod
    def of(
        cls,
        model: str,
        request: ChatRequest,
        *,
        stream: bool,
        latency: float,
        response: ChatResponse | None = None,
        chunks: list[RecordedChunk] | None = None,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> Interaction:
        """A call as it happened at a backend, masked."""
        outcome: Literal["ok", "error", "cancelled"] = "cancelled" if cancelled else "error" if error else "ok"
        interaction = cls(
            model=model,
            target=request.model,
            purpose=request.purpose,
            round=request.round,
            step_id=request.step_id,
            digest=_stamped(messages_digest(request.messages)),
            messages=request.messages,
            tools=request.tools,
            tool_names=tool_names(request.tools),
            tool_choice=request.tool_choice,
            response_format=request.response_format,
            temperature=request.temperature,
            asked=request_digest(request),
            max_tokens=request.max_tokens,
            stream=stream,
            outcome=outcome,
            response=response,
            chunks=chunks,
            error=None if error is None else f"{type(error).__name__}: {error}",
            latency=latency,
        )
        return interaction.masked()

    @classmethod
    def from_call(cls, call: LLMCall) -> Interaction:
        """A call a run recorded (``run.calls``, the run store)."""
        response = ChatResponse(
            content=call.reply,
            tool_calls=call.tool_calls,  # type: ignore[arg-type]  # validated from the recorded dicts
            input_tokens=call.usage.input_tokens,
            output_tokens=call.usage.output_tokens,
            cached_input_tokens=call.usage.cached_input_tokens,
            reasoning_tokens=call.usage.reasoning_tokens,
            cost=call.usage.cost,
            finish_reason=call.finish_reason or ("tool_calls" if call.tool_calls else "stop"),
        )
        outcomes: dict[str, Literal["ok", "error", "cancelled"]] = {"failed": "error", "cancelled": "cancelled"}
        outcome = outcomes.get(call.status, "ok")
        return cls(
            model=call.model,
            purpose=call.purpose,
            round=call.round,
            step_id=call.step_id,
            digest=_stamped(messages_digest(call.messages)),
            messages=call.messages,
            tool_names=call.tools,
            asked=call.request_digest or "",
            max_tokens=call.max_tokens,
            structured_level=call.structured_level,
            stream=call.stream,
            outcome=outcome,
            response=response if outcome != "error" else None,
            chunks=[RecordedChunk(text=call.reply)] if outcome == "error" and call.pieces else None,
            error=call.error,
            latency=call.latency,
        )

    def masked(self) -> Interaction:
        """A copy with every key masked, in every text it holds."""
        data = json.loads(mask_secrets(self.model_dump_json()))
        return Interaction.model_validate(data)

    def describe(self) -> str:
        """``analyze`` · ``step s2 (round 1)`` · model, for messages."""
        where: list[str] = [self.purpose]
        if self.step_id:
            where.append(f"step {self.step_id}")
        if self.round:
            where.append(f"round {self.round}")
        return " · ".join(where) + f" · model {self.model!r}"


def _stamped(digest: str) -> str:
    return f"{_NORMALIZING}:{digest}"


def tool_names(tools: Iterable[dict[str, Any]] | None) -> list[str]:
    """The names of the tools in a request's ``tools`` (OpenAI's function schemas)."""
    names = []
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return names


class CassetteHeader(BaseModel):
    """A cassette file's first line, and a line naming the models of a kernel that records into it later."""

    dagmagic_cassette: int
    """The format's version (required: it is what tells a cassette from other JSON lines)."""
    models: list[ModelCard] = Field(default_factory=list)


_HEADER_START = b'{"dagmagic_cassette":'


def _line_problem(line: bytes, problem: str) -> str:
    """What is wrong with a cassette line, in words (a byte that is not UTF-8 named with its column)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"byte {line[exc.start]:#04x} at column {exc.start + 1} is not UTF-8 text"
    return problem


class Cassette:
    """Recorded calls, in a JSON-lines file or only in memory (``path`` None). Appending writes at once, a line
    per call, so a kernel that dies keeps what it recorded.
    """

    def __init__(
        self,
        interactions: Iterable[Interaction] = (),
        models: Iterable[ModelCard] = (),
        *,
        path: Path | None = None,
    ) -> None:
        self.interactions = list(interactions)
        self.models = {card.name: card for card in models}
        self.path = path
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.interactions)

    def __iter__(self) -> Iterator[Interaction]:
        return iter(list(self.interactions))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Cassette:
        """The cassette in ``path``; a file that is not one, or a line that is no recorded call, raises
        ``ConfigurationError`` saying which and what to do. A line cut short (a kernel killed while writing it)
        is skipped with a warning: the rest of the file holds.
        """
        path = Path(path)
        try:
            lines = path.read_bytes().splitlines()
        except FileNotFoundError:
            raise ConfigurationError(f"no cassette at {path}: record it first (record=once or record=all)") from None
        except OSError as exc:
            raise ConfigurationError(f"the cassette {path} cannot be read: {exc}") from None
        if not lines:
            return cls(path=path)
        try:
            header = CassetteHeader.model_validate_json(lines[0])
        except ValidationError:
            raise ConfigurationError(
                f"{path} is not a dagmagic cassette (its first line is not a cassette header); "
                "record=all writes a new one there"
            ) from None
        if header.dagmagic_cassette > CASSETTE_VERSION:
            raise ConfigurationError(
                f"the cassette {path} was written by a newer dagmagic (version {header.dagmagic_cassette}); "
                "upgrade dagmagic to replay it"
            )
        interactions = []
        models = {card.name: card for card in header.models}
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            if line.startswith(_HEADER_START):  # a kernel that recorded another model named it as it began
                with suppress(ValidationError):
                    models.update({card.name: card for card in CassetteHeader.model_validate_json(line).models})
                    continue
            try:
                interactions.append(Interaction.model_validate_json(line))
            except ValidationError as exc:
                problem = exc.errors()[0]["msg"]
                if "EOF while parsing" in problem:
                    log.warning(
                        "[dagmagic] %s, line %d, was cut short (a kernel stopped writing it): skipped", path, number
                    )
                    continue
                raise ConfigurationError(
                    f"{path}, line {number}, is not a recorded call: {_line_problem(line, problem)}. Fix or delete "
                    "that line (its call is then made again with record=new_episodes), or record the cassette "
                    "anew with record=all"
                ) from None
        return cls(interactions, models.values(), path=path)

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the whole cassette to ``path`` (default: its own file), owner-only, and return the path."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ConfigurationError("this cassette has no file: pass save(path)")
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            lines = [self._header_line(), *(item.masked().model_dump_json() for item in self.interactions)]
        temporary = target.with_name(target.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
        os.replace(temporary, target)
        if self.path is None:
            self.path = target
        return target

    def _header_line(self, models: Iterable[ModelCard] | None = None) -> str:
        cards = list(self.models.values() if models is None else models)
        header = CassetteHeader(dagmagic_cassette=CASSETTE_VERSION, models=cards)
        return mask_secrets(header.model_dump_json())

    def add_models(self, cards: Iterable[ModelCard]) -> None:
        """Name the models calls are recorded for: a header line naming the new ones is appended to the file."""
        new = [card for card in cards if self.models.get(card.name) != card]
        if not new:
            return
        with self._lock:
            self.models.update({card.name: card for card in new})
            if self.path is not None:
                self._append_line(self._header_line(new), header=True)

    def append(self, interaction: Interaction) -> None:
        """Add a call, and write it to the file at once."""
        interaction = interaction.masked()
        with self._lock:
            self.interactions.append(interaction)
            if self.path is not None:
                self._append_line(interaction.model_dump_json())

    def _append_line(self, line: str, *, header: bool = False) -> None:
        """Append ``line`` to the file, under an OS lock on it: other kernels may be recording into it too, so
        the file is only ever appended to (rewriting it would drop the lines they added since it was read), and
        a file still empty gets its header first, written by whichever kernel gets there first.
        """
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with _locked(fd):
                size = os.fstat(fd).st_size
                data = line.encode() + b"\n"
                if size == 0:  # the first header names every model known here (``line`` among them)
                    data = self._header_line().encode() + b"\n" + (b"" if header else data)
                elif _last_byte(fd, size) != b"\n":  # a kernel killed mid-line: its cut line stays apart
                    data = b"\n" + data
                while data:
                    data = data[os.write(fd, data) :]
        finally:
            os.close(fd)


def _last_byte(fd: int, size: int) -> bytes:
    os.lseek(fd, size - 1, os.SEEK_SET)  # reading only: with O_APPEND every write goes to the end
    return os.read(fd, 1)


@contextmanager
def _locked(fd: int) -> Iterator[None]:
    """An exclusive OS lock on the open file ``fd`` while inside (none where the platform has no ``fcntl``)."""
    if sys.platform == "win32":
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
