"""A stand-in for Ollama's ``/api/tags`` on loopback, for the default-model probe offline."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_REFUSAL = "fake ollama: this server only lists models"


class FakeOllama:
    """``base`` is the server's URL, ``host`` its ``OLLAMA_HOST`` form; ``paths`` lists the requested paths.

    ``/api/tags`` answers ``body`` (default: the ``models`` as Ollama lists them) with ``status``; a POST (a chat)
    is refused with a 400 whose error is ``CHAT_REFUSAL``.
    """

    def __init__(self, models: list[dict[str, Any]], status: int = 200, body: bytes | None = None) -> None:
        self.paths: list[str] = []
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.paths.append(self.path)
                payload = body if body is not None else json.dumps({"models": models}).encode()
                self.send_response(status if self.path == "/api/tags" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # a chat: refused, as Ollama refuses a model it cannot load
                served.paths.append(self.path)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                payload = json.dumps({"error": CHAT_REFUSAL}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: Any) -> None:  # keep the test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.base = f"http://{self.host}"


def tag(name: str, family: str = "llama") -> dict[str, Any]:
    """One model as ``/api/tags`` lists it."""
    return {"name": name, "model": name, "size": 1, "details": {"family": family, "families": [family]}}


@contextmanager
def fake_ollama(models: list[dict[str, Any]], status: int = 200, body: bytes | None = None) -> Iterator[FakeOllama]:
    """A ``FakeOllama`` serving in a thread until the block ends."""
    fake = FakeOllama(models, status, body)
    # a short poll: shutdown() waits for the serving loop to look, every 0.5 s by default
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.02,), name="fake-ollama", daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()
        thread.join()
