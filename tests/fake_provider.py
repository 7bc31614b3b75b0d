"""An OpenAI-compatible provider on loopback that misbehaves as told, for the real litellm path offline.

``Provider.mode`` (or ``Provider.modes``, one per request in order, the last repeating) picks what each
request gets: ``ok`` (a reply, streamed when asked), ``429``, ``500`` and ``401`` (an error whose message
echoes the key it was sent, as some providers do), ``reset`` (the connection reset without a reply),
``broken`` (a stream reset after its first piece; a JSON body cut short), ``empty`` (an empty reply or a stream
with no text), ``role_only`` (llama.cpp's broken streaming: one chunk with the role, then ``[DONE]``, no finish
reason; a reply in full when not streamed), ``huge`` (a 1 MB reply), ``slow`` (the reply after
``slow_seconds``), ``never`` (accepted, no reply until the test ends) and ``endless`` (a stream of ``reply``
, numbered, every ``piece_seconds``, that never ends: a model that never stops writing; ``stopped`` holds when each such
stream stopped being written, the client having gone). ``reply`` is the text an ``ok``
request gets, or ``answer(body)`` when set (a function of the request's JSON body); a stream comes in pieces of
``piece_size`` characters. A ``429`` carries a ``Retry-After`` header when ``retry_after`` is set; ``times``
holds each request's arrival (``time.monotonic()``).
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HUGE = "x" * 1_000_000


def completion(content: str) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice], "usage": usage}
    ).encode()


def sse_chunk(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Provider:
    """See the module docstring; ``base`` is the ``api_base`` to register, ``requests`` counts requests."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.modes: list[str] = []
        self.reply = "hello there"
        self.answer: Callable[[dict[str, Any]], str] | None = None
        self.piece_size = 65536
        self.slow_seconds = 5.0
        self.piece_seconds = 0.01
        self.stopped: list[float] = []
        self.requests = 0
        self.times: list[float] = []
        self.retry_after: str | None = None
        self.keys_seen: list[str] = []
        self.release = threading.Event()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                index = provider.requests
                provider.requests += 1
                provider.times.append(time.monotonic())
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                provider.keys_seen.append(key)
                mode = provider.modes[min(index, len(provider.modes) - 1)] if provider.modes else provider.mode
                provider.serve(self, mode, key, stream=bool(body.get("stream")), body=body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def serve(
        self, handler: BaseHTTPRequestHandler, mode: str, key: str, *, stream: bool, body: dict[str, Any]
    ) -> None:
        if mode in ("never", "slow"):
            self.release.wait(60 if mode == "never" else self.slow_seconds)
            if mode == "never":
                return
        if mode == "reset":
            return _reset(handler)
        if mode in ("429", "500", "401"):
            message = f"Request refused ({mode}) for the key {key}. Check it at your provider."
            error = json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": mode}})
            headers = {"Retry-After": self.retry_after} if mode == "429" and self.retry_after else {}
            return _send(handler, int(mode), "application/json", error.encode(), headers)
        reply = self.answer(body) if self.answer is not None else self.reply
        text = {"empty": "", "huge": HUGE}.get(mode, reply)
        if not stream:
            if mode == "broken":  # a body cut short
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", "1000")
                handler.end_headers()
                handler.wfile.write(b'{"id": "c", "choi')
                return _reset(handler)
            return _send(handler, 200, "application/json", completion(text))
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        if mode == "broken":  # the first piece, then the connection is gone
            _piece(handler, sse_chunk("A partial "))
            return _reset(handler)
        if mode == "endless":
            return self._endless(handler, reply)
        if mode == "role_only":
            role = {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}
            body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [role]}
            _piece(handler, b"data: " + json.dumps(body).encode() + b"\n\n")
            _piece(handler, b"data: [DONE]\n\n")
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
            return None
        for start in range(0, len(text), self.piece_size):
            _piece(handler, sse_chunk(text[start : start + self.piece_size]))
        _piece(handler, sse_chunk("", "stop"))
        _piece(handler, b"data: [DONE]\n\n")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    def _endless(self, handler: BaseHTTPRequestHandler, reply: str) -> None:
        """Pieces of ``reply``, numbered (litellm ends a stream that repeats one piece a hundred times)."""
        try:
            for number in itertools.count():
                if self.release.is_set():
                    break
                _piece(handler, sse_chunk(f"{reply}{number} "))
                time.sleep(self.piece_seconds)
        except OSError:  # the client closed the connection
            pass
        self.stopped.append(time.monotonic())

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _send(
    handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None
) -> None:
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _piece(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
    handler.wfile.flush()


def _reset(handler: BaseHTTPRequestHandler) -> None:
    """Close with a TCP reset (linger 0), every reference to the socket included."""
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.close_connection = True
    handler.wfile.flush()
    handler.rfile.close()
    handler.wfile.close()
    handler.connection.close()
