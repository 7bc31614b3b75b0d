"""Exporting a run's spans never holds the run (nor the cell awaiting it): a collector that is down, or one that
accepts and never answers, costs a run nothing, and is told once, not at every run.
"""

from __future__ import annotations

import logging
import socket
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

from dagmagic import tracing as tracing_module
from tests.test_tracing import _session

EXPORT_TIMEOUT = 3.0
"""Seconds the OTLP exporter gives one export (``OTEL_EXPORTER_OTLP_TIMEOUT``; 10 by default)."""
RUNS = 3


@pytest.fixture(params=["closed", "hanging"])
def unreachable(request: pytest.FixtureRequest) -> Iterator[str]:
    """An OTLP endpoint nothing answers at: a closed port, or one that accepts connections and never replies."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    port = listener.getsockname()[1]
    if request.param == "closed":
        listener.close()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        listener.close()


async def _timed_runs(count: int) -> list[float]:
    took = []
    for _ in range(count):
        started = time.monotonic()
        run = await _session().start("capital of France?")
        took.append(time.monotonic() - started)
        assert run.status == "done", run.error
    return took


def _said(records: list[logging.LogRecord]) -> list[str]:
    return [
        f"{record.name}: {record.getMessage()}"
        for record in records
        if record.levelno >= logging.WARNING and record.name.startswith(("dagmagic", "opentelemetry"))
    ]


@pytest.mark.slow
async def test_an_unreachable_collector_neither_holds_a_run_nor_is_told_at_every_run(
    unreachable: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tracing_module, "_own_provider", None)  # dagmagic's own, built for this endpoint
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", unreachable)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(EXPORT_TIMEOUT))
    caplog.set_level(logging.WARNING)
    untraced = await _timed_runs(RUNS)
    monkeypatch.setenv("DAG_OTEL", "1")
    await _timed_runs(1)  # the first builds the exporter
    traced = await _timed_runs(RUNS)
    provider = tracing_module._own_provider
    assert provider is not None
    # every export attempted (each gives up within EXPORT_TIMEOUT) before the warnings are counted
    flushing = threading.Thread(target=provider.shutdown, daemon=True)
    flushing.start()
    for _ in range(int(EXPORT_TIMEOUT * (RUNS + 3) / 0.05)):
        if not flushing.is_alive():
            break
        time.sleep(0.05)
    ratio = statistics.median(traced) / statistics.median(untraced)
    runs = f"runs traced {[round(t, 2) for t in traced]} s, untraced {[round(t, 2) for t in untraced]} s"
    assert ratio < 3, f"exporting to {unreachable} made a run {ratio:.1f}x as long: {runs}"
    said = _said(caplog.records)
    assert len(said) == 1, said
    assert said[0].startswith("dagmagic: ") and unreachable in said[0], said
